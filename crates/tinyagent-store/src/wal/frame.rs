//! Pure line framing of the log: no I/O here.
//!
//! A record is one line of UTF-8 JSON followed by `\n`:
//!
//! ```text
//! {"seq":7,"prev":"1c291ca3","type":"tool.started","ts":"2026-11-29T19:40:00.123Z","data":{...},"crc":"9f0e1d2c"}
//! ```
//!
//! `crc` is the CRC-32 (IEEE) of every byte of the line before `,"crc":"`,
//! that is of `line[..len - 18]` where `line` excludes the newline. `crc` is
//! always the last member, so a reader can check a line before parsing it.
//!
//! The `type`/`data` pair is whatever the [`Record`] serialises to.

use crate::Record;
use serde::Deserialize;

/// The longest line (newline included) a log may hold: 16 MiB.
///
/// [`encode`] refuses a longer record before anything is written, and the
/// reader takes a longer line for damage without holding more than this
/// much of it, so reading stays within the contract's memory bound (the
/// state plus 64 MB) whatever the file holds: a multi-gigabyte torn tail
/// never becomes a multi-gigabyte buffer. tinyagent's records are far
/// smaller (tool output is capped at tens of kilobytes).
pub const MAX_LINE_LEN: usize = 16 << 20;

/// Length of the `,"crc":"hhhhhhhh"}` suffix.
pub const CRC_SUFFIX_LEN: usize = 18;
const CRC_PREFIX: &[u8] = b",\"crc\":\"";

/// Why a line is not a valid record (before any chain check).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("line does not end with a crc member")]
    NoCrc,
    #[error("crc mismatch: line says {stored:08x}, bytes give {computed:08x}")]
    CrcMismatch { stored: u32, computed: u32 },
    #[error("not a valid record: {0}")]
    BadRecord(String),
}

/// A decoded, crc-checked line.
#[derive(Debug, Clone, PartialEq)]
pub struct Frame<R> {
    pub seq: u64,
    pub prev: u32,
    pub ts: String,
    /// The line's `type`/`data` pair, decoded.
    pub event: R,
    pub crc: u32,
}

#[derive(Deserialize)]
#[serde(bound = "R: Record")]
struct RawFrame<R> {
    seq: u64,
    prev: String,
    ts: String,
    #[serde(flatten)]
    event: R,
}

/// Formats a crc the way the log does: 8 lowercase hex digits.
fn crc_hex(crc: u32) -> String {
    format!("{crc:08x}")
}

fn parse_hex(bytes: &[u8]) -> Option<u32> {
    if bytes.len() != 8
        || !bytes
            .iter()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b))
    {
        return None;
    }
    u32::from_str_radix(std::str::from_utf8(bytes).ok()?, 16).ok()
}

