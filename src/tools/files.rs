//! Helpers shared by the file tools [`read`](super::read),
//! [`write`](super::write) and [`edit`](super::edit): every path goes through
//! [`super::paths::resolve`] first, and I/O errors read the same in all three.

use super::paths;
use super::{ToolContext, ToolOutcome};
use std::io;
use std::path::PathBuf;

/// Resolves a path, turning a refusal into an error outcome.
pub(super) fn resolve(ctx: &ToolContext, path: &str) -> Result<PathBuf, ToolOutcome> {
    paths::resolve(ctx.workspace, path).map_err(|e| ToolOutcome::error(e.to_string()))
}

/// An I/O error while trying to `what` (read, write) `path`, as a tool error.
pub(super) fn io_error(what: &str, path: &str, e: &io::Error) -> ToolOutcome {
    match e.kind() {
        io::ErrorKind::NotFound => ToolOutcome::error(format!("file not found: {path}")),
        io::ErrorKind::PermissionDenied => {
            ToolOutcome::error(format!("permission denied: cannot {what} {path}"))
        }
        _ => ToolOutcome::error(format!("cannot {what} {path}: {e}")),
    }
}
