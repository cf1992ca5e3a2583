//! Why a launch did not go on: refused (nothing changed), failed at run
//! time, or stopped by a signal before the run began. The command line
//! turns each into its exit code; nothing here knows those numbers.

use nix::sys::signal::Signal;

/// A launch's failure and the one line that says why.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    /// Bad input, or a state the command will not act on: every check
    /// comes before the first side effect, so nothing changed.
    #[error("{0}")]
    Refused(String),
    /// A failure at run time: the disk, the bucket, the environment.
    #[error("{0}")]
    Failed(String),
    /// A stopping signal came before the run began.
    #[error("{1}")]
    Stopped(Signal, String),
}

impl LaunchError {
    pub fn refused(message: impl Into<String>) -> LaunchError {
        LaunchError::Refused(message.into())
    }

    pub fn failed(message: impl Into<String>) -> LaunchError {
        LaunchError::Failed(message.into())
    }

    /// The same kind of error with another message.
    #[must_use]
    pub fn map_message(self, f: impl FnOnce(String) -> String) -> LaunchError {
        match self {
            LaunchError::Refused(m) => LaunchError::Refused(f(m)),
            LaunchError::Failed(m) => LaunchError::Failed(f(m)),
            LaunchError::Stopped(s, m) => LaunchError::Stopped(s, f(m)),
        }
    }

    /// Whether this is a refusal.
    pub fn is_refusal(&self) -> bool {
        matches!(self, LaunchError::Refused(_))
    }
}

impl From<crate::agent::AgentError> for LaunchError {
    fn from(e: crate::agent::AgentError) -> LaunchError {
        if e.is_refusal() {
            LaunchError::Refused(e.to_string())
        } else {
            LaunchError::Failed(e.to_string())
        }
    }
}

impl From<crate::config::ConfigError> for LaunchError {
    fn from(e: crate::config::ConfigError) -> LaunchError {
        LaunchError::Refused(e.to_string())
    }
}

/// A storage error that is the input's fault (a corrupt or locked log) is
/// a refusal; any other a failure.
impl From<crate::store::StoreError> for LaunchError {
    fn from(e: crate::store::StoreError) -> LaunchError {
        if e.is_refusal() {
            LaunchError::Refused(e.to_string())
        } else {
            LaunchError::Failed(e.to_string())
        }
    }
}

impl From<anyhow::Error> for LaunchError {
    fn from(e: anyhow::Error) -> LaunchError {
        LaunchError::Failed(format!("{e:#}"))
    }
}
