//! Workspace checkpoints: the workspace's files, content-addressed, after
//! every call that can change them.
//!
//! The store is a shadow git repository beside the log,
//! `<wal>.d/checkpoints.git` (bare, no templates, files 0600), and a
//! checkpoint is named by its root tree id. Checkpoints are taken in
//! process: an index kept in memory (and cached in the store, see
//! index.rs) holds each file's stat data (mtime, ctime, size, inode) and
//! blob id, so only files whose stat changed are read and hashed again and
//! only the trees on their paths are made again; the new objects of one
//! checkpoint go to one pack (objects.rs), durable with one wait for the
//! disk. The `git` binary is used for diffs, restores and a fork's copy. See
//! docs/design.md ("Workspace checkpoints") for why and how it is made
//! durable and safe.
//!
//! What is stored: the files and symlinks under the workspace that
//! `.gitignore` and `.ignore` files do not exclude, never anything inside a
//! `.git` directory, never the run's own files (the log and `<wal>.d/` when
//! they lie in the workspace). A file larger than the size cap
//! ([`max_file_bytes`]) is not stored: the checkpoint record names it with
//! its size and SHA-256.
//!
//! The parts: `walk` (which files, and reading them safely), `look` (the
//! whole tree or, with the watch, only what its events named; `watch` is
//! the inotify side), `index` and `objects` (above), `git` (the binary),
//! `store` (diff, a fork's copy), [`trust`] (a store tinyagent did not
//! write is refused), [`restore`] and [`rewind`].

mod git;
mod index;
mod look;
mod objects;
pub mod restore;
pub mod rewind;
mod store;
#[cfg(test)]
mod tests;
pub mod trust;
mod walk;
mod watch;

pub use git::{Git, GitError, check_version};
use index::StatKey;
use look::WatchMode;
use objects::{Kind, Oid, PackWriter, hex, parse_hex};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
pub use store::{clear_stale_lock, copy_store, diff};
use walk::{OsStrPath, read_content, sha256_file};
pub use walk::{walk, walk_with_stat};

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

/// The checkpoint store's settings for this process: the git program and
/// the size cap of one stored file. Set once, at start, by the launch of a
/// command from the local config (`[checkpoints] git`, `max_file_bytes`)
/// and its environment overrides (`launch::parts::configure_checkpoints`);
/// [`StoreSettings::default`] until then.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreSettings {
    /// The git binary (default `git`, from `PATH`).
    pub git: PathBuf,
    /// A file larger than this is not stored (default 32 MiB).
    pub max_file_bytes: u64,
}

impl Default for StoreSettings {
    fn default() -> StoreSettings {
        StoreSettings {
            git: PathBuf::from("git"),
            max_file_bytes: DEFAULT_MAX_FILE_BYTES,
        }
    }
}

static SETTINGS: std::sync::OnceLock<StoreSettings> = std::sync::OnceLock::new();

/// Sets the store's settings for this process; the first call wins (they
/// are read once).
pub fn configure(settings: StoreSettings) {
    let _ = SETTINGS.set(settings);
}

/// The settings in force.
pub fn settings() -> &'static StoreSettings {
    SETTINGS.get_or_init(StoreSettings::default)
}

/// The size cap of one stored file (see [`StoreSettings`]).
pub fn max_file_bytes() -> u64 {
    settings().max_file_bytes
}

/// The checkpoint store of a log: `<wal>.d/checkpoints.git`.
pub fn store_dir(wal: &Path) -> PathBuf {
    crate::rundir::RunDir::of(wal).checkpoints()
}

pub use crate::event::Oversized;

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
    /// In watch mode, how the workspace was looked at: `watch` (only the
    /// paths events named), else `full: <why>` (the whole tree was
    /// walked). `None` when the watch is off.
    pub walk: Option<String>,
}

/// Why a checkpoint could not be made.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error("checkpoint store: {0}")]
    Git(#[from] GitError),
    #[error("checkpoint store: {0}")]
    Io(String),
}

impl CheckpointError {
    /// The store was refused (trust.rs): not this user's, or holding what
    /// tinyagent did not write. A command says so with exit 2.
    pub fn is_untrusted(&self) -> bool {
        matches!(self, CheckpointError::Git(GitError::Untrusted(_)))
    }
}

