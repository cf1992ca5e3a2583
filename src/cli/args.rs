//! Raw command-line arguments (clap). They are turned into validated options
//! before any I/O happens.

pub use crate::bench::BenchSaveArgs;
use crate::config::ProviderKind;
use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

#[derive(Debug, Parser)]
#[command(
    name = "tinyagent",
    version,
    about = "A coding agent whose runs survive crashes"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Start a new run; prints the log path on stderr.
    Run(RunArgs),
    /// Continue a stopped or crashed run in place, appending to its log.
    Resume(ResumeArgs),
    /// Look at, check, repair, export or import a log.
    #[command(subcommand)]
    Log(LogCommand),
    /// A new log holding a run's history up to the end of a step (the
    /// original is never changed); --restore also puts the workspace's files
    /// back to that step.
    Fork(ForkArgs),
    /// Benchmarks.
    #[command(subcommand)]
    Bench(BenchCommand),
    /// An offline end-to-end run with a built-in scripted model.
    Demo(DemoArgs),
}

#[derive(Debug, Args, Clone, Default)]
pub struct ProviderArgs {
    #[arg(long, value_enum)]
    pub provider: Option<ProviderKind>,
    #[arg(long)]
    pub model: Option<String>,
    #[arg(long)]
    pub base_url: Option<String>,
    /// Environment variable holding the API key.
    #[arg(long)]
    pub api_key_env: Option<String>,
}

#[derive(Debug, Args, Clone, Default)]
#[allow(
    clippy::struct_excessive_bools,
    reason = "one field per command-line flag"
)]
pub struct RunArgs {
    /// What the agent should do.
    pub task: String,
    /// Log file (default $TINYAGENT_HOME/runs/<run_id>.wal); an existing file is refused.
    #[arg(long)]
    pub wal: Option<PathBuf>,
    #[command(flatten)]
    pub provider: ProviderArgs,
    /// Scripted model responses (provider script).
    #[arg(long)]
    pub script: Option<PathBuf>,
    /// USD per million input tokens.
    #[arg(long)]
    pub price_in: Option<f64>,
    /// USD per million output tokens.
    #[arg(long)]
    pub price_out: Option<f64>,
    #[arg(long)]
    pub max_steps: Option<u64>,
    #[arg(long)]
    pub max_cost: Option<f64>,
    #[arg(long)]
    pub max_format_errors: Option<u32>,
    /// Enable the update_plan tool.
    #[arg(long)]
    pub plan: bool,
    /// Read-only Markdown mirror of the plan (requires --plan).
    #[arg(long)]
    pub plan_file: Option<PathBuf>,
    /// Offer no tool that changes files or runs commands.
    #[arg(long)]
    pub read_only: bool,
    /// Compact the model view when the estimate exceeds this many tokens.
    #[arg(long)]
    pub compact_at: Option<u64>,
    /// Records between background snapshots.
    #[arg(long)]
    pub snapshot_every: Option<u64>,
    /// Workspace the tools act in (default: current directory).
    #[arg(long)]
    pub cwd: Option<PathBuf>,
    /// JSON events on stdout; human output goes to stderr.
    #[arg(long)]
    pub json: bool,
    /// TOML config (default ./tinyagent.toml if present).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Stream model output (SSE) where the provider supports it.
    #[arg(long)]
    pub stream: bool,
}

#[derive(Debug, Args, Clone, Default)]
pub struct ResumeArgs {
    /// The log (or a whole-file trajectory JSON, which is imported first).
    pub path: PathBuf,
    #[arg(long)]
    pub json: bool,
    #[arg(long)]
    pub max_steps: Option<u64>,
    #[arg(long)]
    pub max_cost: Option<f64>,
    /// Raise the limit of consecutive malformed tool calls.
    #[arg(long)]
    pub max_format_errors: Option<u32>,
    /// A new user message; continues a finished run.
    #[arg(long)]
    pub message: Option<String>,
    #[command(flatten)]
    pub provider: ProviderArgs,
    /// TOML config (default ./tinyagent.toml if present): hooks and the
    /// environment come from here, never from the log.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Go on without the hooks the log was written with.
    #[arg(long)]
    pub no_hooks: bool,
    /// Where a resumed trajectory's run works (required for a trajectory
    /// file: the workspace it names is not taken on its word).
    #[arg(long)]
    pub cwd: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub enum LogCommand {
    /// What the log holds.
    Inspect {
        wal: PathBuf,
        #[arg(long)]
        json: bool,
    },
    /// Exit 0 clean, 1 torn tail (resume will cut it), 2 corrupt or unreadable.
    Verify { wal: PathBuf },
    /// Cut a torn tail (the cut bytes are kept beside the log).
    Repair { wal: PathBuf },
    /// Whole-file trajectory JSON, schema v2.
    Export {
        wal: PathBuf,
        #[arg(short = 'o', long = "output")]
        output: Option<PathBuf>,
    },
    /// A unified diff of the workspace files one step or one call changed
    /// (without --step or --call: the whole run).
    Diff {
        wal: PathBuf,
        #[arg(long, conflicts_with = "call")]
        step: Option<u64>,
        #[arg(long)]
        call: Option<String>,
    },
    /// Trajectory JSON v1 or v2 -> log.
    Import {
        json: PathBuf,
        #[arg(short = 'o', long = "output")]
        output: PathBuf,
    },
}

#[derive(Debug, Args, Clone)]
pub struct ForkArgs {
    /// The log to fork (read only).
    pub wal: PathBuf,
    /// The last step the fork keeps (0: only the starting state).
    #[arg(long)]
    pub at: u64,
    /// The new log (default $TINYAGENT_HOME/runs/<new run_id>.wal).
    #[arg(short = 'o', long = "output")]
    pub output: Option<PathBuf>,
    /// Also put the workspace's files back to the step's last checkpoint
    /// (files created later are removed, deleted ones come back; ignored
    /// files are not touched).
    #[arg(long)]
    pub restore: bool,
}

#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Save cost: log append vs whole-file checkpoint, side by side.
    Save(BenchSaveArgs),
}

#[derive(Debug, Args, Clone, Default)]
pub struct DemoArgs {
    /// Keep the demo's workspace and log in this directory.
    #[arg(long)]
    pub dir: Option<PathBuf>,
    #[arg(long)]
    pub json: bool,
}
