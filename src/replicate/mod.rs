//! Replication: a run's log and checkpoint store shipped to S3-compatible
//! object storage, so that it can be resumed on another machine (contract
//! section 11; the bucket layout and the fencing protocol are in
//! docs/replication.md).
//!
//! The local, fdatasync'd log stays the commit point. After each of its
//! sync points the store calls the [`Replicator`]'s hook with the bytes it
//! just made durable; the replicator stores them as an immutable segment,
//! then stores a new manifest naming it with a conditional put (`If-Match`
//! the version it wrote last). In sync mode the hook returns only then, so
//! nothing that depends on the records happens before they are in the
//! bucket; in async mode a background shipper does the same a moment later.
//! A writer whose conditional put fails has lost the run to another writer:
//! it stops before acknowledging anything more.
//!
//! - [`bucket`]: one bucket through `object_store`, with retries.
//! - [`fetch`]: a run fetched from the bucket onto a machine that never saw
//!   it, checked, and taken over.
//! - [`lease`]: the writer's lease, renewed on its own clock, which tells a
//!   resume whether the run is live.
//! - [`manifest`]: the run's one mutable object, and its checks.
//! - [`store_files`]: which checkpoint store files are shipped.
//! - `ship`: a writer's shipping, from the hook (sync) or the background
//!   shipper (async), and the merging of segments.
//! - `error`: [`ReplicateError`], why replication failed.

pub mod bucket;
mod error;
pub mod fetch;
pub mod lease;
pub mod manifest;
mod ship;
pub mod store_files;

use bucket::{Bucket, BucketError, Credentials, Url};
pub use error::{Fence, Holder, ReplicateError};
use lease::{Leased, own_lease};
pub use manifest::{FORMAT, MANIFEST, MAX_LOG, Manifest, Segment};
use object_store::{PutMode, UpdateVersion};
pub use ship::{FAN_IN, MAX_SEGMENT};
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};
pub use store_files::{StoreFile, immutable_files, store_file};

/// `sync` or `async`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Sync,
    Async,
}

/// Replication as the person asked for it.
#[derive(Debug, Clone)]
pub struct Settings {
    pub url: Url,
    pub mode: Mode,
    pub max_lag: Duration,
    pub timeout: Duration,
    /// How long a writer's lease lasts unrenewed (`replicate.lease_s`).
    pub lease: Duration,
}

impl Settings {
    /// Flags over `[replicate]`; `None` when no URL is given.
    ///
    /// # Errors
    /// A bad URL or mode, a zero timeout or lease.
    pub fn resolve(
        url: Option<&str>,
        mode: Option<&str>,
        section: &crate::config::file::ReplicateSection,
    ) -> Result<Option<Settings>, String> {
        let Some(url) = url.or(section.url.as_deref()) else {
            return Ok(None);
        };
        let url = Url::parse(url)?;
        let mode = match mode.or(section.mode.as_deref()).unwrap_or("sync") {
            "sync" => Mode::Sync,
            "async" => Mode::Async,
            other => {
                return Err(format!(
                    "replicate.mode {other:?}: expected \"sync\" or \"async\""
                ));
            }
        };
        let timeout = section.timeout_s.unwrap_or(60);
        if timeout == 0 {
            return Err("replicate.timeout_s must be at least 1".into());
        }
        let lease = section.lease_s.unwrap_or(30);
        if lease == 0 {
            return Err("replicate.lease_s must be at least 1".into());
        }
        Ok(Some(Settings {
            url,
            mode,
            max_lag: Duration::from_millis(section.max_lag_ms.unwrap_or(1000)),
            timeout: Duration::from_secs(timeout),
            lease: Duration::from_secs(lease),
        }))
    }
}

/// A name for this process as a writer.
pub fn writer_id() -> String {
    let host = lease::host();
    format!(
        "{host}/pid {}/{:08x}",
        std::process::id(),
        fastrand::u32(..)
    )
}

