//! A run's lease: who is writing it now, and until when (contract section
//! 18; the timing is in docs/replication.md, "The lease").
//!
//! `<prefix>/<run_id>/lease.json` names the writer (machine, pid, its
//! writer id and epoch) and when its lease runs out (`expires`, UTC by the
//! writer's clock). The writer stores it with the manifest when it creates
//! or takes over the run, then renews it on its own clock, every third of
//! `lease_s`, each renewal `If-Match` the version it stored last, and each
//! given at most a third of `lease_s` of retries. It counts its own lease as
//! running out `lease_s` after it *sent* its last renewal that succeeded,
//! less a tenth for clocks that disagree; a sync point that finds it has
//! (the bucket did not answer two renewals in a row) renews first, or fails
//! (sync mode), or says so (async). A renewal whose `If-Match` fails and
//! that finds another writer named has lost the run: the next sync point
//! fails with it.
//!
//! A lease is only about liveness. Which writer may store the run is still
//! decided by the manifest's conditional writes alone, so a lease that
//! lapses wrongly (a clock far off) can cost a live run its writer, never a
//! record.

use super::bucket::{Bucket, BucketError};
use super::{Fence, Holder, ReplicateError};
use object_store::{PutMode, UpdateVersion};
use serde::{Deserialize, Serialize};
use std::time::{Duration, SystemTime};

/// The lease's name under a run's prefix.
pub const LEASE: &str = "lease.json";

/// The lease object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    pub run_id: String,
    /// The writer id the manifest names.
    pub writer: String,
    pub host: String,
    pub pid: u32,
    pub epoch: u64,
    /// The lease length the writer renews to, in seconds.
    pub lease_s: u64,
    /// When the lease runs out (RFC 3339, UTC).
    pub expires: String,
    /// The writer ended the run (or let it go): nobody holds it.
    #[serde(default)]
    pub released: bool,
}

/// What a lease says now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Held {
    /// Live until then.
    Live(SystemTime),
    /// Ran out then (the writer or its machine stopped).
    Lapsed(SystemTime),
    /// The writer let it go (the run ended).
    Released,
}

/// This machine's name, as leases give it.
pub fn host() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "unknown-host".into())
}

impl Lease {
    /// The lease of `writer` (epoch `epoch`) running out `lease` from now.
    pub fn new(run_id: &str, writer: &str, epoch: u64, lease: Duration) -> Lease {
        Lease {
            run_id: run_id.to_string(),
            writer: writer.to_string(),
            host: host(),
            pid: std::process::id(),
            epoch,
            lease_s: lease.as_secs(),
            expires: stamp(SystemTime::now() + lease),
            released: false,
        }
    }

    /// Decodes a lease read from a bucket (not trusted): its run id, an
    /// expiry that parses, names of a sane length.
    ///
    /// # Errors
    /// What is wrong with it.
    pub fn decode(bytes: &[u8], run_id: &str) -> Result<Lease, String> {
        if bytes.len() > 4096 {
            return Err(format!("the lease is {} bytes long", bytes.len()));
        }
        let l: Lease =
            serde_json::from_slice(bytes).map_err(|e| format!("the lease does not parse: {e}"))?;
        if l.run_id != run_id {
            return Err(format!(
                "the lease is of run {:?}, not {run_id:?}",
                l.run_id
            ));
        }
        if l.writer.len() > 300 || l.host.len() > 255 {
            return Err("the lease names a writer too long to be one".into());
        }
        humantime::parse_rfc3339(&l.expires)
            .map_err(|e| format!("the lease's expiry {:?}: {e}", l.expires))?;
        Ok(l)
    }

    /// The lease as stored.
    ///
    /// # Panics
    /// Never: a lease is plain strings and numbers.
    pub fn encode(&self) -> Vec<u8> {
        let mut v = serde_json::to_vec_pretty(self).expect("a lease serialises");
        v.push(b'\n');
        v
    }

    /// What the lease says at `now`.
    pub fn held(&self, now: SystemTime) -> Held {
        if self.released {
            return Held::Released;
        }
        // Checked by `decode`; a lease made here always parses.
        let until = humantime::parse_rfc3339(&self.expires).unwrap_or(SystemTime::UNIX_EPOCH);
        if until > now {
            Held::Live(until)
        } else {
            Held::Lapsed(until)
        }
    }

