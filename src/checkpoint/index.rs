//! The checkpointer's index: each stored file's stat data and blob id, by
//! directory, with each directory's tree id cached until something under
//! it changes. Kept in memory for the life of a checkpointer, and saved to
//! a cache file in the store (`tinyagent-stat`, checksummed, written by
//! rename without sync: a lost or damaged one only means files are hashed
//! again) so the next process need not read every file.

use super::objects::{Kind, Oid, object_id};
use std::collections::BTreeMap;
use std::path::Path;

/// The stat data a file's blob id is trusted under (as git's index).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatKey {
    pub dev: u64,
    pub ino: u64,
    pub size: u64,
    pub mtime: i64,
    pub mtime_ns: i64,
    pub ctime: i64,
    pub ctime_ns: i64,
}

impl StatKey {
    pub fn of(m: &std::fs::Metadata) -> StatKey {
        use std::os::unix::fs::MetadataExt;
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

    /// Changed within a second of `t` or later (seconds since the epoch):
    /// a write within the file system's timestamp granularity after the
    /// file was read could keep this stat data, so the id is not trusted.
    pub fn racy(&self, t: i64) -> bool {
        self.mtime.max(self.ctime) >= t - 1
    }
}

/// git's modes of what is stored.
pub const MODE_FILE: u32 = 0o100_644;
pub const MODE_EXEC: u32 = 0o100_755;
pub const MODE_LINK: u32 = 0o120_000;
const MODE_TREE: u32 = 0o040_000;

#[derive(Debug, Clone)]
pub struct FileEntry {
    pub stat: StatKey,
    pub mode: u32,
    pub id: Oid,
    /// The id must be checked against the file's content at the next scan.
    pub racy: bool,
    /// The scan that last saw the file.
    pub seen: u64,
}

#[derive(Debug, Default, Clone)]
pub struct Dir {
    pub files: BTreeMap<Vec<u8>, FileEntry>,
    pub dirs: BTreeMap<Vec<u8>, Dir>,
    /// The tree id, while nothing under the directory changed.
    pub tree: Option<Oid>,
}

impl Dir {
    /// The entry of a relative path.
    pub fn get_mut(&mut self, path: &[u8]) -> Option<&mut FileEntry> {
        let (dirs, name) = split(path);
        let mut d = self;
        for c in dirs {
            d = d.dirs.get_mut(c)?;
        }
        d.files.get_mut(name)
    }

    /// Whether a relative path has an entry.
    pub fn contains(&self, path: &[u8]) -> bool {
        let (dirs, name) = split(path);
        let mut d = self;
        for c in dirs {
            match d.dirs.get(c) {
                Some(next) => d = next,
                None => return false,
            }
        }
        d.files.contains_key(name)
    }

    /// Sets the entry of `path`, making its directories (their trees are
    /// made again).
    pub fn insert(&mut self, path: &[u8], entry: FileEntry) {
        let (dirs, name) = split(path);
        let mut d = self;
        d.tree = None;
        for c in dirs {
            d = d.dirs.entry(c.to_vec()).or_default();
            d.tree = None;
        }
        d.files.insert(name.to_vec(), entry);
    }

    /// Removes the files the scan `seen` did not see, and directories left
    /// empty; adds each removed path to `removed`.
    pub fn sweep(&mut self, prefix: &mut Vec<u8>, seen: u64, removed: &mut Vec<Vec<u8>>) {
        let before = removed.len();
        let base = prefix.len();
        self.files.retain(|name, e| {
            if e.seen == seen {
                return true;
            }
            prefix.truncate(base);
            prefix.extend_from_slice(name);
            removed.push(prefix.clone());
            false
        });
        for (name, sub) in &mut self.dirs {
            prefix.truncate(base);
            prefix.extend_from_slice(name);
            prefix.push(b'/');
            sub.sweep(prefix, seen, removed);
        }
        prefix.truncate(base);
        self.dirs.retain(|_, d| !d.is_empty());
        if removed.len() > before {
            self.tree = None;
        }
    }

    /// [`Dir::sweep`] of one path only: the file at `path` and everything
    /// under the directory at `path`, when the scan `seen` did not see
    /// them (the other entries are left as they are). Gives whether
    /// anything was removed.
    pub fn sweep_at(&mut self, path: &[u8], seen: u64, removed: &mut Vec<Vec<u8>>) -> bool {
        let (dirs, name) = split(path);
        let comps: Vec<&[u8]> = dirs.collect();
        self.sweep_down(&comps, name, path, seen, removed)
    }

