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

pub mod bucket;
pub mod fetch;
pub mod lease;

use bucket::{Bucket, BucketError, Credentials, Url};
use lease::{Leased, own_lease};
use object_store::{PutMode, UpdateVersion};
use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// The manifest's format number.
pub const FORMAT: u32 = 1;
/// The manifest's name under a run's prefix.
pub const MANIFEST: &str = "manifest.json";
/// Segments of one level merged into one of the next when this many are at
/// the end of the list.
pub const FAN_IN: usize = 16;
/// A merged segment is at most this long (longer runs keep more segments).
pub const MAX_SEGMENT: u64 = 256 << 20;
/// A manifest naming a longer log, or more segments, is refused before
/// anything is read or allocated for it.
pub const MAX_LOG: u64 = 1 << 40;
const MAX_SEGMENTS: usize = 100_000;

/// What a checkpoint store file's name (relative to the store) is to a
/// fetch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreFile {
    /// A loose object (`objects/ab/<38 or 62 hex>`) or a pack and its index
    /// (`objects/pack/pack-<hex>.pack`, `.idx`): shipped and fetched.
    Object,
    /// A pack's derived file (`.rev`, `.bitmap`, `.mtimes`), which git
    /// makes again when it needs it: neither shipped nor fetched.
    Derived,
    /// Anything else (`objects/info/alternates`, a config, a hook): never
    /// shipped, and a bucket that holds one is refused.
    Other,
}

fn is_hex(s: &str, lens: &[usize]) -> bool {
    lens.contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
}

/// Sorts a checkpoint store file's name.
pub fn store_file(rel: &str) -> StoreFile {
    let parts: Vec<&str> = rel.split('/').collect();
    match parts.as_slice() {
        ["objects", "pack", name] => {
            let Some((stem, ext)) = name.rsplit_once('.') else {
                return StoreFile::Other;
            };
            let hex_ok = stem
                .strip_prefix("pack-")
                .is_some_and(|h| is_hex(h, &[40, 64]));
            match (hex_ok, ext) {
                (true, "pack" | "idx") => StoreFile::Object,
                (true, "rev" | "bitmap" | "mtimes") => StoreFile::Derived,
                _ => StoreFile::Other,
            }
        }
        ["objects", dir, name] if is_hex(dir, &[2]) && is_hex(name, &[38, 62]) => StoreFile::Object,
        _ => StoreFile::Other,
    }
}

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
    /// A bad URL or mode, a zero timeout.
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

/// One stored piece of the log: its bytes `[start, start + len)`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Segment {
    /// Relative to the run's prefix.
    pub key: String,
    pub start: u64,
    pub len: u64,
    pub crc32: u32,
    /// 0 for a sync point's own segment, n + 1 for FAN_IN of level n merged.
    #[serde(default)]
    pub level: u32,
}

/// The run's one mutable object: who holds it and what of it is stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    pub format: u32,
    pub run_id: String,
    /// The writer holding the run (host, pid, a random tag).
    pub writer: String,
    /// Bumped by each takeover.
    pub epoch: u64,
    /// `running`, or the status the writer finished with.
    pub status: String,
    pub updated: String,
    #[serde(default)]
    pub started_at: Option<String>,
    #[serde(default)]
    pub task: Option<String>,
    #[serde(default)]
    pub steps: u64,
    #[serde(default)]
    pub cost_usd: f64,
    /// Bytes of the log stored: the segments cover `[0, log_len)`.
    pub log_len: u64,
    pub segments: Vec<Segment>,
    /// Checkpoint store files stored (under `checkpoints/`).
    #[serde(default)]
    pub checkpoint_files: u64,
}

