//! The command line: clap arguments -> validated options -> commands.
//!
//! Exit codes for `run` and `resume`: 0 finished, 1 run-time failure, 2
//! refused input, 3 stopped by a limit.

pub mod args;
mod demo;
pub mod fork;
pub mod inspect;
mod logcmd;
mod resume;
mod run;
pub mod secrets;

use crate::agent::AgentError;
use crate::event::RunStatus;
use crate::store::StoreError;
use args::{Cli, Command};

/// A command's failure: its exit code and the one line that says why.
#[derive(Debug)]
pub struct CliError {
    pub code: i32,
    pub message: String,
}

impl CliError {
    pub fn new(code: i32, message: impl Into<String>) -> CliError {
        CliError {
            code,
            message: message.into(),
        }
    }

    /// A refusal: bad input or a state the command will not act on (exit 2).
    pub fn refused(message: impl Into<String>) -> CliError {
        CliError::new(2, message)
    }
}

impl From<AgentError> for CliError {
    fn from(e: AgentError) -> CliError {
        CliError::new(e.exit_code(), e.to_string())
    }
}

impl From<crate::config::ConfigError> for CliError {
    fn from(e: crate::config::ConfigError) -> CliError {
        CliError::refused(e.to_string())
    }
}

/// A storage error keeps its own exit code (2 refused, 1 run-time failure)
/// and message.
impl From<StoreError> for CliError {
    fn from(e: StoreError) -> CliError {
        CliError::new(e.exit_code(), e.to_string())
    }
}

impl From<anyhow::Error> for CliError {
    fn from(e: anyhow::Error) -> CliError {
        CliError::new(1, format!("{e:#}"))
    }
}

/// Exit code for how a run ended.
pub fn status_exit_code(status: RunStatus) -> i32 {
    match status {
        RunStatus::Completed => 0,
        RunStatus::Error => 1,
        RunStatus::MaxSteps | RunStatus::MaxCost | RunStatus::FormatErrors => 3,
        RunStatus::Interrupted => crate::signals::received().map_or(130, crate::signals::exit_code),
    }
}

/// One line on stderr, best effort (a closed stderr never stops a run).
pub fn say(line: &str) {
    crate::agent::output::err_line(line);
}

/// The exit code of a run that ended with `status`; an interrupted one says
/// how to resume it.
pub fn finished(status: RunStatus, wal: &std::path::Path) -> Result<i32, CliError> {
    if status == RunStatus::Interrupted {
        let name = crate::signals::received().map_or("a signal", crate::signals::name);
        say(&format!(
            "interrupted ({name}); resume with: tinyagent resume {}",
            wal.display()
        ));
    }
    Ok(status_exit_code(status))
}

/// Runs a parsed command line and returns the exit code. For `run` and
/// `resume` the API keys are first taken out of the environment, which may
/// re-execute the process (see [`secrets`]): call this before any thread
/// starts.
pub fn main(cli: Cli) -> i32 {
    if matches!(cli.command, Command::Run(_) | Command::Resume(_))
        && let Err(e) = secrets::isolate(&secrets::named_key_vars(&cli.command))
    {
        crate::agent::output::err_line(&format!("tinyagent: {}", e.message));
        return e.code;
    }
    let result = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt.block_on(dispatch(cli)),
        Err(e) => Err(CliError::new(1, format!("cannot start the runtime: {e}"))),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            crate::agent::output::err_line(&format!("tinyagent: {}", e.message));
            e.code
        }
    }
}

/// A write past the file-size limit (`ulimit -f`) raises SIGXFSZ, whose
/// default action kills the process without a word. With a handler
/// installed the write fails with EFBIG instead, so the log writer stops
/// cleanly (exit 1, one line naming the error) and a snapshot write becomes
/// a warning. Children get the default action back on exec.
fn catch_file_size_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let xfsz = SignalKind::from_raw(nix::sys::signal::Signal::SIGXFSZ as i32);
    // Installing the handler is what matters; the stream is never polled.
    if let Err(e) = signal(xfsz) {
        crate::agent::output::err_line(&format!("tinyagent: warning: cannot catch SIGXFSZ: {e}"));
    }
}

/// From here on SIGINT, SIGTERM and SIGHUP stop the run cleanly (recorded,
/// exit 130/143/129) instead of killing the process.
fn listen_for_stop() -> Result<(), CliError> {
    crate::signals::install().map_err(|e| CliError::new(1, format!("cannot handle signals: {e}")))
}

async fn dispatch(cli: Cli) -> Result<i32, CliError> {
    catch_file_size_signal();
    match cli.command {
        Command::Run(a) => {
            listen_for_stop()?;
            run::run(&a).await
        }
        Command::Resume(a) => {
            listen_for_stop()?;
            resume::resume(&a).await
        }
        Command::Log(cmd) => tokio::task::block_in_place(|| logcmd::log(cmd)),
        Command::Bench(args::BenchCommand::Save(a)) => tokio::task::block_in_place(|| {
            let (mut out, mut err) = (std::io::stdout(), std::io::stderr());
            crate::bench::bench_save(&a, &mut out, &mut err).map_err(CliError::from)
        }),
        Command::Demo(a) => tokio::task::block_in_place(|| demo::demo(&a)),
        Command::Fork(a) => tokio::task::block_in_place(|| fork::fork(&a)),
    }
}