    fn sweep_down(
        &mut self,
        comps: &[&[u8]],
        name: &[u8],
        path: &[u8],
        seen: u64,
        removed: &mut Vec<Vec<u8>>,
    ) -> bool {
        let changed = if let Some((first, rest)) = comps.split_first() {
            let Some(sub) = self.dirs.get_mut(*first) else {
                return false;
            };
            let changed = sub.sweep_down(rest, name, path, seen, removed);
            if sub.is_empty() {
                self.dirs.remove(*first);
            }
            changed
        } else {
            let mut changed = false;
            if self.files.get(name).is_some_and(|e| e.seen != seen) {
                self.files.remove(name);
                removed.push(path.to_vec());
                changed = true;
            }
            if let Some(sub) = self.dirs.get_mut(name) {
                let before = removed.len();
                let mut prefix = path.to_vec();
                prefix.push(b'/');
                sub.sweep(&mut prefix, seen, removed);
                changed |= removed.len() > before;
                if sub.is_empty() {
                    self.dirs.remove(name);
                }
            }
            changed
        };
        if changed {
            self.tree = None;
        }
        changed
    }

    pub fn is_empty(&self) -> bool {
        self.files.is_empty() && self.dirs.is_empty()
    }

    pub fn count(&self) -> u64 {
        self.files.len() as u64 + self.dirs.values().map(Dir::count).sum::<u64>()
    }

    /// The tree id of this directory, making the trees that changed (each
    /// is handed to `new_tree` with its id, to be stored if new).
    pub fn build(
        &mut self,
        new_tree: &mut dyn FnMut(Oid, &[u8]) -> std::io::Result<()>,
    ) -> std::io::Result<Oid> {
        if let Some(id) = self.tree {
            return Ok(id);
        }
        // (sort key, mode, name, id): git orders a directory's name as if
        // it ended in '/'.
        let mut items: Vec<(Vec<u8>, u32, &[u8], Oid)> = Vec::new();
        let mut sub_ids = Vec::with_capacity(self.dirs.len());
        for d in self.dirs.values_mut() {
            sub_ids.push(d.build(new_tree)?);
        }
        for ((name, _), id) in self.dirs.iter().zip(sub_ids) {
            let mut key = name.clone();
            key.push(b'/');
            items.push((key, MODE_TREE, name, id));
        }
        for (name, e) in &self.files {
            items.push((name.clone(), e.mode, name, e.id));
        }
        items.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        let mut data = Vec::with_capacity(items.len() * 40);
        for (_, mode, name, id) in &items {
            data.extend_from_slice(format!("{mode:o} ").as_bytes());
            data.extend_from_slice(name);
            data.push(0);
            data.extend_from_slice(id);
        }
        let id = object_id(Kind::Tree, &data);
        new_tree(id, &data)?;
        self.tree = Some(id);
        Ok(id)
    }

