//! Where a restore acts: one resolution for `fork --restore`, `restore
//! --undo` and the restore a resume finishes.
//!
//! The workspace comes from the log (`run.started`), or from the
//! replication sidecar when a resume from a bucket put the run elsewhere
//! (a sidecar is believed only when this machine wrote it, see
//! `bucket::read_sidecar`). A path taken from either is used only when the
//! person vouches for it: it is the current directory, the one given with
//! `--cwd`, or one this machine's own runs recorded under `$TINYAGENT_HOME`
//! (the log lies in `$TINYAGENT_HOME/runs`, or the sidecar names it). It is
//! never `/`, `$HOME` or an ancestor of either.

use super::LaunchError;
use std::path::{Path, PathBuf};

/// The workspace a restore of the log `wal` (run `run_id`, recorded
/// workspace `recorded`) acts in, checked; `cwd` is `--cwd`.
pub fn for_restore(
    wal: &Path,
    run_id: &str,
    recorded: &str,
    cwd: Option<&Path>,
) -> Result<PathBuf, LaunchError> {
    let sidecar = super::bucket::read_sidecar(wal, run_id)?.and_then(|s| s.workspace);
    let named = sidecar.as_deref().unwrap_or(recorded);
    let path = Path::new(named);
    if !path.is_absolute() || !path.is_dir() {
        return Err(LaunchError::refused(format!(
            "the run's workspace {named:?} is not an absolute directory on this machine"
        )));
    }
    let real = canonical(path)?;
    refuse_wide(&real)?;
    let given = cwd.map(canonical).transpose()?;
    if let Some(g) = &given
        && *g != real
    {
        return Err(LaunchError::refused(format!(
            "--cwd {} is not the run's workspace ({})",
            g.display(),
            real.display()
        )));
    }
    let here = std::env::current_dir()
        .ok()
        .and_then(|d| d.canonicalize().ok());
    let under_home = super::parts::home()
        .ok()
        .and_then(|h| h.join("runs").canonicalize().ok())
        .is_some_and(|runs| wal.starts_with(runs));
    if given.is_some() || here.as_ref() == Some(&real) || sidecar.is_some() || under_home {
        return Ok(real);
    }
    Err(LaunchError::refused(format!(
        "{}: the log names {} as its workspace, which is not taken on its word; run this \
         there, or say so with --cwd {}",
        wal.display(),
        real.display(),
        real.display()
    )))
}

fn canonical(p: &Path) -> Result<PathBuf, LaunchError> {
    std::fs::canonicalize(p).map_err(|e| LaunchError::refused(format!("{}: {e}", p.display())))
}

/// Refuses `/`, `$HOME` and every ancestor of `$HOME`: a restore removes
/// files, never across a whole system or home.
fn refuse_wide(real: &Path) -> Result<(), LaunchError> {
    let home = std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .and_then(|h| std::fs::canonicalize(h).ok());
    if real.parent().is_none() || home.as_deref().is_some_and(|h| h.starts_with(real)) {
        return Err(LaunchError::refused(format!(
            "the run's workspace is {}: a restore there is refused (never /, $HOME or an \
             ancestor of either)",
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
}
