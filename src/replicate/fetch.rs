//! A run fetched from a bucket onto a machine that never saw it.
//!
//! Everything read from the bucket is checked before it is believed: the
//! manifest's shape ([`Manifest::decode`]), each segment's length and crc
//! against the manifest, the log they make up (every line's crc and the
//! chain of `prev`, no torn or corrupt part, the run id of its
//! `run.started`), and the checkpoint files by git itself (`git fsck` of
//! the store they make up). A bucket that fails a check is refused and
//! nothing is written outside the staging directory, which goes.

use super::bucket::{Bucket, BucketError, Url};
use super::{MANIFEST, Manifest, Settings};
use crate::event::Event;
use object_store::{PutMode, UpdateVersion};
use std::collections::HashSet;
use std::path::{Path, PathBuf};

/// Why a fetch did not happen.
#[derive(Debug, Clone, thiserror::Error)]
pub enum FetchError {
    /// The bucket holds no run by that id (no manifest).
    #[error("{0}")]
    NotStored(String),
    /// What the bucket holds is not taken: forged, inconsistent, or held by
    /// another writer the caller may not displace.
    #[error("{0}")]
    Refused(String),
    /// The bucket could not be reached or read.
    #[error("{0}")]
    Failed(String),
}

impl FetchError {
    fn refused(m: impl Into<String>) -> FetchError {
        FetchError::Refused(m.into())
    }
    fn failed(m: impl Into<String>) -> FetchError {
        FetchError::Failed(m.into())
    }
    /// Whether the bucket's content was refused (or is not there), rather
    /// than the bucket failing.
    pub fn is_refusal(&self) -> bool {
        !matches!(self, FetchError::Failed(_))
    }
}

/// Splits `s3://bucket/prefix/<run_id>` into the replication URL and the
/// run id.
///
/// # Errors
/// Not an s3 URL, or one without a run id.
pub fn parse_run_url(s: &str) -> Result<(Url, String), String> {
    let url = Url::parse(s)?;
    let (prefix, run_id) = match url.prefix.rsplit_once('/') {
        Some((p, r)) => (p.to_string(), r.to_string()),
        None => (String::new(), url.prefix.clone()),
    };
    if run_id.is_empty() {
        return Err(format!("{s:?}: name the run: s3://bucket/prefix/<run_id>"));
    }
    Ok((
        Url {
            bucket: url.bucket,
            prefix,
        },
        run_id,
    ))
}

/// A run's manifest and everything it names, checked.
pub struct Fetched {
    pub manifest: Manifest,
    pub version: UpdateVersion,
    /// The log's bytes: `manifest.log_len` of them.
    pub log: Vec<u8>,
    /// Checkpoint store files (relative to the store) and their bytes.
    pub files: Vec<(String, Vec<u8>)>,
}

/// The manifest of `run_id` and its version.
///
/// # Errors
/// No such run (refused), a manifest that does not check, or a bucket that
/// cannot be reached.
pub fn manifest(bucket: &Bucket, run_id: &str) -> Result<(Manifest, UpdateVersion), FetchError> {
    let key = bucket.url.key(&format!("{run_id}/{MANIFEST}"));
    let (bytes, version) = match bucket.get(&key) {
        Ok(x) => x,
        Err(BucketError::NotFound) => {
            return Err(FetchError::NotStored(format!(
                "{}/{run_id}: no run stored there (no {MANIFEST})",
                bucket.url
            )));
        }
        Err(e) => return Err(FetchError::failed(format!("{}: {e}", bucket.url))),
    };
    let m = Manifest::decode(&bytes, run_id)
        .map_err(|e| FetchError::refused(format!("{}/{run_id}: {e}", bucket.url)))?;
    Ok((m, version))
}

