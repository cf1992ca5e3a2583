//! The streaming log reader: tells a torn tail from corruption.
//!
//! [`scan`] reads the log one line at a time through a `BufReader`. It holds
//! at most [`MAX_LINE_LEN`] bytes of a line (one and a half times that while
//! reading): a longer line cannot be a record, and only its last
//! [`MAX_LINE_LEN`] bytes can hold the start of one, so memory is bounded
//! whatever the file holds (a multi-gigabyte torn tail included). It never
//! modifies the file. The rules (also in `docs/format.md`):
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
//! Every line is read once, and the search for a record embedded in a bad
//! one is a single pass over it (see `embedded_record`), so a scan is
//! linear in the size of the file on any input, a hostile tail of
//! `{"seq":` repeated included.
//!
//! Corruption is reported with the seq expected at that point, the byte
//! offset of the bad line and a reason naming what failed.

use super::WalError;
use super::crc_back::lowest_suffix_with_crc;
use super::frame::{Frame, MAX_LINE_LEN, MIN_FRAMED_LEN, check_crc, crc_suffix, decode};
use crate::Record;
use serde::{Deserialize, Serialize};
use std::fs::File;
use std::io::{BufRead, BufReader, ErrorKind, Read, Seek, SeekFrom};
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

/// How [`read_line`] read one line.
#[derive(Debug, Clone, Copy)]
struct LineRead {
    /// The line's length in the file (its newline included, if any).
    len: u64,
    /// How many of its first bytes are not in the buffer (0 unless the line
    /// is longer than [`MAX_LINE_LEN`]).
    dropped: u64,
}

/// Bytes [`read_line`] asks the reader for at a time.
const READ_STEP: u64 = 1 << 20;

