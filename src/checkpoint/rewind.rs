//! Going back without losing the person's work: a three-way restore.
//!
//! A restore is not "make the workspace equal that tree". For each path the
//! run's own checkpoints say changed after the restore point (`want`, the
//! restore point's tree, against `expect`, the run's last checkpoint), the
//! path is put back only if the file still holds what the run last recorded
//! (`expect`); a path that holds something else (the person's edit, a file
//! they made) is left as it is and listed as a conflict, unless the restore
//! is forced. A path that already holds `want` is done (so a restore a kill
//! cut short is finished by running it again). Paths the run never changed
//! after the restore point are never looked at: untracked notes, uncommitted
//! edits, ignored files, the config and hooks stay as they are.
//!
//! The same operation undoes a restore: `want` is the workspace as it was
//! before (stored by the restore), `expect` what the restore wrote.
//!
//! Each file is written to a temp file beside it and renamed over, so a kill
//! leaves every path either as it was or as it is to be. A path whose
//! leading directory is a symlink (or not a directory) is never written
//! through: it is a conflict, forced or not.

use super::objects::{Kind, hex, object_id};
use super::{CheckpointError, Git, Oversized};
use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// A path's content in a tree: git's mode and blob id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub mode: String,
    pub id: String,
}

/// One path a restore may change: what it is to hold (`None`: absent) and
/// what it must hold now for the restore to change it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub path: String,
    pub want: Option<Entry>,
    pub expect: Option<Entry>,
}

/// A path left as it is, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    pub path: String,
    pub why: String,
}

/// What a restore does (or, for `--dry-run`, would do).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// Written back (content of `want`).
    pub restore: Vec<String>,
    /// Removed (absent in `want`).
    pub delete: Vec<String>,
    /// Left as they are: changed since the run's last checkpoint, or not
    /// safe to write.
    pub conflicts: Vec<Conflict>,
    /// Over the size cap at the restore point: not stored, cannot be
    /// brought back (named with the recorded SHA-256), left as they are.
    pub oversized: Vec<Oversized>,
    /// Already as they are to be.
    pub done: u64,
    /// What `apply` carries out, in path order.
    actions: Vec<(String, Option<Entry>)>,
}

impl Plan {
    /// Every path the plan changes (written or removed).
    pub fn touched(&self) -> Vec<String> {
        self.actions.iter().map(|(p, _)| p.clone()).collect()
    }

    /// Demotes an action to a conflict (its current content could not be
    /// kept for undo).
    pub fn leave(&mut self, path: &str, why: &str) {
        if let Some(i) = self.actions.iter().position(|(p, _)| p == path) {
            self.actions.remove(i);
            self.restore.retain(|p| p != path);
            self.delete.retain(|p| p != path);
            self.conflicts.push(Conflict {
                path: path.to_string(),
                why: why.to_string(),
            });
        }
    }

    /// Keeps only the actions whose path's present content the store holds
    /// in the tree taken before the restore (`stored`: the changes from the
    /// restore point to that tree); the others become conflicts.
    pub fn keep_only_stored(&mut self, workspace: &Path, stored: &[Change]) {
        let before: BTreeMap<&str, &Option<Entry>> = stored
            .iter()
            .map(|c| (c.path.as_str(), &c.expect))
            .collect();
        let max = super::max_file_bytes();
        let paths: Vec<String> = self.actions.iter().map(|(p, _)| p.clone()).collect();
        for path in paths {
            let now = current(&workspace.join(&path), max).ok().flatten();
            if before.get(path.as_str()).is_none_or(|b| **b != now) {
                self.leave(
                    &path,
                    "its content could not be stored first (ignored now?)",
                );
            }
        }
    }

    /// The plan as lines for the person: `restore P`, `delete P`,
    /// `conflict P (why)`, `skipped-oversized P (N bytes, sha256 H)`.
    pub fn lines(&self) -> Vec<String> {
        let mut out = Vec::new();
        for p in &self.restore {
            out.push(format!("restore {p}"));
        }
        for p in &self.delete {
            out.push(format!("delete {p}"));
        }
        for c in &self.conflicts {
            out.push(format!("conflict {} ({})", c.path, c.why));
        }
        for o in &self.oversized {
            out.push(format!(
                "skipped-oversized {} ({} bytes, sha256 {})",
                o.path, o.size, o.sha256
            ));
        }
        out
    }
}

