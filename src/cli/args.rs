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

#[derive(Debug, Args, Clone, Default, PartialEq)]
pub struct ProviderArgs {
    /// Model API (default: model.provider in the config, else openai; on
    /// resume: the log's).
    #[arg(long, value_enum)]
    pub provider: Option<ProviderKind>,
    /// Model name (default: model.name, else the provider's default; on
    /// resume: the log's).
    #[arg(long)]
    pub model: Option<String>,
    /// Server base URL, e.g. http://127.0.0.1:11434/v1 (default:
    /// model.base_url, else OPENAI_BASE_URL / ANTHROPIC_BASE_URL, else the
    /// provider's public endpoint; on resume: the log's).
    #[arg(long)]
    pub base_url: Option<String>,
    /// Environment variable holding the API key (default: OPENAI_API_KEY or
    /// ANTHROPIC_API_KEY).
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
    #[command(flatten)]
    pub opts: RunOptions,
}

/// `run`'s flags are its options (`args.wal` reads `args.opts.wal`).
impl std::ops::Deref for RunArgs {
    type Target = RunOptions;
    fn deref(&self) -> &RunOptions {
        &self.opts
    }
}

/// `tinyagent chat`: the options of `run`, without a task.
#[derive(Debug, Args, Clone, Default)]
pub struct ChatArgs {
    /// The first message, sent as soon as the chat starts (`tinyagent
    /// chat fix the bug`, or `tinyagent "fix the bug"` on a terminal).
    #[arg(value_name = "MESSAGE", conflicts_with = "resume")]
    pub words: Vec<String>,
    /// Go back to a chat's prompt (or finish its interrupted turn first):
    /// the same as `tinyagent resume <LOG>` on a chat's log.
    #[arg(long, value_name = "LOG")]
    pub resume: Option<PathBuf>,
    #[command(flatten)]
    pub opts: RunOptions,
}

/// The options of a new run (`run` and `chat`).
#[derive(Debug, Args, Clone, Default, PartialEq)]
#[allow(
    clippy::struct_excessive_bools,
    reason = "one field per command-line flag"
)]
pub struct RunOptions {
    /// Log file (default $TINYAGENT_HOME/runs/<run_id>.wal); an existing file is refused.
    #[arg(long)]
    pub wal: Option<PathBuf>,
    /// JSON file of scripted model turns (required by --provider script).
    #[arg(long)]
    pub script: Option<PathBuf>,
    /// USD per million input tokens, for the cost shown and --max-cost
    /// (default: model.price_in, else 0).
    #[arg(long)]
    pub price_in: Option<f64>,
    /// USD per million output tokens (default: model.price_out, else 0).
    #[arg(long)]
    pub price_out: Option<f64>,
    /// Enable the update_plan tool and the plan pinned in every request
    /// (default: plan.enabled, else off).
    #[arg(long)]
    pub plan: bool,
    /// Read-only Markdown mirror of the plan, rewritten on every update
    /// (requires --plan; default: plan.file, else none).
    #[arg(long)]
    pub plan_file: Option<PathBuf>,
    /// Offer only read, grep and glob: no tool that changes files or runs
    /// commands.
    #[arg(long)]
    pub read_only: bool,
    /// Compact the history when the request would exceed this many tokens
    /// (default: compaction.threshold_tokens, else 96000).
    #[arg(long)]
    pub compact_at: Option<u64>,
    /// Records between background snapshots of the run's state (default:
    /// wal.snapshot_every, else 1000).
    #[arg(long)]
    pub snapshot_every: Option<u64>,
    /// Ship the log and checkpoints to S3-compatible storage,
    /// s3://bucket/prefix (default: replicate.url; docs/replication.md).
    #[arg(long, value_name = "URL")]
    pub replicate: Option<String>,
    /// Stream model output (SSE) where the provider supports it (default:
    /// model.stream, else off).
    #[arg(long)]
    pub stream: bool,
    /// Leave the AGENTS.md files of the workspace and its repository out of
    /// the system prompt.
    #[arg(long)]
    pub no_agents_md: bool,
    #[command(flatten)]
    pub session: SessionFlags,
}

/// A new run's options read through to the flags it shares with `resume`
/// (`opts.json` reads `opts.session.json`).
impl std::ops::Deref for RunOptions {
    type Target = SessionFlags;
    fn deref(&self) -> &SessionFlags {
        &self.session
    }
}

