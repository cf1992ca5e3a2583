//! Workspace checkpoints: the workspace's files, content-addressed, after
//! every call that can change them.
//!
//! The store is a shadow git repository beside the log,
//! `<wal>.d/checkpoints.git` (bare, no templates, files 0600): its loose
//! objects hold the file contents (blobs) and directory listings (trees), so
//! unchanged content is stored once, and a checkpoint is named by its root
//! tree id. The repository's own index caches each file's stat data (mtime,
//! size, inode), so only files whose stat changed are read and hashed again.
//! See docs/design.md ("Workspace checkpoints") for why git and how it is
//! made durable and safe.
//!
//! What is stored: the files and symlinks under the workspace that
//! `.gitignore` and `.ignore` files do not exclude, never anything inside a
//! `.git` directory, never the run's own files (the log and `<wal>.d/` when
//! they lie in the workspace). A file larger than the size cap
//! ([`max_file_bytes`]) is not stored: the checkpoint record names it with
//! its size and SHA-256.

mod git;
pub mod restore;
#[cfg(test)]
mod tests;

pub use git::{Git, GitError, check_version};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::{BTreeSet, HashMap};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The default size cap of one stored file: 32 MiB.
pub const DEFAULT_MAX_FILE_BYTES: u64 = 32 << 20;

/// A workspace with more files than this gets no checkpoints (a warning
/// says so): `--cwd` at a home or system directory would otherwise copy it.
pub const MAX_FILES: usize = 200_000;

/// At most this many changed paths are listed in a record (`changed_count`
/// has the total).
pub const MAX_LISTED_CHANGES: usize = 1000;

/// ... and at most about this many bytes of them (a record stays far below
/// the log's line limit whatever the paths).
pub const MAX_LISTED_BYTES: usize = 64 << 10;

/// The id of git's empty tree.
pub const EMPTY_TREE: &str = "4b825dc642cb6eb9a060e54bf8d69288fbee4904";

/// The size cap: `$TINYAGENT_CHECKPOINT_MAX_FILE_BYTES` (a trusted local
/// setting) or [`DEFAULT_MAX_FILE_BYTES`].
pub fn max_file_bytes() -> u64 {
    std::env::var("TINYAGENT_CHECKPOINT_MAX_FILE_BYTES")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(DEFAULT_MAX_FILE_BYTES)
}

/// The checkpoint store of a log: `<wal>.d/checkpoints.git`.
pub fn store_dir(wal: &Path) -> PathBuf {
    // Absolute: git runs in the workspace, not where the path was given.
    let wal = std::path::absolute(wal).unwrap_or_else(|_| wal.to_path_buf());
    let mut s = wal.into_os_string();
    s.push(".d");
    PathBuf::from(s).join("checkpoints.git")
}

/// A file over the size cap: recorded by size and hash, not stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Oversized {
    pub path: String,
    pub size: u64,
    pub sha256: String,
}

/// What one checkpoint found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Taken {
    pub tree: String,
    /// Paths that differ from the previous checkpoint (at most
    /// [`MAX_LISTED_CHANGES`]).
    pub changed: Vec<String>,
    pub changed_count: u64,
    pub files: u64,
    pub oversized: Vec<Oversized>,
}

/// Why a checkpoint could not be made.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error("checkpoint store: {0}")]
    Git(#[from] GitError),
    #[error("checkpoint store: {0}")]
    Io(String),
}

/// The stat data an oversized file's hash is cached under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct StatKey {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: i64,
    mtime_ns: i64,
    ctime: i64,
    ctime_ns: i64,
}

impl StatKey {
    fn of(m: &std::fs::Metadata) -> StatKey {
        StatKey {
            dev: m.dev(),
            ino: m.ino(),
            size: m.size(),
            mtime: m.mtime(),
            mtime_ns: m.mtime_nsec(),
            ctime: m.ctime(),
            ctime_ns: m.ctime_nsec(),
        }
    }
}

/// Makes checkpoints of one workspace into one store.
pub struct Checkpointer {
    git: Git,
    workspace: PathBuf,
    /// Absolute paths never stored (the run's own files).
    protected: crate::tools::protected::Protected,
    max_file: u64,
    /// The paths the index holds (read from it on first use).
    indexed: Option<BTreeSet<Vec<u8>>>,
    oversized_cache: HashMap<Vec<u8>, (StatKey, String)>,
    /// What the previous checkpoint of this process saw: each file's stat
    /// data, when its scan started (seconds since the epoch), and the tree.
    last: Option<LastScan>,
    /// Fan-out directories whose names in `objects/` this process synced.
    named_dirs: std::collections::HashSet<String>,
}

/// The previous checkpoint's view, to hand git only the paths that changed.
struct LastScan {
    stats: HashMap<Vec<u8>, StatKey>,
    started: i64,
    tree: String,
}

