//! Raw command-line arguments (clap). They are turned into validated options
//! before any I/O happens.

pub use crate::bench::BenchSaveArgs;
pub use crate::launch::request::{
    ChatArgs, ColorChoice, ForkArgs, ProviderArgs, RestoreArgs, ResumeArgs, RunArgs, RunOptions,
    SessionFlags,
};
use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

#[derive(Debug, Parser)]
#[command(
    name = "tinyagent",
    version,
    about = "A coding agent whose runs survive crashes",
    long_about = "A coding agent whose runs survive crashes: every step is written to a \
                  CRC-framed, fdatasync'd log before anything depends on it, so a run killed at \
                  any moment resumes where it stopped.",
    after_help = "Logs go to $TINYAGENT_HOME/runs (default ~/.local/state/tinyagent/runs). \
                  Start with `tinyagent demo` (offline); `tinyagent sessions` lists your runs."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

/// The command line as clap is to read it: on a terminal, `tinyagent`
/// alone is `tinyagent chat`, and `tinyagent words…` (a first word that
/// names no subcommand) is `tinyagent chat words…`. Off a terminal nothing
/// changes: `tinyagent` alone prints the help, as a script expects.
pub fn chat_by_default(mut args: Vec<std::ffi::OsString>) -> Vec<std::ffi::OsString> {
    use std::io::IsTerminal;
    let on_terminal = std::io::stdin().is_terminal() && std::io::stderr().is_terminal();
    let Some(first) = args.get(1).map(|a| a.to_string_lossy().into_owned()) else {
        if on_terminal {
            args.push("chat".into());
        }
        return args;
    };
    // Help and version stay what they are; so does every subcommand.
    if matches!(
        first.as_str(),
        "-h" | "--help" | "-V" | "--version" | "help"
    ) {
        return args;
    }
    let cmd = <Cli as clap::CommandFactory>::command();
    let names_a_command = cmd
        .get_subcommands()
        .any(|c| c.get_name() == first || c.get_all_aliases().any(|a| a == first));
    if names_a_command || !on_terminal {
        return args;
    }
    args.insert(1, "chat".into());
    args
}

/// The command line as clap is to read it ([`chat_by_default`], and
/// `--last` where a log goes: see `cli::runs`).
pub fn prepare(args: Vec<std::ffi::OsString>) -> Vec<std::ffi::OsString> {
    let mut args = chat_by_default(args);
    super::runs::spell_last(&mut args);
    args
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Start a new run; prints the log path on stderr.
    #[command(after_help = RUN_EXAMPLES)]
    Run(RunArgs),
    /// Continue a stopped or crashed run in place, appending to its log.
    #[command(after_help = RESUME_EXAMPLES)]
    Resume(ResumeArgs),
    /// An interactive session on a terminal: type a message, the agent
    /// works, then waits for the next (Ctrl-C stops a turn, Ctrl-D ends).
    #[command(after_help = crate::tui::commands::chat_help())]
    Chat(ChatArgs),
    /// Answer a run's approval question from another process (allow, or
    /// --deny); the run itself records the answer.
    Approve(ApproveArgs),
    /// The runs under $TINYAGENT_HOME, newest first: this workspace's, or all.
    Sessions(SessionsArgs),
    /// Look at, check, repair, export or import a log.
    #[command(subcommand)]
    Log(LogCommand),
    /// A new log holding a run's history up to the end of a step (the
    /// original is never changed); --restore also puts the workspace's files
    /// back to that step.
    Fork(ForkArgs),
    /// Undo a fork's restore: `tinyagent restore --undo <FORK.wal>` puts the
    /// paths it changed back as they were before it.
    Restore(RestoreArgs),
    /// Benchmarks.
    #[command(subcommand)]
    Bench(BenchCommand),
    /// An offline end-to-end run with a built-in scripted model.
    Demo(DemoArgs),
    /// Shell completions for bash, zsh, fish, elvish or PowerShell, on stdout.
    Completions(CompletionsArgs),
    /// The manual page (roff), on stdout: `tinyagent man | man -l -`.
    Man,
    /// The container environment's containers.
    #[command(subcommand)]
    Env(EnvCommand),
    /// The MCP servers of the config and their tools.
    #[command(subcommand)]
    Mcp(McpCommand),
}

const RUN_EXAMPLES: &str = "Examples:
  tinyagent run \"fix the failing test in src/parse.rs\"
  tinyagent run --base-url http://127.0.0.1:11434/v1 --model qwen2.5-coder:7b \"add a --verbose flag\"
  tinyagent run --provider anthropic --model claude-sonnet-4-5 --plan \"port the build to cargo\"
  tinyagent run --price-in 0.15 --price-out 0.60 --max-cost 1.00 \"...\"
  tinyagent run --wal run.wal --json \"...\" > events.jsonl

The log path is printed on stderr; after a crash or Ctrl-C, `tinyagent resume <log>` continues.";