/// Appends one framed record (with its trailing newline) to `out` and returns
/// its crc. `event` is serialised once; the `type`/`data` pair it yields is
/// spliced behind `seq`, `prev` and `ts`.
///
/// # Errors
/// When the record does not serialise, or not to `{"type":"<kind>",...}`
/// (see [`Record`]), or the line would be longer than [`MAX_LINE_LEN`];
/// nothing is appended to `out` then.
pub fn encode<R: Record>(
    seq: u64,
    prev: u32,
    ts: &str,
    event: &R,
    out: &mut Vec<u8>,
) -> Result<u32, serde_json::Error> {
    let start = out.len();
    let body = serde_json::to_vec(event)?;
    // body = {"type":"<kind>","data":{...}}
    let kind = event.kind();
    let mut type_prefix = Vec::with_capacity(kind.len() + 11);
    type_prefix.extend_from_slice(br#"{"type":"#);
    serde_json::to_writer(&mut type_prefix, kind)?;
    type_prefix.push(b',');
    if !body.starts_with(&type_prefix) || !body.ends_with(b"}") {
        return Err(<serde_json::Error as serde::ser::Error>::custom(format!(
            "a {kind:?} record does not serialise as {{\"type\":{kind:?},\"data\":...}}"
        )));
    }
    out.extend_from_slice(b"{\"seq\":");
    out.extend_from_slice(seq.to_string().as_bytes());
    out.extend_from_slice(b",\"prev\":\"");
    out.extend_from_slice(crc_hex(prev).as_bytes());
    out.extend_from_slice(b"\",\"type\":");
    out.extend_from_slice(&type_prefix[br#"{"type":"#.len()..type_prefix.len() - 1]);
    out.extend_from_slice(b",\"ts\":");
    serde_json::to_writer(&mut *out, ts)?;
    out.push(b',');
    out.extend_from_slice(&body[type_prefix.len()..body.len() - 1]); // "data":{...}
    let crc = crc32fast::hash(&out[start..]);
    out.extend_from_slice(CRC_PREFIX);
    out.extend_from_slice(crc_hex(crc).as_bytes());
    out.extend_from_slice(b"\"}\n");
    let len = out.len() - start;
    if len > MAX_LINE_LEN {
        out.truncate(start);
        return Err(<serde_json::Error as serde::ser::Error>::custom(format!(
            "a {kind:?} record of {len} bytes is over the {MAX_LINE_LEN}-byte limit of a log line"
        )));
    }
    Ok(crc)
}

/// The shortest line (without its newline) [`check_crc`] looks at: the
/// crc suffix and two more bytes (`{` and `}` at least).
pub const MIN_FRAMED_LEN: usize = CRC_SUFFIX_LEN + 2;

/// When `line` (without its newline) ends with a well-formed
/// `,"crc":"hhhhhhhh"}`, where that suffix starts and the crc it carries.
/// Only the last [`CRC_SUFFIX_LEN`] bytes are looked at, so every line
/// that ends like `line` does (every suffix of it at least that long)
/// gets the same answer.
pub fn crc_suffix(line: &[u8]) -> Option<(usize, u32)> {
    let split = line.len().checked_sub(CRC_SUFFIX_LEN)?;
    let suffix = &line[split..];
    if !suffix.starts_with(CRC_PREFIX) || !suffix.ends_with(b"\"}") {
        return None;
    }
    let stored = parse_hex(&suffix[CRC_PREFIX.len()..CRC_PREFIX.len() + 8])?;
    Some((split, stored))
}

/// Checks the crc of one line (without its newline) and returns the crc it
/// carries. Cheap: no JSON parsing.
///
/// # Errors
/// [`FrameError::NoCrc`] or [`FrameError::CrcMismatch`].
pub fn check_crc(line: &[u8]) -> Result<u32, FrameError> {
    if line.len() < MIN_FRAMED_LEN {
        return Err(FrameError::NoCrc);
    }
    let (split, stored) = crc_suffix(line).ok_or(FrameError::NoCrc)?;
    let computed = crc32fast::hash(&line[..split]);
    if stored != computed {
        return Err(FrameError::CrcMismatch { stored, computed });
    }
    Ok(stored)
}

/// The `data` member's value (`{...}`) of a line as [`encode`] writes it
/// (with or without its newline), found by the frame's layout alone, with
/// no JSON parsing and no crc check: for the writer's own lines, whose
/// bytes are known good (the `--json` event of a record is its data, and
/// need not be serialised a second time). `None` for a line not of that
/// layout.
#[must_use]
pub fn data_of(line: &[u8]) -> Option<&[u8]> {
    /// The rest of `s` after the JSON string it starts with.
    fn after_string(s: &[u8]) -> Option<&[u8]> {
        let mut i = 1;
        if s.first() != Some(&b'"') {
            return None;
        }
        while let Some(&b) = s.get(i) {
            match b {
                b'\\' => i += 2,
                b'"' => return s.get(i + 1..),
                _ => i += 1,
            }
        }
        None
    }
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    let (split, _) = crc_suffix(line)?;
    let rest = line[..split].strip_prefix(b"{\"seq\":")?;
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    let rest = rest[digits..].strip_prefix(b",\"prev\":\"")?;
    let rest = rest.get(8..)?.strip_prefix(b"\",\"type\":")?;
    let rest = after_string(rest)?.strip_prefix(b",\"ts\":")?;
    let data = after_string(rest)?.strip_prefix(b",\"data\":")?;
    (data.starts_with(b"{") && data.ends_with(b"}")).then_some(data)
}

/// Decodes one line (without its newline): crc first, then JSON.
///
/// # Errors
/// The first check that fails.
pub fn decode<R: Record>(line: &[u8]) -> Result<Frame<R>, FrameError> {
    let crc = check_crc(line)?;
    let raw: RawFrame<R> =
        serde_json::from_slice(line).map_err(|e| FrameError::BadRecord(e.to_string()))?;
    let prev = parse_hex(raw.prev.as_bytes())
        .ok_or_else(|| FrameError::BadRecord(format!("prev {:?} is not 8 hex digits", raw.prev)))?;
    Ok(Frame {
        seq: raw.seq,
        prev,
        ts: raw.ts,
        event: raw.event,
        crc,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::Rec;

    fn ev() -> Rec {
        Rec::Add { n: 7 }
    }

    #[test]
    fn encode_matches_the_contract_layout() {
        let mut out = Vec::new();
        let crc = encode(1, 0, "2026-11-29T00:00:00Z", &ev(), &mut out).unwrap();
        let line = std::str::from_utf8(&out).unwrap();
        assert!(line.ends_with('\n'));
        let line = &line[..line.len() - 1];
        assert!(line.starts_with(
            r#"{"seq":1,"prev":"00000000","type":"add","ts":"2026-11-29T00:00:00Z","data":{"#
        ));
        let body = &line[..line.len() - CRC_SUFFIX_LEN];
        assert_eq!(crc32fast::hash(body.as_bytes()), crc);
        assert_eq!(
            &line[line.len() - CRC_SUFFIX_LEN..],
            format!(r#","crc":"{crc:08x}"}}"#)
        );
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(v["data"]["n"], 7);
    }

    #[test]
    fn decode_round_trips_and_rejects_a_flipped_byte() {
        let mut out = Vec::new();
        let crc = encode(5, 0xdead_beef, "t", &ev(), &mut out).unwrap();
        let line = &out[..out.len() - 1];
        let f: Frame<Rec> = decode(line).unwrap();
        assert_eq!((f.seq, f.prev, f.crc), (5, 0xdead_beef, crc));
        assert_eq!(f.event, ev());
        let mut bad = line.to_vec();
        bad[10] ^= 0x01;
        assert!(matches!(
            decode::<Rec>(&bad),
            Err(FrameError::CrcMismatch { .. })
        ));
        assert_eq!(
            decode::<Rec>(&line[..line.len() - 1]),
            Err(FrameError::NoCrc)
        );
    }

    /// The data of an encoded line is found without parsing it, whatever
    /// its strings hold; a line of another layout has none.
    #[test]
    fn the_data_of_an_encoded_line_is_found_by_its_layout() {
        for (ts, text) in [
            ("2026-11-29T00:00:00.123Z", "plain"),
            (
                "t \\\" \",\"data\":{}",
                "a \"quoted\" \\ ,\"data\":{\"x\":1}} text\n",
            ),
            ("", ""),
        ] {
            let rec = Rec::Note { text: text.into() };
            let mut out = Vec::new();
            encode(12_345, 7, ts, &rec, &mut out).unwrap();
            let data = data_of(&out).unwrap();
            let v: serde_json::Value = serde_json::from_slice(data).unwrap();
            assert_eq!(v["text"], text);
            let whole: serde_json::Value = serde_json::from_slice(&out).unwrap();
            assert_eq!(whole["data"], v);
            assert_eq!(data_of(&out[..out.len() - 1]), Some(data));
        }
        let mut out = Vec::new();
        encode(1, 0, "t", &ev(), &mut out).unwrap();
        for cut in [1, 20, out.len() - 2] {
            assert_eq!(data_of(&out[cut..]), None);
        }
        assert_eq!(data_of(b"{\"seq\":1}\n"), None);
        assert_eq!(data_of(b""), None);
    }

    /// A record whose serialisation is not the `type`/`data` pair.
    #[derive(Clone, serde::Serialize, serde::Deserialize)]
    struct Flat {
        n: u64,
    }
    impl Record for Flat {
        fn kind(&self) -> &'static str {
            "flat"
        }
    }

    #[test]
    fn a_record_of_the_wrong_shape_is_refused_and_nothing_is_appended() {
        let mut out = b"keep".to_vec();
        assert!(encode(1, 0, "t", &Flat { n: 1 }, &mut out).is_err());
        assert_eq!(out, b"keep");
    }

    #[test]
    fn a_record_over_the_line_limit_is_refused_and_nothing_is_appended() {
        let mut out = b"kept".to_vec();
        let big = Rec::Note {
            text: "x".repeat(MAX_LINE_LEN),
        };
        let e = encode(1, 0, "t", &big, &mut out).unwrap_err();
        assert!(e.to_string().contains("limit"), "{e}");
        assert_eq!(out, b"kept");
        let fits = Rec::Note {
            text: "x".repeat(MAX_LINE_LEN - 200),
        };
        encode(1, 0, "t", &fits, &mut out).unwrap();
        assert!(out.len() - 4 <= MAX_LINE_LEN);
    }
}
