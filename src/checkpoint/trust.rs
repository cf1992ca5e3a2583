//! What tinyagent believes of a run's own directory, `<wal>.d/`, before it
//! uses it.
//!
//! `<wal>.d/` lies beside the log, wherever the log is: in a shared
//! directory, in a log handed over by someone else, beside a fork's new
//! log that someone made first. Nothing there is configuration. Before a
//! command uses the directory (and before it writes anything), and before
//! every git process the checkpoint store starts:
//!
//! - every entry of `<wal>.d/` is a directory or a regular file (no
//!   symlink, FIFO, socket or device), owned by this process's user and
//!   writable by no one else (no group or other write bit). The one
//!   exception is the store's stat cache (`tinyagent-stat`): a cache that
//!   others could write (an older tinyagent made it by the umask) is not
//!   refused but never read (the next checkpoint hashes again and replaces
//!   it, 0600);
//! - the checkpoint store holds only what tinyagent and the git commands it
//!   runs write ([`check_store`] has the list): no hooks, `commondir`,
//!   `config.worktree`, `shallow`, `info/grafts`, `info/exclude`,
//!   `objects/info/alternates`, replace refs, or anything else git would
//!   read as a setting;
//! - the store's `config` holds only the lines `git init` writes for it
//!   ([`CONFIG_LINES`]: no filter, diff driver, hook path, include or
//!   alias can be named), and `info/attributes` is byte for byte what
//!   [`super::Git::init`] writes (every filter and conversion off).
//!
//! A directory that fails is refused ([`Untrusted`], exit 2) and left as
//! it is: the check only reads.

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

/// `info/attributes` as [`super::Git::init`] writes it: every conversion
/// off, so what is stored and restored is a file's bytes.
pub const ATTRIBUTES: &[u8] =
    b"* -text -ident -filter -merge -working-tree-encoding -export-subst\n";

/// `info/attributes` as the first tinyagent with checkpoints wrote it (its
/// stores are still used): the same, with `-diff`.
const ATTRIBUTES_V1: &[u8] =
    b"* -text -ident -filter -diff -merge -working-tree-encoding -export-subst\n";

/// The lines a store's `config` may hold: what `git init --bare
/// --shared=0600` writes. Each names a setting that runs nothing and
/// points nowhere, whatever section a reordering puts it in.
pub const CONFIG_LINES: &[&str] = &[
    "[core]",
    "\trepositoryformatversion = 0",
    "\tfilemode = true",
    "\tbare = true",
    "\tsharedrepository = 0600",
    "[receive]",
    "\tdenyNonFastforwards = true",
];

/// The stat cache's name in the store (index.rs).
pub const STAT_CACHE: &str = "tinyagent-stat";

/// Why a run's directory is not used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{}: {why}; refused: tinyagent uses a log's `.d` directory only when it is this user's own and holds only what tinyagent wrote (see docs/security.md)",
    path.display()
)]
pub struct Untrusted {
    pub path: PathBuf,
    pub why: String,
}

fn untrusted(path: &Path, why: impl Into<String>) -> Untrusted {
    Untrusted {
        path: path.to_path_buf(),
        why: why.into(),
    }
}

/// `<wal>.d` (absolute).
pub fn run_dir(wal: &Path) -> PathBuf {
    crate::rundir::RunDir::of(wal).path().to_path_buf()
}

/// Checks the run directory of the log `wal` (`<wal>.d`), with the
/// checkpoint store inside it. A directory that is not there passes (this
/// process will make it, 0700).
///
/// # Errors
/// The first entry that fails, and why.
pub fn check_run_dir(wal: &Path) -> Result<(), Untrusted> {
    let dir = run_dir(wal);
    let Some(meta) = lstat(&dir)? else {
        return Ok(());
    };
    let me = euid();
    check_meta(&dir, &meta, me)?;
    if !meta.is_dir() {
        return Err(untrusted(&dir, "is not a directory"));
    }
    walk(&dir, me, &mut |path, meta| {
        if path == dir.join("checkpoints.git") && meta.is_dir() {
            check_store_contents(path, me)?;
            return Ok(false);
        }
        Ok(true)
    })
}