/// The changed paths between two trees of a store, each with both sides.
pub fn tree_changes(git: &Git, from: &str, to: &str) -> Result<Vec<Change>, CheckpointError> {
    let out = git.run(
        &["diff-tree", "-r", "-z", "--raw", "--no-renames", from, to],
        None,
    )?;
    let mut changes = Vec::new();
    let mut fields = out.split(|b| *b == 0);
    while let Some(meta) = fields.next() {
        if meta.is_empty() {
            continue;
        }
        let Some(path) = fields.next() else { break };
        // ":<from mode> <to mode> <from id> <to id> <status>"
        let meta = String::from_utf8_lossy(meta);
        let parts: Vec<&str> = meta.trim_start_matches(':').split(' ').collect();
        if parts.len() < 4 {
            continue;
        }
        let side = |mode: &str, id: &str| {
            (mode != "000000").then(|| Entry {
                mode: mode.to_string(),
                id: id.to_string(),
            })
        };
        changes.push(Change {
            path: String::from_utf8_lossy(path).into_owned(),
            // Going back: what `from` has is wanted, what `to` has expected.
            want: side(parts[0], parts[2]),
            expect: side(parts[1], parts[3]),
        });
    }
    Ok(changes)
}

/// What a path holds now: `Ok(None)` absent, `Err(why)` something a
/// restore does not handle (a directory, a file over `max`, unreadable).
fn current(full: &Path, max: u64) -> Result<Option<Entry>, String> {
    let meta = match std::fs::symlink_metadata(full) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) if e.raw_os_error() == Some(nix::libc::ENOTDIR) => return Ok(None),
        Err(e) => return Err(e.to_string()),
    };
    let ft = meta.file_type();
    let (mode, data) = if ft.is_symlink() {
        let t = std::fs::read_link(full).map_err(|e| e.to_string())?;
        ("120000", t.into_os_string().into_encoded_bytes())
    } else if ft.is_file() {
        if meta.size() > max {
            return Err(format!("{} bytes, over the size cap", meta.size()));
        }
        let mode = if meta.mode() & 0o100 != 0 {
            "100755"
        } else {
            "100644"
        };
        (mode, std::fs::read(full).map_err(|e| e.to_string())?)
    } else {
        return Err("not a file or a symlink".into());
    };
    Ok(Some(Entry {
        mode: mode.to_string(),
        id: hex(&object_id(Kind::Blob, &data)),
    }))
}

/// Whether every directory between the workspace and `rel` is a real
/// directory (or absent): nothing is written through a link. A leading
/// path for which `removed` holds (the plan removes it first) counts as
/// absent.
fn leading_dirs_safe(workspace: &Path, rel: &Path, removed: &dyn Fn(&Path) -> bool) -> bool {
    let mut at = workspace.to_path_buf();
    let mut sub = PathBuf::new();
    let parts: Vec<_> = rel.components().collect();
    for c in &parts[..parts.len().saturating_sub(1)] {
        at.push(c);
        sub.push(c);
        match std::fs::symlink_metadata(&at) {
            Ok(m) if m.file_type().is_dir() => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return true,
            Ok(_) if removed(&sub) => return true,
            _ => return false,
        }
    }
    true
}

/// Whether a relative path is one a restore may name: no `..`, not
/// absolute, nothing inside a `.git` directory.
fn sane(rel: &str) -> bool {
    let p = Path::new(rel);
    !rel.is_empty()
        && p.components()
            .all(|c| matches!(c, std::path::Component::Normal(n) if n != ".git"))
}

