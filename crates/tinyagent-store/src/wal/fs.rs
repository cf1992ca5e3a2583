//! The file-access seam of the log writer, so tests can inject faults.
//!
//! The writer only ever does two things to its file: one `write` per record
//! and one `sync_data` (fdatasync) after it. [`LogFile`] is exactly that, with
//! an implementation for [`std::fs::File`] and a [`FaultyFile`] wrapper that
//! follows a scripted [`FaultPlan`]: fail the Nth write with an errno,
//! short-write the Nth write, fail the Nth sync with an errno.
//!
//! A plan can come from the `TINYAGENT_FAULTS` environment variable, so the
//! binary can be fault-tested from outside, e.g.
//! `TINYAGENT_FAULTS=sync:5:EIO,write:7:short,write:9:ENOSPC`.
//! Counts are 1-based and per file: `sync:5:EIO` fails the fifth sync.

use std::io;

/// Environment variable read by [`FaultPlan::from_env`].
#[cfg(feature = "failpoints")]
const FAULTS_ENV: &str = "TINYAGENT_FAULTS";

/// What the log writer needs from its file.
pub trait LogFile: Send {
    /// One `write(2)`: may write fewer bytes than asked.
    fn write(&mut self, buf: &[u8]) -> io::Result<usize>;
    /// `fdatasync(2)`.
    fn sync_data(&mut self) -> io::Result<()>;
}

impl LogFile for std::fs::File {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        io::Write::write(self, buf)
    }
    fn sync_data(&mut self) -> io::Result<()> {
        std::fs::File::sync_data(self)
    }
}

/// Which operation a fault hits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultOp {
    Write,
    Sync,
}

/// What happens instead of the operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultKind {
    /// Fail with this errno; nothing is written or synced.
    Errno(i32),
    /// Write only the first half of the buffer (writes only).
    Short,
}

/// One scripted fault: the `nth` (1-based) call of `op` does `kind`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fault {
    pub op: FaultOp,
    pub nth: u64,
    pub kind: FaultKind,
}

/// A script of faults for one file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FaultPlan {
    pub faults: Vec<Fault>,
}

/// A fault plan that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad fault plan {spec:?}: {reason} (expected e.g. \"sync:5:EIO,write:7:short\")")]
pub struct FaultPlanError {
    pub spec: String,
    pub reason: String,
}

const ERRNOS: &[(&str, nix::errno::Errno)] = &[
    ("EIO", nix::errno::Errno::EIO),
    ("ENOSPC", nix::errno::Errno::ENOSPC),
    ("EDQUOT", nix::errno::Errno::EDQUOT),
    ("EROFS", nix::errno::Errno::EROFS),
    ("EFBIG", nix::errno::Errno::EFBIG),
    ("EBADF", nix::errno::Errno::EBADF),
    ("EINTR", nix::errno::Errno::EINTR),
    ("EAGAIN", nix::errno::Errno::EAGAIN),
    ("EPERM", nix::errno::Errno::EPERM),
];

fn parse_kind(s: &str) -> Option<FaultKind> {
    if s.eq_ignore_ascii_case("short") {
        return Some(FaultKind::Short);
    }
    if let Ok(n) = s.parse::<i32>() {
        return (n > 0).then_some(FaultKind::Errno(n));
    }
    ERRNOS
        .iter()
        .find(|(name, _)| name.eq_ignore_ascii_case(s))
        .map(|(_, e)| FaultKind::Errno(*e as i32))
}