/// Checks a checkpoint store (`<wal>.d/checkpoints.git`) and the directory
/// holding it. A store that is not there passes.
///
/// # Errors
/// The first entry that fails, and why.
pub fn check_store(git_dir: &Path) -> Result<(), Untrusted> {
    let me = euid();
    if let Some(parent) = git_dir.parent()
        && let Some(meta) = lstat(parent)?
    {
        check_meta(parent, &meta, me)?;
    }
    let Some(meta) = lstat(git_dir)? else {
        return Ok(());
    };
    check_meta(git_dir, &meta, me)?;
    if !meta.is_dir() {
        return Err(untrusted(git_dir, "is not a directory"));
    }
    check_store_contents(git_dir, me)
}

fn euid() -> u32 {
    nix::unistd::geteuid().as_raw()
}

fn lstat(path: &Path) -> Result<Option<std::fs::Metadata>, Untrusted> {
    match std::fs::symlink_metadata(path) {
        Ok(m) => Ok(Some(m)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(untrusted(path, format!("cannot be examined ({e})"))),
    }
}

/// A directory or regular file of this user that no one else can write.
fn check_meta(path: &Path, meta: &std::fs::Metadata, me: u32) -> Result<(), Untrusted> {
    let ft = meta.file_type();
    if ft.is_symlink() {
        return Err(untrusted(path, "is a symbolic link"));
    }
    if !ft.is_dir() && !ft.is_file() {
        let what = if ft.is_fifo() {
            "a FIFO"
        } else if ft.is_socket() {
            "a socket"
        } else {
            "a device"
        };
        return Err(untrusted(path, format!("is {what}")));
    }
    if meta.uid() != me {
        return Err(untrusted(
            path,
            format!("belongs to uid {}, not to this user (uid {me})", meta.uid()),
        ));
    }
    if meta.mode() & 0o022 != 0 && !is_stat_cache(path) {
        return Err(untrusted(
            path,
            format!(
                "is writable by other users (mode {:04o}; it must be 0700 for a directory, 0600 for a file)",
                meta.mode() & 0o7777
            ),
        ));
    }
    Ok(())
}

/// The stat cache is the one file a loose mode does not refuse: it is never
/// read then (see index.rs), and is replaced 0600.
fn is_stat_cache(path: &Path) -> bool {
    path.file_name().is_some_and(|n| n == STAT_CACHE)
        && path
            .parent()
            .and_then(Path::file_name)
            .is_some_and(|n| n == "checkpoints.git")
}

/// What `git init` leaves in a store when it is killed while it probes the
/// file system: `t` and six letters or digits at the store's top level, a
/// file or a link to `testing`. git never reads it, so it is passed over
/// (a fork killed while its store was made is finished by a rerun).
fn is_init_probe(path: &Path, meta: &std::fs::Metadata) -> bool {
    let named = path.file_name().and_then(|n| n.to_str()).is_some_and(|n| {
        n.len() == 7 && n.starts_with('t') && n[1..].bytes().all(|b| b.is_ascii_alphanumeric())
    });
    let in_store = path
        .parent()
        .and_then(Path::file_name)
        .is_some_and(|n| n == "checkpoints.git");
    let kind = meta.file_type().is_file()
        || (meta.file_type().is_symlink()
            && std::fs::read_link(path).is_ok_and(|t| t == Path::new("testing")));
    named && in_store && kind
}

/// Visits every entry beneath `dir` (depth first), checking each with
/// [`check_meta`]; `visit` says whether to go into a directory.
fn walk(
    dir: &Path,
    me: u32,
    visit: &mut dyn FnMut(&Path, &std::fs::Metadata) -> Result<bool, Untrusted>,
) -> Result<(), Untrusted> {
    let entries =
        std::fs::read_dir(dir).map_err(|e| untrusted(dir, format!("cannot be listed ({e})")))?;
    for entry in entries {
        let entry = entry.map_err(|e| untrusted(dir, format!("cannot be listed ({e})")))?;
        let path = entry.path();
        let Some(meta) = lstat(&path)? else {
            continue;
        };
        if is_init_probe(&path, &meta) {
            continue;
        }
        check_meta(&path, &meta, me)?;
        if visit(&path, &meta)? && meta.is_dir() {
            walk(&path, me, visit)?;
        }
    }
    Ok(())
}

/// What may be where in a store, by path relative to it.
fn allowed(rel: &[&str], is_dir: bool) -> bool {
    let hex = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_hexdigit());
    // Temporary files of tinyagent's writers (objects.rs, index.rs,
    // fsutil's atomic writes) and of git's, and git's locks.
    let temp = |s: &str| {
        s.starts_with("tmp-tinyagent-") || s.starts_with(".tinyagent-tmp-") || s.starts_with("tmp_")
    };
    if is_dir {
        return match rel {
            ["info" | "objects" | "refs"] | ["objects", "info" | "pack"] => true,
            ["objects", fan] => hex(fan, 2),
            // Refs are data; replace refs would swap objects.
            ["refs", "replace", ..] => false,
            ["refs", ..] => true,
            _ => false,
        };
    }
    match rel {
        [name] => {
            temp(name)
                || matches!(
                    *name,
                    "HEAD"
                        | "config"
                        | "packed-refs"
                        | "index"
                        | "restore-index"
                        | STAT_CACHE
                        | "HEAD.lock"
                        | "config.lock"
                        | "packed-refs.lock"
                        | "index.lock"
                        | "restore-index.lock"
                )
        }
        ["info", name] => *name == "attributes" || name.starts_with(".tinyagent-tmp-"),
        // Nothing in objects/info: no alternates, no commit graph.
        ["objects", "pack", name] => {
            temp(name)
                || name.strip_prefix("pack-").is_some_and(|rest| {
                    rest.split_once('.').is_some_and(|(id, ext)| {
                        (hex(id, 40) || hex(id, 64))
                            && matches!(ext, "pack" | "idx" | "rev" | "keep" | "mtimes")
                    })
                })
        }
        ["objects", fan, name] => hex(fan, 2) && (hex(name, 38) || temp(name)),
        ["refs", "replace", ..] => false,
        ["refs", ..] => true,
        _ => false,
    }
}

