//! The four ways of saving one more event that `bench save` and
//! `benches/save.rs` compare, on a run that already holds N messages:
//!
//! - [`Method::LogAppend`]: the real [`WalWriter`] appends the event (serialise,
//!   frame, one `write`, `fdatasync`) to a log already holding the run.
//! - [`Method::RawFdatasync`]: the physical floor: the same number of bytes
//!   appended to a plain `O_APPEND` file, then `fdatasync`; no framing, no serde.
//! - [`Method::CheckpointFsync`]: the old design: serialise the whole run as a
//!   trajectory JSON, write it to a temp file in the same directory, `fsync`,
//!   rename over the checkpoint, `fsync` the directory.
//! - [`Method::CheckpointNoFsync`]: the same whole-file write and rename
//!   without any fsync (fast, and not durable).

use super::run::SyntheticRun;
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use tinyagent_store::wal::WalError;
use tinyagent_store::wal::reader;
use tinyagent_store::wal::writer::{LockedLog, WalWriter};

/// Why a benchmark could not run.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("benchmark file {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("serialising the benchmark run: {0}")]
    Json(#[from] serde_json::Error),
    #[error("benchmark log: {0}")]
    Wal(#[from] WalError),
    #[error("benchmark log {0} has no record to append after")]
    EmptyLog(PathBuf),
}

fn io_at(path: &Path) -> impl FnOnce(std::io::Error) -> BenchError + '_ {
    move |source| BenchError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// One way of saving an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    LogAppend,
    RawFdatasync,
    CheckpointFsync,
    CheckpointNoFsync,
}

impl Method {
    /// All four, in the order samples interleave them.
    pub const ALL: [Method; 4] = [
        Method::LogAppend,
        Method::CheckpointFsync,
        Method::CheckpointNoFsync,
        Method::RawFdatasync,
    ];

    /// Short name used in JSON members and criterion ids.
    pub fn name(self) -> &'static str {
        match self {
            Method::LogAppend => "log_append",
            Method::RawFdatasync => "raw_fdatasync",
            Method::CheckpointFsync => "checkpoint_fsync",
            Method::CheckpointNoFsync => "checkpoint_nofsync",
        }
    }
}

/// Files and buffers for saving one more event into a run of N messages.
pub struct SaveRig {
    run: SyntheticRun,
    log_path: PathBuf,
    log: WalWriter,
    raw_path: PathBuf,
    raw: File,
    raw_line: Vec<u8>,
    dir: PathBuf,
    checkpoint: PathBuf,
    checkpoint_tmp: PathBuf,
    json: Vec<u8>,
}

/// Writes `bytes` as a new file and syncs it and its directory.
fn write_synced(path: &Path, bytes: &[u8]) -> Result<(), BenchError> {
    let mut f = OpenOptions::new()
        .create_new(true)
        .write(true)
        .open(path)
        .map_err(io_at(path))?;
    f.write_all(bytes).map_err(io_at(path))?;
    f.sync_all().map_err(io_at(path))
}

fn sync_dir(dir: &Path) -> Result<(), BenchError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_at(dir))
}

/// Opens the writer on a log already holding records (found by the reader).
fn open_writer(path: &Path) -> Result<WalWriter, BenchError> {
    let scan = reader::scan::<crate::event::Event>(path, None, |_, _| {})?;
    let last = scan
        .last
        .ok_or_else(|| BenchError::EmptyLog(path.to_path_buf()))?;
    Ok(LockedLog::open(path)?.into_writer(Some(&last), scan.valid_bytes, None))
}