    /// "machine M, pid P".
    pub fn holder(&self) -> String {
        format!("machine {}, pid {}", self.host, self.pid)
    }
}

/// `t` as the lease writes times.
pub fn stamp(t: SystemTime) -> String {
    humantime::format_rfc3339_millis(t).to_string()
}

/// How long from now until `t` ("in 12s"), or since ("3s ago").
pub fn from_now(t: SystemTime) -> String {
    match t.duration_since(SystemTime::now()) {
        Ok(d) => format!("in {}s", d.as_secs() + 1),
        Err(e) => format!("{}s ago", e.duration().as_secs()),
    }
}

/// The lease of `run_id` and its version, if one is stored.
///
/// # Errors
/// A lease that does not decode, or a bucket that fails.
pub fn read(bucket: &Bucket, run_id: &str) -> Result<Option<(Lease, UpdateVersion)>, String> {
    let key = bucket.url.key(&format!("{run_id}/{LEASE}"));
    match bucket.get(&key) {
        Ok((b, v)) => Lease::decode(&b, run_id)
            .map(|l| Some((l, v)))
            .map_err(|e| format!("{}/{run_id}: {e}", bucket.url)),
        Err(BucketError::NotFound) => Ok(None),
        Err(e) => Err(format!("{}: {e}", bucket.url)),
    }
}

/// Stores `lease` over whatever is there (a writer that has just created
/// or taken over the run through the manifest).
///
/// # Errors
/// The bucket failed.
pub fn store(bucket: &Bucket, lease: &Lease) -> Result<UpdateVersion, BucketError> {
    let key = bucket.url.key(&format!("{}/{LEASE}", lease.run_id));
    bucket.put(&key, lease.encode(), PutMode::Overwrite)
}

/// A lease a writer has just stored: what, its version, and when the put
/// that stored it was sent.
pub struct Leased {
    pub lease: Lease,
    pub version: UpdateVersion,
    pub sent: std::time::Instant,
}

/// How long after sending a renewal that succeeded a writer counts the
/// lease as its own: `lease_s` less a tenth (at least 100 ms), for clocks
/// that disagree with the reader's.
pub fn own_lease(lease: Duration) -> Duration {
    lease.saturating_sub((lease / 10).max(Duration::from_millis(100)))
}

/// How often the lease is renewed, and how long one renewal is retried:
/// a third of `lease_s`.
pub fn period(lease: Duration) -> Duration {
    lease / 3
}

/// Why a renewal did not happen.
enum Renewal {
    /// Another writer holds the run.
    Lost(ReplicateError),
    /// The bucket did not answer in time.
    Failed(String),
}

impl super::Inner {
    fn lease_key(&self) -> String {
        self.key(LEASE)
    }

    /// The renewer: every [`period`], renews the lease (retried for at most
    /// a period). Ends when the replicator stops, or with the run lost.
    pub(super) fn renew_on_clock(&self) {
        let every = period(self.settings.lease);
        loop {
            {
                let stop = self.renew_stop.lock().expect("lock");
                let (stop, _) = self
                    .renew_cv
                    .wait_timeout_while(stop, every, |s| !*s)
                    .expect("lock");
                if *stop {
                    return;
                }
            }
            if self.failed().is_some() {
                return;
            }
            match self.renew(every) {
                Ok(()) => {}
                Err(Renewal::Lost(e)) => {
                    self.fail(&e);
                    return;
                }
                Err(Renewal::Failed(_)) => self.warn_if_lapsed(),
            }
        }
    }