/// The store's entries against the list, `config` and `info/attributes`
/// against what tinyagent writes.
fn check_store_contents(git_dir: &Path, me: u32) -> Result<(), Untrusted> {
    walk(git_dir, me, &mut |path, meta| {
        let rel = path.strip_prefix(git_dir).unwrap_or(path);
        let parts: Vec<&str> = rel.iter().map(|p| p.to_str().unwrap_or("\u{0}")).collect();
        if allowed(&parts, meta.is_dir()) {
            Ok(true)
        } else {
            Err(untrusted(
                path,
                if meta.is_dir() {
                    "is a directory tinyagent's checkpoint store never holds"
                } else {
                    "is a file tinyagent's checkpoint store never holds"
                },
            ))
        }
    })?;
    let config = git_dir.join("config");
    if let Some(bytes) = read_small(&config)? {
        check_config(&bytes).map_err(|why| untrusted(&config, why))?;
    }
    let attributes = git_dir.join("info/attributes");
    if let Some(bytes) = read_small(&attributes)?
        && bytes != ATTRIBUTES
        && bytes != ATTRIBUTES_V1
    {
        return Err(untrusted(
            &attributes,
            "is not the attributes tinyagent writes (it could name a filter git would run)",
        ));
    }
    Ok(())
}

/// A file's bytes, up to 64 KiB (a longer one is not ours).
fn read_small(path: &Path) -> Result<Option<Vec<u8>>, Untrusted> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let f = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(untrusted(path, format!("cannot be read ({e})"))),
    };
    let mut bytes = Vec::new();
    f.take(64 << 10)
        .read_to_end(&mut bytes)
        .map_err(|e| untrusted(path, format!("cannot be read ({e})")))?;
    Ok(Some(bytes))
}