impl Checkpointer {
    /// A checkpointer for `workspace` into the store of the log `wal`
    /// (created on first use).
    pub fn new(
        wal: &Path,
        workspace: &Path,
        protected: crate::tools::protected::Protected,
    ) -> Checkpointer {
        Checkpointer {
            git: Git {
                git_dir: store_dir(wal),
                work_tree: workspace.to_path_buf(),
                index: None,
            },
            workspace: workspace.to_path_buf(),
            protected,
            max_file: max_file_bytes(),
            indexed: None,
            oversized_cache: HashMap::new(),
            last: None,
            named_dirs: std::collections::HashSet::new(),
        }
    }

    /// A checkpointer of `workspace` into the store at `git_dir`.
    pub fn for_store(
        git_dir: &Path,
        workspace: &Path,
        protected: crate::tools::protected::Protected,
    ) -> Checkpointer {
        Checkpointer {
            git: Git {
                git_dir: git_dir.to_path_buf(),
                work_tree: workspace.to_path_buf(),
                index: None,
            },
            workspace: workspace.to_path_buf(),
            protected,
            max_file: max_file_bytes(),
            indexed: None,
            oversized_cache: HashMap::new(),
            last: None,
            named_dirs: std::collections::HashSet::new(),
        }
    }

    pub fn git(&self) -> &Git {
        &self.git
    }

    /// Stores the workspace as it is now and gives its tree, with what
    /// changed since `prev` (the previous checkpoint's tree; `None`: the
    /// empty tree). Every object the tree needs is durable when this
    /// returns.
    pub fn take(&mut self, prev: Option<&str>) -> Result<Taken, CheckpointError> {
        check_version()?;
        self.git.init()?;
        let started = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
        let (files, oversized, stats) = self.scan();
        if files.len() >= MAX_FILES {
            return Err(CheckpointError::Io(format!(
                "the workspace holds {MAX_FILES} files or more (not ignored): too many to checkpoint"
            )));
        }
        let indexed = match self.indexed.take() {
            Some(set) => set,
            None => {
                // The first use in this process: a lock left by a killed
                // one is stale (the run holds the log's lock).
                clear_stale_lock(&self.git.git_dir);
                self.read_index()
            }
        };
        // The paths git must look at: with a previous scan in this process,
        // those whose stat data changed, those modified in or after the
        // second that scan started (a change within the file system's
        // timestamp granularity keeps the same stat data; git's own racy
        // check rehashes them), new ones and removed ones; else all of them
        // (git's index still skips rehashing unchanged ones).
        let last = self.last.take();
        let mut input = Vec::new();
        for p in &files {
            let look = match (&last, stats.get(p)) {
                (Some(l), Some(now)) => l.stats.get(p) != Some(now) || now.mtime >= l.started - 1,
                _ => true,
            };
            if look {
                input.extend_from_slice(p);
                input.push(0);
            }
        }
        for p in indexed.difference(&files) {
            input.extend_from_slice(p);
            input.push(0);
        }
        let unchanged_since = match &last {
            Some(l) if input.is_empty() => Some(l.tree.clone()),
            _ => None,
        };
        let tree = if let Some(tree) = unchanged_since {
            tree
        } else {
            match self.index_and_write(&input) {
                Ok(tree) => tree,
                Err(_) => {
                    // The index is only a cache: one that is damaged, or
                    // names an object a crash lost before it was synced, is
                    // dropped and every file hashed again.
                    let _ = std::fs::remove_file(self.git.git_dir.join("index"));
                    let mut all = Vec::new();
                    for p in &files {
                        all.extend_from_slice(p);
                        all.push(0);
                    }
                    self.index_and_write(&all)?
                }
            }
        };
        self.last = Some(LastScan {
            stats,
            started,
            tree: tree.clone(),
        });
        let count = files.len() as u64;
        self.indexed = Some(files);
        let prev = prev.unwrap_or(EMPTY_TREE);
        let (changed, changed_count) = if prev == tree {
            // The previous checkpoint made these objects durable already.
            (Vec::new(), 0)
        } else {
            // A previous tree this store lacks (a damaged store) counts as
            // empty: everything is listed, nothing is lost.
            let (changed, count, new_ids) = self
                .changes(prev, &tree)
                .or_else(|_| self.changes(EMPTY_TREE, &tree))?;
            let mut ids: Vec<&str> = new_ids.iter().map(String::as_str).collect();
            ids.push(&tree);
            self.sync_objects(&ids)?;
            (changed, count)
        };
        Ok(Taken {
            tree,
            changed,
            changed_count,
            files: count,
            oversized,
        })
    }

