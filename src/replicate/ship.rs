//! A writer's shipping: a sync point's bytes stored as a segment, the
//! checkpoint store's new files, then a manifest naming them stored with a
//! conditional put; in sync mode from the store's hook, in async mode from
//! the background shipper. Segments of one level are merged
//! ([`FAN_IN`] into one) as they pile up.

use super::bucket::BucketError;
use super::{
    Fence, Holder, Inner, MANIFEST, Manifest, ReplicateError, Segment, Shipped, immutable_files,
};
use object_store::PutMode;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::{Duration, Instant};

/// Segments of one level merged into one of the next when this many are at
/// the end of the list.
pub const FAN_IN: usize = 16;
/// A merged segment is at most this long (longer runs keep more segments).
pub const MAX_SEGMENT: u64 = 256 << 20;

/// The error of a writer that lost the run: the manifest there is `m`.
fn fenced_by_manifest(run_id: &str, m: Option<&Manifest>) -> ReplicateError {
    ReplicateError::Fenced {
        run_id: run_id.to_string(),
        by: Fence::Manifest,
        holder: m.map(|m| Holder {
            writer: m.writer.clone(),
            at: None,
            epoch: m.epoch,
        }),
    }
}

impl Inner {
    /// Sync mode: stores the sync point's bytes (and new checkpoint files)
    /// and the manifest naming them before the store acknowledges anything.
    pub(super) fn ship_now(
        &self,
        start: u64,
        bytes: &[u8],
        checkpoint: bool,
    ) -> Result<(), ReplicateError> {
        if let Some(f) = self.failed() {
            return Err(f);
        }
        self.hold_lease()?;
        let mut st = self.shipped.lock().expect("lock");
        let r = self.ship(&mut st, start, bytes, checkpoint);
        if let Err(e) = &r {
            self.fail(e);
        }
        r
    }

    pub(super) fn ship(
        &self,
        st: &mut Shipped,
        start: u64,
        bytes: &[u8],
        checkpoint: bool,
    ) -> Result<(), ReplicateError> {
        if start != st.manifest.log_len {
            return Err(ReplicateError::Gap {
                start,
                stored: st.manifest.log_len,
            });
        }
        if bytes.is_empty() {
            return Ok(());
        }
        if checkpoint || st.manifest.segments.is_empty() {
            self.ship_checkpoint_files(st)?;
        }
        let end = start + bytes.len() as u64;
        let rel = format!("log/{start:016x}-{end:016x}-e{}", st.manifest.epoch);
        self.bucket
            .put(&self.key(&rel), bytes.to_vec(), PutMode::Overwrite)
            .map_err(ReplicateError::bucket)?;
        let mut next = st.manifest.clone();
        next.segments.push(Segment {
            key: rel,
            start,
            len: bytes.len() as u64,
            crc32: crc32fast::hash(bytes),
            level: 0,
        });
        next.log_len = end;
        next.checkpoint_files = st.files.len() as u64;
        self.put_manifest(st, next)?;
        self.consolidate(st)
    }

    /// Stores `next` over the manifest this writer stored last
    /// (`If-Match`). A failed match is this writer's end unless the
    /// manifest there is exactly the one it meant to store (an earlier
    /// attempt that succeeded without its answer arriving).
    pub(super) fn put_manifest(
        &self,
        st: &mut Shipped,
        mut next: Manifest,
    ) -> Result<(), ReplicateError> {
        next.updated = super::manifest::now();
        let key = self.key(MANIFEST);
        match self
            .bucket
            .put(&key, next.encode(), PutMode::Update(st.version.clone()))
        {
            Ok(v) => {
                st.version = v;
                st.manifest = next;
                Ok(())
            }
            Err(BucketError::Precondition | BucketError::NotFound) => {
                let there = self
                    .bucket
                    .get(&key)
                    .ok()
                    .and_then(|(b, v)| Manifest::decode(&b, &next.run_id).ok().map(|m| (m, v)));
                match there {
                    Some((m, v))
                        if m.writer == next.writer
                            && m.epoch == next.epoch
                            && m.log_len == next.log_len
                            && m.segments == next.segments =>
                    {
                        st.version = v;
                        st.manifest = m;
                        Ok(())
                    }
                    other => {
                        let e = fenced_by_manifest(&next.run_id, other.as_ref().map(|x| &x.0));
                        self.fail(&e);
                        Err(e)
                    }
                }
            }
            Err(e) => Err(ReplicateError::bucket(e)),
        }
    }

    /// Files of the checkpoint store's `objects/` not stored yet. They are
    /// immutable once in place (named by content), so each is stored once;
    /// temporary files and locks are left out.
    fn ship_checkpoint_files(&self, st: &mut Shipped) -> Result<(), ReplicateError> {
        let store = crate::checkpoint::store_dir(&self.wal);
        let mut new = Vec::new();
        for rel in immutable_files(&store) {
            if st.files.contains(&rel) {
                continue;
            }
            let bytes = match std::fs::read(store.join(&rel)) {
                Ok(b) => b,
                // Gone (a pack replacing loose objects): nothing to store.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(ReplicateError::read(rel, &e)),
            };
            new.push((rel, bytes));
        }
        if new.is_empty() {
            return Ok(());
        }
        let names: Vec<String> = new.iter().map(|(r, _)| r.clone()).collect();
        let items = new
            .into_iter()
            .map(|(rel, b)| (self.key(&format!("checkpoints/{rel}")), b))
            .collect();
        self.bucket
            .put_many(items)
            .map_err(ReplicateError::bucket)?;
        st.files.extend(names);
        Ok(())
    }