/// Fetches and checks the log and checkpoint files of `run_id` into memory.
/// The log is checked in `scratch` (a directory this call may write in).
///
/// # Errors
/// As [`manifest`]; a segment or log that does not check (refused).
pub fn fetch(bucket: &Bucket, run_id: &str, scratch: &Path) -> Result<Fetched, FetchError> {
    let (manifest, version) = manifest(bucket, run_id)?;
    let run_prefix = bucket.url.key(run_id);
    // Grown as segments arrive and check: the manifest's own `log_len` is
    // not trusted with an allocation.
    let mut log = Vec::new();
    for s in &manifest.segments {
        let (bytes, _) = bucket
            .get(&format!("{run_prefix}/{}", s.key))
            .map_err(|e| match e {
                BucketError::NotFound => FetchError::refused(format!(
                    "{}/{run_id}: the manifest names {}, which is not there",
                    bucket.url, s.key
                )),
                e => FetchError::failed(format!("{}: {e}", bucket.url)),
            })?;
        if bytes.len() as u64 != s.len || crc32fast::hash(&bytes) != s.crc32 {
            return Err(FetchError::refused(format!(
                "{}/{run_id}: segment {} does not match the manifest ({} bytes, crc {:08x}; \
                 expected {} bytes, crc {:08x})",
                bucket.url,
                s.key,
                bytes.len(),
                crc32fast::hash(&bytes),
                s.len,
                s.crc32
            )));
        }
        log.extend_from_slice(&bytes);
    }
    check_log(&log, run_id, scratch)
        .map_err(|e| FetchError::refused(format!("{}/{run_id}: the stored log {e}", bucket.url)))?;
    let mut files = Vec::new();
    let cp_prefix = format!("{run_prefix}/checkpoints");
    let listed = bucket
        .list(&cp_prefix)
        .map_err(|e| FetchError::failed(format!("{}: {e}", bucket.url)))?;
    for (key, _) in listed {
        let Some(rel) = key.strip_prefix(&format!("{cp_prefix}/")) else {
            continue;
        };
        match super::store_file(rel) {
            super::StoreFile::Object => {}
            super::StoreFile::Derived => continue,
            super::StoreFile::Other => {
                return Err(FetchError::refused(format!(
                    "{}/{run_id}: {key:?} is not a checkpoint object or pack; nothing was \
                     taken over",
                    bucket.url
                )));
            }
        }
        let (bytes, _) = bucket
            .get(&key)
            .map_err(|e| FetchError::failed(format!("{}: {e}", bucket.url)))?;
        files.push((rel.to_string(), bytes));
    }
    Ok(Fetched {
        manifest,
        version,
        log,
        files,
    })
}

/// Every line of `log` framed and chained as the store writes them, none
/// torn or corrupt, the first a `run.started` of `run_id`.
fn check_log(log: &[u8], run_id: &str, scratch: &Path) -> Result<(), String> {
    let path = scratch.join("check.wal");
    std::fs::write(&path, log).map_err(|e| format!("could not be checked: {e}"))?;
    let mut first: Option<String> = None;
    let report = tinyagent_store::wal::reader::scan::<Event>(&path, None, |f, _| {
        if first.is_none() {
            first = Some(match &f.event {
                Event::RunStarted(r) => r.run_id.clone(),
                _ => String::new(),
            });
        }
    });
    let _ = std::fs::remove_file(&path);
    let report = report.map_err(|e| format!("cannot be read: {e}"))?;
    if let Some(c) = report.corruption {
        return Err(format!(
            "is corrupt at seq {}, byte offset {}: {}",
            c.seq, c.offset, c.reason
        ));
    }
    if let Some(t) = report.torn_tail {
        return Err(format!(
            "ends in a torn record ({} bytes at offset {})",
            t.bytes, t.offset
        ));
    }
    if report.valid_bytes != log.len() as u64 || report.last.is_none() {
        return Err("holds no complete record".into());
    }
    match first.as_deref() {
        Some(id) if id == run_id => Ok(()),
        Some("") => Err("does not start with run.started".into()),
        Some(other) => Err(format!("is of run {other:?}")),
        None => Err("holds no record".into()),
    }
}

/// A run this process holds now.
pub struct TakenOver {
    pub bucket: Bucket,
    pub settings: Settings,
    pub manifest: Manifest,
    pub version: UpdateVersion,
    pub files: HashSet<String>,
    /// This writer's lease, stored once the manifest was taken.
    pub lease: super::lease::Leased,
}