/// Reads one line (through its `\n`, or to end of file) into `line`,
/// keeping only its last [`MAX_LINE_LEN`] bytes when it is longer, and never
/// more than one and a half times that while reading.
fn read_line(r: &mut impl BufRead, line: &mut Vec<u8>) -> std::io::Result<LineRead> {
    line.clear();
    let mut got = LineRead { len: 0, dropped: 0 };
    loop {
        let n = r.by_ref().take(READ_STEP).read_until(b'\n', line)?;
        got.len += n as u64;
        let done = n == 0 || line.ends_with(b"\n");
        let keep = if done {
            MAX_LINE_LEN
        } else {
            MAX_LINE_LEN + MAX_LINE_LEN / 2
        };
        if line.len() > keep {
            let cut = line.len() - MAX_LINE_LEN;
            line.drain(..cut);
            got.dropped += cut as u64;
        }
        if done {
            return Ok(got);
        }
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
        let got = read_line(&mut r, &mut line).map_err(read_err)?;
        if got.len == 0 {
            report.file_len = report.file_len.max(start);
            return Ok(report);
        }
        let n = line.len();
        let bad = if got.dropped > 0 {
            format!(
                "a line of {} bytes, longer than any record ({MAX_LINE_LEN} bytes at most)",
                got.len
            )
        } else if line.ends_with(b"\n") {
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
        return finish_bad(&mut r, &mut line, got, start, expect_seq, &bad, report)
            .map_err(read_err);
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

/// Offset (within `piece`) of the first crc-valid record that starts at or
/// after byte `from` and ends at the end of `piece` (its newline aside):
/// the first `p >= from` where `piece[p..]` starts with `{"seq":` and, its
/// newline stripped, passes [`check_crc`].
///
/// # Linear on any piece
///
/// The obvious search (hash `piece[p..]` at every `{"seq":`) costs the
/// length of the rest of the piece per candidate, so a piece of repeated
/// `{"seq":` ending in a crc suffix costs the square of its length (95 s
/// at 6.4 MB, issue 14). But every candidate ends where the piece ends:
///
/// 1. they share the same last 18 bytes, so the `,"crc":"hhhhhhhh"}`
///    suffix is parsed once ([`crc_suffix`]): when the piece does not end
///    in one, no candidate can be a record and the answer is `None` at
///    once;
/// 2. they share the same stored crc and the same end of their crc'd
///    bytes (`split`), so the question is "which suffixes of
///    `body[..split]` have crc `stored`", answered for all offsets at once
///    by one backward pass ([`lowest_suffix_with_crc`]: the CRC register is
///    run in reverse from `!stored`, eight bytes per step);
/// 3. of the offsets from the first `{"seq":` at or after `from` on that
///    start with `{"seq":`, are long enough for [`check_crc`]
///    ([`MIN_FRAMED_LEN`]) and whose register comes out as CRC-32's
///    initial one, the lowest is the answer: the one the obvious search
///    finds first.
///
/// So each byte of the piece costs a bounded amount of work (a test in
/// the search for the first `{"seq":`, an eighth of a backward step, a
/// prefix test where it is a `{`, at most four single CRC steps where that
/// prefix matches) and no memory is used beyond the piece itself. The
/// 16 MiB window [`read_line`] keeps of an overlong line is one such pass.
fn embedded_record(piece: &[u8], from: usize) -> Option<usize> {
    const START: &[u8] = b"{\"seq\":";
    let body = piece.strip_suffix(b"\n").unwrap_or(piece);
    let (split, stored) = crc_suffix(body)?;
    let first = body
        .get(from..)?
        .windows(START.len())
        .position(|w| w == START)?
        + from;
    lowest_suffix_with_crc(&body[..split], first, stored, START[0], |p| {
        body[p..].starts_with(START) && body.len() - p >= MIN_FRAMED_LEN
    })
}

/// Where in `piece` (a line as [`read_line`] kept it) a crc-valid record
/// starts, as an offset from the line's first byte: the whole line when it
/// is all there and `whole` is set, else one starting inside it. A record is
/// never longer than [`MAX_LINE_LEN`], so the bytes [`read_line`] dropped
/// cannot hold the start of one.
fn record_in(piece: &[u8], got: LineRead, whole: bool) -> Option<u64> {
    if got.dropped == 0 {
        let body = piece.strip_suffix(b"\n").unwrap_or(piece);
        if whole && check_crc(body).is_ok() {
            return Some(0);
        }
        embedded_record(piece, 1).map(|p| p as u64)
    } else {
        embedded_record(piece, 0).map(|p| got.dropped + p as u64)
    }
}

/// Decides between torn tail and corruption for a bad line at `start`
/// (held in `line`, read as `got`): looks for a crc-valid record inside it
/// and on every later line.
fn finish_bad(
    r: &mut BufReader<File>,
    line: &mut Vec<u8>,
    got: LineRead,
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
    if let Some(p) = record_in(line, got, false) {
        corrupt(start + p, &mut report);
        return Ok(report);
    }
    let mut at = start + got.len;
    loop {
        let got = read_line(r, line)?;
        if got.len == 0 {
            report.torn_tail = Some(TornTail {
                offset: start,
                bytes: at - start,
            });
            report.file_len = report.file_len.max(at);
            return Ok(report);
        }
        if let Some(p) = record_in(line, got, true) {
            corrupt(at + p, &mut report);
            return Ok(report);
        }
        at += got.len;
    }
}

/// Checks that exactly the record `pos` names (seq, crc, offset, length)
/// is in the log at `path` (else [`WalError::Anchor`]), reading that one
/// line only. What [`scan`] checks first when given `from`.
///
/// # Errors
/// [`WalError::Anchor`], or when the file cannot be opened or read.
pub fn check_record_at<R: Record>(path: &Path, pos: &RecordPos) -> Result<(), WalError> {
    let mut r = BufReader::with_capacity(1 << 16, open(path)?);
    check_anchor::<R>(&mut r, path, pos, &mut Vec::new())
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
    if anchor.len > MAX_LINE_LEN as u64 {
        return Err(fail(format!(
            "a {}-byte record is over the {MAX_LINE_LEN}-byte limit",
            anchor.len
        )));
    }
    r.seek(SeekFrom::Start(anchor.offset)).map_err(read_err)?;
    line.clear();
    // At most the line's claimed length: a wrong offset into a huge torn
    // tail reads no further.
    let n = r
        .by_ref()
        .take(anchor.len)
        .read_until(b'\n', line)
        .map_err(read_err)?;
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

#[cfg(test)]
mod tests;