/// A store's `config` holds only [`CONFIG_LINES`], each ended by a newline.
///
/// # Errors
/// The first line that is not one of them.
pub fn check_config(bytes: &[u8]) -> Result<(), String> {
    let text = std::str::from_utf8(bytes)
        .map_err(|_| "is not the config tinyagent's store has (not UTF-8)".to_string())?;
    if !text.is_empty() && !text.ends_with('\n') {
        return Err("is not the config tinyagent's store has (no final newline)".into());
    }
    for line in text.split_terminator('\n') {
        if !CONFIG_LINES.contains(&line) {
            return Err(format!(
                "holds {:?}, a line git's own config for tinyagent's store never has (it could name a filter, hook or other command)",
                crate::text::cut_chars(line, 80, "…")
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_lines_git_init_writes_pass_as_config() {
        let ours = "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = true\n\tsharedrepository = 0600\n[receive]\n\tdenyNonFastforwards = true\n";
        assert_eq!(check_config(ours.as_bytes()), Ok(()));
        for bad in [
            "[filter \"x\"]\n\tclean = touch /tmp/m\n",
            "[core]\n\thooksPath = /tmp/h\n",
            "[core]\n\tbare = true",
            "[include]\n\tpath = /tmp/c\n",
            "[core]\r\n\tbare = true\r\n",
            "[core]\n\tfsmonitor = /tmp/m\n",
        ] {
            assert!(check_config(bad.as_bytes()).is_err(), "{bad:?} passed");
        }
    }

    #[test]
    fn the_store_list_holds_what_tinyagent_and_git_write_and_nothing_git_obeys() {
        let ok: &[(&[&str], bool)] = &[
            (&["HEAD"], false),
            (&["config"], false),
            (&["tinyagent-stat"], false),
            (&["tmp-tinyagent-7-spare-0"], false),
            (&["info", "attributes"], false),
            (&["objects", "pack"], true),
            (&["objects", "info"], true),
            (
                &[
                    "objects",
                    "pack",
                    "pack-0892e17bab6e9eb578ef33facf4d000d7741d969.idx",
                ],
                false,
            ),
            (&["objects", "ab"], true),
            (
                &["objects", "ab", "cdef0123456789abcdef0123456789abcdef01"],
                false,
            ),
            (&["refs", "heads"], true),
        ];
        for (rel, dir) in ok {
            assert!(allowed(rel, *dir), "{rel:?} refused");
        }
        let refused: &[(&[&str], bool)] = &[
            (&["hooks"], true),
            (&["commondir"], false),
            (&["config.worktree"], false),
            (&["shallow"], false),
            (&["description"], false),
            (&["info", "grafts"], false),
            (&["info", "exclude"], false),
            (&["objects", "info", "alternates"], false),
            (&["objects", "info", "http-alternates"], false),
            (&["objects", "pack", "pack-x.promisor"], false),
            (&["refs", "replace"], true),
            (&["git"], true),
            (&["worktrees"], true),
            (&["info", "attributes"], true),
        ];
        for (rel, dir) in refused {
            assert!(!allowed(rel, *dir), "{rel:?} passed");
        }
    }

    #[test]
    fn a_killed_git_inits_probe_is_passed_over_and_nothing_else_is() {
        let dir = tempfile::tempdir().unwrap();
        let store = dir.path().join("r.wal.d/checkpoints.git");
        std::fs::create_dir_all(&store).unwrap();
        std::fs::write(store.join("tzX1lIx"), "").unwrap();
        std::os::unix::fs::symlink("testing", store.join("tAb3dE9")).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", store.join("tQQQQQQ")).unwrap();
        let meta = |n: &str| std::fs::symlink_metadata(store.join(n)).unwrap();
        assert!(is_init_probe(&store.join("tzX1lIx"), &meta("tzX1lIx")));
        assert!(is_init_probe(&store.join("tAb3dE9"), &meta("tAb3dE9")));
        // A link anywhere else is not git's probe.
        assert!(!is_init_probe(&store.join("tQQQQQQ"), &meta("tQQQQQQ")));
        // Nor is a file of that name elsewhere in the run's directory.
        let beside = dir.path().join("r.wal.d/tzX1lIx");
        std::fs::write(&beside, "").unwrap();
        assert!(!is_init_probe(
            &beside,
            &std::fs::symlink_metadata(&beside).unwrap()
        ));
    }
}