/// Whether `run_id` may be taken over as far as its lease goes: refused
/// while another writer's lease is live (naming its machine and pid and
/// when it runs out) unless `take_over`; a lease that ran out, was
/// released, or is missing (a run stored before leases) is no obstacle.
/// `gone` names a writer known to have stopped (this machine's own, whose
/// log nobody here holds open).
///
/// # Errors
/// Refused as described; a lease that does not decode is refused too
/// unless `take_over`; a bucket that fails.
pub fn check_lease(
    bucket: &Bucket,
    run_id: &str,
    take_over: bool,
    gone: Option<&str>,
) -> Result<(), FetchError> {
    use super::lease::Held;
    let lease = match super::lease::read(bucket, run_id) {
        Ok(l) => l,
        Err(e) if take_over => {
            crate::report::err_line(&format!("warning: {e}; taken over anyway (--take-over)"));
            return Ok(());
        }
        Err(e) => {
            return Err(FetchError::refused(format!(
                "{e}; whether its writer is alive cannot be told: --take-over takes the run anyway"
            )));
        }
    };
    let Some((lease, _)) = lease else {
        return Ok(());
    };
    let Held::Live(until) = lease.held(std::time::SystemTime::now()) else {
        return Ok(());
    };
    if gone == Some(lease.writer.as_str()) {
        return Ok(());
    }
    if take_over {
        crate::report::err_line(&format!(
            "taking run {run_id} over from writer {} ({}) whose lease runs out {}",
            lease.writer,
            lease.holder(),
            super::lease::stamp(until)
        ));
        return Ok(());
    }
    Err(FetchError::refused(format!(
        "{}/{run_id} is live: writer {} ({}) holds it, and its lease runs out at {} ({}); \
         resume it once that writer has stopped, or take it over now with --take-over (that \
         writer then stops)",
        bucket.url,
        lease.writer,
        lease.holder(),
        super::lease::stamp(until),
        super::lease::from_now(until)
    )))
}

/// Takes the run over: the manifest, with this writer and the next epoch,
/// stored `If-Match` the version read. Another writer that took it first
/// makes this fail, naming that writer.
///
/// # Errors
/// Held by another writer (the message names it), or the bucket failed.
pub fn take_over(
    bucket: Bucket,
    settings: Settings,
    fetched: &Fetched,
    writer: &str,
) -> Result<TakenOver, FetchError> {
    let files = fetched.files.iter().map(|(r, _)| r.clone());
    take_over_from(
        bucket,
        settings,
        &fetched.manifest,
        &fetched.version,
        files,
        writer,
    )
}

/// [`take_over`] of the manifest `read` (at `version`), whose checkpoint
/// files `files` are stored.
///
/// # Errors
/// As [`take_over`].
pub fn take_over_from(
    bucket: Bucket,
    settings: Settings,
    read: &Manifest,
    version: &UpdateVersion,
    files: impl IntoIterator<Item = String>,
    writer: &str,
) -> Result<TakenOver, FetchError> {
    let files: HashSet<String> = files.into_iter().collect();
    let mut next = read.clone();
    next.writer = writer.to_string();
    next.epoch += 1;
    next.status = "running".into();
    next.updated = super::manifest::now();
    let run_id = next.run_id.clone();
    let key = bucket.url.key(&format!("{run_id}/{MANIFEST}"));
    let encoded = next.encode();
    let sent = std::time::Instant::now();
    match bucket.put(&key, encoded, PutMode::Update(version.clone())) {
        Ok(version) => {
            let lease = lease_for(&bucket, &settings, &next, sent)?;
            Ok(TakenOver {
                bucket,
                settings,
                files,
                manifest: next,
                version,
                lease,
            })
        }
        Err(BucketError::Precondition) => {
            let holder = manifest(&bucket, &run_id).ok();
            // Our own write, whose answer was lost?
            if let Some((m, v)) = &holder
                && m.writer == next.writer
                && m.epoch == next.epoch
            {
                let lease = lease_for(&bucket, &settings, m, sent)?;
                return Ok(TakenOver {
                    bucket,
                    settings,
                    files,
                    manifest: m.clone(),
                    version: v.clone(),
                    lease,
                });
            }
            Err(FetchError::failed(match holder {
                Some((m, _)) => format!(
                    "{}/{run_id}: the run is held by writer {} (epoch {}), which took it over \
                     first; nothing was written here",
                    bucket.url, m.writer, m.epoch
                ),
                None => format!(
                    "{}/{run_id}: another writer took the run over first; nothing was written here",
                    bucket.url
                ),
            }))
        }
        Err(e) => Err(FetchError::failed(format!("{}: {e}", bucket.url))),
    }
}

