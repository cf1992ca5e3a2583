//! `tinyagent run` and `tinyagent resume`: flags to a launch, the run
//! driven, its outcome to an exit code (see [`crate::launch`]).

use super::CliError;
use super::args::{ResumeArgs, RunArgs};
use crate::launch::{self, Opened, Running};

/// `tinyagent run`, or a new `tinyagent chat` (`chat`: its prompt instead
/// of a task).
pub async fn run(args: &RunArgs, chat: bool) -> Result<i32, CliError> {
    let running = launch::new::open(args, chat)?;
    drive(running).await
}

/// `tinyagent resume`, or `chat --resume` (`chat`: the log must be a
/// chat's).
pub async fn resume(args: &ResumeArgs, chat: bool) -> Result<i32, CliError> {
    match launch::resume::open(args, chat)? {
        Opened::Running(running) => drive(*running).await,
        Opened::NotContinued { limit, why } => {
            super::say(&why);
            Ok(if limit { 3 } else { 0 })
        }
    }
}

/// The run's loop (or a chat's turns), the shared tail, the exit code.
async fn drive(mut running: Running) -> Result<i32, CliError> {
    let result = if running.agent.state().is_chat() {
        super::chat::converse(&mut running.agent).await
    } else {
        running.agent.run().await
    };
    let (wal, key_var) = (running.wal.clone(), running.key_var.clone());
    running.close();
    super::finished(result, &wal, &key_var)
}
