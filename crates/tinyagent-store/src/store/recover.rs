//! What an open finds and mends before the log is written again: the
//! newest usable snapshot (each fallback with a warning) or a full replay,
//! and a torn tail saved beside the log before it is cut.

use super::{StoreError, io_err};
use crate::fsutil::{create_private, sibling, sync_parent_dir};
use crate::snapshot::{self, SnapshotError, SnapshotSaved};
use crate::wal::WalError;
use crate::wal::reader::{ScanReport, TornTail, check_record_at, scan};
use crate::{Fold, Record};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

pub(super) fn check_regular(path: &Path) -> Result<(), StoreError> {
    match std::fs::metadata(path) {
        Ok(m) if !m.is_file() => Err(StoreError::BadLog {
            path: path.to_path_buf(),
            reason: "not a regular file".to_string(),
        }),
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(StoreError::NotFound {
            path: path.to_path_buf(),
        }),
        Err(e) => Err(io_err(format!("could not stat {}", path.display()))(e)),
    }
}

/// A state and scan built from the newest usable snapshot plus the records
/// after it, or `None` when no snapshot is usable (warnings say why).
///
/// A candidate is checked in this order: the file and its own checksums
/// ([`snapshot::read_unbound`]: a regular file within [`snapshot::size_cap`]
/// of the log, header, body length and crc), the record it claims to cover
/// against the log (so a stale snapshot or one of another log is reported as
/// that), `header_crc`, then the body is decoded and the records after it are
/// replayed.
pub(super) fn from_snapshot<R: Record, S: Fold<R>>(
    path: &Path,
    warnings: &mut Vec<String>,
) -> Result<Option<(S, ScanReport, SnapshotSaved)>, StoreError> {
    let snap = snapshot::snapshot_path(path);
    let bak = snapshot::backup_path(path);
    let log_len = std::fs::metadata(path)
        .map_err(io_err(format!("could not stat {}", path.display())))?
        .len();
    let cap = snapshot::size_cap(log_len);
    for cand in [&snap, &bak] {
        let fallback = if cand == &snap {
            "falling back to the .bak snapshot"
        } else {
            "falling back to a full replay"
        };
        let checked = match snapshot::read_unbound(cand, cap) {
            Ok(x) => x,
            Err(SnapshotError::Missing { .. }) => {
                if cand == &snap && std::fs::symlink_metadata(&bak).is_ok() {
                    warnings.push(format!("{} is missing; {fallback}", cand.display()));
                }
                continue;
            }
            Err(e) => {
                warnings.push(format!("{}: {e}; {fallback}", cand.display()));
                continue;
            }
        };
        let pos = checked.covered();
        match check_record_at::<R>(path, &pos) {
            Ok(()) => {}
            Err(e @ WalError::Anchor { .. }) => {
                warnings.push(format!(
                    "{} is stale or belongs to another log ({e}); {fallback}",
                    cand.display()
                ));
                continue;
            }
            Err(e) => return Err(e.into()),
        }
        let decoded = checked.check_binding().and_then(|()| checked.decode::<S>());
        let mut state = match decoded {
            Ok(state) => state,
            Err(e) => {
                warnings.push(format!("{}: {e}; {fallback}", cand.display()));
                continue;
            }
        };
        match scan::<R>(path, Some(&pos), |f, _| state.apply(&f.event)) {
            Ok(report) => {
                let saved = SnapshotSaved {
                    seq: pos.seq,
                    path: cand.clone(),
                };
                return Ok(Some((state, report, saved)));
            }
            Err(e @ WalError::Anchor { .. }) => {
                warnings.push(format!(
                    "{} is stale or belongs to another log ({e}); {fallback}",
                    cand.display()
                ));
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(None)
}

pub(super) fn full_replay<R: Record, S: Fold<R>>(
    path: &Path,
) -> Result<(S, ScanReport), StoreError> {
    let mut state = S::empty_for_writing();
    let report = scan::<R>(path, None, |f, _| state.apply(&f.event))?;
    Ok((state, report))
}

/// Copies `[tail.offset, tail.offset + tail.bytes)` of `path` into a new
/// `<wal>.torn-<offset>` file and makes it durable.
///
/// The copy goes through one 64 KiB buffer, so a torn tail of any size costs
/// 64 KiB of memory; a buffer of zeros is skipped with a seek rather than
/// written, so a tail that is a hole (a file extended but never written, as
/// a crash can leave) stays a hole in the copy instead of filling the disk.
/// The copy reads back byte for byte the same.
pub(super) fn save_torn(path: &Path, tail: &TornTail) -> Result<PathBuf, StoreError> {
    let mut src =
        std::fs::File::open(path).map_err(io_err(format!("could not open {}", path.display())))?;
    src.seek(SeekFrom::Start(tail.offset))
        .map_err(io_err(format!("could not read {}", path.display())))?;
    let base = sibling(path, &format!(".torn-{}", tail.offset));
    let mut n = 0u32;
    let (mut dst, dst_path) = loop {
        let p = if n == 0 {
            base.clone()
        } else {
            sibling(&base, &format!(".{n}"))
        };
        match create_private(&p, false) {
            Ok(f) => break (f, p),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && n < 1000 => n += 1,
            Err(e) => return Err(io_err(format!("could not create {}", p.display()))(e)),
        }
    };
    let ctx = format!("could not save the torn tail to {}", dst_path.display());
    copy_keeping_holes(&mut src.take(tail.bytes), &mut dst).map_err(io_err(ctx.clone()))?;
    dst.sync_all().map_err(io_err(ctx.clone()))?;
    sync_parent_dir(&dst_path).map_err(io_err(ctx))?;
    Ok(dst_path)
}

/// Size of the one buffer [`save_torn`] copies through.
const COPY_BUF: usize = 64 << 10;

/// Copies `src` to the start of the empty file `dst` through one
/// [`COPY_BUF`] buffer, seeking over buffers of zeros (see [`save_torn`]);
/// returns the bytes copied.
fn copy_keeping_holes(src: &mut impl Read, dst: &mut std::fs::File) -> std::io::Result<u64> {
    static ZEROS: [u8; COPY_BUF] = [0; COPY_BUF];
    let mut buf = vec![0u8; COPY_BUF];
    let mut total = 0u64;
    loop {
        let n = match src.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        total += n as u64;
        if buf[..n] == ZEROS[..n] {
            dst.seek(SeekFrom::Start(total))?;
        } else {
            dst.write_all(&buf[..n])?;
        }
    }
    // A trailing hole: the seek alone does not make the file longer.
    dst.set_len(total)?;
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{Store, StoreOptions, load_with};
    use crate::testkit::{Rec, Sum};
    use crate::wal::reader::RecordPos;

    type SumStore = Store<Rec, Sum>;

    fn no_snapshots() -> StoreOptions {
        StoreOptions {
            snapshot_every: 0,
            ..StoreOptions::default()
        }
    }

    /// A log of the records 1..=5 and the position of each.
    fn log(dir: &Path) -> (PathBuf, Vec<RecordPos>) {
        let p = dir.join("s.wal");
        let mut s = SumStore::create(&p, no_snapshots()).unwrap();
        for n in 1..=5 {
            s.append(Rec::Add { n }).unwrap();
        }
        s.close().unwrap();
        let mut pos = Vec::new();
        scan::<Rec>(&p, None, |_, q| pos.push(*q)).unwrap();
        (p, pos)
    }

    /// A well-formed, correctly checksummed snapshot that claims `claim`
    /// and holds a state no replay gives.
    fn plant(wal: &Path, claim: &RecordPos) {
        let bogus = Sum {
            total: 999,
            records: 999,
        };
        snapshot::write(wal, &bogus, claim, || {}).unwrap();
        // Keep the .bak out of it: only the planted snapshot is offered.
        let _ = std::fs::remove_file(snapshot::backup_path(wal));
    }

    #[test]
    fn a_snapshot_claiming_a_record_the_log_does_not_have_is_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let (p, pos) = log(dir.path());
        let full = full_replay::<Rec, Sum>(&p).unwrap().0;
        assert_eq!(full.total, 15);
        let last = pos[4];
        let claims = [
            (
                "another crc",
                RecordPos {
                    crc: last.crc ^ 1,
                    ..last
                },
            ),
            ("another seq", RecordPos { seq: 4, ..last }),
            (
                "another offset",
                RecordPos {
                    offset: last.offset - 1,
                    ..last
                },
            ),
            (
                "another length",
                RecordPos {
                    len: last.len + 1,
                    ..last
                },
            ),
            (
                "past the end",
                RecordPos {
                    seq: 6,
                    offset: last.end(),
                    ..last
                },
            ),
            (
                "the middle of a line",
                RecordPos {
                    offset: pos[2].offset + 3,
                    ..pos[2]
                },
            ),
        ];
        for (what, claim) in claims {
            plant(&p, &claim);
            let (s, report) = SumStore::open(&p, no_snapshots()).unwrap();
            assert_eq!(s.state(), &full, "{what}");
            assert_eq!(
                (report.snapshot.clone(), report.replayed),
                (None, 5),
                "{what}"
            );
            assert!(
                report.warnings.iter().any(|w| w.contains("stale")),
                "{what}: {:?}",
                report.warnings
            );
            drop(s);
            let l = load_with::<Rec, Sum>(&p, true).unwrap();
            assert_eq!((l.state.total, l.snapshot), (15, None), "{what}");
        }
        // The same snapshot claiming the record it does cover is used.
        snapshot::write(&p, &full, &last, || {}).unwrap();
        let (s, report) = SumStore::open(&p, no_snapshots()).unwrap();
        assert_eq!((s.state(), report.replayed), (&full, 0));
        assert_eq!(report.snapshot.map(|s| s.seq), Some(5));
    }

    #[test]
    fn a_torn_tail_copy_keeps_every_byte_and_leaves_holes_holes() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.bin");
        let mut bytes = b"head".to_vec();
        bytes.resize(4 + 3 * COPY_BUF + 17, 0);
        bytes.extend_from_slice(b"middle");
        bytes.resize(bytes.len() + 2 * COPY_BUF, 0);
        std::fs::write(&p, &bytes).unwrap();
        let f = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
        f.set_len(bytes.len() as u64 + (64 << 20)).unwrap();
        drop(f);
        let tail = TornTail {
            offset: 2,
            bytes: std::fs::metadata(&p).unwrap().len() - 2,
        };
        let kept = save_torn(&p, &tail).unwrap();
        let copy = std::fs::read(&kept).unwrap();
        let orig = std::fs::read(&p).unwrap();
        assert_eq!(copy.len() as u64, tail.bytes);
        assert!(copy == orig[2..], "the copy differs");
        let blocks = std::fs::metadata(&kept).unwrap().blocks();
        assert!(
            blocks * 512 < 1 << 20,
            "{blocks} blocks for a mostly empty copy"
        );
    }
}
