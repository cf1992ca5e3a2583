//! The streaming log reader: tells a torn tail from corruption.
//!
//! [`scan`] reads the log one line at a time through a `BufReader`, so memory
//! is bounded by the longest line, never by the file. It never modifies the
//! file. The rules (also in `docs/format.md`):
//!
//! 1. A line is *good* when it ends with `\n`, its crc checks, its JSON
//!    decodes into a record, its `seq` is the previous seq + 1 (1 for the
//!    first) and its `prev` is the previous record's crc (`00000000` for the
//!    first). Good lines are handed to the visitor in order.
//! 2. A crc-valid record whose `seq` or `prev` does not follow (a seq gap, a
//!    duplicated line, a line spliced in from another log) is corruption,
//!    wherever it is, even as the last line: a crash cannot produce it.
//! 3. A *bad* line (no newline, no or wrong crc, undecodable JSON) with no
//!    crc-valid record anywhere after its start is a torn tail: it and every
//!    byte after it are what an interrupted append left behind.
//! 4. A bad line with a crc-valid record after it (on a later line, or
//!    embedded inside the bad line itself, as when a newline was damaged) is
//!    corruption.
//!
//! Corruption is reported with the seq expected at that point, the byte
//! offset of the bad line and a reason naming what failed.

use super::WalError;
use super::frame::{Frame, check_crc, decode};
use crate::Record;
use serde::{Deserialize, Serialize};
use std::fs::File;
use std::io::{BufRead, BufReader, ErrorKind, Seek, SeekFrom};
use std::path::Path;

/// Where one record sits in the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordPos {
    pub seq: u64,
    pub crc: u32,
    /// Byte offset of the line's first byte.
    pub offset: u64,
    /// Length of the line including its newline.
    pub len: u64,
}

impl RecordPos {
    /// Offset just past the record's newline.
    pub fn end(&self) -> u64 {
        self.offset + self.len
    }
}

/// An incomplete or damaged end of the log, from `offset` to end of file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TornTail {
    pub offset: u64,
    pub bytes: u64,
}

/// Damage that a crash cannot explain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Corruption {
    /// The seq expected at that point.
    pub seq: u64,
    /// Byte offset of the bad line.
    pub offset: u64,
    pub reason: String,
}

/// What a scan found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScanReport {
    /// Good records read by this scan (after `from`, when given).
    pub records: u64,
    /// Offset just past the last good record (where a torn tail is cut).
    pub valid_bytes: u64,
    /// Size of the file as read.
    pub file_len: u64,
    /// The last good record (`from` itself when no record follows it).
    pub last: Option<RecordPos>,
    pub torn_tail: Option<TornTail>,
    pub corruption: Option<Corruption>,
}

impl ScanReport {
    /// No torn tail and no corruption.
    pub fn is_clean(&self) -> bool {
        self.torn_tail.is_none() && self.corruption.is_none()
    }

    /// The seq the next appended record gets.
    pub fn next_seq(&self) -> u64 {
        self.last.map_or(1, |p| p.seq + 1)
    }
}

fn open(path: &Path) -> Result<File, WalError> {
    File::open(path).map_err(|e| match e.kind() {
        ErrorKind::NotFound => WalError::NotFound {
            path: path.to_path_buf(),
        },
        _ => WalError::io(format!("could not open {}", path.display()), e),
    })
}

/// Scans the log at `path`, calling `visit` with every good record in order.
/// With `from`, the scan first checks that exactly that record is at
/// `from.offset` (else [`WalError::Anchor`]) and then reads only what follows
/// it. Torn tails and corruption are reported, not returned as errors.
///
/// # Errors
/// When the file cannot be opened or read, or the anchor is not there.
pub fn scan<R: Record>(
    path: &Path,
    from: Option<&RecordPos>,
    mut visit: impl FnMut(&Frame<R>, &RecordPos),
) -> Result<ScanReport, WalError> {
    let file = open(path)?;
    let meta_len = file
        .metadata()
        .map_err(|e| WalError::io(format!("could not stat {}", path.display()), e))?
        .len();
    let mut r = BufReader::with_capacity(1 << 16, file);
    let read_err = |e| WalError::io(format!("could not read {}", path.display()), e);
    let mut line = Vec::with_capacity(4096);
    if let Some(anchor) = from {
        check_anchor::<R>(&mut r, path, anchor, &mut line)?;
    }
    let mut report = ScanReport {
        records: 0,
        valid_bytes: from.map_or(0, RecordPos::end),
        file_len: meta_len,
        last: from.copied(),
        torn_tail: None,
        corruption: None,
    };
    loop {
        let start = report.valid_bytes;
        let expect_seq = report.next_seq();
        line.clear();
        let n = r.read_until(b'\n', &mut line).map_err(read_err)?;
        if n == 0 {
            report.file_len = report.file_len.max(start);
            return Ok(report);
        }
        let bad = if line.ends_with(b"\n") {
            match decode(&line[..n - 1]) {
                Ok(frame) => {
                    let pos = RecordPos {
                        seq: frame.seq,
                        crc: frame.crc,
                        offset: start,
                        len: n as u64,
                    };
                    if let Some(reason) = chain_error(&frame, report.last.as_ref()) {
                        report.corruption = Some(Corruption {
                            seq: expect_seq,
                            offset: start,
                            reason,
                        });
                        return Ok(report);
                    }
                    visit(&frame, &pos);
                    report.records += 1;
                    report.valid_bytes = pos.end();
                    report.last = Some(pos);
                    continue;
                }
                Err(e) => e.to_string(),
            }
        } else {
            "incomplete line (no newline at end of file)".to_string()
        };
        return finish_bad(&mut r, &line, start, expect_seq, &bad, report).map_err(read_err);
    }
}

