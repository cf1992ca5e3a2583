//! Test-only seams: switches that crash and fault tests flip from outside
//! the process through environment variables. The variables are read only
//! with the `failpoints` feature, which the test builds enable (the root
//! package's dev-dependencies) and no other build does: a binary built for
//! use never reads them, and holds none of their names (`.ci/run` checks).
//!
//! - `TINYAGENT_CRASH_AFTER=<record type>:<n>`: SIGKILL the process right
//!   after the n-th record of that type it appended is durable.
//! - `TINYAGENT_CRASH_IN_SNAPSHOT=<n>`: SIGKILL the process in the middle of
//!   its n-th snapshot write (temp file written and synced, not yet renamed).
//! - `TINYAGENT_FAULTS=sync:5:EIO,write:7:short,...`: fail the n-th write or
//!   fdatasync of the log file ([`FaultPlan`]).
//!
//! [`TestSeams::from_env`] reads all three; the application calls it once,
//! at start, and passes the result to the store in
//! [`crate::StoreOptions::seams`]. Nothing else reads these variables.

use crate::wal::fs::{FaultPlan, FaultPlanError};

/// `TINYAGENT_CRASH_AFTER`.
#[cfg(feature = "failpoints")]
const CRASH_AFTER_ENV: &str = "TINYAGENT_CRASH_AFTER";
/// `TINYAGENT_CRASH_IN_SNAPSHOT`.
#[cfg(feature = "failpoints")]
const CRASH_IN_SNAPSHOT_ENV: &str = "TINYAGENT_CRASH_IN_SNAPSHOT";

/// Crash right after the `nth` durable record of type `kind`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CrashAfter {
    pub kind: String,
    pub nth: u64,
}

impl CrashAfter {
    /// Parses `<record type>:<n>`; `None` for anything else (as before: a
    /// malformed value turns the seam off).
    #[must_use]
    pub fn parse(spec: &str) -> Option<CrashAfter> {
        let (kind, n) = spec.rsplit_once(':')?;
        Some(CrashAfter {
            kind: kind.to_string(),
            nth: n.parse().ok()?,
        })
    }
}

/// The test seams of one process (all off by default).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TestSeams {
    /// Faults injected into the log file's writes and syncs.
    pub faults: Option<FaultPlan>,
    /// Crash after a given durable record.
    pub crash_after: Option<CrashAfter>,
    /// Crash inside the n-th snapshot write (counted from 1).
    pub crash_in_snapshot: Option<u64>,
}

impl TestSeams {
    /// Reads the three variables. Only a fault plan that does not parse is
    /// an error; a malformed crash seam is ignored. Without the
    /// `failpoints` feature nothing is read: every seam is off.
    ///
    /// # Errors
    /// When `TINYAGENT_FAULTS` is set and does not parse.
    #[cfg(not(feature = "failpoints"))]
    #[allow(
        clippy::unnecessary_wraps,
        reason = "the same signature as with failpoints"
    )]
    pub fn from_env() -> Result<TestSeams, FaultPlanError> {
        Ok(TestSeams::default())
    }

    /// Reads the three variables (see above).
    ///
    /// # Errors
    /// When `TINYAGENT_FAULTS` is set and does not parse.
    #[cfg(feature = "failpoints")]
    pub fn from_env() -> Result<TestSeams, FaultPlanError> {
        Ok(TestSeams {
            faults: FaultPlan::from_env()?,
            crash_after: std::env::var(CRASH_AFTER_ENV)
                .ok()
                .and_then(|v| CrashAfter::parse(&v)),
            crash_in_snapshot: std::env::var(CRASH_IN_SNAPSHOT_ENV)
                .ok()
                .and_then(|v| v.parse().ok()),
        })
    }
}

/// Kills the process as `kill -9` would at this moment.
pub(crate) fn crash_now() {
    let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
}

/// Counts records against a [`CrashAfter`] seam.
#[derive(Debug, Clone)]
pub(crate) struct CrashCounter {
    kind: String,
    remaining: u64,
}

impl CrashCounter {
    pub(crate) fn new(seam: Option<&CrashAfter>) -> Option<CrashCounter> {
        seam.map(|c| CrashCounter {
            kind: c.kind.clone(),
            remaining: c.nth,
        })
    }

    /// Counts a durable record of type `kind`; true when this is the one to
    /// crash after.
    pub(crate) fn hit(&mut self, kind: &str) -> bool {
        if kind != self.kind || self.remaining == 0 {
            return false;
        }
        self.remaining -= 1;
        self.remaining == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crash_after_parses_type_and_count_and_counts_only_its_type() {
        let seam = CrashAfter::parse("step.saved:2").unwrap();
        assert_eq!(seam.kind, "step.saved");
        assert!(CrashAfter::parse("step.saved").is_none());
        assert!(CrashAfter::parse("step.saved:x").is_none());
        let mut c = CrashCounter::new(Some(&seam)).unwrap();
        assert!(!c.hit("tool.started"));
        assert!(!c.hit("step.saved"));
        assert!(c.hit("step.saved"));
        assert!(!c.hit("step.saved"));
    }
}