/// The flags of every command that drives a run (`run`, `chat`, `resume`,
/// `chat --resume`): one group, flattened into each, so that a command
/// handing over to another passes them whole and none is dropped on the way.
#[derive(Debug, Args, Clone, Default, PartialEq)]
pub struct SessionFlags {
    #[command(flatten)]
    pub provider: ProviderArgs,
    /// Stop after this many model steps, exit 3 (default: limits.max_steps,
    /// else unlimited; on resume: the log's).
    #[arg(long)]
    pub max_steps: Option<u64>,
    /// Stop once the run has cost this many USD, exit 3 (default:
    /// limits.max_cost_usd, else unlimited; needs prices; on resume: the
    /// log's).
    #[arg(long)]
    pub max_cost: Option<f64>,
    /// Stop after this many malformed tool calls in a row, exit 3 (default:
    /// limits.max_format_errors, else 3; on resume: the log's).
    #[arg(long)]
    pub max_format_errors: Option<u32>,
    /// Seconds to wait for the model server per attempt (for a stream: for
    /// the headers and between chunks); 6 attempts by default (default:
    /// model.request_timeout_s, else 300; on resume: the log's).
    #[arg(long, value_name = "SECONDS")]
    pub timeout: Option<u64>,
    /// Workspace the tools act in (default: the current directory). On
    /// resume a log works where it ran (--cwd may only repeat it); a
    /// trajectory that names a workspace needs --cwd to say where to work;
    /// a run from a bucket is restored into --cwd (default: the current
    /// directory, which must be empty or hold the run's last checkpoint).
    #[arg(long)]
    pub cwd: Option<PathBuf>,
    /// Replication: sync (a sync point waits for the bucket) or async
    /// (default: replicate.mode, else sync; on resume: the run's).
    #[arg(long, value_name = "MODE")]
    pub replicate_mode: Option<String>,
    /// JSON events on stdout, one per line; human output goes to stderr.
    #[arg(long)]
    pub json: bool,
    /// TOML config file (default: ./tinyagent.toml if present); flags
    /// override it. On resume, hooks and the environment come from here,
    /// never from the log.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Colour in human output: auto (a terminal, and NO_COLOR not set),
    /// always or never.
    #[arg(long, value_enum, default_value_t = ColorChoice::Auto)]
    pub color: ColorChoice,
    /// Ask before calls that can change files or run commands: never
    /// (default: approvals.mode, else never) or mutating. Answered on the
    /// terminal (y/n/a), or by `tinyagent approve` from another process. A
    /// run that asked keeps asking when resumed.
    #[arg(long, value_enum, value_name = "MODE")]
    pub approve: Option<crate::config::ApproveMode>,
}

#[derive(Debug, Args, Clone, Default)]
pub struct ResumeArgs {
    /// The log (or a whole-file trajectory JSON, which is imported first),
    /// or a run id from `tinyagent sessions` (a unique start is enough).
    /// Without one, on a terminal: a pick of this workspace's runs.
    #[arg(conflicts_with = "last")]
    pub path: Option<PathBuf>,
    /// Resume the newest run of this workspace (or of --cwd; see
    /// `tinyagent sessions`).
    #[arg(long)]
    pub last: bool,
    /// A new user message: continues a finished run too.
    #[arg(long)]
    pub message: Option<String>,
    /// Go on without the hooks the log was written with.
    #[arg(long)]
    pub no_hooks: bool,
    #[command(flatten)]
    pub session: SessionFlags,
}

/// `resume`'s options read through to the flags it shares with `run`.
impl std::ops::Deref for ResumeArgs {
    type Target = SessionFlags;
    fn deref(&self) -> &SessionFlags {
        &self.session
    }
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

/// When human output is coloured.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum ColorChoice {
    /// When stderr is a terminal and `NO_COLOR` is not set.
    #[default]
    Auto,
    Always,
    Never,
}

impl ColorChoice {
    /// Whether to colour now.
    pub fn on(self) -> bool {
        use std::io::IsTerminal;
        match self {
            ColorChoice::Always => true,
            ColorChoice::Never => false,
            ColorChoice::Auto => {
                std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
                    && std::io::stderr().is_terminal()
            }
        }
    }
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

impl ResumeArgs {
    /// The log or trajectory to resume (set by `--last` before anything
    /// reads it).
    pub fn log(&self) -> &std::path::Path {
        self.path.as_deref().unwrap_or(std::path::Path::new(""))
    }
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
        /// Tool results whole, not folded to their first and last lines.
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

#[derive(Debug, Args, Clone)]
pub struct ForkArgs {
    /// The log to fork (read only): its path, its run id (or a unique
    /// start of one), or --last.
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