    /// Merges the last [`FAN_IN`] segments when they are of one level, into
    /// one of the next (read back from the local log and checked against
    /// the crcs stored); repeated while it applies. The manifest names the
    /// merged segment before the parts are removed.
    fn consolidate(&self, st: &mut Shipped) -> Result<(), ReplicateError> {
        loop {
            let segs = &st.manifest.segments;
            let Some(last) = segs.last() else {
                return Ok(());
            };
            let level = last.level;
            let run = segs.iter().rev().take_while(|s| s.level == level).count();
            if run < FAN_IN {
                return Ok(());
            }
            let parts: Vec<Segment> = segs[segs.len() - FAN_IN..].to_vec();
            let start = parts[0].start;
            let end = last.start + last.len;
            if end - start > MAX_SEGMENT {
                return Ok(());
            }
            let Ok(bytes) = read_range(&self.wal, start, end) else {
                return Ok(());
            };
            let mut at = 0usize;
            for p in &parts {
                let piece = &bytes[at..at + p.len as usize];
                if crc32fast::hash(piece) != p.crc32 {
                    // The local log is not what was shipped: leave it.
                    return Ok(());
                }
                at += p.len as usize;
            }
            let rel = format!(
                "log/{start:016x}-{end:016x}-e{}-l{}",
                st.manifest.epoch,
                level + 1
            );
            if let Err(e) = self
                .bucket
                .put(&self.key(&rel), bytes.clone(), PutMode::Overwrite)
            {
                // The parts are still there and named: merge later.
                crate::report::err_line(&format!(
                    "warning: replication: could not merge segments: {e}"
                ));
                return Ok(());
            }
            let mut next = st.manifest.clone();
            let keep = next.segments.len() - FAN_IN;
            next.segments.truncate(keep);
            next.segments.push(Segment {
                key: rel,
                start,
                len: end - start,
                crc32: crc32fast::hash(&bytes),
                level: level + 1,
            });
            self.put_manifest(st, next)?;
            for p in parts {
                let _ = self.bucket.delete(&self.key(&p.key));
            }
        }
    }

    /// Async mode: notes the new durable length for the shipper; waits only
    /// when the bucket is reachable and the oldest unshipped sync point is
    /// older than `max_lag`.
    pub(super) fn enqueue(&self, durable: u64, checkpoint: bool) -> Result<(), ReplicateError> {
        if let Some(f) = self.failed() {
            return Err(f);
        }
        self.warn_if_lapsed();
        let mut q = self.queue.lock().expect("queue lock");
        q.durable = durable;
        q.checkpoint |= checkpoint;
        if q.oldest.is_none() {
            q.oldest = Some(Instant::now());
        }
        self.cv.notify_all();
        let max_lag = self.settings.max_lag;
        while !q.outage && q.shipped < q.durable && q.oldest.is_some_and(|t| t.elapsed() > max_lag)
        {
            q = self
                .cv
                .wait_timeout(q, Duration::from_millis(50))
                .expect("queue lock")
                .0;
            if let Some(f) = self.failed() {
                return Err(f);
            }
        }
        Ok(())
    }

    /// The async shipper: ships what is durable and not stored, from the
    /// local log, in pieces of at most 8 MiB; warns once when the bucket
    /// goes away and once when it is caught up again.
    pub(super) fn ship_in_background(&self) {
        let mut warned = false;
        let mut backoff = Duration::from_millis(200);
        loop {
            let (from, to, checkpoint) = {
                let mut q = self.queue.lock().expect("queue lock");
                while q.shipped >= q.durable && !q.stop {
                    q = self.cv.wait(q).expect("queue lock");
                }
                if q.shipped >= q.durable && q.stop {
                    return;
                }
                let to = q.durable.min(q.shipped + (8 << 20));
                let cp = std::mem::take(&mut q.checkpoint);
                (q.shipped, to, cp)
            };
            let result = read_range(&self.wal, from, to)
                .map_err(|e| ReplicateError::read("the log", &e))
                .and_then(|bytes| {
                    let mut st = self.shipped.lock().expect("lock");
                    self.ship(&mut st, from, &bytes, checkpoint)
                });
            let mut q = self.queue.lock().expect("queue lock");
            match result {
                Ok(()) => {
                    q.shipped = to;
                    q.outage = false;
                    q.oldest = (q.shipped < q.durable).then(Instant::now);
                    backoff = Duration::from_millis(200);
                    if warned && q.shipped >= q.durable {
                        crate::report::err_line(&format!(
                            "replication: caught up with {}",
                            self.settings.url
                        ));
                        warned = false;
                    }
                    self.cv.notify_all();
                }
                Err(e) => {
                    q.checkpoint |= checkpoint;
                    if self.failed().is_some() {
                        // Fenced: the next sync point fails with it.
                        crate::report::err_line(&e.to_string());
                        self.cv.notify_all();
                        return;
                    }
                    q.outage = true;
                    self.cv.notify_all();
                    if !warned {
                        crate::report::err_line(&format!(
                            "warning: {e}; the run goes on and replication catches up when \
                             the bucket is back"
                        ));
                        warned = true;
                    }
                    if q.stop {
                        return;
                    }
                    drop(q);
                    std::thread::sleep(backoff);
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                }
            }
        }
    }
}

/// Bytes `[start, end)` of the file at `path`.
pub(super) fn read_range(path: &Path, start: u64, end: u64) -> std::io::Result<Vec<u8>> {
    let f = std::fs::File::open(path)?;
    let mut buf = vec![0u8; (end - start) as usize];
    f.read_exact_at(&mut buf, start)?;
    Ok(buf)
}