/// Why a crc-valid record does not follow the previous one, if it does not.
fn chain_error<R>(frame: &Frame<R>, last: Option<&RecordPos>) -> Option<String> {
    let (want_seq, want_prev) = last.map_or((1, 0), |p| (p.seq + 1, p.crc));
    if frame.seq != want_seq {
        let what = if frame.seq < want_seq {
            "duplicated or out-of-order record"
        } else {
            "seq gap"
        };
        return Some(format!(
            "{what}: expected seq {want_seq}, found seq {}",
            frame.seq
        ));
    }
    if frame.prev != want_prev {
        return Some(format!(
            "broken prev link: record says prev {:08x}, previous record's crc is {want_prev:08x} (a line from another log?)",
            frame.prev
        ));
    }
    None
}

/// Offset (within `piece`) of a crc-valid record that starts after byte 0.
fn embedded_record(piece: &[u8]) -> Option<usize> {
    const START: &[u8] = b"{\"seq\":";
    (1..piece.len().saturating_sub(START.len() - 1))
        .filter(|&p| piece[p..].starts_with(START))
        .find(|&p| {
            let rest = &piece[p..];
            let rest = rest.strip_suffix(b"\n").unwrap_or(rest);
            check_crc(rest).is_ok()
        })
}

/// Decides between torn tail and corruption for a bad line at `start`: looks
/// for a crc-valid record inside it and on every later line.
fn finish_bad(
    r: &mut BufReader<File>,
    bad_line: &[u8],
    start: u64,
    expect_seq: u64,
    bad: &str,
    mut report: ScanReport,
) -> std::io::Result<ScanReport> {
    let corrupt = |at: u64, report: &mut ScanReport| {
        report.corruption = Some(Corruption {
            seq: expect_seq,
            offset: start,
            reason: format!("{bad}; a valid record follows at byte {at}"),
        });
    };
    if let Some(p) = embedded_record(bad_line) {
        corrupt(start + p as u64, &mut report);
        return Ok(report);
    }
    let mut at = start + bad_line.len() as u64;
    let mut piece = Vec::with_capacity(4096);
    loop {
        piece.clear();
        let n = r.read_until(b'\n', &mut piece)?;
        if n == 0 {
            report.torn_tail = Some(TornTail {
                offset: start,
                bytes: at - start,
            });
            report.file_len = report.file_len.max(at);
            return Ok(report);
        }
        let body = piece.strip_suffix(b"\n").unwrap_or(&piece);
        if check_crc(body).is_ok() {
            corrupt(at, &mut report);
            return Ok(report);
        }
        if let Some(p) = embedded_record(&piece) {
            corrupt(at + p as u64, &mut report);
            return Ok(report);
        }
        at += n as u64;
    }
}

fn check_anchor<R: Record>(
    r: &mut BufReader<File>,
    path: &Path,
    anchor: &RecordPos,
    line: &mut Vec<u8>,
) -> Result<(), WalError> {
    let fail = |reason: String| WalError::Anchor {
        path: path.to_path_buf(),
        seq: anchor.seq,
        offset: anchor.offset,
        reason,
    };
    let read_err = |e| WalError::io(format!("could not read {}", path.display()), e);
    r.seek(SeekFrom::Start(anchor.offset)).map_err(read_err)?;
    line.clear();
    let n = r.read_until(b'\n', line).map_err(read_err)?;
    if n == 0 {
        return Err(fail("the log ends before it".to_string()));
    }
    if n as u64 != anchor.len || !line.ends_with(b"\n") {
        return Err(fail(format!(
            "the line there is {n} bytes long, expected {}",
            anchor.len
        )));
    }
    let frame: Frame<R> = decode(&line[..n - 1]).map_err(|e| fail(e.to_string()))?;
    if frame.seq != anchor.seq || frame.crc != anchor.crc {
        return Err(fail(format!(
            "found seq {} crc {:08x}, expected crc {:08x}",
            frame.seq, frame.crc, anchor.crc
        )));
    }
    Ok(())
}