    /// Updates the index with `paths` (NUL-separated) and writes the tree
    /// (git checks that every object it names is there).
    fn index_and_write(&self, paths: &[u8]) -> Result<String, CheckpointError> {
        if !paths.is_empty() {
            self.git.run(
                &[
                    "update-index",
                    "--add",
                    "--remove",
                    "--replace",
                    "-z",
                    "--stdin",
                ],
                Some(paths),
            )?;
        }
        Ok(self.git.text(&["write-tree"], None)?)
    }

    /// The paths the index holds.
    fn read_index(&self) -> BTreeSet<Vec<u8>> {
        if !self.git.git_dir.join("index").is_file() {
            return BTreeSet::new();
        }
        match self.git.run(&["ls-files", "-z"], None) {
            Ok(out) => out
                .split(|b| *b == 0)
                .filter(|p| !p.is_empty())
                .map(<[u8]>::to_vec)
                .collect(),
            Err(_) => {
                let _ = std::fs::remove_file(self.git.git_dir.join("index"));
                BTreeSet::new()
            }
        }
    }

    /// The workspace's files to store (relative paths, as bytes) and those
    /// over the size cap.
    #[allow(clippy::type_complexity, reason = "three results of one walk")]
    fn scan(&mut self) -> (BTreeSet<Vec<u8>>, Vec<Oversized>, HashMap<Vec<u8>, StatKey>) {
        let mut files = BTreeSet::new();
        let mut oversized = Vec::new();
        let mut stats = HashMap::new();
        for rel in walk(&self.workspace, &self.protected)
            .into_iter()
            .take(MAX_FILES)
        {
            let full = self.workspace.join(OsStrPath::of(&rel));
            let Ok(meta) = std::fs::symlink_metadata(&full) else {
                continue; // gone since the walk saw it
            };
            if meta.file_type().is_file() && meta.size() > self.max_file {
                let key = StatKey::of(&meta);
                let hash = match self.oversized_cache.get(&rel) {
                    Some((k, h)) if *k == key => h.clone(),
                    _ => {
                        let Ok(h) = sha256_file(&full) else { continue };
                        self.oversized_cache.insert(rel.clone(), (key, h.clone()));
                        h
                    }
                };
                oversized.push(Oversized {
                    path: String::from_utf8_lossy(&rel).into_owned(),
                    size: meta.size(),
                    sha256: hash,
                });
                continue;
            }
            stats.insert(rel.clone(), StatKey::of(&meta));
            files.insert(rel);
        }
        (files, oversized, stats)
    }

    /// Changed paths between two trees, their count, and the ids of the
    /// objects new in `to` (blobs and trees).
    fn changes(
        &self,
        from: &str,
        to: &str,
    ) -> Result<(Vec<String>, u64, Vec<String>), CheckpointError> {
        let out = self.git.run(
            &[
                "diff-tree",
                "-r",
                "-t",
                "-z",
                "--raw",
                "--no-renames",
                from,
                to,
            ],
            None,
        )?;
        let mut changed = Vec::new();
        let mut count = 0u64;
        let mut listed_bytes = 0usize;
        let mut ids = Vec::new();
        let mut fields = out.split(|b| *b == 0);
        while let Some(meta) = fields.next() {
            if meta.is_empty() {
                continue;
            }
            let Some(path) = fields.next() else { break };
            // :oldmode newmode oldid newid status
            let meta = String::from_utf8_lossy(meta);
            let parts: Vec<&str> = meta.trim_start_matches(':').split(' ').collect();
            let [old_mode, new_mode, _, new_id, _] = parts.as_slice() else {
                continue;
            };
            if new_id.bytes().any(|b| b != b'0') {
                ids.push((*new_id).to_string());
            }
            if *old_mode == "040000" || *new_mode == "040000" {
                continue; // a directory: its files are listed themselves
            }
            count += 1;
            if changed.len() < MAX_LISTED_CHANGES && listed_bytes < MAX_LISTED_BYTES {
                listed_bytes += path.len();
                changed.push(String::from_utf8_lossy(path).into_owned());
            }
        }
        Ok((changed, count, ids))
    }

    /// fsyncs the fan-out directories of `ids` and `objects/` itself: git
    /// fsyncs each object file (`core.fsync=loose-object`) but not the
    /// directory entries that name them.
    /// `objects/` itself is synced only when a fan-out directory this
    /// process has not synced its name of yet is involved.
    fn sync_objects(&mut self, ids: &[&str]) -> Result<(), CheckpointError> {
        let objects = self.git.git_dir.join("objects");
        let dirs: BTreeSet<String> = ids
            .iter()
            .filter(|id| id.len() > 2)
            .map(|id| id[..2].to_string())
            .collect();
        let mut new_names = false;
        for d in &dirs {
            let dir = objects.join(d);
            if dir.is_dir() {
                git::sync_dir(&dir).map_err(|e| CheckpointError::Io(format!("fsync {d}: {e}")))?;
                new_names |= !self.named_dirs.contains(d);
            }
        }
        if new_names {
            git::sync_dir(&objects)
                .map_err(|e| CheckpointError::Io(format!("fsync objects: {e}")))?;
            self.named_dirs.extend(dirs);
        }
        Ok(())
    }
}

