//! The run's manifest: its one mutable object in the bucket, naming the
//! writer that holds the run, its epoch and the segments that store its log
//! (the layout is in docs/replication.md). What a bucket holds is not
//! trusted: [`Manifest::decode`] checks a manifest before anything it names
//! is read.

use serde::{Deserialize, Serialize};

/// The manifest's format number.
pub const FORMAT: u32 = 1;
/// The manifest's name under a run's prefix.
pub const MANIFEST: &str = "manifest.json";
/// A manifest naming a longer log, or more segments, is refused before
/// anything is read or allocated for it.
pub const MAX_LOG: u64 = 1 << 40;
const MAX_SEGMENTS: usize = 100_000;

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

/// Now, as a manifest writes times.
pub(super) fn now() -> String {
    humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string()
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

    pub(super) fn encode(&self) -> Vec<u8> {
        let mut v = serde_json::to_vec_pretty(self).expect("a manifest serialises");
        v.push(b'\n');
        v
    }
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
    fn a_forged_huge_log_len_is_refused_by_decode() {
        let mut m = manifest_with(&[(0, 10)]);
        m.segments[0].len = u64::MAX / 2;
        m.log_len = u64::MAX / 2;
        let e = Manifest::decode(&m.encode(), "r1").unwrap_err();
        assert!(e.contains("at most"), "{e}");
    }
}
