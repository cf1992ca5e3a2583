//! The opt-in watch of a workspace (`[checkpoints] watch = true`): one
//! inotify watch per stored directory, so that a checkpoint re-examines
//! only the paths the kernel said something happened to, and trusts the
//! index for the rest without an `lstat` each.
//!
//! Watches are added while a walk lists the directories (the walk that
//! sets them up is a full one; later walks add them for directories that
//! appear), before each directory's entries are read, so a change made
//! after a directory was listed is an event. What the watch cannot see is
//! why it is opt-in (docs/design.md, "Workspace checkpoints"). When it
//! cannot be trusted for a checkpoint, [`Watch::drain`] says why and the
//! checkpoint walks the whole tree.

use nix::errno::Errno;
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, WatchDescriptor};
use std::collections::{BTreeSet, HashMap};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Mutex;

/// File systems whose changes made through this kernel all come as inotify
/// events (magic numbers of `statfs`'s `f_type`): ext2/3/4, xfs, btrfs,
/// tmpfs, overlayfs, f2fs, zfs. Network and FUSE file systems (NFS, CIFS,
/// 9p, virtiofs, sshfs...) can change under the kernel's feet, so a
/// workspace on one of them is walked.
const KNOWN_GOOD: &[(u32, &str)] = &[
    (0xEF53, "ext4"),
    (0x5846_5342, "xfs"),
    (0x9123_683E, "btrfs"),
    (0x0102_1994, "tmpfs"),
    (0x794C_7630, "overlayfs"),
    (0xF2F5_2010, "f2fs"),
    (0x2FC1_2FC1, "zfs"),
];

fn mask() -> AddWatchFlags {
    AddWatchFlags::IN_CREATE
        | AddWatchFlags::IN_DELETE
        | AddWatchFlags::IN_MODIFY
        | AddWatchFlags::IN_CLOSE_WRITE
        | AddWatchFlags::IN_MOVED_FROM
        | AddWatchFlags::IN_MOVED_TO
        | AddWatchFlags::IN_ATTRIB
        | AddWatchFlags::IN_DELETE_SELF
        | AddWatchFlags::IN_MOVE_SELF
        | AddWatchFlags::IN_ONLYDIR
        | AddWatchFlags::IN_DONT_FOLLOW
}

/// One inotify instance watching the directories of one workspace.
pub struct Watch {
    fd: Inotify,
    /// Each watch's directory, relative to the workspace (`""`: the root).
    dirs: Mutex<HashMap<WatchDescriptor, Vec<u8>>>,
    /// Why the watch can no longer be trusted, once it cannot.
    broken: Mutex<Option<String>>,
}

/// The paths a checkpoint must look at again: each one is re-examined with
/// everything under it.
#[derive(Debug, Default, Clone)]
pub struct Scope {
    paths: BTreeSet<Vec<u8>>,
    /// Every directory above a path of `paths`.
    above: BTreeSet<Vec<u8>>,
}

impl Scope {
    pub fn new(mut paths: Vec<Vec<u8>>) -> Scope {
        paths.sort_unstable();
        paths.dedup();
        // A path under another one is covered by it.
        let mut kept: BTreeSet<Vec<u8>> = BTreeSet::new();
        for p in paths {
            if !Scope::under_any(&kept, &p) {
                kept.insert(p);
            }
        }
        let mut above = BTreeSet::new();
        for p in &kept {
            for (i, b) in p.iter().enumerate() {
                if *b == b'/' {
                    above.insert(p[..i].to_vec());
                }
            }
        }
        Scope { paths: kept, above }
    }

    fn under_any(set: &BTreeSet<Vec<u8>>, p: &[u8]) -> bool {
        set.contains(p)
            || p.iter()
                .enumerate()
                .any(|(i, b)| *b == b'/' && set.contains(&p[..i]))
    }

    pub fn paths(&self) -> impl Iterator<Item = &[u8]> {
        self.paths.iter().map(Vec::as_slice)
    }

    /// `rel` is a path of the scope or under one.
    pub fn within(&self, rel: &[u8]) -> bool {
        Scope::under_any(&self.paths, rel)
    }

    /// The walk goes into `rel`: within the scope, or a directory on the
    /// way to it (the root is always walked).
    pub fn admits(&self, rel: &[u8]) -> bool {
        rel.is_empty() || self.above.contains(rel) || self.within(rel)
    }
}

