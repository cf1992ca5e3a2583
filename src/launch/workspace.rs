//! Where a run works: one resolution for `resume` (of a log, a trajectory
//! or a run in a bucket), `fork`, `fork --restore`, `restore --undo` and
//! the restore a resume finishes (contract sections 17 and 20).
//!
//! A log names its workspace (`run.started`), or the replication sidecar
//! does when a resume from a bucket put the run elsewhere (a sidecar is
//! believed only when this machine wrote it, see `bucket::read_sidecar`).
//! A path taken from either is used only when the person vouches for it:
//! it is the current directory, the one given with `--cwd`, the sidecar's,
//! or one this machine recorded for this very run (`run`, a resume the
//! person vouched for, a fork of a run whose workspace was vouched for
//! leave a line `workspace <DIR> run <RUN_ID>` in `$TINYAGENT_HOME/endpoints`,
//! the file of what the person chose on this machine). A run brought here
//! (from a bucket, or a trajectory) works where the person is or says
//! (`--cwd`). Whatever names it, the workspace is never `/`, `$HOME` or an
//! ancestor of either. A refusal (exit 2) comes before anything is written.

use super::LaunchError;
use std::path::{Path, PathBuf};

/// What names the workspace to resolve.
#[derive(Debug, Clone, Copy)]
pub enum Named<'a> {
    /// A log on this machine (run `run_id`), whose records name `recorded`.
    Log {
        wal: &'a Path,
        run_id: &'a str,
        recorded: &'a str,
    },
    /// A run brought to this machine: it works in `--cwd`, else in the
    /// current directory.
    Here,
}

/// The workspace `named` resolves to with `--cwd` `cwd`, checked and
/// canonical.
///
/// # Errors
/// Exit 2, saying why and how to vouch for it, when the rule refuses it.
pub fn resolve(named: Named<'_>, cwd: Option<&Path>) -> Result<PathBuf, LaunchError> {
    let given = cwd.map(given_dir).transpose()?;
    let (wal, run_id, recorded) = match named {
        Named::Here => {
            let real = match given {
                Some(g) => g,
                None => canonical(Path::new("."))?,
            };
            refuse_wide(&real)?;
            return Ok(real);
        }
        Named::Log {
            wal,
            run_id,
            recorded,
        } => (wal, run_id, recorded),
    };
    let sidecar = super::bucket::read_sidecar(wal, run_id)?.and_then(|s| s.workspace);
    let named = sidecar.as_deref().unwrap_or(recorded);
    let path = Path::new(named);
    if !path.is_absolute() || !path.is_dir() {
        return Err(LaunchError::refused(format!(
            "{}: the run's workspace {named:?} is not an absolute directory on this machine",
            wal.display()
        )));
    }
    let real = canonical(path)?;
    refuse_wide(&real)?;
    if let Some(g) = &given
        && *g != real
    {
        return Err(LaunchError::refused(format!(
            "--cwd {} is not the log's workspace ({}); a run goes on where it ran",
            g.display(),
            real.display()
        )));
    }
    let here = std::env::current_dir()
        .ok()
        .and_then(|d| d.canonicalize().ok());
    if given.is_some() || here.as_ref() == Some(&real) || sidecar.is_some() || known(run_id, &real)
    {
        return Ok(real);
    }
    Err(LaunchError::refused(format!(
        "{}: the log names {} as its workspace, and no run on this machine worked there; it \
         is not taken on its word: run this there, or say so with --cwd {}",
        wal.display(),
        real.display(),
        real.display()
    )))
}

/// The line `$TINYAGENT_HOME/endpoints` holds for run `run_id` working in
/// `workspace` (canonical).
fn mark(run_id: &str, workspace: &Path) -> String {
    format!("workspace {} run {run_id}", workspace.display())
}

fn known(run_id: &str, workspace: &Path) -> bool {
    super::parts::home().is_ok_and(|h| super::endpoints::known(&h, &mark(run_id, workspace)))
}

/// Records that run `run_id` works in `workspace` on this machine (the
/// person chose or vouched for it), so that a later resume, fork or restore
/// of it from elsewhere finds it. Best effort: a warning when it cannot be
/// written (the person's word is asked for again then).
pub fn remember(run_id: &str, workspace: &Path) {
    let Ok(real) = std::fs::canonicalize(workspace) else {
        return;
    };
    // One line a mark: a name with a line break could forge another's.
    if real.as_os_str().as_encoded_bytes().contains(&b'\n') || run_id.contains('\n') {
        return;
    }
    let done =
        super::parts::home().and_then(|h| super::endpoints::remember(&h, &mark(run_id, &real)));
    if let Err(e) = done {
        crate::report::err_line(&format!(
            "warning: {e}; a resume from elsewhere will ask for --cwd"
        ));
    }
}

fn canonical(p: &Path) -> Result<PathBuf, LaunchError> {
    std::fs::canonicalize(p).map_err(|e| LaunchError::refused(format!("{}: {e}", p.display())))
}

/// `--cwd DIR`, canonical, a directory.
fn given_dir(dir: &Path) -> Result<PathBuf, LaunchError> {
    let real = std::fs::canonicalize(dir)
        .map_err(|e| LaunchError::refused(format!("--cwd {}: {e}", dir.display())))?;
    if !real.is_dir() {
        return Err(LaunchError::refused(format!(
            "--cwd {} is not a directory",
            real.display()
        )));
    }
    Ok(real)
}

/// A warning for a new run whose workspace is `/`, `$HOME` or an ancestor
/// of `$HOME`: it may start there (the person is there), but the rule
/// above will not resume, fork or restore it there, so the person is told
/// before anything runs.
pub fn wide_warning(workspace: &Path) -> Option<String> {
    let real = std::fs::canonicalize(workspace).ok()?;
    refuse_wide(&real).err().map(|_| {
        format!(
            "warning: this run works in {}, which is / or your home directory (or above it): \
             a run there cannot be resumed, forked or restored, so a crash or a stop ends it for \
             good; start runs in a project directory",
            real.display()
        )
    })
}

/// Refuses `/`, `$HOME` and every ancestor of `$HOME`: a resumed run acts
/// there and a restore removes files, never across a whole system or home.
fn refuse_wide(real: &Path) -> Result<(), LaunchError> {
    let home = std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .and_then(|h| std::fs::canonicalize(h).ok());
    if real.parent().is_none() || home.as_deref().is_some_and(|h| h.starts_with(real)) {
        return Err(LaunchError::refused(format!(
            "the run's workspace would be {}: refused (a resume, fork or restore never works \
             in /, $HOME or an ancestor of either)",
            real.display()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_root_and_home_and_its_ancestors_are_refused() {
        assert!(refuse_wide(Path::new("/")).is_err());
        if let Some(h) = std::env::var_os("HOME").and_then(|h| std::fs::canonicalize(h).ok()) {
            assert!(refuse_wide(&h).is_err());
            if let Some(p) = h.parent() {
                assert!(refuse_wide(p).is_err());
            }
            assert!(refuse_wide(&h.join("project-that-is-not-an-ancestor")).is_ok());
        }
    }

    #[test]
    fn a_mark_names_the_run_and_its_workspace() {
        assert_eq!(
            mark("r1", Path::new("/w/p")),
            "workspace /w/p run r1".to_string()
        );
    }
}
