//! The command line: clap arguments -> validated options -> commands.
//!
//! Exit codes for `run` and `resume`: 0 finished, 1 run-time failure, 2
//! refused input, 3 stopped by a limit.

mod approve;
pub mod args;
mod ask;
mod chat;
mod demo;
mod envcmd;
mod logcmd;
mod man;
mod mcpcmd;
mod remote;
mod runs;
mod sessions;

use crate::agent::AgentError;
use crate::event::RunStatus;
use crate::launch::{self, Opened};
use crate::replicate::ReplicateError;
use crate::signals::StopToken;
use crate::store::StoreError;
use args::{Cli, Command, ResumeArgs, RunArgs};

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
        CliError::new(if e.is_refusal() { 2 } else { 1 }, e.to_string())
    }
}

/// A launch's failure as the command line reports it: refused 2, failed 1,
/// stopped by a signal 128 + its number.
impl From<crate::launch::LaunchError> for CliError {
    fn from(e: crate::launch::LaunchError) -> CliError {
        use crate::launch::LaunchError;
        match e {
            LaunchError::Refused(m) => CliError::new(2, m),
            LaunchError::Failed(m) => CliError::new(1, m),
            LaunchError::Stopped(sig, m) => CliError::new(crate::signals::exit_code(sig), m),
        }
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
        CliError::new(if e.is_refusal() { 2 } else { 1 }, e.to_string())
    }
}

impl From<anyhow::Error> for CliError {
    fn from(e: anyhow::Error) -> CliError {
        CliError::new(1, format!("{e:#}"))
    }
}

/// Exit code for how a run ended (`stop`: the run's token, which says
/// which signal interrupted it).
pub fn status_exit_code(status: RunStatus, stop: &StopToken) -> i32 {
    match status {
        RunStatus::Completed => 0,
        RunStatus::Error | RunStatus::Truncated | RunStatus::Refused => 1,
        RunStatus::MaxSteps | RunStatus::MaxCost | RunStatus::FormatErrors => 3,
        RunStatus::Interrupted => stop.signal().map_or(130, crate::signals::exit_code),
    }
}

/// One line on stderr, best effort (a closed stderr never stops a run).
pub fn say(line: &str) {
    crate::report::err_line(line);
}

/// The exit code of a run that ended (or failed) with `result`, and the
/// next step for the person: an interrupted or failed run says how to
/// resume it, a run stopped by a limit which flag to raise, a refused key
/// which variable to check (`key_var`).
pub fn finished(
    result: Result<RunStatus, AgentError>,
    wal: &std::path::Path,
    key_var: &str,
    stop: &StopToken,
) -> Result<i32, CliError> {
    let resume = format!("tinyagent resume {}", wal.display());
    let status = match result {
        Ok(status) => status,
        Err(AgentError::Model { reason, auth }) => {
            let hint = if auth {
                format!(
                    ": check the API key in ${key_var} (or name another variable with \
                     --api-key-env)"
                )
            } else {
                String::new()
            };
            return Err(CliError::new(
                1,
                format!("{reason}{hint}; resume with: {resume}"),
            ));
        }
        // Another writer holds the run now: nothing to fix or resume here.
        Err(AgentError::Store(StoreError::Hook(e)))
            if e.downcast_ref::<ReplicateError>()
                .is_some_and(ReplicateError::is_fenced) =>
        {
            return Err(CliError::new(1, e.to_string()));
        }
        Err(e @ AgentError::Store(_)) if !e.is_refusal() => {
            return Err(CliError::new(
                1,
                format!("{e}; once that is fixed, resume with: {resume}"),
            ));
        }
        Err(e) => return Err(e.into()),
    };
    match status {
        RunStatus::Interrupted => {
            let name = stop.signal().map_or("a signal", crate::signals::name);
            say(&format!("interrupted ({name}); resume with: {resume}"));
        }
        RunStatus::MaxSteps => say(&format!(
            "stopped by the step limit; continue with: {resume} --max-steps <more>"
        )),
        RunStatus::MaxCost => say(&format!(
            "stopped by the cost limit; continue with: {resume} --max-cost <more>"
        )),
        RunStatus::FormatErrors => say(&format!(
            "stopped after malformed tool calls in a row; continue with: {resume} --message \
             <guidance> (or a higher --max-format-errors)"
        )),
        RunStatus::Truncated => say(&format!(
            "the model's answers were cut at the output limit {} times in a row; raise \
             --max-output-tokens, then continue with: {resume} --message <guidance>",
            crate::agent::MAX_TRUNCATED_IN_ROW + 1
        )),
        RunStatus::Refused => say("the model refused to answer (its text is on stdout)"),
        RunStatus::Completed | RunStatus::Error => {}
    }
    Ok(status_exit_code(status, stop))
}

