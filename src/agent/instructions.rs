//! Project instructions: the `AGENTS.md` files from the workspace up to its
//! git root, made part of the system prompt (which `run.started` records,
//! so a resumed run is sent the same text even if the files changed).
//!
//! They are workspace files, so not trusted for anything but text for the
//! model: a file is read only when it is a regular file reached without a
//! symbolic link (a link could point the prompt, and so the model server,
//! at a file outside the workspace), and 32 KiB in all is the most that is
//! taken. The nearest file matters most: it is read first and comes last;
//! what does not fit is cut from the files farthest up.

use std::io::Read;
use std::path::{Path, PathBuf};

/// The most text taken from all the files together.
pub const MAX_BYTES: usize = 32 * 1024;

/// The file name looked for in each directory.
pub const FILE_NAME: &str = "AGENTS.md";

/// What was found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Instructions {
    /// (file, its text as taken), from the git root down to the workspace.
    pub files: Vec<(PathBuf, String)>,
    /// Files that were cut (or left out) to stay within [`MAX_BYTES`].
    pub cut: Vec<PathBuf>,
    /// Files that were not read, and why.
    pub skipped: Vec<String>,
}

/// The directories looked in: the workspace and each parent up to the
/// nearest one holding `.git` (only the workspace when there is none),
/// nearest first.
fn dirs(workspace: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut dir = Some(workspace);
    while let Some(d) = dir {
        out.push(d.to_path_buf());
        if d.join(".git").exists() {
            return out;
        }
        dir = d.parent();
    }
    // No repository: the workspace alone.
    out.truncate(1);
    out
}

/// Reads `path` if it is a regular file reached without a symbolic link,
/// at most `limit` bytes (plus one, to tell a cut).
fn read_plain(path: &Path, limit: usize) -> Result<Option<Vec<u8>>, String> {
    use std::os::unix::fs::OpenOptionsExt;
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("{}: {e}", path.display())),
    };
    if meta.file_type().is_symlink() {
        return Err(format!("{} is a symbolic link; not read", path.display()));
    }
    if !meta.is_file() {
        return Err(format!(
            "{} is not a regular file; not read",
            path.display()
        ));
    }
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    // What was opened, not what was looked at: the name may have been
    // swapped for a FIFO or a device in between.
    if !f.metadata().is_ok_and(|m| m.is_file()) {
        return Err(format!(
            "{} is not a regular file; not read",
            path.display()
        ));
    }
    let mut bytes = Vec::new();
    f.take(limit as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(Some(bytes))
}

/// Cuts `bytes` to at most `max`, at a character boundary.
fn cut_text(bytes: &[u8], max: usize) -> String {
    let text = String::from_utf8_lossy(bytes);
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_string()
}

/// Finds and reads the instructions for `workspace` (an absolute path).
pub fn load(workspace: &Path) -> Instructions {
    let mut found = Instructions::default();
    let mut budget = MAX_BYTES;
    let mut nearest_first = Vec::new();
    for dir in dirs(workspace) {
        let path = dir.join(FILE_NAME);
        match read_plain(&path, budget) {
            Ok(None) => {}
            Err(why) => found.skipped.push(why),
            Ok(Some(_)) if budget == 0 => found.cut.push(path),
            Ok(Some(bytes)) => {
                let text = cut_text(&bytes, budget);
                if text.len() < bytes.len() {
                    found.cut.push(path.clone());
                }
                budget -= text.len();
                nearest_first.push((path, text));
            }
        }
    }
    nearest_first.reverse();
    found.files = nearest_first;
    found
}

impl Instructions {
    /// The section appended to the system prompt (empty when none).
    pub fn prompt_section(&self) -> String {
        if self.files.is_empty() {
            return String::new();
        }
        let mut s = String::from(
            "\nProject instructions (AGENTS.md files from the repository root down to the \
             workspace; where they disagree, the later, nearer one applies):\n",
        );
        for (path, text) in &self.files {
            s.push_str(&format!("--- {}\n", path.display()));
            s.push_str(text.trim_end());
            s.push('\n');
        }
        if !self.cut.is_empty() {
            s.push_str(&format!(
                "[instructions cut to {} KiB in all]\n",
                MAX_BYTES / 1024
            ));
        }
        s
    }

    /// The files taken, as recorded in `run.started`.
    pub fn paths(&self) -> Vec<String> {
        self.files
            .iter()
            .map(|(p, _)| p.display().to_string())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_up_to_the_git_root_nearest_last_within_the_cap() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("repo");
        let ws = root.join("a/b");
        std::fs::create_dir_all(&ws).unwrap();
        std::fs::create_dir_all(root.join(".git")).unwrap();
        // Above the repository: never read.
        std::fs::write(dir.path().join(FILE_NAME), "outside").unwrap();
        std::fs::write(root.join(FILE_NAME), "root rules").unwrap();
        std::fs::write(ws.join(FILE_NAME), "workspace rules").unwrap();
        let found = load(&ws);
        let texts: Vec<&str> = found.files.iter().map(|(_, t)| t.as_str()).collect();
        assert_eq!(texts, ["root rules", "workspace rules"]);
        assert!(found.cut.is_empty() && found.skipped.is_empty());
        let section = found.prompt_section();
        assert!(section.find("root rules") < section.find("workspace rules"));
        assert!(!section.contains("outside"));

        // The nearest file is kept whole; the cap cuts the one farthest up.
        std::fs::write(ws.join(FILE_NAME), "w".repeat(MAX_BYTES - 10)).unwrap();
        let found = load(&ws);
        assert_eq!(found.files[0].1, "root rules"[..10].to_string());
        assert_eq!(found.files[1].1.len(), MAX_BYTES - 10);
        assert!(found.cut.is_empty());
        std::fs::write(ws.join(FILE_NAME), "w".repeat(MAX_BYTES + 5)).unwrap();
        let found = load(&ws);
        assert_eq!(found.files.len(), 1);
        assert_eq!(found.files[0].1.len(), MAX_BYTES);
        assert_eq!(found.cut, [ws.join(FILE_NAME), root.join(FILE_NAME)]);
        assert!(found.prompt_section().contains("cut to 32 KiB"));
    }

    #[test]
    fn a_link_or_a_fifo_is_not_read_and_no_repository_means_the_workspace_alone() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        std::fs::create_dir_all(&ws).unwrap();
        std::fs::write(dir.path().join(FILE_NAME), "parent without a repository").unwrap();
        assert_eq!(load(&ws), Instructions::default());
        let secret = dir.path().join("secret");
        std::fs::write(&secret, "do not send").unwrap();
        std::os::unix::fs::symlink(&secret, ws.join(FILE_NAME)).unwrap();
        let found = load(&ws);
        assert!(found.files.is_empty());
        assert!(
            found.skipped[0].contains("symbolic link"),
            "{:?}",
            found.skipped
        );
        std::fs::remove_file(ws.join(FILE_NAME)).unwrap();
        nix::unistd::mkfifo(&ws.join(FILE_NAME), nix::sys::stat::Mode::S_IRWXU).unwrap();
        let found = load(&ws);
        assert!(found.skipped[0].contains("not a regular file"));
    }
}
