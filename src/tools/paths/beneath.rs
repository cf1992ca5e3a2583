//! The workspace held open as a directory, and every open of a tool's path
//! made beneath it: `openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)`, or,
//! where that is missing, a walk one component at a time with
//! `openat(O_NOFOLLOW)` (see the module docs of [`super`]).

use super::PathError;
use nix::errno::Errno;
use nix::fcntl::{OFlag, OpenHow, ResolveFlag};
use nix::sys::stat::Mode;
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

/// Whether an error from [`Beneath`] means the path led out of the workspace
/// (`EXDEV` from `RESOLVE_BENEATH` or the walk, `ELOOP` for a magic link).
pub fn escaped(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(c) if c == Errno::EXDEV as i32 || c == Errno::ELOOP as i32)
}

/// Set once `openat2` answered `ENOSYS`: walk by hand from then on.
static NO_OPENAT2: AtomicBool = AtomicBool::new(false);

/// Most symbolic links one walk expands (the kernel's limit too).
const MAX_LINKS: usize = 40;

/// The workspace held open as a directory; every open goes beneath it.
#[derive(Debug)]
pub struct Beneath {
    dir: OwnedFd,
    canonical: PathBuf,
}

impl Beneath {
    /// Opens the workspace directory.
    pub fn open(workspace: &Path) -> Result<Beneath, PathError> {
        let bad = |e: io::Error| PathError::Workspace(workspace.display().to_string(), e);
        let dir = nix::fcntl::open(
            workspace,
            OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| bad(e.into()))?;
        // What the descriptor is, not what the path names now.
        let canonical = fd_path(&dir)
            .or_else(|| workspace.canonicalize().ok())
            .ok_or_else(|| bad(io::Error::from(io::ErrorKind::NotFound)))?;
        Ok(Beneath { dir, canonical })
    }

    /// The workspace's real path.
    pub fn canonical(&self) -> &Path {
        &self.canonical
    }

    /// `real` (a path [`resolve`] gave, or one under [`Self::canonical`])
    /// relative to the workspace, `.` for the workspace itself.
    pub fn relative(&self, real: &Path) -> PathBuf {
        match real.strip_prefix(&self.canonical) {
            Ok(rel) if !rel.as_os_str().is_empty() => rel.to_path_buf(),
            _ => PathBuf::from("."),
        }
    }

    /// Opens `rel` beneath the workspace with `flags` (`O_CLOEXEC` and
    /// `O_NOCTTY` added, and with `O_PATH` only `O_DIRECTORY` and
    /// `O_NOFOLLOW` kept; a file created gets mode 0666 less the umask).
    pub fn open_file(&self, rel: &Path, flags: OFlag) -> io::Result<File> {
        self.open_fd(rel, flags).map(File::from)
    }

    fn open_fd(&self, rel: &Path, flags: OFlag) -> io::Result<OwnedFd> {
        let flags = if flags.contains(OFlag::O_PATH) {
            // openat2 takes no other flags with O_PATH.
            flags & (OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW) | OFlag::O_CLOEXEC
        } else {
            flags | OFlag::O_CLOEXEC | OFlag::O_NOCTTY
        };
        let mode = if flags.contains(OFlag::O_CREAT) {
            Mode::from_bits_truncate(0o666)
        } else {
            Mode::empty()
        };
        if !NO_OPENAT2.load(Ordering::Relaxed) {
            let how = beneath(flags, mode, ResolveFlag::empty());
            // EAGAIN: a rename raced a `..`; the kernel asks for a retry.
            for _ in 0..8 {
                match nix::fcntl::openat2(&self.dir, rel, how) {
                    Err(Errno::EAGAIN) => {}
                    Err(Errno::ENOSYS) => {
                        NO_OPENAT2.store(true, Ordering::Relaxed);
                        break;
                    }
                    other => return other.map_err(io::Error::from),
                }
            }
            if !NO_OPENAT2.load(Ordering::Relaxed) {
                return Err(Errno::EAGAIN.into());
            }
        }
        open_walking(&self.dir, rel, flags, mode)
    }