/// What a writer knows of the bucket.
struct Shipped {
    manifest: Manifest,
    version: UpdateVersion,
    /// Checkpoint store files stored, relative to the store's directory.
    files: HashSet<String>,
}

/// The async shipper's queue.
#[derive(Default)]
struct Queue {
    /// The log's durable length.
    durable: u64,
    /// A checkpoint was recorded since the last shipment.
    checkpoint: bool,
    /// When the oldest unshipped sync point was made.
    oldest: Option<Instant>,
    /// The last shipment failed (the bucket is away): sync points do not
    /// wait for it.
    outage: bool,
    stop: bool,
    /// Shipped length.
    shipped: u64,
}

struct Inner {
    bucket: Bucket,
    settings: Settings,
    wal: PathBuf,
    /// The run's prefix in the bucket (`<prefix>/<run_id>`).
    run_prefix: String,
    shipped: Mutex<Shipped>,
    /// Set once the run was lost to another writer, or the bucket failed
    /// in sync mode: every later sync point fails with it. (Apart from
    /// `shipped`, which the async shipper holds while it talks to the
    /// bucket.)
    failed: Mutex<Option<ReplicateError>>,
    queue: Mutex<Queue>,
    cv: Condvar,
    /// The lease as this writer stored it last, and its version (held by
    /// a renewal while it talks to the bucket).
    lease: Mutex<(lease::Lease, UpdateVersion)>,
    /// Until when this writer counts its lease as its own (read by every
    /// sync point; never held across a bucket call).
    lease_until: Mutex<Instant>,
    /// The async mode's warning that the lease ran out was given.
    lease_warned: Mutex<bool>,
    /// Set when the renewer is to stop.
    renew_stop: Mutex<bool>,
    renew_cv: Condvar,
}

/// A run's replication to one bucket.
pub struct Replicator {
    inner: Arc<Inner>,
    shipper: Option<std::thread::JoinHandle<()>>,
    renewer: Option<std::thread::JoinHandle<()>>,
}

/// What a run says about itself when it ends.
#[derive(Debug, Clone)]
pub struct Summary {
    pub status: String,
    pub steps: u64,
    pub cost_usd: f64,
}

/// A bucket client for `settings`.
///
/// # Errors
/// [`ReplicateError::Connect`], as [`Bucket::connect`].
pub fn connect(settings: &Settings, creds: &Credentials) -> Result<Bucket, ReplicateError> {
    Bucket::connect(&settings.url, creds, settings.timeout).map_err(ReplicateError::Connect)
}

impl Replicator {
    /// Starts replicating a new run: its manifest is created with
    /// `If-None-Match: *`, so two runs can never share a prefix.
    ///
    /// # Errors
    /// The manifest exists, or the bucket could not be reached in time.
    pub fn create(
        settings: Settings,
        creds: &Credentials,
        wal: &Path,
        manifest: Manifest,
    ) -> Result<Replicator, ReplicateError> {
        let bucket = connect(&settings, creds)?;
        Self::create_in(bucket, settings, wal, manifest)
    }

    /// [`Replicator::create`] through a client made already (benches and
    /// tests point one at a server of their own).
    ///
    /// # Errors
    /// As [`Replicator::create`].
    pub fn create_in(
        bucket: Bucket,
        settings: Settings,
        wal: &Path,
        manifest: Manifest,
    ) -> Result<Replicator, ReplicateError> {
        let run_prefix = settings.url.key(&manifest.run_id);
        let key = format!("{run_prefix}/{MANIFEST}");
        let version = match bucket.put(&key, manifest.encode(), PutMode::Create) {
            Ok(v) => v,
            Err(BucketError::AlreadyExists) => {
                return Err(ReplicateError::Exists {
                    url: settings.url.to_string(),
                    run_id: manifest.run_id,
                });
            }
            Err(source) => {
                return Err(ReplicateError::Bucket {
                    url: Some(settings.url.to_string()),
                    source,
                });
            }
        };
        let sent = Instant::now();
        let held = lease::Lease::new(
            &manifest.run_id,
            &manifest.writer,
            manifest.epoch,
            settings.lease,
        );
        let lease_version =
            lease::store(&bucket, &held).map_err(|source| ReplicateError::Bucket {
                url: Some(settings.url.to_string()),
                source,
            })?;
        Ok(Self::start(
            bucket,
            settings,
            wal,
            manifest,
            version,
            HashSet::new(),
            Leased {
                lease: held,
                version: lease_version,
                sent,
            },
        ))
    }