/// The variables a command that drives a run names as holding its API key
/// (see [`crate::launch::secrets`]).
fn named_key_vars(command: &Command) -> Vec<String> {
    use crate::launch::secrets::{named_for_resume, named_for_run};
    match command {
        Command::Run(a) => named_for_run(&a.opts),
        Command::Chat(a) => match &a.resume {
            None => named_for_run(&a.opts),
            Some(log) => named_for_resume(&args::ResumeArgs {
                path: Some(log.clone()),
                session: a.opts.session.clone(),
                ..args::ResumeArgs::default()
            }),
        },
        Command::Resume(a) => named_for_resume(a),
        _ => Vec::new(),
    }
}

/// `tinyagent run`, or a new `tinyagent chat` (`chat`: its prompt instead
/// of a task); `stop` is the command's stop token (`listen_for_stop`).
pub async fn run(args: &RunArgs, chat: bool, stop: &StopToken) -> Result<i32, CliError> {
    let running = launch::new::open(args, chat, stop, Box::new(ask::Terminal))?;
    // Indexed under $TINYAGENT_HOME, so `sessions` lists a run logged
    // elsewhere with --wal.
    if let (Ok(home), Some(run)) = (launch::parts::home(), &running.agent.state().run) {
        crate::inspect::runs::index(&home, &running.wal, &run.run_id);
    }
    drive(running).await
}

/// `tinyagent resume`, or `chat --resume` (`chat`: the log must be a
/// chat's).
pub async fn resume(args: &ResumeArgs, chat: bool, stop: &StopToken) -> Result<i32, CliError> {
    match launch::resume::open(args, chat, stop, Box::new(ask::Terminal))? {
        Opened::Running(running) => drive(*running).await,
        Opened::NotContinued { limit, why } => {
            say(&why);
            Ok(if limit { 3 } else { 0 })
        }
    }
}

/// The run's loop (or a chat's turns), the shared tail, the exit code.
async fn drive(mut running: crate::launch::Running) -> Result<i32, CliError> {
    let result = if running.agent.state().is_chat() {
        chat::converse(&mut running.agent).await
    } else {
        running.agent.run().await
    };
    let (wal, key_var) = (running.wal.clone(), running.key_var.clone());
    let stop = running.agent.stop_token().clone();
    running.close();
    finished(result, &wal, &key_var, &stop)
}

/// Runs a parsed command line and returns the exit code. For `run` and
/// `resume` the API keys are first taken out of the environment, which may
/// re-execute the process (see [`crate::launch::secrets`]): call this before any thread
/// starts.
pub fn main(mut cli: Cli) -> i32 {
    if let Err(e) = runs::resolve(&mut cli) {
        crate::report::err_line(&format!("tinyagent: {}", e.message));
        return e.code;
    }
    if let Command::Resume(a) = &mut cli.command
        && a.last
    {
        match newest_run(a.cwd.as_deref()) {
            Ok(log) => a.path = Some(log),
            Err(e) => {
                crate::report::err_line(&format!("tinyagent: {}", e.message));
                return e.code;
            }
        }
    }
    if matches!(
        cli.command,
        Command::Run(_) | Command::Resume(_) | Command::Chat(_)
    ) && let Err(e) = crate::launch::secrets::isolate(&named_key_vars(&cli.command))
    {
        let e = CliError::from(e);
        crate::report::err_line(&format!("tinyagent: {}", e.message));
        return e.code;
    }
    let result = match crate::runtime::build() {
        Ok(rt) => rt.block_on(dispatch(cli)),
        Err(e) => Err(CliError::new(1, format!("cannot start the runtime: {e}"))),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            crate::report::err_line(&format!("tinyagent: {}", e.message));
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
        crate::report::err_line(&format!("tinyagent: warning: cannot catch SIGXFSZ: {e}"));
    }
}

/// From here on SIGINT, SIGTERM and SIGHUP stop the run cleanly (recorded,
/// exit 130/143/129) instead of killing the process: they set the token
/// this returns, which the command hands to its runs.
fn listen_for_stop() -> Result<StopToken, CliError> {
    let stop = StopToken::new();
    crate::signals::install(&stop)
        .map_err(|e| CliError::new(1, format!("cannot handle signals: {e}")))?;
    Ok(stop)
}