/// Makes checkpoints of one workspace into one store.
pub struct Checkpointer {
    git: Git,
    workspace: PathBuf,
    /// Absolute paths never stored (the run's own files).
    protected: crate::exec::protected::Protected,
    max_file: u64,
    oversized_cache: HashMap<Vec<u8>, (StatKey, String)>,
    /// The index and the store's object ids, loaded on first use.
    state: Option<State>,
    /// Scans made (each entry records the last that saw it).
    scans: u64,
    /// The files over the cap as of the last checkpoint.
    oversized_now: BTreeMap<Vec<u8>, Oversized>,
    watch: WatchMode,
    /// Checkpoints that walked the whole tree though the watch was wanted.
    full_walks: u64,
    /// A warning not yet given (the watch was lost), and whether one was.
    warning: Option<String>,
    warned: bool,
    /// Files made ahead for the next pack (made with the state).
    spares: Option<objects::Spares>,
}

/// What a checkpointer knows between checkpoints.
struct State {
    root: index::Dir,
    /// The tree `root` is of (the last checkpoint's).
    tree: Oid,
    /// Every object the store holds.
    known: HashSet<Oid>,
    /// The cache file was written since the state was loaded.
    saved: bool,
}

/// Workspaces up to this many files have their index saved after every
/// checkpoint that changed something (a write of at most about 100 KB);
/// larger ones when a checkpoint hashed [`SAVE_AFTER_HASHED`] files or more.
const SAVE_ALWAYS_UP_TO: u64 = 1000;
const SAVE_AFTER_HASHED: u64 = 64;

impl Checkpointer {
    /// A checkpointer for `workspace` into the store of the log `wal`
    /// (created on first use).
    pub fn new(
        wal: &Path,
        workspace: &Path,
        protected: crate::exec::protected::Protected,
    ) -> Checkpointer {
        Checkpointer::for_store(&store_dir(wal), workspace, protected)
    }

    /// A checkpointer of `workspace` into the store at `git_dir`.
    pub fn for_store(
        git_dir: &Path,
        workspace: &Path,
        protected: crate::exec::protected::Protected,
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
            oversized_cache: HashMap::new(),
            state: None,
            scans: 0,
            oversized_now: BTreeMap::new(),
            watch: WatchMode::Off,
            full_walks: 0,
            warning: None,
            warned: false,
            spares: None,
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
        // A state kept from the last checkpoint means this process made or
        // found the store whole and nothing has failed since.
        let mut state = match self.state.take() {
            Some(s) => s,
            None => {
                self.git.init()?;
                // The temporary files of the store's root are cleared as
                // the state is loaded: spares made before go with them.
                self.spares = None;
                let (state, unindexed) = self.load_state();
                if let Some(why) = unindexed
                    && self.warning.is_none()
                {
                    self.warning = Some(format!("checkpoints: {why}"));
                }
                self.spares = Some(objects::Spares::new(&self.git.git_dir));
                state
            }
        };
        // On failure the state is dropped (it may name objects that were
        // not written) and loaded again next time; the events the watch
        // gave were drained for that state, so a watch is set up again by
        // the next checkpoint's walk.
        let taken = match self.take_with(&mut state, prev) {
            Ok(t) => t,
            Err(e) => {
                if matches!(self.watch, WatchMode::On(_)) {
                    self.watch = WatchMode::Wanted;
                }
                return Err(e);
            }
        };
        self.state = Some(state);
        Ok(taken)
    }

    /// The store's objects and the cached index (first use in a process:
    /// temporary files or a lock a killed process left are stale, as the
    /// run holds the log's lock).
    fn load_state(&self) -> (State, Option<String>) {
        let dir = &self.git.git_dir;
        clear_stale_lock(dir);
        objects::clear_tmp(dir);
        let (mut known, unindexed) = objects::known_objects(&dir.join("objects"));
        let mut failed = None;
        for pack in unindexed {
            if let Err(why) = self.index_again(&pack, &mut known) {
                failed.get_or_insert(why);
            }
        }
        let state = match index::load(dir, &|id| known.contains(id)) {
            Some((root, tree)) => State {
                root,
                tree,
                known,
                saved: true,
            },
            None => State {
                root: index::Dir::default(),
                tree: objects::object_id(Kind::Tree, b""),
                known,
                saved: false,
            },
        };
        (state, failed)
    }

