//! What a launch is asked to do: the flags of the commands that start or
//! continue a run (`run`, `chat`, `resume`, `fork`), as the command line
//! parses them. The flags every such command shares are one group,
//! [`SessionFlags`], flattened into each, so that a command handing over to
//! another passes them whole.

use crate::config::ProviderKind;
use clap::Args;
use std::path::PathBuf;

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
    /// USD per million input tokens read from the prompt cache (default:
    /// model.price_cached_in, else the built-in table, else --price-in).
    #[arg(long)]
    pub price_cached_in: Option<f64>,
    /// USD per million input tokens written to the prompt cache (default:
    /// model.price_cache_write, else the built-in table, else --price-in).
    #[arg(long)]
    pub price_cache_write: Option<f64>,
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
    /// Most tokens one reply may have (default: model.max_output_tokens,
    /// else the built-in table for known models, else the server's own
    /// limit; Anthropic, which needs one, 8192).
    #[arg(long, value_name = "TOKENS")]
    pub max_output_tokens: Option<u32>,
    /// How hard a reasoning model thinks: sent as Chat Completions'
    /// `reasoning_effort`, the Responses API's `reasoning.effort` and
    /// Anthropic's `output_config.effort` (low, medium or high only)
    /// (default: model.reasoning_effort, else the server's default).
    #[arg(long, value_name = "EFFORT")]
    pub reasoning_effort: Option<crate::kinds::ReasoningEffort>,
    /// Tokens an Anthropic model may think for before it answers: extended
    /// thinking on, `thinking.budget_tokens` (default:
    /// model.thinking_budget, else thinking off).
    #[arg(long, value_name = "TOKENS")]
    pub thinking_budget: Option<u32>,
    /// The model's context window in tokens; the compaction threshold
    /// defaults to 80% of it (default: model.context_window, else the
    /// built-in table, else 128000).
    #[arg(long, value_name = "TOKENS")]
    pub context_window: Option<u64>,
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
    /// Compact the model view when the request would exceed this many
    /// tokens (default: compaction.threshold_tokens, else 80% of the
    /// context window; on resume: what the run had, and a new value is
    /// recorded in the `resume` record for the rest of the run).
    #[arg(long, value_name = "TOKENS")]
    pub compact_at: Option<u64>,
    /// Workspace the tools act in (default: the current directory). On
    /// resume a log works where it ran (--cwd may only repeat it; a log
    /// this machine did not run is resumed there or with --cwd naming it);
    /// a trajectory that names a workspace needs --cwd to say where to work;
    /// a run from a bucket is restored into --cwd (default: the current
    /// directory, which must be empty or hold the run's last checkpoint).
    /// Never /, $HOME or an ancestor of either.
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
    /// Take a run in a bucket over even while its writer's lease is live
    /// (that writer stops at its next sync point).
    #[arg(long)]
    pub take_over: bool,
    /// The reasoning effort for this resume, over the run's (see `run
    /// --reasoning-effort`; default: what the run was started with).
    #[arg(long, value_name = "EFFORT")]
    pub reasoning_effort: Option<crate::kinds::ReasoningEffort>,
    /// The Anthropic thinking budget for this resume, over the run's (see
    /// `run --thinking-budget`; default: what the run was started with).
    #[arg(long, value_name = "TOKENS")]
    pub thinking_budget: Option<u32>,
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

impl ResumeArgs {
    /// The log or trajectory to resume (set by `--last` before anything
    /// reads it).
    pub fn log(&self) -> &std::path::Path {
        self.path.as_deref().unwrap_or(std::path::Path::new(""))
    }
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
    /// Also put back the files the run changed after the step, where they
    /// still hold what the run last left in them (the person's own files
    /// and edits are never touched; others are listed as conflicts). The
    /// workspace before is kept: `tinyagent restore --undo <NEW.wal>`.
    #[arg(long)]
    pub restore: bool,
    /// With --restore: put back conflicting files too.
    #[arg(long, requires = "restore")]
    pub force: bool,
    /// With --restore: print what the restore would do (restore, delete,
    /// conflict, skipped-oversized) and change nothing.
    #[arg(long, requires = "restore")]
    pub dry_run: bool,
    /// The run's workspace, when this is run from elsewhere (it must be
    /// the one the log names).
    #[arg(long)]
    pub cwd: Option<PathBuf>,
}

/// `tinyagent restore --undo <WAL>`.
#[derive(Debug, Args, Clone)]
pub struct RestoreArgs {
    /// The log of a fork made with --restore: its path, its run id (or a
    /// unique start of one), or --last.
    pub wal: PathBuf,
    /// Put the paths the fork's restore changed back as they were before
    /// it, where they still hold what the restore wrote; the undo is
    /// recorded in the fork's log (once: a second undo is refused).
    #[arg(long, required = true)]
    pub undo: bool,
    /// Put back conflicting files too.
    #[arg(long)]
    pub force: bool,
    /// Print what would change and change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// The run's workspace, when this is run from elsewhere (it must be
    /// the one the log names; needed for a fork this machine did not make).
    #[arg(long)]
    pub cwd: Option<PathBuf>,
}