    /// One renewal, `If-Match` the version stored last, retried for
    /// `within`. A failed match whose lease names this writer is its own
    /// earlier renewal whose answer was lost.
    fn renew(&self, within: Duration) -> Result<(), Renewal> {
        let mut held = self.lease.lock().expect("lock");
        let sent = std::time::Instant::now();
        let mut next = held.0.clone();
        next.expires = stamp(SystemTime::now() + self.settings.lease);
        let put = self.bucket.put_within(
            &self.lease_key(),
            next.encode(),
            PutMode::Update(held.1.clone()),
            within,
        );
        let version = match put {
            Ok(v) => v,
            Err(BucketError::Precondition | BucketError::NotFound) => {
                match read(&self.bucket, &next.run_id) {
                    Ok(Some((there, v))) if there.writer == next.writer && !there.released => v,
                    Ok(there) => {
                        return Err(Renewal::Lost(fenced_by_lease(
                            &next.run_id,
                            there.as_ref().map(|x| &x.0),
                        )));
                    }
                    Err(e) => return Err(Renewal::Failed(e)),
                }
            }
            Err(e) => return Err(Renewal::Failed(e.to_string())),
        };
        *held = (next, version);
        drop(held);
        let mut until = self.lease_until.lock().expect("lock");
        *until = (*until).max(sent + own_lease(self.settings.lease));
        *self.lease_warned.lock().expect("lock") = false;
        Ok(())
    }

    fn lapsed(&self) -> bool {
        std::time::Instant::now() >= *self.lease_until.lock().expect("lock")
    }

    /// Sync mode, before a sync point is shipped: the lease must be this
    /// writer's. In the common case the renewer has kept it so and this
    /// costs no bucket call; when it ran out (the bucket did not answer the
    /// renewals) it is renewed here, for up to `timeout_s`, or the sync
    /// point fails unacknowledged.
    pub(super) fn hold_lease(&self) -> Result<(), ReplicateError> {
        if !self.lapsed() {
            return Ok(());
        }
        let e = match self.renew(self.settings.timeout) {
            Ok(()) => return Ok(()),
            Err(Renewal::Lost(e)) => e,
            Err(Renewal::Failed(reason)) => ReplicateError::LeaseLapsed {
                run_id: self.lease.lock().expect("lock").0.run_id.clone(),
                reason,
            },
        };
        self.fail(&e);
        Err(e)
    }

    /// Async mode: says once that the lease ran out (the run goes on; a
    /// resume elsewhere may take it over, and this writer then stops).
    pub(super) fn warn_if_lapsed(&self) {
        if self.settings.mode != super::Mode::Async || !self.lapsed() {
            return;
        }
        let mut warned = self.lease_warned.lock().expect("lock");
        if !*warned {
            *warned = true;
            crate::report::err_line(&format!(
                "warning: replication: this writer's lease on {} ran out (the bucket does not \
                 answer); the run goes on, and stops if another machine takes it over",
                self.settings.url
            ));
        }
    }

    /// The run ended: the lease is marked released (`If-Match`, so a lease
    /// another writer took is left alone).
    pub(super) fn release_lease(&self) {
        let held = self.lease.lock().expect("lock");
        let mut next = held.0.clone();
        next.released = true;
        next.expires = stamp(SystemTime::now());
        let _ = self.bucket.put(
            &self.lease_key(),
            next.encode(),
            PutMode::Update(held.1.clone()),
        );
    }
}

/// The error of a writer whose lease another writer took: the lease there
/// is `there`.
fn fenced_by_lease(run_id: &str, there: Option<&Lease>) -> ReplicateError {
    ReplicateError::Fenced {
        run_id: run_id.to_string(),
        by: Fence::Lease,
        holder: there.map(|l| Holder {
            writer: l.writer.clone(),
            at: Some(l.holder()),
            epoch: l.epoch,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_is_live_until_it_runs_out_and_a_forged_one_is_refused() {
        let l = Lease::new("r1", "h/pid 1/abc", 3, Duration::from_secs(30));
        let back = Lease::decode(&l.encode(), "r1").unwrap();
        assert_eq!(back, l);
        let now = SystemTime::now();
        assert!(matches!(l.held(now), Held::Live(_)));
        assert!(matches!(
            l.held(now + Duration::from_secs(31)),
            Held::Lapsed(_)
        ));
        let released = Lease {
            released: true,
            ..l.clone()
        };
        assert_eq!(released.held(now), Held::Released);
        assert!(
            Lease::decode(&l.encode(), "r2")
                .unwrap_err()
                .contains("not \"r2\"")
        );
        let bad = Lease {
            expires: "soon".into(),
            ..l.clone()
        };
        assert!(Lease::decode(&bad.encode(), "r1").is_err());
        assert!(Lease::decode(&vec![b' '; 5000], "r1").is_err());
    }
}