    /// Goes on replicating a run this process has taken over
    /// ([`fetch::take_over`]).
    pub fn resume(taken: fetch::TakenOver, wal: &Path) -> Replicator {
        Self::start(
            taken.bucket,
            taken.settings,
            wal,
            taken.manifest,
            taken.version,
            taken.files,
            taken.lease,
        )
    }

    fn start(
        mut bucket: Bucket,
        settings: Settings,
        wal: &Path,
        manifest: Manifest,
        version: UpdateVersion,
        files: HashSet<String>,
        leased: Leased,
    ) -> Replicator {
        let lease_until = leased.sent + own_lease(settings.lease);
        let run_prefix = settings.url.key(&manifest.run_id);
        let shipped_len = manifest.log_len;
        if settings.mode == Mode::Async {
            // The shipper retries for ever; one attempt gives up soon, so
            // that an outage is noticed (and sync points stop waiting for
            // the lag bound) within about twice `max_lag`.
            bucket.timeout = (settings.max_lag * 2).clamp(Duration::from_secs(1), settings.timeout);
        }
        let mode = settings.mode;
        let inner = Arc::new(Inner {
            bucket,
            settings,
            wal: wal.to_path_buf(),
            run_prefix,
            shipped: Mutex::new(Shipped {
                manifest,
                version,
                files,
            }),
            failed: Mutex::new(None),
            queue: Mutex::new(Queue {
                durable: shipped_len,
                shipped: shipped_len,
                checkpoint: true,
                ..Queue::default()
            }),
            cv: Condvar::new(),
            lease: Mutex::new((leased.lease, leased.version)),
            lease_until: Mutex::new(lease_until),
            lease_warned: Mutex::new(false),
            renew_stop: Mutex::new(false),
            renew_cv: Condvar::new(),
        });
        let shipper = (mode == Mode::Async).then(|| {
            let inner = inner.clone();
            std::thread::Builder::new()
                .name("tinyagent-shipper".into())
                .spawn(move || inner.ship_in_background())
                .expect("could not start the replication thread")
        });
        let renewer = {
            let inner = inner.clone();
            std::thread::Builder::new()
                .name("tinyagent-lease".into())
                .spawn(move || inner.renew_on_clock())
                .expect("could not start the lease thread")
        };
        Replicator {
            inner,
            shipper,
            renewer: Some(renewer),
        }
    }

