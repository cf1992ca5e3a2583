//! Atomic state snapshots and the background thread that writes them.
//!
//! `<wal>.snapshot` is one header line of JSON, then the body:
//!
//! ```text
//! {"format":"tinyagent-snapshot","version":1,"seq":1000,"offset":123456,"record_offset":123300,"crc":"1c291ca3","body_len":98765,"body_crc":"9f0e1d2c","header_crc":"4e15aee0"}\n
//! <body_len bytes: serde_json of the state (the Fold)>
//! ```
//!
//! `seq`, `crc`, `record_offset` and `offset` name the last record the state
//! covers (its seq, crc, first byte and the byte just past its newline);
//! `body_crc` is the CRC-32 of the body and `header_crc` the CRC-32 of
//! [`SnapshotHeader::binding`], a line of every other header member
//! (`body_crc` included), which binds the body to the record it claims to
//! cover: a header from one snapshot over the body of another fails one of the
//! two. A snapshot is written to a temp file
//! in the same directory (`<wal>.snapshot.tmp-<pid>-<n>`), fsync'd, the
//! current `.snapshot` is hard-linked to `.snapshot.bak`, the temp file is
//! renamed over `.snapshot` and the directory is fsync'd. There is a valid
//! `.snapshot` at every instant; a crash leaves at worst a stray temp file,
//! which [`clean_stray`] deletes when the log is next opened for writing.
//!
//! # Reading is checking
//!
//! A snapshot is opened with `O_NOFOLLOW|O_NONBLOCK` (a symlink is refused, a
//! FIFO cannot block), must be a regular file (lstat before the open, fstat
//! after it, the same inode both times) no larger than [`size_cap`] of its
//! log, and at most that many bytes are read. Then the header must parse and
//! name a record, the body must have `body_len` bytes and `body_crc`, and
//! `header_crc` must hold. Snapshots written before `header_crc` existed
//! (same format, version 1, no such member) are still read with the body
//! check they always had; see [`SnapshotHeader::header_crc`].
//!
//! The [`SnapshotWriter`] is a thread with its own mirror of the state (a
//! [`crate::Fold`]): the store sends it every appended record after it is durable (a move, no clone, no
//! serialisation on the append path) and it writes a snapshot every
//! `snapshot_every` records. The channel is unbounded, so a slow snapshot
//! never delays an append.
//!
//! The parts: this file (the format, the paths, an atomic write, stray temp
//! files), `read` (reading is checking) and `writer` (the thread).

mod read;
mod writer;

pub(crate) use read::read_unbound;
pub use read::{MIN_SIZE_CAP, read, read_header, read_header_within, read_within, size_cap};
pub(crate) use writer::WriterConfig;
pub use writer::{Notice, SnapshotHook, SnapshotWriter};

use crate::fsutil::{Step, parent_dir, replace_atomically, sibling, sync_parent_dir};
use crate::wal::reader::RecordPos;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

const SNAPSHOT_FORMAT: &str = "tinyagent-snapshot";
const SNAPSHOT_VERSION: u32 = 1;
const TMP_MARK: &str = ".snapshot.tmp-";

/// A snapshot that was written (or loaded).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SnapshotSaved {
    /// Seq of the last record it covers.
    pub seq: u64,
    pub path: PathBuf,
}

/// The snapshot's first line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotHeader {
    pub format: String,
    pub version: u32,
    pub seq: u64,
    /// Offset just past the covered record's newline.
    pub offset: u64,
    /// Offset of the covered record's first byte.
    pub record_offset: u64,
    /// Crc of the covered record (8 hex digits).
    pub crc: String,
    pub body_len: u64,
    pub body_crc: String,
    /// CRC-32 (8 hex digits) of [`SnapshotHeader::binding`]. Every snapshot
    /// this crate writes has it. `None` only in a snapshot written by an
    /// older binary (the checked-in previous-format fixture is one): the
    /// version stays 1 so that those keep loading and so that an older
    /// binary still reads a newer snapshot (it ignores the member), and such
    /// a header is checked as it always was, body length and crc only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub header_crc: Option<String>,
}