/// What restoring `changes` in `workspace` does. Paths `protected` covers
/// (the run's own files) are never planned. `oversized_at_want` names the
/// files the `want` side could not store; `skip_delete` says which
/// deletions would remove a file the `want` side ignored.
pub fn plan(
    workspace: &Path,
    changes: &[Change],
    protected: &crate::exec::protected::Protected,
    oversized_at_want: &[Oversized],
    skip_delete: &dyn Fn(&str) -> bool,
    force: bool,
) -> Plan {
    let max = super::max_file_bytes();
    let big: BTreeMap<&str, &Oversized> = oversized_at_want
        .iter()
        .map(|o| (o.path.as_str(), o))
        .collect();
    let mut plan = Plan::default();
    let mut dirs = Vec::new();
    for c in changes {
        let full = workspace.join(&c.path);
        if !sane(&c.path) || protected.covers(&full) {
            continue;
        }
        if c.want.is_none()
            && let Some(o) = big.get(c.path.as_str())
        {
            plan.oversized.push((*o).clone());
            continue;
        }
        let conflict = |why: &str| Conflict {
            path: c.path.clone(),
            why: why.to_string(),
        };
        let deleted = |p: &Path| plan.delete.iter().any(|d| Path::new(d) == p);
        if !leading_dirs_safe(workspace, Path::new(&c.path), &deleted) {
            plan.conflicts
                .push(conflict("a leading directory is a symlink or a file"));
            continue;
        }
        let now = match current(&full, max) {
            Ok(n) => n,
            Err(_) if c.want.is_some() && c.expect.is_none() && full.is_dir() => {
                // A directory where the file is to come back: decided once
                // the removals are known.
                dirs.push(c);
                continue;
            }
            Err(why) => {
                plan.conflicts.push(conflict(&why));
                continue;
            }
        };
        if now == c.want {
            plan.done += 1;
            continue;
        }
        if c.want.is_none() && skip_delete(&c.path) {
            plan.conflicts
                .push(conflict("ignored at the restore point: not removed"));
            continue;
        }
        if now != c.expect && !force {
            plan.conflicts
                .push(conflict("changed since the run's last checkpoint"));
            continue;
        }
        match &c.want {
            Some(_) => plan.restore.push(c.path.clone()),
            None => plan.delete.push(c.path.clone()),
        }
        plan.actions.push((c.path.clone(), c.want.clone()));
    }
    // A directory the plan empties (every file under it removed) goes, and
    // the file comes back in its place; else it is a conflict.
    for c in dirs {
        let mut under = Vec::new();
        files_under(&workspace.join(&c.path), Path::new(&c.path), &mut under);
        if under
            .iter()
            .all(|f| plan.delete.iter().any(|d| Path::new(d) == f))
        {
            plan.restore.push(c.path.clone());
            plan.actions.push((c.path.clone(), c.want.clone()));
        } else {
            plan.conflicts.push(Conflict {
                path: c.path.clone(),
                why: "a directory holding files the restore does not remove".into(),
            });
        }
    }
    // A file over the cap at the restore point that is not as it was then
    // cannot be brought back (it was never stored): it is named, with the
    // SHA-256 recorded, never silently passed over.
    for o in oversized_at_want {
        if plan.oversized.iter().any(|p| p.path == o.path) || !sane(&o.path) {
            continue;
        }
        let full = workspace.join(&o.path);
        if protected.covers(&full) {
            continue;
        }
        let same = std::fs::symlink_metadata(&full).is_ok_and(|m| m.file_type().is_file())
            && super::sha256_file(&full).is_ok_and(|h| h == o.sha256);
        if !same {
            plan.oversized.push(o.clone());
        }
    }
    plan
}

/// Every non-directory under `dir` (as paths relative to the workspace,
/// `rel` being `dir`'s).
fn files_under(dir: &Path, rel: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let (p, r) = (e.path(), rel.join(e.file_name()));
        if std::fs::symlink_metadata(&p).is_ok_and(|m| m.file_type().is_dir()) {
            files_under(&p, &r, out);
        } else {
            out.push(r);
        }
    }
}

/// The contents of `ids` from the store (`git cat-file --batch`).
fn blobs(git: &Git, ids: &BTreeSet<String>) -> Result<BTreeMap<String, Vec<u8>>, CheckpointError> {
    let mut out = BTreeMap::new();
    if ids.is_empty() {
        return Ok(out);
    }
    let input: String = ids.iter().map(|i| format!("{i}\n")).collect();
    let bytes = git.run(&["cat-file", "--batch"], Some(input.as_bytes()))?;
    let mut rest = bytes.as_slice();
    while !rest.is_empty() {
        let Some(nl) = rest.iter().position(|b| *b == b'\n') else {
            break;
        };
        let head = String::from_utf8_lossy(&rest[..nl]).to_string();
        let parts: Vec<&str> = head.split(' ').collect();
        let size = match parts.as_slice() {
            [id, "blob", size] => size
                .parse::<usize>()
                .map_err(|_| CheckpointError::Io(format!("cat-file: bad size for {id}")))?,
            _ => return Err(CheckpointError::Io(format!("cat-file: {head}"))),
        };
        let start = nl + 1;
        if rest.len() < start + size {
            return Err(CheckpointError::Io("cat-file: short output".into()));
        }
        out.insert(parts[0].to_string(), rest[start..start + size].to_vec());
        rest = rest.get(start + size + 1..).unwrap_or(&[]);
    }
    Ok(out)
}

