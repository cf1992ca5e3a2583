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

use crate::event::Event;
use serde::Deserialize;

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

/// A decoded, crc-checked record.
#[derive(Debug, Clone, PartialEq)]
pub struct Frame {
    pub seq: u64,
    pub prev: u32,
    pub ts: String,
    pub event: Event,
    pub crc: u32,
}

#[derive(Deserialize)]
struct RawFrame {
    seq: u64,
    prev: String,
    ts: String,
    #[serde(flatten)]
    event: Event,
}

/// Formats a crc the way the log does: 8 lowercase hex digits.
pub fn crc_hex(crc: u32) -> String {
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
pub fn encode(
    seq: u64,
    prev: u32,
    ts: &str,
    event: &Event,
    out: &mut Vec<u8>,
) -> Result<u32, serde_json::Error> {
    let start = out.len();
    let body = serde_json::to_vec(event)?;
    // body = {"type":"<kind>","data":{...}}
    let kind = event.kind();
    let type_prefix_len = r#"{"type":""#.len() + kind.len() + 2; // `{"type":"kind",`
    debug_assert!(body.starts_with(br#"{"type":""#));
    out.extend_from_slice(b"{\"seq\":");
    out.extend_from_slice(seq.to_string().as_bytes());
    out.extend_from_slice(b",\"prev\":\"");
    out.extend_from_slice(crc_hex(prev).as_bytes());
    out.extend_from_slice(b"\",\"type\":\"");
    out.extend_from_slice(kind.as_bytes());
    out.extend_from_slice(b"\",\"ts\":");
    serde_json::to_writer(&mut *out, ts)?;
    out.push(b',');
    out.extend_from_slice(&body[type_prefix_len..body.len() - 1]); // "data":{...}
    let crc = crc32fast::hash(&out[start..]);
    out.extend_from_slice(CRC_PREFIX);
    out.extend_from_slice(crc_hex(crc).as_bytes());
    out.extend_from_slice(b"\"}\n");
    Ok(crc)
}

/// Checks the crc of one line (without its newline) and returns the crc it
/// carries. Cheap: no JSON parsing.
pub fn check_crc(line: &[u8]) -> Result<u32, FrameError> {
    if line.len() < CRC_SUFFIX_LEN + 2 {
        return Err(FrameError::NoCrc);
    }
    let split = line.len() - CRC_SUFFIX_LEN;
    let suffix = &line[split..];
    if !suffix.starts_with(CRC_PREFIX) || !suffix.ends_with(b"\"}") {
        return Err(FrameError::NoCrc);
    }
    let stored =
        parse_hex(&suffix[CRC_PREFIX.len()..CRC_PREFIX.len() + 8]).ok_or(FrameError::NoCrc)?;
    let computed = crc32fast::hash(&line[..split]);
    if stored != computed {
        return Err(FrameError::CrcMismatch { stored, computed });
    }
    Ok(stored)
}

/// Decodes one line (without its newline): crc first, then JSON.
pub fn decode(line: &[u8]) -> Result<Frame, FrameError> {
    let crc = check_crc(line)?;
    let raw: RawFrame =
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
    use crate::event::{Event, ToolStarted};

    fn ev() -> Event {
        Event::ToolStarted(ToolStarted {
            step: 1,
            call_id: "c1".into(),
            name: "bash".into(),
        })
    }

    #[test]
    fn encode_matches_the_contract_layout() {
        let mut out = Vec::new();
        let crc = encode(1, 0, "2026-11-29T00:00:00Z", &ev(), &mut out).unwrap();
        let line = std::str::from_utf8(&out).unwrap();
        assert!(line.ends_with('\n'));
        let line = &line[..line.len() - 1];
        assert!(line.starts_with(r#"{"seq":1,"prev":"00000000","type":"tool.started","ts":"2026-11-29T00:00:00Z","data":{"#));
        let body = &line[..line.len() - CRC_SUFFIX_LEN];
        assert_eq!(crc32fast::hash(body.as_bytes()), crc);
        assert_eq!(
            &line[line.len() - CRC_SUFFIX_LEN..],
            format!(r#","crc":"{crc:08x}"}}"#)
        );
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(v["data"]["call_id"], "c1");
    }

    #[test]
    fn decode_round_trips_and_rejects_a_flipped_byte() {
        let mut out = Vec::new();
        let crc = encode(5, 0xdeadbeef, "t", &ev(), &mut out).unwrap();
        let line = &out[..out.len() - 1];
        let f = decode(line).unwrap();
        assert_eq!((f.seq, f.prev, f.crc), (5, 0xdeadbeef, crc));
        assert_eq!(f.event, ev());
        let mut bad = line.to_vec();
        bad[10] ^= 0x01;
        assert!(matches!(decode(&bad), Err(FrameError::CrcMismatch { .. })));
        assert_eq!(decode(&line[..line.len() - 1]), Err(FrameError::NoCrc));
    }
}
