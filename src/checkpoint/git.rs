//! The `git` binary, run against the shadow repository only.
//!
//! Every invocation names the repository (`--git-dir`) and the workspace
//! (`--work-tree`) explicitly and is cut off from every configuration the
//! workspace or the environment could bring in: no system or global config,
//! `HOME` and `XDG_CONFIG_HOME` pointed at the store, no inherited `GIT_*`
//! variable, no hooks, no fsmonitor, no pager, no external diff or textconv.
//! The workspace's own `.git` is never opened: git is told where its
//! repository is, so it does not look for one. In-tree `.gitattributes` are
//! overridden by the store's `info/attributes` (`* -text -ident -filter
//! -working-tree-encoding`), so what is stored is the file's bytes.
//!
//! git always reads the repository's own `config` and `info/attributes`,
//! and the store lies under `<wal>.d/`, which someone else may have made or
//! handed over: before every git process, the store is checked
//! (trust.rs) to hold only what tinyagent and git write for it, owned by
//! this user and writable by no one else; a store that fails is refused
//! ([`GitError::Untrusted`]) and no git runs.

use std::ffi::OsStr;
use std::io::Write;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The oldest git whose `core.fsync` makes objects durable (2.36).
pub const MIN_GIT: (u32, u32) = (2, 36);

/// Options given on every command line (`-c name=value`), over the store's
/// own config file.
const SAFE_CONFIG: &[&str] = &[
    "core.hooksPath=/dev/null",
    // git's default for these is under `$XDG_CONFIG_HOME`, which points
    // at the store.
    "core.attributesFile=/dev/null",
    "core.excludesFile=/dev/null",
    "core.useReplaceRefs=false",
    "protocol.allow=never",
    "core.fsmonitor=false",
    "core.untrackedCache=false",
    // The index is a cache (a damaged one is dropped and rebuilt, its
    // trailing hash tells): its writes need no fsync.
    "core.fsync=loose-object,pack,pack-metadata",
    "core.autocrlf=false",
    "core.safecrlf=false",
    "core.symlinks=true",
    "core.filemode=true",
    "core.quotePath=false",
    "core.sharedRepository=0600",
    "core.splitIndex=false",
    "core.sparseCheckout=false",
    "index.threads=1",
    "gc.auto=0",
    "safe.directory=*",
    "diff.external=",
    "diff.noprefix=false",
    "color.ui=false",
    "advice.detachedHead=false",
];

/// A failed git invocation.
#[derive(Debug, thiserror::Error)]
pub enum GitError {
    #[error("could not run git ({0}): checkpoints need git 2.36 or newer")]
    Spawn(std::io::Error),
    #[error("git {args}: {why}")]
    Failed { args: String, why: String },
    #[error(
        "git {0}.{1} is too old for durable checkpoints (core.fsync needs {MIN_GIT:?} or newer)"
    )]
    TooOld(u32, u32),
    #[error("{0}")]
    Io(String),
    #[error("{0}")]
    Untrusted(#[from] super::trust::Untrusted),
}

/// The shadow repository of one log and the workspace it looks at.
#[derive(Debug, Clone)]
pub struct Git {
    pub git_dir: PathBuf,
    pub work_tree: PathBuf,
    /// Index file (`None`: the repository's own).
    pub index: Option<PathBuf>,
}

impl Git {
    /// `git` with a clean environment: no inherited `GIT_*` variable, no
    /// system or global config, `HOME` pointed at the store.
    fn base_command(&self) -> Command {
        let mut cmd = Command::new(git_program());
        // A git left running by a killed agent could hold the index lock
        // or write behind the back of the next process.
        crate::exec::group::die_with_agent(&mut cmd);
        crate::exec::host::detach(&mut cmd);
        for (k, _) in std::env::vars_os() {
            if k.as_encoded_bytes().starts_with(b"GIT_") {
                cmd.env_remove(k);
            }
        }
        cmd.env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_ATTR_NOSYSTEM", "1")
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("GIT_OPTIONAL_LOCKS", "0")
            .env("GIT_NO_REPLACE_OBJECTS", "1")
            .env("GIT_NO_LAZY_FETCH", "1")
            .env("GIT_PROTOCOL_FROM_USER", "0")
            .env("HOME", &self.git_dir)
            .env("XDG_CONFIG_HOME", &self.git_dir)
            .env("LC_ALL", "C")
            .env("GIT_PAGER", "cat")
            .env("PAGER", "cat");
        cmd
    }

