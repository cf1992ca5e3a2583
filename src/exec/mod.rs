//! Host execution: where a command runs and how it is held, stopped and
//! kept apart from the agent, below the tools that start commands.
//!
//! - [`env`]: the execution environments ([`ExecEnv`]): local, a container
//!   per run; key scrubbing. [`sandbox`]: the bubblewrap sandbox and its
//!   command line.
//! - [`container`]: the container engine's command line and the wrappers
//!   inside the run's container.
//! - [`group`]: a foreground command's process group, held before its exec
//!   until recorded, stopped with a grace, found again after a kill.
//! - [`host`]: a child started apart from the agent ([`host::detach`]: its
//!   own session, no inherited descriptor), `/proc/PID/stat`, group kill.
//! - [`protected`]: the run's own files, out of every tool's reach.

pub mod container;
pub mod env;
pub mod group;
pub mod host;
pub mod protected;
pub mod sandbox;

pub use env::{ContainerEnv, EnvError, ExecEnv, HideVars, LocalEnv};
pub use sandbox::SandboxEnv;