impl SaveRig {
    /// Lays out, in `dir`, a log and a raw file already holding a run of
    /// `messages` messages and a checkpoint of it; all synced before timing.
    pub fn new(dir: &Path, messages: u64, output_bytes: usize) -> Result<SaveRig, BenchError> {
        let run = SyntheticRun::new(messages, output_bytes);
        let log_bytes = run.log_bytes()?;
        let log_path = dir.join(format!("run-{messages}.wal"));
        let raw_path = dir.join(format!("raw-{messages}.bin"));
        write_synced(&log_path, &log_bytes)?;
        write_synced(&raw_path, &log_bytes)?;
        drop(log_bytes);
        let checkpoint = dir.join(format!("trajectory-{messages}.json"));
        let checkpoint_tmp = dir.join(format!(".trajectory-{messages}.json.tmp"));
        let mut json = Vec::new();
        run.trajectory().to_json(&mut json)?;
        write_synced(&checkpoint, &json)?;
        sync_dir(dir)?;
        let log = open_writer(&log_path)?;
        let raw = OpenOptions::new()
            .append(true)
            .open(&raw_path)
            .map_err(io_at(&raw_path))?;
        let raw_line = run.next_line()?;
        Ok(SaveRig {
            run,
            log_path,
            log,
            raw_path,
            raw,
            raw_line,
            dir: dir.to_path_buf(),
            checkpoint,
            checkpoint_tmp,
            json,
        })
    }

    /// Saves the event once with `method`.
    pub fn save(&mut self, method: Method) -> Result<(), BenchError> {
        match method {
            Method::LogAppend => self.log_append(),
            Method::RawFdatasync => self.raw_append(),
            Method::CheckpointFsync => self.checkpoint(true),
            Method::CheckpointNoFsync => self.checkpoint(false),
        }
    }

    /// (a) The real writer: serialise, frame, write, fdatasync.
    pub fn log_append(&mut self) -> Result<(), BenchError> {
        self.log.append(&self.run.next)?;
        Ok(())
    }

    /// (d) The same bytes to a plain O_APPEND file, then fdatasync.
    pub fn raw_append(&mut self) -> Result<(), BenchError> {
        self.raw
            .write_all(&self.raw_line)
            .and_then(|()| self.raw.sync_data())
            .map_err(io_at(&self.raw_path))
    }

    /// (b)/(c) The whole run as one JSON file: temp file, write, (fsync),
    /// rename over the checkpoint, (fsync the directory).
    pub fn checkpoint(&mut self, fsync: bool) -> Result<(), BenchError> {
        self.run.trajectory().to_json(&mut self.json)?;
        let tmp = &self.checkpoint_tmp;
        let mut f = File::create(tmp).map_err(io_at(tmp))?;
        f.write_all(&self.json).map_err(io_at(tmp))?;
        if fsync {
            f.sync_all().map_err(io_at(tmp))?;
        }
        drop(f);
        fs::rename(tmp, &self.checkpoint).map_err(io_at(&self.checkpoint))?;
        if fsync {
            sync_dir(&self.dir)?;
        }
        Ok(())
    }

    /// Makes everything a method left behind durable, outside any timing, so
    /// the next method does not pay for it: the unsynced checkpoint's dirty
    /// pages would otherwise be written back (and journalled) during the next
    /// method's fdatasync. A no-op after the methods that sync themselves.
    pub fn settle(&mut self, method: Method) -> Result<(), BenchError> {
        match method {
            Method::LogAppend | Method::RawFdatasync | Method::CheckpointFsync => Ok(()),
            Method::CheckpointNoFsync => {
                File::open(&self.checkpoint)
                    .and_then(|f| f.sync_all())
                    .map_err(io_at(&self.checkpoint))?;
                sync_dir(&self.dir)
            }
        }
    }

    /// Bytes of the event's log line (and of each raw append).
    pub fn event_bytes(&self) -> usize {
        self.raw_line.len()
    }

    /// Bytes of one whole-file checkpoint.
    pub fn checkpoint_bytes(&self) -> usize {
        self.json.len()
    }

    /// Removes the rig's files.
    pub fn remove(self) -> Result<(), BenchError> {
        for path in [
            &self.log_path,
            &self.raw_path,
            &self.checkpoint,
            &self.checkpoint_tmp,
        ] {
            match fs::remove_file(path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io_at(path)(e)),
            }
        }
        Ok(())
    }
}