    /// A command for `args` with every outside influence removed.
    pub fn command<I, S>(&self, args: I) -> Command
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let mut cmd = self.base_command();
        if let Some(index) = &self.index {
            cmd.env("GIT_INDEX_FILE", index);
        }
        for c in SAFE_CONFIG {
            cmd.arg("-c").arg(c);
        }
        // `batch` (git 2.37+): the objects one command writes are flushed
        // with one fsync before they are renamed into place, instead of one
        // each (the first checkpoint of a big workspace writes thousands).
        cmd.arg("-c").arg(if batch_fsync() {
            "core.fsyncMethod=batch"
        } else {
            "core.fsyncMethod=fsync"
        });
        cmd.arg("--git-dir")
            .arg(&self.git_dir)
            .arg("--work-tree")
            .arg(&self.work_tree)
            .args(args)
            .stdin(Stdio::null());
        // Paths given to git are relative to the workspace; a command that
        // needs no workspace (a fork's copy, a diff) runs where it can.
        cmd.current_dir(if self.work_tree.is_dir() {
            self.work_tree.as_path()
        } else {
            Path::new("/")
        });
        cmd
    }

    /// Runs `args` (feeding `input` on stdin) and gives stdout.
    pub fn run(&self, args: &[&str], input: Option<&[u8]>) -> Result<Vec<u8>, GitError> {
        self.run_env(args, input, &[])
    }

    /// [`Git::run`] with more environment variables.
    pub fn run_env(
        &self,
        args: &[&str],
        input: Option<&[u8]>,
        envs: &[(&str, &OsStr)],
    ) -> Result<Vec<u8>, GitError> {
        // No git runs on a store that could make it obey someone else.
        super::trust::check_store(&self.git_dir)?;
        let mut cmd = self.command(args);
        for (k, v) in envs {
            cmd.env(k, v);
        }
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        if input.is_some() {
            cmd.stdin(Stdio::piped());
        }
        let mut child = cmd.spawn().map_err(GitError::Spawn)?;
        let feeder = match (input, child.stdin.take()) {
            (Some(bytes), Some(mut stdin)) => {
                let bytes = bytes.to_vec();
                Some(std::thread::spawn(move || stdin.write_all(&bytes)))
            }
            _ => None,
        };
        let out = child.wait_with_output().map_err(GitError::Spawn)?;
        if let Some(f) = feeder {
            let _ = f.join();
        }
        if !out.status.success() {
            let why = String::from_utf8_lossy(&out.stderr).trim().to_string();
            return Err(GitError::Failed {
                args: args.first().copied().unwrap_or("").to_string(),
                why: if why.is_empty() {
                    out.status.to_string()
                } else {
                    crate::text::cut_chars(&why, 400, "…")
                },
            });
        }
        Ok(out.stdout)
    }

    /// stdout as trimmed text.
    pub fn text(&self, args: &[&str], input: Option<&[u8]>) -> Result<String, GitError> {
        let out = self.run(args, input)?;
        Ok(String::from_utf8_lossy(&out).trim().to_string())
    }

    /// Makes the shadow repository if it is not there: a bare repository
    /// with no templates (so no sample hooks), files 0600 and directories
    /// 0700, attributes that store bytes as they are. Durable when it
    /// returns.
    pub fn init(&self) -> Result<(), GitError> {
        let io = |what: &str, e: std::io::Error| GitError::Io(format!("{what}: {e}"));
        // A store that is there is used only if it is this user's and holds
        // nothing git would obey but what tinyagent wrote; checked before
        // anything is changed (a refused store is left as it is).
        super::trust::check_store(&self.git_dir)?;
        // info/attributes is written last: its presence (with a HEAD and a
        // config that survived) means a complete init. A killed or
        // power-cut one is simply done again: git re-inits in place.
        if self.git_dir.join("info/attributes").is_file() && self.usable() {
            return Ok(());
        }
        for f in ["HEAD", "config"] {
            let p = self.git_dir.join(f);
            if std::fs::metadata(&p).is_ok_and(|m| m.len() == 0) {
                let _ = std::fs::remove_file(&p);
            }
            // Locks of an init a kill cut short (nothing else uses a store
            // that is not initialised yet).
            let _ = std::fs::remove_file(self.git_dir.join(format!("{f}.lock")));
        }
        if let Some(parent) = self.git_dir.parent() {
            tinyagent_store::fsutil::create_dir_all_durable(parent)
                .map_err(|e| io(&format!("creating {}", parent.display()), e))?;
        }
        let dir = self.git_dir.to_string_lossy().to_string();
        let mut cmd = self.base_command();
        let out = cmd
            .args(["init", "-q", "--bare", "--template=", "--shared=0600", &dir])
            .stdin(Stdio::null())
            .output()
            .map_err(GitError::Spawn)?;
        if !out.status.success() {
            return Err(GitError::Failed {
                args: "init".into(),
                why: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            });
        }
        let info = self.git_dir.join("info");
        match std::fs::DirBuilder::new().mode(0o700).create(&info) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(io("creating info/", e)),
        }
        tinyagent_store::fsutil::atomic_write(&info.join("attributes"), super::trust::ATTRIBUTES)
            .map_err(|e| io("writing info/attributes", e))?;
        // git writes these without fsync.
        for f in ["HEAD", "config", "description"] {
            let p = self.git_dir.join(f);
            if let Ok(file) = std::fs::File::open(&p) {
                file.sync_all()
                    .map_err(|e| io(&format!("syncing {}", p.display()), e))?;
            }
        }
        for d in [
            self.git_dir.join("objects"),
            self.git_dir.join("refs"),
            self.git_dir.clone(),
        ] {
            sync_dir(&d).map_err(|e| io(&format!("syncing {}", d.display()), e))?;
        }
        if let Some(parent) = self.git_dir.parent() {
            sync_dir(parent).map_err(|e| io("syncing the store's directory", e))?;
        }
        // What this git wrote is what every later use will be checked
        // against: a git whose init writes more is told now.
        super::trust::check_store(&self.git_dir)?;
        Ok(())
    }
}

