//! Helpers for checkpoint tests: a directory's whole content, and the tree
//! id an independent git gives a workspace.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Every file under `dir` with its mode and bytes (directories too, by
/// mode): equal maps mean an unchanged tree.
pub fn tree_of(dir: &Path) -> BTreeMap<PathBuf, (u32, Vec<u8>)> {
    use std::os::unix::fs::PermissionsExt;
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            let meta = std::fs::symlink_metadata(&p).unwrap();
            let rel = p.strip_prefix(dir).unwrap().to_path_buf();
            if meta.is_dir() {
                out.insert(rel, (meta.permissions().mode(), Vec::new()));
                stack.push(p);
            } else if meta.file_type().is_symlink() {
                let target = std::fs::read_link(&p).unwrap();
                out.insert(
                    rel,
                    (0o120_000, target.as_os_str().as_encoded_bytes().to_vec()),
                );
            } else {
                out.insert(rel, (meta.permissions().mode(), std::fs::read(&p).unwrap()));
            }
        }
    }
    out
}

/// The tree id of the workspace as an independent git computes it (a fresh
/// repository, `add -A` honouring .gitignore, and the root `.ignore` as an
/// excludes file): what a checkpoint of it must be named.
pub fn git_tree_of(ws: &Path) -> String {
    let repo = tempfile::tempdir().unwrap();
    let git = |args: &[&str]| {
        let mut cmd = Command::new("git");
        cmd.env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null");
        if args[0] != "init" {
            cmd.env("GIT_DIR", repo.path()).env("GIT_WORK_TREE", ws);
        }
        let out = cmd
            .current_dir(ws)
            .args(["-c", "core.autocrlf=false", "-c", "safe.directory=*"])
            .arg("-c")
            .arg(format!(
                "core.excludesFile={}",
                ws.join(".ignore").display()
            ))
            .args(args)
            .output()
            .expect("git");
        assert!(
            out.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    git(&[
        "init",
        "-q",
        "--bare",
        "--template=",
        repo.path().to_str().unwrap(),
    ]);
    git(&["add", "-A"]);
    git(&["write-tree"])
}