impl SnapshotHeader {
    /// The text `header_crc` is the CRC-32 of: every other member, in order,
    /// one space between them, numbers in decimal, crcs as written, e.g.
    /// `tinyagent-snapshot 1 1000 123300 123456 1c291ca3 98765 9f0e1d2c`.
    /// `body_crc` is in it, so the crc binds the body to the covered record.
    #[must_use]
    pub fn binding(&self) -> String {
        format!(
            "{} {} {} {} {} {} {} {}",
            self.format,
            self.version,
            self.seq,
            self.record_offset,
            self.offset,
            self.crc,
            self.body_len,
            self.body_crc
        )
    }

    /// Whether `header_crc` holds (a header without one passes: see the
    /// member's docs).
    fn check_binding(&self) -> Result<(), SnapshotError> {
        let Some(stored) = &self.header_crc else {
            return Ok(());
        };
        let computed = format!("{:08x}", crc32fast::hash(self.binding().as_bytes()));
        if *stored == computed {
            Ok(())
        } else {
            Err(SnapshotError::Damaged(format!(
                "header crc is {computed}, header says {stored}: the header and body do not belong together"
            )))
        }
    }

    /// The covered record, if the header is self-consistent.
    fn covered(&self) -> Result<RecordPos, SnapshotError> {
        let damaged = |why: &str| Err(SnapshotError::Damaged(why.to_string()));
        if self.format != SNAPSHOT_FORMAT || self.version != SNAPSHOT_VERSION {
            return damaged("unknown snapshot format or version");
        }
        if self.seq == 0 || self.offset <= self.record_offset {
            return damaged("header names no record");
        }
        let crc = u32::from_str_radix(&self.crc, 16)
            .ok()
            .filter(|_| self.crc.len() == 8);
        let Some(crc) = crc else {
            return damaged("header crc is not 8 hex digits");
        };
        Ok(RecordPos {
            seq: self.seq,
            crc,
            offset: self.record_offset,
            len: self.offset - self.record_offset,
        })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("{} does not exist", path.display())]
    Missing { path: PathBuf },
    #[error("{context}: {source}")]
    Io {
        context: String,
        source: std::io::Error,
    },
    #[error("damaged snapshot: {0}")]
    Damaged(String),
    #[error("could not serialise the state: {0}")]
    Encode(#[from] serde_json::Error),
}

fn io_err(context: String) -> impl FnOnce(std::io::Error) -> SnapshotError {
    move |source| SnapshotError::Io { context, source }
}

/// `<wal>.snapshot`
pub fn snapshot_path(wal: &Path) -> PathBuf {
    sibling(wal, ".snapshot")
}

/// Whether two paths name one file (same device and inode).
fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
        _ => false,
    }
}

/// `<wal>.snapshot.bak`
pub fn backup_path(wal: &Path) -> PathBuf {
    sibling(wal, ".snapshot.bak")
}

fn temp_path(wal: &Path, suffix: &str) -> PathBuf {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    sibling(
        wal,
        &format!("{TMP_MARK}{}-{n}{suffix}", std::process::id()),
    )
}

/// Deletes temp files a crashed snapshot write left beside `wal`; returns
/// their paths. Call only while holding the log's lock.
///
/// # Errors
/// When the directory cannot be read or a file cannot be removed.
pub fn clean_stray(wal: &Path) -> std::io::Result<Vec<PathBuf>> {
    let Some(name) = wal.file_name().and_then(|n| n.to_str()) else {
        return Ok(Vec::new());
    };
    let prefix = format!("{name}{TMP_MARK}");
    let mut removed = Vec::new();
    for entry in std::fs::read_dir(parent_dir(wal))? {
        let entry = entry?;
        if entry
            .file_name()
            .to_str()
            .is_some_and(|n| n.starts_with(&prefix))
        {
            std::fs::remove_file(entry.path())?;
            removed.push(entry.path());
        }
    }
    if !removed.is_empty() {
        sync_parent_dir(wal)?;
    }
    Ok(removed)
}