    /// A pack left without a whole index (a power loss after the pack was
    /// synced and before its unsynced index reached the disk): indexed
    /// again by `git index-pack`. A pack whose bytes do not match its
    /// checksum trailer and name was never whole on disk, so no checkpoint
    /// record names it (the record follows the pack's sync): it is removed,
    /// with what is left of its index. A whole pack is never removed; if it
    /// cannot be indexed now, its objects count as missing and the next
    /// checkpoint writes them again; the error says so (the checkpointer's
    /// warning).
    fn index_again(&self, pack: &Path, known: &mut HashSet<Oid>) -> Result<(), String> {
        let idx = pack.with_extension("idx");
        let _ = std::fs::remove_file(&idx);
        if !objects::pack_is_whole(pack) {
            let _ = std::fs::remove_file(pack);
            return Ok(());
        }
        let cannot = |why: String| {
            format!(
                "{} has no whole index and could not be indexed again ({why}); its objects are stored again",
                pack.display()
            )
        };
        self.git
            .run(&["index-pack", &pack.to_string_lossy()], None)
            .map_err(|e| cannot(e.to_string()))?;
        let ids = std::fs::read(&idx)
            .ok()
            .and_then(|b| objects::idx_ids(&b))
            .ok_or_else(|| cannot("git wrote no whole index".into()))?;
        known.extend(ids);
        Ok(())
    }

    fn take_with(
        &mut self,
        state: &mut State,
        prev: Option<&str>,
    ) -> Result<Taken, CheckpointError> {
        let io = |what: &str, e: std::io::Error| CheckpointError::Io(format!("{what}: {e}"));
        let started = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
        let (paths, scope, walk_note) = self.walk_for_checkpoint(&state.root);
        if scope.is_none() {
            self.oversized_now.clear();
        }
        if paths.len() >= MAX_FILES {
            return Err(CheckpointError::Io(format!(
                "the workspace holds {MAX_FILES} files or more (not ignored): too many to checkpoint"
            )));
        }
        self.scans += 1;
        let scan = self.scans;
        let mut pack: Option<PackWriter> = None;
        let mut changed: Vec<Vec<u8>> = Vec::new();
        let mut hashed = 0u64;
        // The paths a scoped walk saw, each looked at again with what was
        // under it.
        let mut walked: Vec<Vec<u8>> = Vec::new();
        if let Some(scope) = &scope {
            self.oversized_now.retain(|k, _| !scope.within(k));
        }
        for (rel, meta) in paths {
            if scope.is_some() {
                walked.push(rel.clone());
            }
            let ft = meta.file_type();
            if !(ft.is_file() || ft.is_symlink()) {
                continue;
            }
            if ft.is_file() && meta.size() > self.max_file {
                let full = self.workspace.join(OsStrPath::of(&rel));
                if let Some(o) = self.oversized(&rel, &full, &meta) {
                    self.oversized_now.insert(rel.clone(), o);
                }
                continue;
            }
            let mode = if ft.is_symlink() {
                index::MODE_LINK
            } else if meta.mode() & 0o100 != 0 {
                index::MODE_EXEC
            } else {
                index::MODE_FILE
            };
            let stat = StatKey::of(&meta);
            if let Some(e) = state.root.get_mut(&rel)
                && e.stat == stat
                && e.mode == mode
                && !e.racy
            {
                e.seen = scan;
                continue;
            }
            let full = self.workspace.join(OsStrPath::of(&rel));
            let Some(data) = read_content(&full, &meta, self.max_file) else {
                continue; // gone, swapped, or grown over the cap since
            };
            hashed += 1;
            let id = objects::object_id(Kind::Blob, &data);
            if !state.known.contains(&id) {
                let p = match &mut pack {
                    Some(p) => p,
                    None => pack.insert(
                        PackWriter::new(&self.git.git_dir).map_err(|e| io("making a pack", e))?,
                    ),
                };
                p.add(Kind::Blob, id, &data)
                    .map_err(|e| io("writing a pack", e))?;
                state.known.insert(id);
            }
            let entry = index::FileEntry {
                stat,
                mode,
                id,
                racy: stat.racy(started),
                seen: scan,
            };
            match state.root.get_mut(&rel) {
                Some(e) if e.id == id && e.mode == mode => *e = entry,
                _ => {
                    state.root.insert(&rel, entry);
                    changed.push(rel);
                }
            }
        }
        match &scope {
            None => state.root.sweep(&mut Vec::new(), scan, &mut changed),
            Some(scope) => {
                for p in scope.paths().chain(walked.iter().map(Vec::as_slice)) {
                    state.root.sweep_at(p, scan, &mut changed);
                }
            }
        }
        let oversized: Vec<Oversized> = self.oversized_now.values().cloned().collect();
        let known = &mut state.known;
        let git_dir = &self.git.git_dir;
        let tree = state
            .root
            .build(&mut |id, data| {
                if known.insert(id) {
                    let p = match &mut pack {
                        Some(p) => p,
                        None => pack.insert(PackWriter::new(git_dir)?),
                    };
                    p.add(Kind::Tree, id, data)?;
                }
                Ok(())
            })
            .map_err(|e| io("writing a pack", e))?;
        if let Some(p) = pack {
            let done = p.finish(self.spares.as_ref());
            // The files it took are made again now, not while its renames
            // wait on the store's directory.
            if let Some(s) = &self.spares {
                s.refill();
            }
            done.map_err(|e| io("writing a pack", e))?;
        }
        let was = std::mem::replace(&mut state.tree, tree);
        let count = state.root.count();
        if !changed.is_empty()
            && (count <= SAVE_ALWAYS_UP_TO || hashed >= SAVE_AFTER_HASHED || !state.saved)
        {
            // A cache: a failure to write it costs hashing next time.
            state.saved |= index::save(git_dir, &state.root, &tree).is_ok();
        }
        let tree = hex(&tree);
        let prev = prev.unwrap_or(EMPTY_TREE);
        let (changed, changed_count) = if prev == tree {
            (Vec::new(), 0)
        } else if parse_hex(prev) == Some(was) {
            // The index was of `prev`: what changed is what this scan saw.
            changed.sort_unstable();
            changed.dedup();
            let n = changed.len() as u64;
            let mut listed = Vec::new();
            let mut listed_bytes = 0usize;
            for p in changed {
                if listed.len() >= MAX_LISTED_CHANGES || listed_bytes >= MAX_LISTED_BYTES {
                    break;
                }
                listed_bytes += p.len();
                listed.push(String::from_utf8_lossy(&p).into_owned());
            }
            (listed, n)
        } else {
            // A previous tree this store lacks (a damaged store) counts as
            // empty: everything is listed, nothing is lost.
            self.changes(prev, &tree)
                .or_else(|_| self.changes(EMPTY_TREE, &tree))?
        };
        Ok(Taken {
            tree,
            changed,
            changed_count,
            files: count,
            oversized,
            walk: walk_note,
        })
    }