    /// The workspace held open for the calls of this process: opened again
    /// only when `workspace` no longer names the directory held (one `stat`
    /// per call, where [`Beneath::open`] costs an open and a `/proc` lookup).
    /// The identity compared is the device, the inode and the birth time: a
    /// directory deleted and made again may get the held one's inode number
    /// back, but not its birth. Where no birth time is kept, the held
    /// directory is then empty (a directory is deleted only when empty), so
    /// an open beneath it fails and the caller's full resolution, which
    /// opens the workspace afresh, takes over.
    pub fn shared(workspace: &Path) -> Result<Arc<Beneath>, PathError> {
        let bad = |e: io::Error| PathError::Workspace(workspace.display().to_string(), e);
        let now = std::fs::metadata(workspace).map_err(bad)?;
        let named = Identity::of(&now);
        let mut slot = SHARED.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(held) = slot.as_ref()
            && held.path == workspace
            && held.identity == named
        {
            return Ok(Arc::clone(&held.beneath));
        }
        let beneath = Arc::new(Beneath::open(workspace)?);
        // The identity of what was opened, not of what the path named a
        // moment before: if they differ, the next call opens it again.
        let st = nix::sys::stat::fstat(&beneath.dir).map_err(|e| bad(e.into()))?;
        let opened = (st.st_dev, st.st_ino) == (now.dev(), now.ino());
        *slot = Some(Held {
            path: workspace.to_path_buf(),
            identity: Identity {
                dev: st.st_dev,
                ino: st.st_ino,
                born: if opened { named.born } else { None },
            },
            beneath: Arc::clone(&beneath),
        });
        Ok(beneath)
    }

    /// Opens `rel` beneath the workspace following no symbolic link at all
    /// (`RESOLVE_NO_SYMLINKS`, `ELOOP` if the path holds one), so that the
    /// file opened is the one at [`Self::canonical`] joined with `rel` when
    /// `rel` has no `..` (see [`plain_relative`]). `ENOSYS` where `openat2`
    /// is missing: the caller then takes the full way.
    pub fn open_plain(&self, rel: &Path, flags: OFlag) -> io::Result<File> {
        if NO_OPENAT2.load(Ordering::Relaxed) {
            return Err(Errno::ENOSYS.into());
        }
        let how = beneath(
            flags | OFlag::O_CLOEXEC | OFlag::O_NOCTTY,
            Mode::empty(),
            ResolveFlag::RESOLVE_NO_SYMLINKS,
        );
        nix::fcntl::openat2(&self.dir, rel, how)
            .map(File::from)
            .map_err(io::Error::from)
    }

    /// Creates the directory `rel` and its missing parents, each one made in
    /// a directory opened beneath the workspace.
    pub fn create_dirs(&self, rel: &Path) -> io::Result<()> {
        let dir = OFlag::O_PATH | OFlag::O_DIRECTORY;
        let mut done = PathBuf::from(".");
        for comp in rel.components() {
            let Component::Normal(name) = comp else {
                continue;
            };
            let next = done.join(name);
            match self.open_fd(&next, dir) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    let parent = self.open_fd(&done, dir)?;
                    match nix::sys::stat::mkdirat(&parent, name, Mode::from_bits_truncate(0o777)) {
                        Ok(()) | Err(Errno::EEXIST) => {}
                        Err(e) => return Err(e.into()),
                    }
                    self.open_fd(&next, dir)?;
                }
                Err(e) => return Err(e),
            }
            done = next;
        }
        Ok(())
    }
}

/// The workspace [`Beneath::shared`] holds, with the identity of the
/// directory it holds.
struct Held {
    path: PathBuf,
    identity: Identity,
    beneath: Arc<Beneath>,
}

/// What tells one directory from another named the same.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Identity {
    dev: u64,
    ino: u64,
    /// The birth time, where the file system keeps one.
    born: Option<std::time::SystemTime>,
}

impl Identity {
    fn of(meta: &std::fs::Metadata) -> Identity {
        Identity {
            dev: meta.dev(),
            ino: meta.ino(),
            born: meta.created().ok(),
        }
    }
}

static SHARED: Mutex<Option<Held>> = Mutex::new(None);

/// How `openat2` opens beneath the workspace: never out of it
/// (`RESOLVE_BENEATH`), never through a magic link, and with `extra`.
fn beneath(flags: OFlag, mode: Mode, extra: ResolveFlag) -> OpenHow {
    OpenHow::new()
        .flags(flags)
        .mode(mode)
        .resolve(ResolveFlag::RESOLVE_BENEATH | ResolveFlag::RESOLVE_NO_MAGICLINKS | extra)
}

/// The path the kernel has for an open file (`/proc/self/fd`), if known.
pub fn fd_path(fd: &impl AsRawFd) -> Option<PathBuf> {
    let p = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).ok()?;
    p.is_absolute().then_some(p)
}

