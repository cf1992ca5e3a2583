//! The files of a run that no tool may touch, even when they lie inside the
//! workspace (a user's choice with `--wal`, or a config file kept in the
//! workspace): the log, its snapshots, torn-tail copies and `<wal>.d/`, the
//! config file and the hook programs the run uses. A tool that could rewrite
//! them could forge the run or get a command of its choosing run on the host.

use std::path::{Path, PathBuf};

/// Absolute paths, each protected with everything beneath it, and log
/// names whose siblings (`<wal>.snapshot`, `<wal>.torn-*`...) are too.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Protected {
    paths: Vec<PathBuf>,
    logs: Vec<PathBuf>,
}

fn absolute(path: &Path) -> PathBuf {
    let abs = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir().map_or_else(|_| path.to_path_buf(), |d| d.join(path))
    };
    // The parent is resolved, not the name: a log or snapshot may not exist yet.
    match (abs.parent(), abs.file_name()) {
        (Some(dir), Some(name)) => dir
            .canonicalize()
            .map_or_else(|_| abs.clone(), |d| d.join(name)),
        _ => abs,
    }
}

impl Protected {
    /// Nothing protected (tools used outside a run).
    pub fn none() -> Protected {
        Protected::default()
    }

    /// Protects `path` and everything beneath it.
    pub fn add(&mut self, path: &Path) {
        let p = absolute(path);
        if !self.paths.contains(&p) {
            self.paths.push(p);
        }
    }

    /// Protects a log and every file named after it beside it (`<wal>.*`:
    /// snapshots, their temp files, torn tails, `<wal>.d/`).
    pub fn add_log(&mut self, wal: &Path) {
        self.add(wal);
        let p = absolute(wal);
        if !self.logs.contains(&p) {
            self.logs.push(p);
        }
    }

    /// Every protected path (logs included), for a sandbox to hide.
    pub fn paths(&self) -> &[PathBuf] {
        &self.paths
    }

    /// The protected logs (their `<wal>.*` siblings are protected too).
    pub fn logs(&self) -> &[PathBuf] {
        &self.logs
    }

    /// Whether `path` (absolute, resolved) is protected.
    pub fn covers(&self, path: &Path) -> bool {
        if self.paths.iter().any(|p| path.starts_with(p)) {
            return true;
        }
        self.logs.iter().any(|wal| {
            let (Some(dir), Some(name)) = (wal.parent(), wal.file_name()) else {
                return false;
            };
            let mut prefix = name.to_os_string();
            prefix.push(".");
            path.strip_prefix(dir).ok().is_some_and(|rest| {
                rest.components().next().is_some_and(|first| {
                    first
                        .as_os_str()
                        .as_encoded_bytes()
                        .starts_with(prefix.as_encoded_bytes())
                })
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_log_protects_its_siblings_and_nothing_else() {
        let mut p = Protected::none();
        p.add_log(Path::new("/w/runs/r1.wal"));
        p.add(Path::new("/w/tinyagent.toml"));
        for yes in [
            "/w/runs/r1.wal",
            "/w/runs/r1.wal.snapshot",
            "/w/runs/r1.wal.snapshot.tmp-1-2.bak",
            "/w/runs/r1.wal.torn-99",
            "/w/runs/r1.wal.d/p1.log",
            "/w/tinyagent.toml",
        ] {
            assert!(p.covers(Path::new(yes)), "{yes}");
        }
        for no in [
            "/w/runs/r2.wal",
            "/w/runs/r1.walrus",
            "/w/src/main.rs",
            "/w/runs",
        ] {
            assert!(!p.covers(Path::new(no)), "{no}");
        }
    }
}