/// The lease of the writer that has just taken the manifest `m` (stored
/// over whatever lease is there: the manifest decided who holds the run,
/// and the writer named there before finds its renewal refused).
fn lease_for(
    bucket: &Bucket,
    settings: &Settings,
    m: &Manifest,
    sent: std::time::Instant,
) -> Result<super::lease::Leased, FetchError> {
    let lease = super::lease::Lease::new(&m.run_id, &m.writer, m.epoch, settings.lease);
    let version = super::lease::store(bucket, &lease)
        .map_err(|e| FetchError::failed(format!("{}: storing the lease: {e}", bucket.url)))?;
    Ok(super::lease::Leased {
        lease,
        version,
        sent,
    })
}

/// Writes the fetched checkpoint files into a new store at `git_dir`.
///
/// # Errors
/// Git cannot make the store, a file cannot be written, or `git fsck`
/// finds the store broken (a forged or damaged object).
pub fn write_store(git_dir: &Path, files: &[(String, Vec<u8>)]) -> Result<(), String> {
    let git = crate::checkpoint::Git {
        git_dir: git_dir.to_path_buf(),
        work_tree: git_dir.to_path_buf(),
        index: None,
    };
    git.init().map_err(|e| e.to_string())?;
    let mut dirs: HashSet<PathBuf> = HashSet::new();
    for (rel, bytes) in files {
        let p = git_dir.join(rel);
        if let Some(d) = p.parent()
            && dirs.insert(d.to_path_buf())
        {
            // 0700 whatever the umask: a store's directories are private
            // (and a looser one would be refused as someone else's).
            std::os::unix::fs::DirBuilderExt::mode(
                std::fs::DirBuilder::new().recursive(true),
                0o700,
            )
            .create(d)
            .map_err(|e| format!("{}: {e}", d.display()))?;
        }
        tinyagent_store::fsutil::atomic_write(&p, bytes)
            .map_err(|e| format!("{}: {e}", p.display()))?;
    }
    for d in &dirs {
        let _ = std::fs::File::open(d).and_then(|f| f.sync_all());
    }
    if !files.is_empty() {
        // Every tree's paths too: an entry `.`, `..`, `.git` (in any case),
        // empty or holding a `/` is an error, not fsck's default warning,
        // so that no restore of any checkpoint can be steered by one.
        let mut args = Vec::new();
        for id in [
            "hasDot",
            "hasDotdot",
            "hasDotgit",
            "emptyName",
            "fullPathname",
            "badFilemode",
            "duplicateEntries",
            "nulInHeader",
        ] {
            args.push("-c".to_string());
            args.push(format!("fsck.{id}=error"));
        }
        args.extend(["fsck", "--no-dangling", "--no-progress"].map(String::from));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        git.run(&args, None).map_err(|e| {
            format!(
                "the stored checkpoint files do not make a sound store: {}",
                crate::text::first_line(&e.to_string(), 300)
            )
        })?;
    }
    Ok(())
}

/// The checkpoint files stored for `run_id` (relative to the store).
///
/// # Errors
/// The bucket cannot be listed.
pub fn stored_files(bucket: &Bucket, run_id: &str) -> Result<Vec<String>, FetchError> {
    let prefix = bucket.url.key(&format!("{run_id}/checkpoints"));
    let listed = bucket
        .list(&prefix)
        .map_err(|e| FetchError::failed(format!("{}: {e}", bucket.url)))?;
    Ok(listed
        .into_iter()
        .filter_map(|(k, _)| k.strip_prefix(&format!("{prefix}/")).map(str::to_string))
        .collect())
}

/// Does the local log at `wal` begin with exactly what `m` says is stored
/// (each segment's length and CRC-32 over the same bytes of the file)?
///
/// # Errors
/// Why not (the bucket holds more, or other bytes).
pub fn local_holds(wal: &Path, m: &Manifest) -> Result<(), String> {
    use std::os::unix::fs::FileExt;
    let f = std::fs::File::open(wal).map_err(|e| format!("{}: {e}", wal.display()))?;
    let len = f.metadata().map_err(|e| e.to_string())?.len();
    if m.log_len > len {
        return Err(format!(
            "the bucket holds {} bytes of the log, this machine {len}: the run went on \
             elsewhere",
            m.log_len
        ));
    }
    for s in &m.segments {
        let mut buf = vec![0u8; s.len as usize];
        f.read_exact_at(&mut buf, s.start)
            .map_err(|e| e.to_string())?;
        if crc32fast::hash(&buf) != s.crc32 {
            return Err(format!(
                "the bucket's bytes {}..{} differ from this machine's log: the run went on \
                 elsewhere",
                s.start,
                s.start + s.len
            ));
        }
    }
    Ok(())
}