const RESUME_EXAMPLES: &str = "Examples:
  tinyagent resume                                on a terminal: pick one of this directory's runs
  tinyagent resume --last                         the newest run of this directory
  tinyagent resume ~/.local/state/tinyagent/runs/r20261201-abcd.wal
  tinyagent resume run.wal --max-steps 80         raise a limit that stopped the run
  tinyagent resume run.wal --message \"now also update the docs\"
  tinyagent resume old-run.json --cwd .           a trajectory file: imported first

Provider settings come from the log; hooks and the environment from the local config.";

#[derive(Debug, Args, Clone)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

#[derive(Debug, Subcommand)]
pub enum EnvCommand {
    /// Remove the containers (`tinyagent-*`) whose runs are finished or
    /// whose logs are gone.
    Prune(EnvPruneArgs),
}

#[derive(Debug, Args, Clone, Default)]
pub struct EnvPruneArgs {
    /// The engine to ask (default: the first of podman, docker found).
    #[arg(long, value_enum)]
    pub engine: Option<crate::config::EngineKind>,
}

/// `tinyagent approve`: the answer to a run's waiting question.
#[derive(Debug, Args, Clone, Default)]
pub struct ApproveArgs {
    /// The log of the run that waits: its path, its run id (or a unique
    /// start of one), or --last.
    pub wal: PathBuf,
    /// The call it asks about (`log inspect` and `sessions` show it).
    pub call_id: String,
    /// Deny the call instead of allowing it.
    #[arg(long)]
    pub deny: bool,
    /// Why (shown to the model with a denied call).
    #[arg(long, value_name = "TEXT")]
    pub reason: Option<String>,
}

#[derive(Debug, Args, Clone, Default)]
pub struct SessionsArgs {
    /// The runs stored in a bucket (s3://bucket/prefix) instead.
    pub url: Option<String>,
    /// Every workspace's runs, not only those of the current directory.
    #[arg(long)]
    pub all: bool,
    /// One JSON array of runs on stdout.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum LogCommand {
    /// What the log holds: status, liveness, plan, calls, usage, integrity.
    Inspect {
        /// The log: its path, its run id (or a unique start of one), or --last.
        wal: PathBuf,
        /// One JSON object on stdout.
        #[arg(long)]
        json: bool,
    },
    /// Exit 0 clean, 1 torn tail (resume will cut it), 2 corrupt or unreadable.
    Verify {
        /// The log: its path, its run id (or a unique start of one), or --last.
        wal: PathBuf,
    },
    /// Cut a torn tail (the cut bytes are kept beside the log).
    Repair {
        /// The log: its path, its run id (or a unique start of one), or --last.
        wal: PathBuf,
    },
    /// The run as a readable transcript: task, steps, calls, results
    /// (folded), resumes, the end; paged on a terminal ($PAGER).
    Show {
        /// The log: its path, its run id (or a unique start of one), or --last.
        wal: PathBuf,
        /// Everything whole: tool results not folded to their first and last
        /// lines, no text or argument cut.
        #[arg(long)]
        full: bool,
    },
    /// Whole-file trajectory JSON, schema v2.
    Export {
        /// The log: its path, its run id (or a unique start of one), or --last.
        wal: PathBuf,
        /// Where to write it (default: stdout).
        #[arg(short = 'o', long = "output")]
        output: Option<PathBuf>,
    },
    /// A unified diff of the workspace files one step or one call changed
    /// (without --step or --call: the whole run).
    Diff {
        /// The log: its path, its run id (or a unique start of one), or --last.
        wal: PathBuf,
        /// What this step changed (from the checkpoint before it to its last).
        #[arg(long, conflicts_with = "call")]
        step: Option<u64>,
        /// What this call changed.
        #[arg(long)]
        call: Option<String>,
    },
    /// Trajectory JSON v1 or v2 -> log.
    Import {
        /// The trajectory file (never modified).
        json: PathBuf,
        /// The new log (refused if it exists).
        #[arg(short = 'o', long = "output")]
        output: PathBuf,
    },
}

#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Save cost: log append vs whole-file checkpoint, side by side.
    Save(BenchSaveArgs),
}

#[derive(Debug, Args, Clone, Default)]
pub struct DemoArgs {
    /// Put the demo's workspace and log in this directory (default: a new
    /// temporary one, left in place for you to look at).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// JSON events on stdout.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum McpCommand {
    /// Start the configured servers, list their tools and each tool's
    /// effect, stop them.
    List(McpListArgs),
}

#[derive(Debug, Args, Clone, Default)]
pub struct McpListArgs {
    /// TOML config (default ./tinyagent.toml if present).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Where the servers run (default: current directory).
    #[arg(long)]
    pub cwd: Option<PathBuf>,
    /// One JSON object on stdout.
    #[arg(long)]
    pub json: bool,
}