impl Watch {
    pub fn new() -> Result<Watch, String> {
        let fd = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC)
            .map_err(|e| format!("inotify_init: {e}"))?;
        Ok(Watch {
            fd,
            dirs: Mutex::new(HashMap::new()),
            broken: Mutex::new(None),
        })
    }

    fn break_with(&self, why: String) {
        let mut b = self
            .broken
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if b.is_none() {
            *b = Some(why);
        }
    }

    /// Why the watch cannot be trusted any more (a watch could not be
    /// added, or a directory is on a file system it does not see well).
    pub fn broken(&self) -> Option<String> {
        self.broken
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Watches the directory `full` (`rel` in the workspace). Called by
    /// the walk before the directory's entries are read; safe from several
    /// threads. Adding one already watched only renames it (a directory
    /// moved within the workspace keeps its watch).
    pub fn add(&self, full: &Path, rel: &[u8]) {
        if self.broken().is_some() {
            return;
        }
        match nix::sys::statfs::statfs(full) {
            Ok(s) => {
                // `f_type` is a signed or unsigned integer of the platform's
                // width; the magic numbers are 32-bit.
                #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                let t = s.filesystem_type().0 as u32;
                if !KNOWN_GOOD.iter().any(|(m, _)| *m == t) {
                    self.break_with(format!(
                        "{} is on a file system (type {t:#x}) whose changes inotify may not \
                         report (network, FUSE, 9p, virtiofs...); known to be reliable: {}",
                        full.display(),
                        KNOWN_GOOD
                            .iter()
                            .map(|(_, n)| *n)
                            .collect::<Vec<_>>()
                            .join(", ")
                    ));
                    return;
                }
            }
            Err(_) => return, // gone: its parent's watch reports that
        }
        match self.fd.add_watch(full, mask()) {
            Ok(wd) => {
                self.dirs
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .insert(wd, rel.to_vec());
            }
            // Gone or replaced since it was listed: its parent's watch
            // reports that.
            Err(Errno::ENOENT | Errno::ENOTDIR) => {}
            Err(Errno::ENOSPC) => self.break_with(
                "the inotify watch limit is reached (raise fs.inotify.max_user_watches)".into(),
            ),
            Err(e) => self.break_with(format!("inotify_add_watch {}: {e}", full.display())),
        }
    }

    /// Reads every event queued since the last drain: the paths to look at
    /// again (`keep` filters out the run's own files), or why the whole
    /// tree must be walked (the queue overflowed, an ignore file changed,
    /// the workspace itself moved, the watch broke).
    pub fn drain(&self, keep: &dyn Fn(&[u8]) -> bool) -> Result<Scope, Fallback> {
        if let Some(why) = self.broken() {
            return Err(Fallback::Broken(why));
        }
        let mut dirs = self
            .dirs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut paths = Vec::new();
        let mut full: Option<Fallback> = None;
        loop {
            let events = match self.fd.read_events() {
                Ok(ev) => ev,
                Err(Errno::EAGAIN) => break,
                Err(Errno::EINTR) => continue,
                Err(e) => return Err(Fallback::Broken(format!("reading inotify events: {e}"))),
            };
            for ev in events {
                if ev.mask.contains(AddWatchFlags::IN_Q_OVERFLOW) {
                    // Events were lost: only a new watch and a walk help.
                    return Err(Fallback::Overflow);
                }
                if ev.mask.contains(AddWatchFlags::IN_IGNORED) {
                    // The directory is gone; its parent reported it.
                    if dirs.remove(&ev.wd).is_some_and(|d| d.is_empty()) {
                        full.get_or_insert(Fallback::Root);
                    }
                    continue;
                }
                let Some(dir) = dirs.get(&ev.wd) else {
                    continue;
                };
                let Some(name) = ev.name.as_ref() else {
                    // About the directory itself.
                    if dir.is_empty()
                        && ev
                            .mask
                            .intersects(AddWatchFlags::IN_DELETE_SELF | AddWatchFlags::IN_MOVE_SELF)
                    {
                        full.get_or_insert(Fallback::Root);
                    } else if !dir.is_empty() {
                        paths.push(dir.clone());
                    }
                    continue;
                };
                let name = name.as_bytes();
                let mut path = dir.clone();
                if !path.is_empty() {
                    path.push(b'/');
                }
                path.extend_from_slice(name);
                if !keep(&path) {
                    continue;
                }
                if name == b".gitignore" || name == b".ignore" {
                    full.get_or_insert(Fallback::IgnoreRules);
                }
                paths.push(path);
            }
        }
        match full {
            Some(f) => Err(f),
            None => Ok(Scope::new(paths)),
        }
    }
}

/// Why a checkpoint in watch mode walked the whole tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fallback {
    /// The kernel's event queue overflowed: events were lost.
    Overflow,
    /// A `.gitignore` or `.ignore` file changed: what is stored may have
    /// changed anywhere.
    IgnoreRules,
    /// The workspace directory itself was moved or deleted.
    Root,
    /// The watch cannot be used (watch limit, file system, read error).
    Broken(String),
}

impl std::fmt::Display for Fallback {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Fallback::Overflow => f.write_str("the inotify event queue overflowed"),
            Fallback::IgnoreRules => f.write_str("an ignore file changed"),
            Fallback::Root => f.write_str("the workspace directory itself moved or was deleted"),
            Fallback::Broken(why) => f.write_str(why),
        }
    }
}