/// `openat2(RESOLVE_BENEATH)` by hand: one component at a time, never letting
/// the kernel follow a link (`O_NOFOLLOW`), relative links expanded in place,
/// absolute ones and a `..` above `root` refused with `EXDEV`. The final
/// component is followed unless `flags` holds `O_NOFOLLOW`.
fn open_walking(root: &OwnedFd, rel: &Path, flags: OFlag, mode: Mode) -> io::Result<OwnedFd> {
    let mut pending: Vec<OsString> = Vec::new();
    push_components(&mut pending, rel)?;
    if pending.is_empty() {
        pending.push(".".into());
    }
    let mut dirs: Vec<OwnedFd> = Vec::new();
    let mut links = 0;
    while let Some(name) = pending.pop() {
        let last = pending.is_empty();
        if name == ".." {
            if dirs.pop().is_none() {
                return Err(Errno::EXDEV.into());
            }
            if last {
                pending.push(".".into());
            }
            continue;
        }
        if name == "." && !last {
            continue;
        }
        let cur = dirs.last().map_or(root.as_fd(), |d| d.as_fd());
        let how = if last {
            flags | OFlag::O_NOFOLLOW
        } else {
            OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC
        };
        match nix::fcntl::openat(cur, name.as_os_str(), how, mode) {
            Ok(fd) if last => return Ok(fd),
            Ok(fd) => dirs.push(fd),
            Err(e @ (Errno::ELOOP | Errno::ENOTDIR)) => {
                if last && flags.contains(OFlag::O_NOFOLLOW) {
                    return Err(e.into());
                }
                // A symbolic link: splice its target in, or give the error.
                let Ok(target) = nix::fcntl::readlinkat(cur, name.as_os_str()) else {
                    return Err(e.into());
                };
                links += 1;
                if links > MAX_LINKS {
                    return Err(Errno::ELOOP.into());
                }
                let target = PathBuf::from(target);
                if target.is_absolute() {
                    return Err(Errno::EXDEV.into());
                }
                if target.as_os_str().is_empty() {
                    return Err(Errno::ENOENT.into());
                }
                let before = pending.len();
                push_components(&mut pending, &target)?;
                if pending.len() == before {
                    pending.push(".".into());
                }
            }
            Err(e) => return Err(e.into()),
        }
    }
    // The walk returns at its last component; an empty walk finds nothing.
    Err(Errno::ENOENT.into())
}