impl FaultPlan {
    /// Parses `op:n:kind[,op:n:kind...]` where `op` is `write` or `sync`,
    /// `n` counts from 1 and `kind` is `short` (writes only), an errno name
    /// (`EIO`, `ENOSPC`, ...) or a positive errno number.
    pub fn parse(spec: &str) -> Result<FaultPlan, FaultPlanError> {
        let err = |reason: String| FaultPlanError {
            spec: spec.to_string(),
            reason,
        };
        let mut faults = Vec::new();
        for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let parts: Vec<&str> = item.split(':').collect();
            let [op, nth, kind] = parts[..] else {
                return Err(err(format!("{item:?} is not op:n:kind")));
            };
            let op = match op {
                "write" => FaultOp::Write,
                "sync" => FaultOp::Sync,
                other => return Err(err(format!("unknown operation {other:?}"))),
            };
            let nth = nth
                .parse::<u64>()
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| err(format!("{nth:?} is not a count from 1")))?;
            let kind = parse_kind(kind).ok_or_else(|| err(format!("unknown fault {kind:?}")))?;
            if op == FaultOp::Sync && kind == FaultKind::Short {
                return Err(err("a sync cannot be short".to_string()));
            }
            faults.push(Fault { op, nth, kind });
        }
        Ok(FaultPlan { faults })
    }

    /// Reads `TINYAGENT_FAULTS`; `Ok(None)` when it is unset or empty.
    /// Only with the `failpoints` feature, which the test builds enable.
    #[cfg(feature = "failpoints")]
    pub fn from_env() -> Result<Option<FaultPlan>, FaultPlanError> {
        match std::env::var(FAULTS_ENV) {
            Ok(spec) if !spec.trim().is_empty() => FaultPlan::parse(&spec).map(Some),
            Ok(_) | Err(std::env::VarError::NotPresent) => Ok(None),
            Err(std::env::VarError::NotUnicode(_)) => Err(FaultPlanError {
                spec: String::new(),
                reason: format!("{FAULTS_ENV} is not UTF-8"),
            }),
        }
    }

    fn find(&self, op: FaultOp, nth: u64) -> Option<FaultKind> {
        self.faults
            .iter()
            .find(|f| f.op == op && f.nth == nth)
            .map(|f| f.kind)
    }
}

/// A [`LogFile`] that follows a [`FaultPlan`] and otherwise passes every call
/// through to the file it wraps.
pub(crate) struct FaultyFile<F: LogFile> {
    inner: F,
    plan: FaultPlan,
    writes: u64,
    syncs: u64,
}

impl<F: LogFile> FaultyFile<F> {
    pub(crate) fn new(inner: F, plan: FaultPlan) -> Self {
        FaultyFile {
            inner,
            plan,
            writes: 0,
            syncs: 0,
        }
    }
}

impl<F: LogFile> LogFile for FaultyFile<F> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.writes += 1;
        match self.plan.find(FaultOp::Write, self.writes) {
            None => self.inner.write(buf),
            Some(FaultKind::Errno(e)) => Err(io::Error::from_raw_os_error(e)),
            Some(FaultKind::Short) => self.inner.write(&buf[..buf.len() / 2]),
        }
    }

    fn sync_data(&mut self) -> io::Result<()> {
        self.syncs += 1;
        match self.plan.find(FaultOp::Sync, self.syncs) {
            None | Some(FaultKind::Short) => self.inner.sync_data(),
            Some(FaultKind::Errno(e)) => Err(io::Error::from_raw_os_error(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_documented_example() {
        let plan = FaultPlan::parse("sync:5:EIO,write:7:short,write:9:ENOSPC").unwrap();
        assert_eq!(
            plan.faults,
            vec![
                Fault {
                    op: FaultOp::Sync,
                    nth: 5,
                    kind: FaultKind::Errno(nix::errno::Errno::EIO as i32)
                },
                Fault {
                    op: FaultOp::Write,
                    nth: 7,
                    kind: FaultKind::Short
                },
                Fault {
                    op: FaultOp::Write,
                    nth: 9,
                    kind: FaultKind::Errno(nix::errno::Errno::ENOSPC as i32)
                },
            ]
        );
    }

    #[test]
    fn rejects_bad_plans() {
        for bad in [
            "sync:0:EIO",
            "read:1:EIO",
            "write:1",
            "write:1:EWHAT",
            "sync:2:short",
        ] {
            assert!(FaultPlan::parse(bad).is_err(), "{bad} should not parse");
        }
    }

    struct Mem(Vec<u8>, u64);
    impl LogFile for Mem {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0.extend_from_slice(buf);
            Ok(buf.len())
        }
        fn sync_data(&mut self) -> io::Result<()> {
            self.1 += 1;
            Ok(())
        }
    }

    #[test]
    fn faulty_file_fails_exactly_the_scripted_calls() {
        let plan = FaultPlan::parse("write:2:short,write:3:EIO,sync:1:ENOSPC").unwrap();
        let mut f = FaultyFile::new(Mem(Vec::new(), 0), plan);
        assert_eq!(f.write(b"abcd").unwrap(), 4);
        assert_eq!(f.write(b"efgh").unwrap(), 2);
        let e = f.write(b"ijkl").unwrap_err();
        assert_eq!(e.raw_os_error(), Some(nix::errno::Errno::EIO as i32));
        assert_eq!(f.write(b"mn").unwrap(), 2);
        assert_eq!(
            f.sync_data().unwrap_err().raw_os_error(),
            Some(nix::errno::Errno::ENOSPC as i32)
        );
        f.sync_data().unwrap();
        assert_eq!(f.inner.0, b"abcdefmn");
        assert_eq!(f.inner.1, 1);
    }
}
