//! The files a run keeps beside its log, named in one place.
//!
//! Beside `<wal>` a run keeps `<wal>.snapshot` and `<wal>.snapshot.bak`
//! (the store's), `<wal>.out/` (background output in the container
//! environment) and `<wal>.d/`, its own directory ([`RunDir`]): the
//! background processes' output (`p<N>.log`), the checkpoint store
//! (`checkpoints.git`), approval answers (`approvals/`), a restore's intent
//! (`restore.json`) and the replication sidecar (`replicate.json`).
//! Everything in it is data: checked before it is believed
//! (`checkpoint::trust`, docs/security.md).

use std::path::{Path, PathBuf};

/// `<wal>.d`: the run's own directory beside its log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunDir(PathBuf);

impl RunDir {
    /// The run directory of the log at `wal`, absolute (git and the tools
    /// run elsewhere than where the path was given).
    pub fn of(wal: &Path) -> RunDir {
        let wal = std::path::absolute(wal).unwrap_or_else(|_| wal.to_path_buf());
        RunDir(beside(&wal, ".d"))
    }

    /// The directory itself.
    pub fn path(&self) -> &Path {
        &self.0
    }

    /// The checkpoint store: `checkpoints.git`.
    pub fn checkpoints(&self) -> PathBuf {
        self.0.join("checkpoints.git")
    }

    /// Where `tinyagent approve` leaves answers: `approvals/`.
    pub fn approvals(&self) -> PathBuf {
        self.0.join("approvals")
    }

    /// A restore's intent: `restore.json`.
    pub fn restore_intent(&self) -> PathBuf {
        self.0.join("restore.json")
    }

    /// The replication sidecar: `replicate.json`.
    pub fn replication(&self) -> PathBuf {
        self.0.join("replicate.json")
    }
}

/// `<wal>.out`: background output in the container environment (bound into
/// the container, so it is kept apart from `<wal>.d`).
pub fn container_output(wal: &Path) -> PathBuf {
    beside(wal, ".out")
}

/// `wal` with `suffix` added to its name.
fn beside(wal: &Path, suffix: &str) -> PathBuf {
    let mut s = wal.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_file_of_a_run_is_named_beside_its_log() {
        let d = RunDir::of(Path::new("/r/x.wal"));
        assert_eq!(d.path(), Path::new("/r/x.wal.d"));
        assert_eq!(d.checkpoints(), Path::new("/r/x.wal.d/checkpoints.git"));
        assert_eq!(d.approvals(), Path::new("/r/x.wal.d/approvals"));
        assert_eq!(d.restore_intent(), Path::new("/r/x.wal.d/restore.json"));
        assert_eq!(d.replication(), Path::new("/r/x.wal.d/replicate.json"));
        assert_eq!(
            container_output(Path::new("/r/x.wal")),
            Path::new("/r/x.wal.out")
        );
        // Relative logs are made absolute.
        assert!(RunDir::of(Path::new("x.wal")).path().is_absolute());
    }
}