/// Pushes `path`'s components onto `stack` so that the first pops first.
fn push_components(stack: &mut Vec<OsString>, path: &Path) -> io::Result<()> {
    let mut parts: Vec<&OsStr> = Vec::new();
    for comp in path.components() {
        match comp {
            Component::Normal(c) => parts.push(c),
            Component::ParentDir => parts.push(OsStr::new("..")),
            Component::CurDir => parts.push(OsStr::new(".")),
            Component::RootDir | Component::Prefix(_) => return Err(Errno::EXDEV.into()),
        }
    }
    stack.extend(parts.into_iter().rev().map(OsStr::to_os_string));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::unix::fs::symlink;

    /// A workspace `ws` inside a temp dir holding `secret` (outside it).
    fn setup() -> (tempfile::TempDir, PathBuf, Beneath) {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        std::fs::create_dir_all(ws.join("sub/deeper")).unwrap();
        std::fs::write(dir.path().join("secret"), "secret").unwrap();
        std::fs::write(ws.join("sub/deeper/f.txt"), "inside").unwrap();
        symlink("sub/deeper/f.txt", ws.join("ok-link")).unwrap();
        symlink("sub", ws.join("dir-link")).unwrap();
        symlink("../deeper/f.txt", ws.join("sub/deeper/rel-up")).unwrap();
        symlink("../secret", ws.join("up-link")).unwrap();
        symlink("sub/../../secret", ws.join("sneaky")).unwrap();
        symlink(dir.path().join("secret"), ws.join("abs-link")).unwrap();
        symlink("/proc/self/cwd", ws.join("magic")).unwrap();
        symlink("loop2", ws.join("loop1")).unwrap();
        symlink("loop1", ws.join("loop2")).unwrap();
        symlink("made.txt", ws.join("to-create")).unwrap();
        let b = Beneath::open(&ws).unwrap();
        (dir, ws, b)
    }

    fn content(fd: OwnedFd) -> String {
        let mut s = String::new();
        File::from(fd).read_to_string(&mut s).unwrap();
        s
    }

    /// Opens with openat2 and with the walk; both must agree.
    fn both(b: &Beneath, rel: &str, flags: OFlag) -> io::Result<String> {
        let rel = Path::new(rel);
        let mode = Mode::from_bits_truncate(0o666);
        let kernel = b.open_fd(rel, flags);
        let walked = open_walking(&b.dir, rel, flags | OFlag::O_CLOEXEC, mode);
        match (kernel, walked) {
            (Ok(k), Ok(w)) => {
                let (k, w) = (content(k), content(w));
                assert_eq!(k, w, "{}", rel.display());
                Ok(k)
            }
            (Err(k), Err(w)) => {
                assert_eq!(escaped(&k), escaped(&w), "{}: {k} / {w}", rel.display());
                Err(w)
            }
            (k, w) => panic!("{}: openat2 {k:?}, walk {w:?}", rel.display()),
        }
    }

    #[test]
    fn links_inside_are_followed_by_both_ways() {
        let (_dir, _ws, b) = setup();
        for rel in [
            "sub/deeper/f.txt",
            "ok-link",
            "dir-link/deeper/f.txt",
            "sub/deeper/rel-up",
            "dir-link/deeper/../deeper/rel-up",
        ] {
            assert_eq!(both(&b, rel, OFlag::O_RDONLY).unwrap(), "inside", "{rel}");
        }
    }

    #[test]
    fn escapes_are_refused_by_both_ways() {
        let (_dir, _ws, b) = setup();
        for rel in [
            "up-link",
            "sneaky",
            "abs-link",
            "magic/ws/ok-link",
            "../secret",
            "sub/../../secret",
        ] {
            let err = both(&b, rel, OFlag::O_RDONLY).unwrap_err();
            assert!(escaped(&err), "{rel}: {err}");
        }
        let err = both(&b, "loop1", OFlag::O_RDONLY).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(Errno::ELOOP as i32));
        let err = both(&b, "nope/x", OFlag::O_RDONLY).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
        let err = both(&b, "ok-link", OFlag::O_RDONLY | OFlag::O_NOFOLLOW).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(Errno::ELOOP as i32));
    }

    #[test]
    fn creating_through_a_link_inside_lands_inside() {
        let (_dir, ws, b) = setup();
        let fd = open_walking(
            &b.dir,
            Path::new("to-create"),
            OFlag::O_WRONLY | OFlag::O_CREAT,
            Mode::from_bits_truncate(0o644),
        )
        .unwrap();
        drop(fd);
        assert!(ws.join("made.txt").is_file());
        let err = open_walking(
            &b.dir,
            Path::new("up-link"),
            OFlag::O_WRONLY | OFlag::O_CREAT,
            Mode::from_bits_truncate(0o644),
        )
        .unwrap_err();
        assert!(escaped(&err));
    }

    #[test]
    fn create_dirs_stays_beneath() {
        let (dir, ws, b) = setup();
        b.create_dirs(Path::new("a/b/c")).unwrap();
        assert!(ws.join("a/b/c").is_dir());
        b.create_dirs(Path::new("dir-link/new")).unwrap();
        assert!(ws.join("sub/new").is_dir());
        symlink(dir.path(), ws.join("out")).unwrap();
        let err = b.create_dirs(Path::new("out/evil")).unwrap_err();
        assert!(escaped(&err), "{err}");
        assert!(!dir.path().join("evil").exists());
        assert_eq!(b.relative(&ws.canonicalize().unwrap()), Path::new("."));
    }

    #[test]
    fn the_walk_holds_against_a_link_swapped_in() {
        let (dir, ws, b) = setup();
        let done = AtomicBool::new(false);
        let mut escapes = 0;
        std::thread::scope(|s| {
            s.spawn(|| {
                let (f, l, x) = (ws.join(".f"), ws.join(".l"), ws.join("x"));
                for _ in 0..2000 {
                    let _ = std::fs::remove_file(&f);
                    std::fs::hard_link(ws.join("sub/deeper/f.txt"), &f).unwrap();
                    std::fs::rename(&f, &x).unwrap();
                    let _ = std::fs::remove_file(&l);
                    symlink(dir.path().join("secret"), &l).unwrap();
                    std::fs::rename(&l, &x).unwrap();
                }
                done.store(true, Ordering::SeqCst);
            });
            while !done.load(Ordering::SeqCst) {
                let flags = OFlag::O_RDONLY | OFlag::O_CLOEXEC;
                if let Ok(fd) = open_walking(&b.dir, Path::new("x"), flags, Mode::empty())
                    && content(fd) == "secret"
                {
                    escapes += 1;
                }
            }
        });
        assert_eq!(escapes, 0);
    }
}