/// Carries out `plan` in `workspace` from the store `git`: each file is
/// written to a temp file and renamed over the path, each removal removes
/// directories it leaves empty, and everything is on disk when it returns.
pub fn apply(git: &Git, workspace: &Path, plan: &Plan) -> Result<(), CheckpointError> {
    let ids: BTreeSet<String> = plan
        .actions
        .iter()
        .filter_map(|(_, w)| w.as_ref().map(|e| e.id.clone()))
        .collect();
    let data = blobs(git, &ids)?;
    let io = |p: &Path, e: std::io::Error| CheckpointError::Io(format!("{}: {e}", p.display()));
    // Removals first: a file the run put where a directory was goes before
    // the directory's files come back.
    let (gone, back): (Vec<_>, Vec<_>) = plan.actions.iter().partition(|(_, w)| w.is_none());
    for (rel, want) in gone.into_iter().chain(back) {
        let full = workspace.join(rel);
        // Checked again just before the write: nothing through a link.
        if !leading_dirs_safe(workspace, Path::new(rel), &|_| false) {
            continue;
        }
        match want {
            Some(e) => {
                let bytes = data
                    .get(&e.id)
                    .ok_or_else(|| CheckpointError::Io(format!("{rel}: blob {} missing", e.id)))?;
                if let Some(dir) = full.parent() {
                    std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
                }
                write_one(&full, &e.mode, bytes).map_err(|e| io(&full, e))?;
            }
            None => {
                match std::fs::remove_file(&full) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(io(&full, e)),
                }
                let mut dir = full.parent();
                while let Some(d) = dir {
                    if d == workspace || std::fs::remove_dir(d).is_err() {
                        break;
                    }
                    dir = d.parent();
                }
            }
        }
    }
    if let Ok(dir) = std::fs::File::open(workspace) {
        nix::unistd::syncfs(&dir).map_err(|e| CheckpointError::Io(format!("syncfs: {e}")))?;
    }
    Ok(())
}

/// Writes one file (or link) by a temp file beside it renamed over it.
fn write_one(full: &Path, mode: &str, bytes: &[u8]) -> std::io::Result<()> {
    let name = full
        .file_name()
        .map(|n| n.as_bytes().to_vec())
        .unwrap_or_default();
    let mut tmp_name = b".tinyagent-restore-".to_vec();
    tmp_name.extend_from_slice(&name);
    let tmp: PathBuf = full.with_file_name(std::ffi::OsStr::from_bytes(&tmp_name));
    let _ = std::fs::remove_file(&tmp);
    if mode == "120000" {
        std::os::unix::fs::symlink(std::ffi::OsStr::from_bytes(bytes), &tmp)?;
    } else {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)?;
        f.write_all(bytes)?;
        let perm = if mode == "100755" { 0o755 } else { 0o644 };
        f.set_permissions(std::fs::Permissions::from_mode(perm))?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, full)
}

/// Whether the `.gitignore` and `.ignore` files of `tree` exclude a path:
/// a file the run "created" after the restore point that the restore
/// point's rules ignore was there and ignored then (its `.gitignore` was
/// removed later), so it is not removed.
pub fn ignored_in(git: &Git, tree: &str) -> Result<impl Fn(&str) -> bool, CheckpointError> {
    use ignore::gitignore::{Gitignore, GitignoreBuilder};
    let out = git.run(&["ls-tree", "-r", "-z", "--full-tree", tree], None)?;
    let mut files = Vec::new();
    for rec in out.split(|b| *b == 0) {
        let Some(tab) = rec.iter().position(|b| *b == b'\t') else {
            continue;
        };
        let path = String::from_utf8_lossy(&rec[tab + 1..]).into_owned();
        let head = String::from_utf8_lossy(&rec[..tab]).into_owned();
        let name = path.rsplit('/').next().unwrap_or("");
        if (name == ".gitignore" || name == ".ignore")
            && let [_, "blob", id] = head.split(' ').collect::<Vec<_>>().as_slice()
        {
            files.push((path, (*id).to_string()));
        }
    }
    let ids = files.iter().map(|(_, id)| id.clone()).collect();
    let data = blobs(git, &ids)?;
    let root = Path::new("/w");
    // Shallow directories first, `.gitignore` before `.ignore` (which wins).
    files.sort_by_key(|(p, _)| {
        (
            p.matches('/').count(),
            p.ends_with("/.ignore") || p == ".ignore",
        )
    });
    let mut rules: Vec<(String, Gitignore)> = Vec::new();
    for (path, id) in &files {
        let dir = path.rsplit_once('/').map_or("", |(d, _)| d).to_string();
        let mut b = GitignoreBuilder::new(root.join(&dir));
        for line in String::from_utf8_lossy(data.get(id).map_or(&[][..], Vec::as_slice)).lines() {
            let _ = b.add_line(None, line);
        }
        if let Ok(g) = b.build() {
            rules.push((dir, g));
        }
    }
    Ok(move |rel: &str| {
        let mut ignored = false;
        for (dir, g) in &rules {
            if dir.is_empty() || rel.starts_with(&format!("{dir}/")) {
                let m = g.matched_path_or_any_parents(root.join(rel), false);
                if m.is_ignore() {
                    ignored = true;
                } else if m.is_whitelist() {
                    ignored = false;
                }
            }
        }
        ignored
    })
}

#[cfg(test)]
mod tests;