/// Relative paths (bytes) of the files and symlinks to store, in no
/// particular order (at most [`MAX_FILES`]).
pub fn walk(workspace: &Path, protected: &crate::tools::protected::Protected) -> Vec<Vec<u8>> {
    let protected = protected.clone();
    let walker = ignore::WalkBuilder::new(workspace)
        .hidden(false)
        .parents(false)
        .ignore(true)
        .git_ignore(true)
        .git_global(false)
        .git_exclude(false)
        .require_git(false)
        .follow_links(false)
        .filter_entry(move |e| e.file_name() != ".git" && !protected.covers(e.path()))
        .build();
    let mut out = Vec::new();
    for entry in walker.flatten() {
        if out.len() >= MAX_FILES {
            break;
        }
        let Some(ft) = entry.file_type() else {
            continue;
        };
        if !(ft.is_file() || ft.is_symlink()) {
            continue;
        }
        let Ok(rel) = entry.path().strip_prefix(workspace) else {
            continue;
        };
        out.push(rel.as_os_str().as_bytes().to_vec());
    }
    out
}

/// A relative path from its bytes.
struct OsStrPath;

impl OsStrPath {
    fn of(bytes: &[u8]) -> &Path {
        Path::new(std::ffi::OsStr::from_bytes(bytes))
    }
}

fn sha256_file(path: &Path) -> std::io::Result<String> {
    let mut f = std::fs::File::open(path)?;
    let mut h = Sha256::new();
    std::io::copy(&mut f, &mut h)?;
    Ok(format!("{:x}", h.finalize()))
}

/// A unified diff between two trees of a store (`from` `None`: the empty
/// tree). Read-only: nothing in the store changes.
pub fn diff(git_dir: &Path, from: Option<&str>, to: &str) -> Result<Vec<u8>, CheckpointError> {
    let git = Git {
        git_dir: git_dir.to_path_buf(),
        work_tree: std::env::temp_dir(),
        index: None,
    };
    check_version()?;
    Ok(git.run(
        &[
            "diff-tree",
            "-r",
            "-p",
            "--no-color",
            "--no-ext-diff",
            "--no-textconv",
            "--no-renames",
            from.unwrap_or(EMPTY_TREE),
            to,
        ],
        None,
    )?)
}

/// Makes `to` (a new store) hold every object of `from`, as one pack
/// written by `git pack-objects` (no delta search: it is a copy, not a
/// compression), so the new store depends on nothing of the old one, and the
/// old one is only read. Durable when it returns (git fsyncs the pack and
/// its index, `core.fsync=pack`; the directory is synced here); safe to run
/// again after a kill (a second identical pack is harmless).
pub fn copy_store(from: &Path, to: &Path, workspace: &Path) -> Result<(), CheckpointError> {
    let io = |what: String, e: std::io::Error| CheckpointError::Io(format!("{what}: {e}"));
    check_version()?;
    // No workspace is needed (or read) to copy objects.
    let _ = workspace;
    let new = Git {
        git_dir: to.to_path_buf(),
        work_tree: to.to_path_buf(),
        index: None,
    };
    new.init()?;
    // The old store is read through an alternate given for these two
    // commands only: git makes its temp files in the new store, so a kill
    // leaves nothing in the old one, and the new one keeps no link to it.
    let alt = from.join("objects");
    let envs = [("GIT_ALTERNATE_OBJECT_DIRECTORIES", alt.as_os_str())];
    let ids = new.run_env(
        &[
            "cat-file",
            "--batch-all-objects",
            "--batch-check=%(objectname)",
        ],
        None,
        &envs,
    )?;
    if ids.iter().all(u8::is_ascii_whitespace) {
        return Ok(());
    }
    let packs = to.join("objects/pack");
    std::fs::create_dir_all(&packs).map_err(|e| io(format!("mkdir {}", packs.display()), e))?;
    let base = packs.join("pack");
    let base = base.to_string_lossy();
    new.run_env(
        &[
            "pack-objects",
            "-q",
            "--window=0",
            "--depth=0",
            "--threads=1",
            "--no-reuse-delta",
            &base,
        ],
        Some(&ids),
        &envs,
    )?;
    git::sync_dir(&packs).map_err(|e| io(format!("fsync {}", packs.display()), e))?;
    Ok(())
}

/// Removes a git lock file a killed process left (`index.lock`). Only
/// called where no other process can be using the store: the run holds the
/// log's lock, a fork's store has no run yet.
pub fn clear_stale_lock(git_dir: &Path) {
    let _ = std::fs::remove_file(git_dir.join("index.lock"));
}