    /// Every file, with its path, in path order.
    pub fn each(&self, prefix: &mut Vec<u8>, f: &mut dyn FnMut(&[u8], &FileEntry)) {
        let base = prefix.len();
        for (name, e) in &self.files {
            prefix.truncate(base);
            prefix.extend_from_slice(name);
            f(prefix, e);
        }
        for (name, sub) in &self.dirs {
            prefix.truncate(base);
            prefix.extend_from_slice(name);
            prefix.push(b'/');
            sub.each(prefix, f);
        }
        prefix.truncate(base);
    }
}

/// `a/b/c` -> ([a, b], c).
fn split(path: &[u8]) -> (impl Iterator<Item = &[u8]>, &[u8]) {
    let (dir, name): (&[u8], &[u8]) = match path.iter().rposition(|b| *b == b'/') {
        Some(i) => (&path[..i], &path[i + 1..]),
        None => (&[], path),
    };
    (dir.split(|b| *b == b'/').filter(|c| !c.is_empty()), name)
}

const CACHE_MAGIC: &[u8; 8] = b"TASTAT1\n";

/// The cache file of a store.
pub fn cache_path(git_dir: &Path) -> std::path::PathBuf {
    git_dir.join("tinyagent-stat")
}

/// Saves `root` (the index of the checkpoint `tree`) to the store's cache.
pub fn save(git_dir: &Path, root: &Dir, tree: &Oid) -> std::io::Result<()> {
    let mut out = Vec::with_capacity(16 + usize::try_from(root.count()).unwrap_or(0) * 100);
    out.extend_from_slice(CACHE_MAGIC);
    out.extend_from_slice(tree);
    root.each(&mut Vec::new(), &mut |path, e| {
        out.extend_from_slice(&u32::try_from(path.len()).unwrap_or(0).to_le_bytes());
        out.extend_from_slice(path);
        let s = &e.stat;
        for v in [s.dev, s.ino, s.size] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        for v in [s.mtime, s.mtime_ns, s.ctime, s.ctime_ns] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend_from_slice(&e.mode.to_le_bytes());
        out.push(u8::from(e.racy));
        out.extend_from_slice(&e.id);
    });
    out.extend_from_slice(&crc32fast::hash(&out).to_le_bytes());
    let path = cache_path(git_dir);
    let tmp = git_dir.join(format!("{}-{}.stat", "tmp-tinyagent-", std::process::id()));
    // 0600 whatever the umask, also over a temp file a killed process left.
    let _ = std::fs::remove_file(&tmp);
    let mut f = {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(nix::libc::O_NOFOLLOW)
            .open(&tmp)?
    };
    {
        use std::os::unix::fs::PermissionsExt;
        f.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    }
    std::io::Write::write_all(&mut f, &out)?;
    drop(f);
    std::fs::rename(&tmp, &path)
}

/// The cache file's bytes, when only this user could have written them: a
/// regular file of this user, not writable by group or others (an older
/// tinyagent made it by the umask). Anything else is not read: the index
/// is built again by hashing, and saved 0600.
fn read_private(path: &Path) -> Option<Vec<u8>> {
    use std::io::Read;
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK)
        .open(path)
        .ok()?;
    let meta = f.metadata().ok()?;
    if !meta.is_file() || meta.uid() != nix::unistd::geteuid().as_raw() || meta.mode() & 0o022 != 0
    {
        return None;
    }
    let mut b = Vec::new();
    f.read_to_end(&mut b).ok()?;
    Some(b)
}

/// The cached index and the tree it is of, if the cache is there and whole.
/// Entries whose blob the store lacks (`known` says) are marked racy so
/// they are hashed, and stored, again.
pub fn load(git_dir: &Path, known: &dyn Fn(&Oid) -> bool) -> Option<(Dir, Oid)> {
    let b = read_private(&cache_path(git_dir))?;
    if b.len() < CACHE_MAGIC.len() + 24 || &b[..8] != CACHE_MAGIC {
        return None;
    }
    let (body, crc) = b.split_at(b.len() - 4);
    if crc32fast::hash(body).to_le_bytes() != crc {
        return None;
    }
    let tree: Oid = body[8..28].try_into().ok()?;
    let mut r = &body[28..];
    let mut take = |n: usize| -> Option<&[u8]> {
        if r.len() < n {
            return None;
        }
        let (a, rest) = r.split_at(n);
        r = rest;
        Some(a)
    };
    let mut root = Dir::default();
    while let Some(len) = take(4) {
        let len = u32::from_le_bytes(len.try_into().ok()?) as usize;
        let path = take(len)?.to_vec();
        let mut u = [0u64; 3];
        for v in &mut u {
            *v = u64::from_le_bytes(take(8)?.try_into().ok()?);
        }
        let mut i = [0i64; 4];
        for v in &mut i {
            *v = i64::from_le_bytes(take(8)?.try_into().ok()?);
        }
        let mode = u32::from_le_bytes(take(4)?.try_into().ok()?);
        let racy = take(1)?[0] != 0;
        let id: Oid = take(20)?.try_into().ok()?;
        if path.is_empty() || !matches!(mode, MODE_FILE | MODE_EXEC | MODE_LINK) {
            return None;
        }
        let entry = FileEntry {
            stat: StatKey {
                dev: u[0],
                ino: u[1],
                size: u[2],
                mtime: i[0],
                mtime_ns: i[1],
                ctime: i[2],
                ctime_ns: i[3],
            },
            mode,
            id,
            racy: racy || !known(&id),
            seen: 0,
        };
        root.insert(&path, entry);
    }
    Some((root, tree))
}