    /// A file over the size cap: its SHA-256 (cached by stat data).
    fn oversized(
        &mut self,
        rel: &[u8],
        full: &Path,
        meta: &std::fs::Metadata,
    ) -> Option<Oversized> {
        let key = StatKey::of(meta);
        let hash = match self.oversized_cache.get(rel) {
            Some((k, h)) if *k == key => h.clone(),
            _ => {
                let h = sha256_file(full).ok()?;
                self.oversized_cache.insert(rel.to_vec(), (key, h.clone()));
                h
            }
        };
        Some(Oversized {
            path: String::from_utf8_lossy(rel).into_owned(),
            size: meta.size(),
            sha256: hash,
        })
    }

    /// Changed paths between two trees of the store and their count (`git
    /// diff-tree`: for a checkpoint whose previous tree is not the one
    /// this checkpointer's index is of).
    fn changes(&self, from: &str, to: &str) -> Result<(Vec<String>, u64), CheckpointError> {
        let out = self.git.run(
            &["diff-tree", "-r", "-z", "--raw", "--no-renames", from, to],
            None,
        )?;
        let mut changed = Vec::new();
        let mut count = 0u64;
        let mut listed_bytes = 0usize;
        let mut fields = out.split(|b| *b == 0);
        while let Some(meta) = fields.next() {
            if meta.is_empty() {
                continue;
            }
            let Some(path) = fields.next() else { break };
            count += 1;
            if changed.len() < MAX_LISTED_CHANGES && listed_bytes < MAX_LISTED_BYTES {
                listed_bytes += path.len();
                changed.push(String::from_utf8_lossy(path).into_owned());
            }
        }
        Ok((changed, count))
    }
}