/// `resume --last`: the newest run of `cwd` (default: the current
/// directory).
pub(crate) fn newest_run(cwd: Option<&std::path::Path>) -> Result<std::path::PathBuf, CliError> {
    let here = match cwd {
        Some(dir) => dir.to_path_buf(),
        None => std::env::current_dir()
            .map_err(|e| CliError::new(1, format!("no current directory: {e}")))?,
    };
    crate::inspect::runs::last(&crate::launch::parts::home()?, &here).map_err(CliError::refused)
}

/// Writes `text` to stdout; a reader that went away (`| head`) is not an
/// error.
fn print_all(text: &[u8]) -> Result<i32, CliError> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(text).and_then(|()| out.flush()) {
        Ok(()) => Ok(0),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(0),
        Err(e) => Err(CliError::new(1, format!("cannot write to stdout: {e}"))),
    }
}

/// The chats a chat's command went on to (`/rewind`, `/resume`, `/new`),
/// one after another; `code` is the exit code of the one that ended.
async fn chat_next(
    mut code: i32,
    opts: &args::RunOptions,
    stop: &StopToken,
) -> Result<i32, CliError> {
    while let Some(next) = chat::take_next() {
        code = match next {
            chat::Next::Resume(log) => {
                let a = args::ResumeArgs {
                    path: Some(log),
                    session: args::SessionFlags {
                        cwd: None,
                        ..opts.session.clone()
                    },
                    ..args::ResumeArgs::default()
                };
                resume(&a, false, stop).await?
            }
            chat::Next::New => {
                let a = args::ChatArgs {
                    words: Vec::new(),
                    resume: None,
                    opts: args::RunOptions {
                        wal: None,
                        ..opts.clone()
                    },
                };
                Box::pin(chat::chat(&a, stop)).await?
            }
        };
    }
    Ok(code)
}

async fn dispatch(cli: Cli) -> Result<i32, CliError> {
    catch_file_size_signal();
    match cli.command {
        Command::Run(a) => {
            let stop = listen_for_stop()?;
            run(&a, false, &stop).await
        }
        Command::Resume(a) => {
            let stop = listen_for_stop()?;
            let code = resume(&a, false, &stop).await?;
            let opts = args::RunOptions {
                session: a.session.clone(),
                ..args::RunOptions::default()
            };
            Box::pin(chat_next(code, &opts, &stop)).await
        }
        Command::Chat(a) => {
            let stop = listen_for_stop()?;
            let code = Box::pin(chat::chat(&a, &stop)).await?;
            Box::pin(chat_next(code, &a.opts, &stop)).await
        }
        Command::Approve(a) => crate::runtime::blocking(|| approve::approve(&a)),
        Command::Log(cmd) => crate::runtime::blocking(|| logcmd::log(cmd)),
        // Made in memory, then written: a reader that goes away (`sessions
        // | head`) is not an error.
        Command::Sessions(a) => crate::runtime::blocking(|| {
            let mut text = Vec::new();
            let code = match &a.url {
                Some(url) => remote::sessions(url, a.json, &mut text),
                None => sessions::sessions(a.all, a.json, &mut text),
            };
            print_all(&text)?;
            code
        }),
        Command::Bench(args::BenchCommand::Save(a)) => crate::runtime::blocking(|| {
            let (mut out, mut err) = (std::io::stdout(), std::io::stderr());
            crate::bench::bench_save(&a, &mut out, &mut err).map_err(CliError::from)
        }),
        Command::Demo(a) => crate::runtime::blocking(|| demo::demo(&a)),
        Command::Completions(a) => {
            // Made in memory first: the generator cannot report a closed
            // stdout (`tinyagent completions bash | head`) without panicking.
            let mut text = Vec::new();
            let mut cmd = <Cli as clap::CommandFactory>::command();
            clap_complete::generate(a.shell, &mut cmd, "tinyagent", &mut text);
            print_all(&text)
        }
        Command::Man => print_all(&man::page()?),
        Command::Env(args::EnvCommand::Prune(a)) => crate::runtime::blocking(|| envcmd::prune(&a)),
        Command::Mcp(args::McpCommand::List(a)) => crate::runtime::blocking(|| mcpcmd::list(&a)),
        Command::Fork(a) => {
            crate::runtime::blocking(|| crate::launch::fork::fork(&a).map_err(CliError::from))
        }
        Command::Restore(a) => {
            crate::runtime::blocking(|| crate::launch::rewind::undo(&a).map_err(CliError::from))
        }
    }
}