fn now() -> String {
    humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string()
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

impl Manifest {
    /// A new run's manifest, before any byte is stored.
    pub fn new(run_id: &str, writer: &str, started_at: Option<String>, task: &str) -> Manifest {
        Manifest {
            format: FORMAT,
            run_id: run_id.to_string(),
            writer: writer.to_string(),
            epoch: 1,
            status: "running".into(),
            updated: now(),
            started_at,
            task: Some(crate::text::first_line(task, 200)),
            steps: 0,
            cost_usd: 0.0,
            log_len: 0,
            segments: Vec::new(),
            checkpoint_files: 0,
        }
    }

    /// Decodes and checks a manifest read from a bucket (which is not
    /// trusted): the format, the run id, and segments that cover
    /// `[0, log_len)` in order with keys of the form this module writes.
    ///
    /// # Errors
    /// What is wrong with it.
    pub fn decode(bytes: &[u8], run_id: &str) -> Result<Manifest, String> {
        let m: Manifest = serde_json::from_slice(bytes)
            .map_err(|e| format!("the manifest does not parse: {e}"))?;
        if m.format != FORMAT {
            return Err(format!(
                "manifest format {} (this tinyagent reads {FORMAT})",
                m.format
            ));
        }
        if m.run_id != run_id {
            return Err(format!(
                "the manifest is of run {:?}, not {run_id:?}",
                m.run_id
            ));
        }
        if m.log_len > MAX_LOG || m.segments.len() > MAX_SEGMENTS {
            return Err(format!(
                "the manifest names a log of {} bytes in {} segments (at most {MAX_LOG} bytes \
                 in {MAX_SEGMENTS} are read)",
                m.log_len,
                m.segments.len()
            ));
        }
        let mut at = 0u64;
        for s in &m.segments {
            let key_ok = s.key.starts_with("log/")
                && s.key.len() < 200
                && s.key[4..]
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.')
                && !s.key.contains("..");
            if !key_ok {
                return Err(format!("the manifest names a segment {:?}", s.key));
            }
            if s.start != at || s.len == 0 || s.len > MAX_LOG {
                return Err(format!(
                    "segment {} starts at byte {} (expected {at}) with {} bytes",
                    s.key, s.start, s.len
                ));
            }
            at = s
                .start
                .checked_add(s.len)
                .ok_or("a segment past 2^64 bytes")?;
        }
        if at != m.log_len {
            return Err(format!(
                "the segments cover {at} bytes, the manifest says {}",
                m.log_len
            ));
        }
        Ok(m)
    }

    fn encode(&self) -> Vec<u8> {
        let mut v = serde_json::to_vec_pretty(self).expect("a manifest serialises");
        v.push(b'\n');
        v
    }
}

/// What the message of a writer that lost the run says (the command line
/// tells it from other failures by it: there is nothing to resume here).
pub const HELD: &str = "is now held by writer";

/// The message of a writer that lost the run.
fn held_message(run_id: &str, m: Option<&Manifest>) -> String {
    match m {
        Some(m) => format!(
            "replication: run {run_id} {HELD} {} (epoch {}); this writer stops \
             without acknowledging anything more",
            m.writer, m.epoch
        ),
        None => format!(
            "replication: run {run_id}'s manifest was changed by another writer; this writer \
             stops without acknowledging anything more"
        ),
    }
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
    failed: Mutex<Option<String>>,
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
/// As [`Bucket::connect`].
pub fn connect(settings: &Settings, creds: &Credentials) -> Result<Bucket, String> {
    Bucket::connect(&settings.url, creds, settings.timeout)
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
    ) -> Result<Replicator, String> {
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
    ) -> Result<Replicator, String> {
        let run_prefix = settings.url.key(&manifest.run_id);
        let key = format!("{run_prefix}/{MANIFEST}");
        let version = match bucket.put(&key, manifest.encode(), PutMode::Create) {
            Ok(v) => v,
            Err(BucketError::AlreadyExists) => {
                return Err(format!(
                    "{}/{}: a run of that id is stored there already",
                    settings.url, manifest.run_id
                ));
            }
            Err(e) => return Err(format!("replication to {}: {e}", settings.url)),
        };
        let sent = Instant::now();
        let held = lease::Lease::new(
            &manifest.run_id,
            &manifest.writer,
            manifest.epoch,
            settings.lease,
        );
        let lease_version = lease::store(&bucket, &held)
            .map_err(|e| format!("replication to {}: {e}", settings.url))?;
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
            match inner.settings.mode {
                Mode::Sync => inner.ship_now(p.start, p.bytes, checkpoint),
                Mode::Async => inner.enqueue(p.start + p.bytes.len() as u64, checkpoint),
            }
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
    pub fn catch_up(&self, end: u64) -> Result<(), String> {
        let mut st = self.inner.shipped.lock().expect("lock");
        let from = st.manifest.log_len;
        if end <= from {
            return Ok(());
        }
        let bytes = read_range(&self.inner.wal, from, end)
            .map_err(|e| format!("replication: reading the log: {e}"))?;
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
            warnings.push(f);
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
    fn key(&self, rel: &str) -> String {
        format!("{}/{rel}", self.run_prefix)
    }

    /// Sync mode: stores the sync point's bytes (and new checkpoint files)
    /// and the manifest naming them before the store acknowledges anything.
    fn ship_now(&self, start: u64, bytes: &[u8], checkpoint: bool) -> Result<(), String> {
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

    fn failed(&self) -> Option<String> {
        self.failed.lock().expect("lock").clone()
    }

    fn fail(&self, msg: &str) {
        let mut f = self.failed.lock().expect("lock");
        if f.is_none() {
            *f = Some(msg.to_string());
        }
    }

    fn ship(
        &self,
        st: &mut Shipped,
        start: u64,
        bytes: &[u8],
        checkpoint: bool,
    ) -> Result<(), String> {
        if start != st.manifest.log_len {
            return Err(format!(
                "replication: the log's new bytes start at {start}, but {} are stored",
                st.manifest.log_len
            ));
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
            .map_err(|e| format!("replication: {e}"))?;
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
    fn put_manifest(&self, st: &mut Shipped, mut next: Manifest) -> Result<(), String> {
        next.updated = now();
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
                        let msg = held_message(&next.run_id, other.as_ref().map(|x| &x.0));
                        self.fail(&msg);
                        Err(msg)
                    }
                }
            }
            Err(e) => Err(format!("replication: {e}")),
        }
    }

    /// Files of the checkpoint store's `objects/` not stored yet. They are
    /// immutable once in place (named by content), so each is stored once;
    /// temporary files and locks are left out.
    fn ship_checkpoint_files(&self, st: &mut Shipped) -> Result<(), String> {
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
                Err(e) => return Err(format!("replication: reading {rel}: {e}")),
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
            .map_err(|e| format!("replication: {e}"))?;
        st.files.extend(names);
        Ok(())
    }

    /// Merges the last [`FAN_IN`] segments when they are of one level, into
    /// one of the next (read back from the local log and checked against
    /// the crcs stored); repeated while it applies. The manifest names the
    /// merged segment before the parts are removed.
    fn consolidate(&self, st: &mut Shipped) -> Result<(), String> {
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
    fn enqueue(&self, durable: u64, checkpoint: bool) -> Result<(), String> {
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
    fn ship_in_background(&self) {
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
                .map_err(|e| format!("replication: reading the log: {e}"))
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
                        crate::report::err_line(&e);
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
fn read_range(path: &Path, start: u64, end: u64) -> std::io::Result<Vec<u8>> {
    let f = std::fs::File::open(path)?;
    let mut buf = vec![0u8; (end - start) as usize];
    f.read_exact_at(&mut buf, start)?;
    Ok(buf)
}

/// The immutable files under a checkpoint store's `objects/`, relative to
/// the store (`objects/ab/cdef…`, `objects/pack/pack-….pack`), sorted.
pub fn immutable_files(store: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let objects = store.join("objects");
    let Ok(top) = std::fs::read_dir(&objects) else {
        return out;
    };
    let skip = |name: &str| {
        let ext = Path::new(name).extension().and_then(|e| e.to_str());
        name.starts_with("tmp")
            || name.starts_with('.')
            || matches!(ext, Some("lock" | "tmp" | "keep" | "promisor"))
    };
    for d in top.flatten() {
        let dname = d.file_name().to_string_lossy().to_string();
        if dname == "info" || skip(&dname) || !d.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let Ok(inner) = std::fs::read_dir(d.path()) else {
            continue;
        };
        for f in inner.flatten() {
            let fname = f.file_name().to_string_lossy().to_string();
            if skip(&fname) || !f.file_type().is_ok_and(|t| t.is_file()) {
                continue;
            }
            let rel = format!("objects/{dname}/{fname}");
            if store_file(&rel) == StoreFile::Object {
                out.push(rel);
            }
        }
    }
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest_with(segs: &[(u64, u64)]) -> Manifest {
        let mut m = Manifest::new("r1", "w", None, "task");
        for &(start, len) in segs {
            m.segments.push(Segment {
                key: format!("log/{start:016x}-{:016x}-e1", start + len),
                start,
                len,
                crc32: 0,
                level: 0,
            });
            m.log_len = start + len;
        }
        m
    }

    #[test]
    fn a_manifest_round_trips_and_a_bad_one_is_refused() {
        let m = manifest_with(&[(0, 10), (10, 5)]);
        assert_eq!(Manifest::decode(&m.encode(), "r1").unwrap(), m);
        assert!(
            Manifest::decode(&m.encode(), "r2")
                .unwrap_err()
                .contains("not \"r2\"")
        );
        let gap = manifest_with(&[(0, 10), (11, 5)]);
        assert!(Manifest::decode(&gap.encode(), "r1").is_err());
        let mut long = m.clone();
        long.log_len = 16;
        assert!(Manifest::decode(&long.encode(), "r1").is_err());
        let mut escape = m.clone();
        escape.segments[0].key = "log/../../other/manifest.json".into();
        assert!(Manifest::decode(&escape.encode(), "r1").is_err());
        assert!(Manifest::decode(b"{not json", "r1").is_err());
    }

    #[test]
    fn only_immutable_object_files_are_listed() {
        let d = tempfile::tempdir().unwrap();
        let o = d.path().join("objects");
        for p in ["ab", "pack", "info"] {
            std::fs::create_dir_all(o.join(p)).unwrap();
        }
        for f in [
            &format!("ab/{H38}"),
            "ab/tmp_obj_x",
            &format!("pack/pack-{H40}.pack"),
            &format!("pack/pack-{H40}.idx"),
            &format!("pack/pack-{H40}.rev"),
            "pack/tmp_pack_y",
            "info/packs",
            "info/alternates",
        ] {
            std::fs::write(o.join(f), b"x").unwrap();
        }
        assert_eq!(
            immutable_files(d.path()),
            [
                format!("objects/ab/{H38}"),
                format!("objects/pack/pack-{H40}.idx"),
                format!("objects/pack/pack-{H40}.pack")
            ]
        );
    }

    const H38: &str = "0123456789abcdef0123456789abcdef012345";
    const H40: &str = "0123456789abcdef0123456789abcdef01234567";

    #[test]
    fn only_objects_and_packs_are_store_files() {
        use StoreFile::{Derived, Object, Other};
        for (rel, kind) in [
            (format!("objects/ab/{H38}"), Object),
            (format!("objects/pack/pack-{H40}.pack"), Object),
            (format!("objects/pack/pack-{H40}.idx"), Object),
            (format!("objects/pack/pack-{H40}.rev"), Derived),
            ("objects/info/alternates".into(), Other),
            ("objects/info/packs".into(), Other),
            ("objects/ab/cdef".into(), Other),
            (format!("objects/AB/{H38}"), Other),
            (format!("objects/pack/pack-{H40}.keep"), Other),
            (format!("objects/pack/../{H38}"), Other),
            ("config".into(), Other),
            (format!("hooks/ab/{H38}"), Other),
        ] {
            assert_eq!(store_file(&rel), kind, "{rel}");
        }
    }

    #[test]
    fn a_forged_huge_log_len_is_refused_by_decode() {
        let mut m = manifest_with(&[(0, 10)]);
        m.segments[0].len = u64::MAX / 2;
        m.log_len = u64::MAX / 2;
        let e = Manifest::decode(&m.encode(), "r1").unwrap_err();
        assert!(e.contains("at most"), "{e}");
    }
}
