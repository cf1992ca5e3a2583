//! What a checkpoint looks at: the whole workspace, walked, or, with the
//! file-system watch on (`[checkpoints] watch`), only the paths its events
//! named; and when the watch cannot be trusted, a walk again and one
//! warning saying why.

use super::walk::{OsStrPath, walk_scoped};
use super::{Checkpointer, index, watch};
use std::path::Path;

/// What a checkpoint's walk found: the files and links with their stat
/// data, the scope they cover (`None`: the whole tree), and how they were
/// found (for the record; `None` when the watch is off).
pub(super) type Looked = (
    Vec<(Vec<u8>, std::fs::Metadata)>,
    Option<watch::Scope>,
    Option<String>,
);

/// The checkpointer's file-system watch (`[checkpoints] watch`).
pub(super) enum WatchMode {
    Off,
    /// Wanted: set up by the next checkpoint's (full) walk.
    Wanted,
    On(watch::Watch),
    /// Given up (the reason was warned about): every checkpoint walks.
    Lost,
}

impl Checkpointer {
    /// Turns the file-system watch on or off (off by default). With it on,
    /// the next checkpoint walks the whole tree and watches every directory
    /// it stores; later ones look only at the paths events named, until
    /// something makes the watch untrustworthy (then they walk, and a
    /// warning says why once: [`Checkpointer::take_warning`]).
    pub fn set_watch(&mut self, on: bool) {
        self.watch = if on {
            WatchMode::Wanted
        } else {
            WatchMode::Off
        };
    }

    /// The watch is on and trusted (set up by a checkpoint, not lost).
    pub fn watching(&self) -> bool {
        matches!(self.watch, WatchMode::On(_))
    }

    /// Checkpoints that walked the whole tree while the watch was wanted
    /// (its first, and every fallback).
    pub fn full_walks(&self) -> u64 {
        self.full_walks
    }

    /// A warning to give the person: the watch could not be trusted (once
    /// per checkpointer), or a pack could not be indexed again (set by
    /// [`Checkpointer::take`]).
    pub fn take_warning(&mut self) -> Option<String> {
        self.warning.take()
    }

    fn warn_once(&mut self, why: &str) {
        if !self.warned {
            self.warned = true;
            self.warning = Some(format!(
                "checkpoints: the file-system watch could not be trusted ({why}); the whole workspace was walked"
            ));
        }
    }

    /// The files and links to look at for a checkpoint, the scope they
    /// cover (`None`: the whole tree), and how they were found (for the
    /// record; `None` when the watch is off).
    pub(super) fn walk_for_checkpoint(&mut self, indexed: &index::Dir) -> Looked {
        let full = |ws: &Path, p: &crate::exec::protected::Protected, w: Option<&watch::Watch>| {
            walk_scoped(ws, p, None, w)
        };
        match std::mem::replace(&mut self.watch, WatchMode::Off) {
            WatchMode::Off => (full(&self.workspace, &self.protected, None), None, None),
            WatchMode::Lost => {
                self.watch = WatchMode::Lost;
                self.full_walks += 1;
                (
                    full(&self.workspace, &self.protected, None),
                    None,
                    Some("full: the watch was lost".into()),
                )
            }
            WatchMode::Wanted => self.set_up("the watch is set up"),
            WatchMode::On(w) => {
                let ws = self.workspace.clone();
                let protected = &self.protected;
                let keep = |rel: &[u8]| {
                    !rel.ends_with(b"/.git")
                        && rel != b".git"
                        && !protected.covers(&ws.join(OsStrPath::of(rel)))
                };
                match w.drain(&keep) {
                    Ok(scope) => {
                        let paths = self.scoped_paths(&scope, &w, indexed);
                        // What this walk saw is right; a watch that could
                        // not be added makes the next ones walk.
                        if let Some(why) = w.broken() {
                            self.warn_once(&why);
                            self.watch = WatchMode::Lost;
                        } else {
                            self.watch = WatchMode::On(w);
                        }
                        (paths, Some(scope), Some("watch".into()))
                    }
                    Err(watch::Fallback::IgnoreRules) => {
                        // The same watch; the walk adds watches to the
                        // directories no longer ignored.
                        self.full_walks += 1;
                        let paths = full(&self.workspace, &self.protected, Some(&w));
                        let note = format!("full: {}", watch::Fallback::IgnoreRules);
                        if let Some(why) = w.broken() {
                            self.warn_once(&why);
                            self.watch = WatchMode::Lost;
                        } else {
                            self.watch = WatchMode::On(w);
                        }
                        (paths, None, Some(note))
                    }
                    Err(f @ (watch::Fallback::Overflow | watch::Fallback::Root)) => {
                        // Events were lost: a new watch, set up by a walk.
                        drop(w);
                        self.warn_once(&format!("{f}; watching again"));
                        self.warned = false; // a later loss is told too
                        self.set_up(&f.to_string())
                    }
                    Err(watch::Fallback::Broken(why)) => {
                        self.warn_once(&why);
                        self.watch = WatchMode::Lost;
                        self.full_walks += 1;
                        (
                            full(&self.workspace, &self.protected, None),
                            None,
                            Some(format!("full: {why}")),
                        )
                    }
                }
            }
        }
    }

    /// The files and links under what the watch's events named. A named
    /// file the index holds is looked at directly: it was neither ignored
    /// nor the run's own when a walk stored it, and no ignore file has
    /// changed since (the watch makes the checkpoint walk when one does),
    /// so it still is not. Anything else (a directory, a new path, a file
    /// that became something else) is walked, which adds the watches of new
    /// directories and applies the ignore rules.
    fn scoped_paths(
        &self,
        scope: &watch::Scope,
        w: &watch::Watch,
        indexed: &index::Dir,
    ) -> Vec<(Vec<u8>, std::fs::Metadata)> {
        let mut out = Vec::new();
        let mut rest = Vec::new();
        for p in scope.paths() {
            if indexed.contains(p) {
                match std::fs::symlink_metadata(self.workspace.join(OsStrPath::of(p))) {
                    Ok(m) if m.file_type().is_file() || m.file_type().is_symlink() => {
                        out.push((p.to_vec(), m));
                        continue;
                    }
                    // Gone: the sweep of the scope's paths takes it out.
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                    _ => {}
                }
            }
            rest.push(p.to_vec());
        }
        if !rest.is_empty() {
            let rest = watch::Scope::new(rest);
            out.extend(walk_scoped(
                &self.workspace,
                &self.protected,
                Some(&rest),
                Some(w),
            ));
        }
        out
    }

    /// A new watch, with the full walk that adds its watches.
    fn set_up(&mut self, why: &str) -> Looked {
        self.full_walks += 1;
        match watch::Watch::new() {
            Ok(w) => {
                let paths = walk_scoped(&self.workspace, &self.protected, None, Some(&w));
                if let Some(broken) = w.broken() {
                    self.warn_once(&broken);
                    self.watch = WatchMode::Lost;
                    (paths, None, Some(format!("full: {broken}")))
                } else {
                    self.watch = WatchMode::On(w);
                    (paths, None, Some(format!("full: {why}")))
                }
            }
            Err(e) => {
                self.warn_once(&e);
                self.watch = WatchMode::Lost;
                (
                    walk_scoped(&self.workspace, &self.protected, None, None),
                    None,
                    Some(format!("full: {e}")),
                )
            }
        }
    }
}