    /// The hook the store calls after each sync point.
    pub fn hook(&self) -> tinyagent_store::SyncHook {
        let inner = self.inner.clone();
        Arc::new(move |p: &tinyagent_store::SyncPoint<'_>| {
            let checkpoint = p.kinds.contains(&"workspace.checkpoint");
            let shipped = match inner.settings.mode {
                Mode::Sync => inner.ship_now(p.start, p.bytes, checkpoint),
                Mode::Async => inner.enqueue(p.start + p.bytes.len() as u64, checkpoint),
            };
            shipped.map_err(tinyagent_store::HookError::from)
        })
    }

    /// Ships the log's bytes from what the bucket holds up to `end` (the
    /// durable length of a log opened again), with the checkpoint files not
    /// stored yet, before anything else is appended.
    ///
    /// # Errors
    /// As a sync point's.
    ///
    /// # Panics
    /// When a lock was poisoned.
    pub fn catch_up(&self, end: u64) -> Result<(), ReplicateError> {
        let mut st = self.inner.shipped.lock().expect("lock");
        let from = st.manifest.log_len;
        if end <= from {
            return Ok(());
        }
        let bytes = ship::read_range(&self.inner.wal, from, end)
            .map_err(|e| ReplicateError::read("the log", &e))?;
        let r = self.inner.ship(&mut st, from, &bytes, true);
        if let Err(e) = &r {
            self.inner.fail(e);
        } else {
            let mut q = self.inner.queue.lock().expect("queue lock");
            q.durable = end;
            q.shipped = end;
        }
        r
    }

    pub fn url(&self) -> &Url {
        &self.inner.settings.url
    }

    /// The puts made so far, all and the lease's ([`Bucket::puts`]).
    pub fn puts(&self) -> (u64, u64) {
        self.inner.bucket.puts()
    }

    /// Ends replication: async mode waits (up to the timeout) for the
    /// shipper to catch up; then the manifest records how the run ended.
    /// Returns warnings for the person.
    ///
    /// # Panics
    /// When a lock was poisoned (a panic on the shipper thread).
    pub fn finish(mut self, summary: &Summary) -> Vec<String> {
        let mut warnings = Vec::new();
        self.stop_renewing();
        if let Some(h) = self.shipper.take() {
            let deadline = Instant::now() + self.inner.settings.timeout;
            let mut q = self.inner.queue.lock().expect("queue lock");
            while q.shipped < q.durable && Instant::now() < deadline {
                if self.inner.failed().is_some() {
                    break;
                }
                let left = deadline.saturating_duration_since(Instant::now());
                q = self
                    .inner
                    .cv
                    .wait_timeout(q, left.min(Duration::from_millis(200)))
                    .expect("queue lock")
                    .0;
            }
            if q.shipped < q.durable {
                warnings.push(format!(
                    "replication: {} bytes of the log are not in {} (the bucket did not come \
                     back within {}s); resume this run locally to ship them",
                    q.durable - q.shipped,
                    self.inner.settings.url,
                    self.inner.settings.timeout.as_secs()
                ));
            }
            q.stop = true;
            drop(q);
            self.inner.cv.notify_all();
            let _ = h.join();
        }
        if let Some(f) = self.inner.failed() {
            warnings.push(f.to_string());
            return warnings;
        }
        let mut st = self.inner.shipped.lock().expect("lock");
        let mut next = st.manifest.clone();
        next.status.clone_from(&summary.status);
        next.steps = summary.steps;
        next.cost_usd = summary.cost_usd;
        if let Err(e) = self.inner.put_manifest(&mut st, next) {
            warnings.push(format!(
                "replication: the final manifest was not stored: {e}"
            ));
            return warnings;
        }
        drop(st);
        // The run has ended: the lease goes, so that a resume does not wait
        // for it to run out.
        self.inner.release_lease();
        warnings
    }

    fn stop_renewing(&mut self) {
        *self.inner.renew_stop.lock().expect("lock") = true;
        self.inner.renew_cv.notify_all();
        if let Some(h) = self.renewer.take() {
            let _ = h.join();
        }
    }
}

impl Drop for Replicator {
    fn drop(&mut self) {
        self.stop_renewing();
        if let Some(h) = self.shipper.take() {
            self.inner.queue.lock().expect("queue lock").stop = true;
            self.inner.cv.notify_all();
            let _ = h.join();
        }
    }
}

impl Inner {
    /// The key of `rel` under the run's prefix.
    fn key(&self, rel: &str) -> String {
        format!("{}/{rel}", self.run_prefix)
    }

    /// Why this writer stopped, once it has.
    fn failed(&self) -> Option<ReplicateError> {
        self.failed.lock().expect("lock").clone()
    }

    /// Stops this writer: `e` is what every later sync point fails with
    /// (the first reason is kept).
    fn fail(&self, e: &ReplicateError) {
        let mut f = self.failed.lock().expect("lock");
        if f.is_none() {
            *f = Some(e.clone());
        }
    }
}