/// Writes a snapshot of `state`, which covers the log up to and including
/// `covered`, atomically (see the module docs), calling `before_swap` once
/// the temp file is written and synced (the crash seam).
pub(crate) fn write<S: Serialize>(
    wal: &Path,
    state: &S,
    covered: &RecordPos,
    before_swap: impl FnOnce(),
) -> Result<SnapshotSaved, SnapshotError> {
    let body = serde_json::to_vec(state)?;
    let header = SnapshotHeader {
        format: SNAPSHOT_FORMAT.to_string(),
        version: SNAPSHOT_VERSION,
        seq: covered.seq,
        offset: covered.end(),
        record_offset: covered.offset,
        crc: format!("{:08x}", covered.crc),
        body_len: body.len() as u64,
        body_crc: format!("{:08x}", crc32fast::hash(&body)),
        header_crc: None,
    };
    let header = SnapshotHeader {
        header_crc: Some(format!(
            "{:08x}",
            crc32fast::hash(header.binding().as_bytes())
        )),
        ..header
    };
    let mut bytes = serde_json::to_vec(&header)?;
    bytes.push(b'\n');
    bytes.extend_from_slice(&body);
    drop(body);
    let tmp = temp_path(wal, "");
    let snap = snapshot_path(wal);
    let ctx = |what: &str, p: &Path| format!("could not {what} {}", p.display());
    let keep_backup = || {
        before_swap();
        let bak = backup_path(wal);
        // A kill between the two renames of an earlier write can leave
        // `.snapshot` and `.bak` as one file; then `.bak` already holds the
        // current snapshot (and a rename between two names of one file does
        // nothing, which would leave the temp link behind).
        if snap.exists() && !same_file(&snap, &bak) {
            // Keep the current one as .bak without ever leaving no .snapshot.
            let bak_tmp = temp_path(wal, ".bak");
            std::fs::hard_link(&snap, &bak_tmp).map_err(io_err(ctx("link", &snap)))?;
            if let Err(e) = std::fs::rename(&bak_tmp, &bak) {
                let _ = std::fs::remove_file(&bak_tmp);
                return Err(io_err(ctx("rename to", &bak))(e));
            }
        }
        Ok(())
    };
    let fail = |step: Step, e: std::io::Error| {
        let context = match step {
            Step::Create => ctx("create", &tmp),
            Step::Write => ctx("write", &tmp),
            Step::Sync => ctx("fsync", &tmp),
            Step::Rename => ctx("rename to", &snap),
            Step::SyncDir => ctx("fsync the directory of", wal),
        };
        io_err(context)(e)
    };
    replace_atomically(&snap, &tmp, &bytes, keep_backup, fail)?;
    Ok(SnapshotSaved {
        seq: covered.seq,
        path: snap,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::{Rec, Sum};

    fn pos(seq: u64) -> RecordPos {
        RecordPos {
            seq,
            crc: 0x1234_abcd,
            offset: 10 * seq,
            len: 10,
        }
    }

    #[test]
    fn write_then_read_round_trips_and_keeps_the_previous_as_bak() {
        let dir = tempfile::tempdir().unwrap();
        let wal = dir.path().join("a.wal");
        let one = Sum {
            total: 1,
            records: 1,
        };
        let two = Sum {
            total: 3,
            records: 2,
        };
        write(&wal, &one, &pos(1), || {}).unwrap();
        let saved = write(&wal, &two, &pos(2), || {}).unwrap();
        assert_eq!(
            saved,
            SnapshotSaved {
                seq: 2,
                path: snapshot_path(&wal)
            }
        );
        assert_eq!(read::<Sum>(&snapshot_path(&wal)).unwrap(), (pos(2), two));
        assert_eq!(read::<Sum>(&backup_path(&wal)).unwrap(), (pos(1), one));
        assert_eq!(read_header(&snapshot_path(&wal)).unwrap(), pos(2));
    }

    /// A kill between the writer's two renames leaves `.snapshot` and `.bak`
    /// as one file; the next write must leave no temp link behind.
    #[test]
    fn a_snapshot_sharing_its_inode_with_the_backup_leaves_no_temp_file() {
        let dir = tempfile::tempdir().unwrap();
        let wal = dir.path().join("a.wal");
        let one = Sum {
            total: 1,
            records: 1,
        };
        write(&wal, &one, &pos(1), || {}).unwrap();
        std::fs::hard_link(snapshot_path(&wal), backup_path(&wal)).unwrap();
        let two = Sum {
            total: 3,
            records: 2,
        };
        write(&wal, &two, &pos(2), || {}).unwrap();
        let names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(
            names.iter().all(|n| !n.contains("tmp")),
            "a temp file was left: {names:?}"
        );
        assert_eq!(read::<Sum>(&snapshot_path(&wal)).unwrap(), (pos(2), two));
        assert_eq!(read::<Sum>(&backup_path(&wal)).unwrap(), (pos(1), one));
    }

    #[test]
    fn a_flipped_body_byte_or_a_short_file_is_damaged_and_a_missing_one_missing() {
        let dir = tempfile::tempdir().unwrap();
        let wal = dir.path().join("a.wal");
        let snap = snapshot_path(&wal);
        assert!(matches!(
            read::<Sum>(&snap),
            Err(SnapshotError::Missing { .. })
        ));
        write(
            &wal,
            &Sum {
                total: 5,
                records: 1,
            },
            &pos(1),
            || {},
        )
        .unwrap();
        let mut bytes = std::fs::read(&snap).unwrap();
        let last = bytes.len() - 2;
        bytes[last] ^= 0x01;
        std::fs::write(&snap, &bytes).unwrap();
        assert!(matches!(read::<Sum>(&snap), Err(SnapshotError::Damaged(_))));
        std::fs::write(&snap, &bytes[..bytes.len() / 2]).unwrap();
        assert!(matches!(read::<Sum>(&snap), Err(SnapshotError::Damaged(_))));
    }

    #[test]
    fn stray_temp_files_of_this_log_go_and_others_stay() {
        let dir = tempfile::tempdir().unwrap();
        let wal = dir.path().join("a.wal");
        let stray = sibling(&wal, ".snapshot.tmp-99-0");
        let other = dir.path().join("b.wal.snapshot.tmp-99-0");
        std::fs::write(&stray, b"x").unwrap();
        std::fs::write(&other, b"x").unwrap();
        assert_eq!(clean_stray(&wal).unwrap(), vec![stray.clone()]);
        assert!(!stray.exists() && other.exists());
    }

    #[test]
    fn the_writer_thread_snapshots_every_n_records_and_once_more_on_stop() {
        let dir = tempfile::tempdir().unwrap();
        let wal = dir.path().join("a.wal");
        let config = WriterConfig {
            every: 2,
            hook: None,
            crash_in: None,
        };
        let mut w = SnapshotWriter::spawn(wal.clone(), Sum::default(), None, config).unwrap();
        for seq in 1..=3 {
            w.record(pos(seq), Rec::Add { n: seq });
        }
        let notices = w.stop(true).unwrap();
        let seqs: Vec<u64> = notices.into_iter().map(|n| n.unwrap().seq).collect();
        assert_eq!(seqs, vec![2, 3]);
        let (covered, state) = read::<Sum>(&snapshot_path(&wal)).unwrap();
        assert_eq!(
            (covered, state),
            (
                pos(3),
                Sum {
                    total: 6,
                    records: 3
                }
            )
        );
    }

    /// The example in the module docs and docs/format.md, checked.
    #[test]
    fn the_documented_header_crc_is_the_crc_of_the_documented_binding() {
        let h = SnapshotHeader {
            format: SNAPSHOT_FORMAT.to_string(),
            version: 1,
            seq: 1000,
            offset: 123_456,
            record_offset: 123_300,
            crc: "1c291ca3".to_string(),
            body_len: 98765,
            body_crc: "9f0e1d2c".to_string(),
            header_crc: Some("4e15aee0".to_string()),
        };
        assert_eq!(
            h.binding(),
            "tinyagent-snapshot 1 1000 123300 123456 1c291ca3 98765 9f0e1d2c"
        );
        h.check_binding().unwrap();
        let edited = SnapshotHeader { seq: 999, ..h };
        assert!(matches!(
            edited.check_binding(),
            Err(SnapshotError::Damaged(_))
        ));
    }
}
