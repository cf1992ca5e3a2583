//! How a run is assembled: every origin of a run goes through here.
//!
//! A run starts from one of five origins: a new task (`run`,
//! `chat`), a log on this machine (`resume <wal>`), a whole-file trajectory
//! (`resume file.json`), a run in a bucket (`resume s3://…`), or a fork of
//! a log (`fork`, which writes the new log that `resume` then continues).
//! Each is launched in three stages:
//!
//! 1. **plan**: the local config read, the flags, the log's first record
//!    (or the trajectory, or the bucket's staged copy) and every check of
//!    them: config values, hooks, the model server a key may go to, the
//!    environment, the tool set (MCP servers started and compared), the
//!    files beside the log (`<wal>.d/`), a bucket's manifest and trees. A
//!    refusal here changes nothing: no log is created, locked, cut or
//!    imported, nothing in a bucket is taken over, no workspace file is
//!    touched.
//! 2. **open**: the side effects, in one order for every origin: the
//!    endpoint remembered, replication started (a bucket's run taken over
//!    and put in place), a trajectory imported, the log created or opened
//!    under its lock (a torn tail cut), the first checkpoint, the
//!    environment (a container started once its log names it), a restore a
//!    kill cut short finished, the agent built.
//! 3. **drive** (the caller's, through [`Running`]): the loop, or a chat's
//!    turns; then [`Running::close`], the shared tail: the log closed,
//!    replication finished, a finished run's container removed.
//!
//! The command line (`crate::cli`) maps its flags to these calls and their
//! outcome to an exit code; nothing here knows exit codes.

pub(crate) mod bucket;
mod checks;
pub(crate) mod endpoints;
mod error;
pub mod fork;
pub(crate) mod new;
pub(crate) mod parts;
pub mod request;
pub(crate) mod resume;
pub mod rewind;
pub(crate) mod secrets;
pub(crate) mod trajectory;
pub(crate) mod workspace;

pub use error::LaunchError;

/// Refuses a chat without a terminal to talk on.
pub fn need_terminal(what: &str) -> Result<(), LaunchError> {
    use std::io::IsTerminal;
    if std::io::stdin().is_terminal() {
        return Ok(());
    }
    Err(LaunchError::refused(format!(
        "{what} needs a terminal on stdin (it waits for typed messages); without one, start \
         with `tinyagent run TASK` and go on with `tinyagent resume LOG --message TEXT`"
    )))
}

/// A run opened and ready to be driven: the caller runs its loop (or a
/// chat's turns) on [`Running::agent`], then [`Running::close`].
pub struct Running {
    pub agent: crate::agent::Agent,
    replicator: Option<crate::replicate::Replicator>,
    /// The run's container, removed once the run has finished.
    container: Option<crate::exec::container::Container>,
    /// The log.
    pub wal: std::path::PathBuf,
    /// The variable the run's API key is read from (for the person's hint
    /// when the server refuses it).
    pub key_var: String,
}

impl Running {
    /// The tail every origin shares, once the loop returned: the log
    /// closed, replication finished (what the person should know said), a
    /// finished run's container removed.
    pub fn close(mut self) {
        let finished = matches!(
            self.agent.state().status,
            crate::session::Status::Finished(_)
        );
        let state = self.agent.state().clone();
        self.agent.close();
        bucket::finish(self.replicator.take(), &state);
        if finished {
            parts::remove_container(self.container.as_ref());
        }
    }
}

/// What opening a resume gave: a run to drive, or a run that does not go
/// on (finished, or stopped by a limit that was not raised) and why.
pub enum Opened {
    Running(Box<Running>),
    /// Nothing was appended; `limit` when a limit stopped the run.
    NotContinued {
        limit: bool,
        why: String,
    },
}