impl Git {
    /// HEAD names a ref and the config is there: git sees a repository.
    fn usable(&self) -> bool {
        std::fs::read(self.git_dir.join("HEAD")).is_ok_and(|h| h.starts_with(b"ref: "))
            && std::fs::metadata(self.git_dir.join("config")).is_ok_and(|m| m.len() > 0)
    }
}

/// fsyncs a directory (its entries: new names in it survive a crash).
pub fn sync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

/// The git program (see [`super::StoreSettings`]).
pub fn git_program() -> PathBuf {
    super::settings().git.clone()
}

static CHECKED: std::sync::OnceLock<Result<(u32, u32), String>> = std::sync::OnceLock::new();

/// Whether the git found supports `core.fsyncMethod=batch` (2.37+).
fn batch_fsync() -> bool {
    matches!(CHECKED.get(), Some(Ok(v)) if *v >= (2, 37))
}

/// Checks that git runs and is new enough (once per process).
pub fn check_version() -> Result<(), GitError> {
    let r = CHECKED.get_or_init(|| {
        let mut cmd = Command::new(git_program());
        for (k, _) in std::env::vars_os() {
            if k.as_encoded_bytes().starts_with(b"GIT_") {
                cmd.env_remove(k);
            }
        }
        let out = cmd
            .arg("version")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .current_dir("/")
            .stdin(Stdio::null())
            .output()
            .map_err(|e| GitError::Spawn(e).to_string())?;
        let text = String::from_utf8_lossy(&out.stdout);
        let v =
            parse_version(&text).ok_or_else(|| format!("unrecognised `git version`: {text}"))?;
        if v < MIN_GIT {
            return Err(GitError::TooOld(v.0, v.1).to_string());
        }
        Ok(v)
    });
    r.clone().map(|_| ()).map_err(GitError::Io)
}

/// `git version 2.47.3` -> (2, 47).
pub fn parse_version(text: &str) -> Option<(u32, u32)> {
    let v = text.split_whitespace().nth(2)?;
    let mut parts = v.split('.');
    let major = parts.next()?.parse().ok()?;
    let minor = parts
        .next()?
        .chars()
        .take_while(char::is_ascii_digit)
        .collect::<String>()
        .parse()
        .ok()?;
    Some((major, minor))
}

#[cfg(test)]
mod tests {
    #[test]
    fn versions_parse() {
        assert_eq!(super::parse_version("git version 2.47.3\n"), Some((2, 47)));
        assert_eq!(
            super::parse_version("git version 2.39.5.windows.1"),
            Some((2, 39))
        );
        assert_eq!(super::parse_version("nonsense"), None);
    }
}
