//! Model Context Protocol servers as tool sources.
//!
//! Each enabled `[mcp.servers.<name>]` of the local config is started over
//! stdio when a run (or resume, or `tinyagent mcp list`) starts, spoken to
//! with the `rmcp` client, and asked for its tools. Every tool becomes one
//! [`McpTool`] named `<name>__<tool>`, registered in the run's
//! [`crate::tools::ToolSet`] like a built-in: the same hooks, write order,
//! concurrency and resume rules apply, decided by its [`Effect`]. A tool is
//! [`Effect::ReadOnly`] only when the server marks it `readOnlyHint: true`
//! (and not `destructiveHint: true`); every other tool is mutating, so an
//! interrupted call of it is never run again.
//!
//! The servers' tool lists go into `run.started` ([`McpToolRecord`]: name,
//! effect, a hash of description and schema) besides the tool signature;
//! resume starts the servers again and refuses (exit 2) when what they offer
//! differs, naming each difference ([`differences`]).
//!
//! A server runs in its own process group with SIGKILL as its parent-death
//! signal (see [`crate::exec::group::die_with_agent`]), with the agent's
//! environment less every API key variable, plus the `env` of its table.
//! A [`Server`] stops its process when it is dropped. A server that dies
//! while the run goes on is started again once ([`server`]).
//!
//! A call waits at most the server's `timeout_s` ([`DEFAULT_CALL_TIMEOUT`])
//! and a message from a server may be at most [`MAX_MESSAGE`] long; either
//! failure gives the call an error result and stops the server, which the
//! next call starts again within the same once-per-run budget as a server
//! that died (after that, calls to it are errors at once).

mod conn;
mod limit;
mod render;
mod server;
mod tool;

pub use server::Server;
pub use tool::McpTool;

use crate::config::McpServerSection;
use crate::tools::{Effect, Tool, ToolSetOptions};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// How long a server may take to start and list its tools unless its table
/// says otherwise.
pub const DEFAULT_STARTUP_TIMEOUT: Duration = Duration::from_secs(30);

pub use crate::event::McpToolRecord;

/// How long a call waits for its answer unless the server's table says
/// otherwise (`timeout_s`).
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(120);

/// The largest message (one line on the server's stdout, its newline
/// included) a server may send: a larger one is refused before it is read
/// whole, the call waiting for it gets an error result and the server is
/// stopped.
pub const MAX_MESSAGE: usize = 16 * 1024 * 1024;

/// One server to start: its table, resolved.
#[derive(Debug, Clone)]
pub struct ServerSpec {
    pub name: String,
    pub command: String,
    pub args: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub startup_timeout: Duration,
    /// How long one call waits for its answer.
    pub call_timeout: Duration,
    /// Where it runs: the run's workspace.
    pub cwd: PathBuf,
    /// Variables taken out of its environment besides the usual key
    /// variables (the run's `api_key_env`).
    pub hide: Vec<String>,
    /// The sandbox it runs in (`env.kind = "sandbox"`), like every command
    /// of the run; `None` runs it on the host.
    pub confine: Option<crate::exec::SandboxEnv>,
}

impl ServerSpec {
    /// The enabled servers of a config, in name order.
    pub fn enabled(
        servers: &BTreeMap<String, McpServerSection>,
        workspace: &Path,
        hide: &[String],
    ) -> Vec<ServerSpec> {
        servers
            .iter()
            .filter(|(_, s)| s.enabled != Some(false))
            .map(|(name, s)| ServerSpec {
                name: name.clone(),
                command: s.command.clone(),
                args: s.args.clone(),
                env: s.env.clone(),
                startup_timeout: s
                    .startup_timeout_ms
                    .map_or(DEFAULT_STARTUP_TIMEOUT, Duration::from_millis),
                call_timeout: s
                    .timeout_s
                    .map_or(DEFAULT_CALL_TIMEOUT, Duration::from_secs),
                cwd: workspace.to_path_buf(),
                hide: hide.to_vec(),
                confine: None,
            })
            .collect()
    }
}

impl ServerSpec {
    /// What a sandbox must show the server of the host so that it can run
    /// (see [`crate::exec::SandboxEnv::showing`], which keeps only
    /// what exists and may be shown): its program, looked up on the `PATH`
    /// it gets (its table's `env` first) unless it names a path, and every
    /// absolute path among its arguments, given alone or as a word within
    /// one (an `sh -c` script, `--opt=/path`). A path that lies in a
    /// `node_modules` directory brings the directory holding the outermost
    /// one: the installed package tree, whose files and dependencies Node
    /// loads besides the script named.
    pub fn own_files(&self) -> Vec<PathBuf> {
        let mut named = Vec::new();
        if self.command.contains('/') {
            named.push(self.cwd.join(&self.command));
        } else {
            let path = self
                .env
                .get("PATH")
                .cloned()
                .or_else(|| std::env::var("PATH").ok())
                .unwrap_or_default();
            if let Some(found) = std::env::split_paths(&path)
                .map(|dir| dir.join(&self.command))
                .find(|p| p.is_file())
            {
                named.push(found);
            }
        }
        for arg in &self.args {
            if arg.starts_with('/') {
                named.push(PathBuf::from(arg));
            }
            let words = arg.split(|c: char| c.is_whitespace() || "'\";=:()&|<>`".contains(c));
            named.extend(
                words
                    .filter(|w| w.starts_with('/') && w != arg)
                    .map(PathBuf::from),
            );
        }
        let mut out = Vec::new();
        for path in named {
            // The file a link names, besides the link.
            if let Ok(real) = path.canonicalize()
                && real != path
            {
                out.extend(package_tree(&real));
                out.push(real);
            }
            out.extend(package_tree(&path));
            out.push(path);
        }
        out.sort();
        out.dedup();
        out
    }
}

/// The directory holding the outermost `node_modules` of `path`, if any.
fn package_tree(path: &Path) -> Option<PathBuf> {
    let mut tree = None;
    for dir in path.ancestors().skip(1) {
        if dir.file_name().is_some_and(|n| n == "node_modules") {
            tree = dir.parent().map(Path::to_path_buf);
        }
    }
    tree
}

/// The started servers of one run. A server stops when the last of it is
/// dropped: this list and the [`McpTool`]s made from it share it.
#[derive(Default)]
pub struct McpServers {
    servers: Vec<Arc<Server>>,
}

impl std::fmt::Debug for McpServers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.servers.iter().map(|s| s.name()).collect();
        f.debug_struct("McpServers")
            .field("servers", &names)
            .finish()
    }
}

impl McpServers {
    /// Starts every server (all at once) and lists its tools. The first
    /// failure, in name order, is the error (naming the server); every
    /// server started is stopped then. `stop` cuts the start short, and
    /// later the calls to the servers (see [`Server::start`]).
    pub fn start(
        specs: Vec<ServerSpec>,
        stop: &crate::signals::StopToken,
    ) -> Result<McpServers, String> {
        let pending: Vec<_> = specs
            .into_iter()
            .map(|spec| {
                let stop = stop.clone();
                std::thread::spawn(move || Server::start(spec, stop))
            })
            .collect();
        let mut servers = Vec::new();
        let mut first_error = None;
        for handle in pending {
            match handle.join() {
                Ok(Ok(server)) => servers.push(Arc::new(server)),
                Ok(Err(e)) => {
                    first_error.get_or_insert(e);
                }
                Err(_) => {
                    first_error.get_or_insert_with(|| "an MCP server's start panicked".into());
                }
            }
        }
        match first_error {
            // Dropping `servers` stops those that did start.
            Some(e) => Err(e),
            None => Ok(McpServers { servers }),
        }
    }

    pub fn servers(&self) -> &[Arc<Server>] {
        &self.servers
    }

    pub fn is_empty(&self) -> bool {
        self.servers.is_empty()
    }

    /// Every server's tools as [`Tool`]s, in server then server order.
    pub fn tools(&self) -> Vec<Box<dyn Tool>> {
        self.servers
            .iter()
            .flat_map(|s| {
                s.tools()
                    .iter()
                    .map(|t| Box::new(McpTool::new(s, t)) as Box<dyn Tool>)
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// What `run.started` records of the tools a run with `opts` offers.
    pub fn records(&self, opts: ToolSetOptions) -> Vec<McpToolRecord> {
        self.tools()
            .iter()
            .filter(|t| opts.offers(t.effect()))
            .map(|t| record(t.as_ref()))
            .collect()
    }
}

/// The record of one tool.
pub fn record(tool: &dyn Tool) -> McpToolRecord {
    let mut hasher = Sha256::new();
    for part in [tool.description(), &tool.parameters().to_string()] {
        hasher.update((part.len() as u64).to_le_bytes());
        hasher.update(part.as_bytes());
    }
    McpToolRecord {
        name: tool.name().to_string(),
        effect: effect_name(tool.effect()).to_string(),
        schema: hasher
            .finalize()
            .iter()
            .take(8)
            .map(|b| format!("{b:02x}"))
            .collect(),
    }
}

pub fn effect_name(effect: Effect) -> &'static str {
    match effect {
        Effect::ReadOnly => "read-only",
        Effect::Mutating | Effect::Plan => "mutating",
    }
}

/// The server a tool name belongs to.
fn server_of(name: &str) -> &str {
    name.split_once("__").map_or(name, |(s, _)| s)
}

/// What differs between the MCP tools a log recorded and those the servers
/// offer now, one sentence each; empty when they agree.
pub fn differences(recorded: &[McpToolRecord], live: &[McpToolRecord]) -> Vec<String> {
    let servers = |list: &[McpToolRecord]| -> Vec<String> {
        let mut s: Vec<String> = list
            .iter()
            .map(|t| server_of(&t.name).to_string())
            .collect();
        s.dedup();
        s
    };
    let (was, now) = (servers(recorded), servers(live));
    let mut out = Vec::new();
    for s in was.iter().filter(|s| !now.contains(s)) {
        out.push(format!(
            "MCP server `{s}` gave the run tools but offers none now (not configured, disabled, \
             or listing no tools)"
        ));
    }
    for s in now.iter().filter(|s| !was.contains(s)) {
        out.push(format!(
            "MCP server `{s}` is configured now but the run was started without it"
        ));
    }
    for r in recorded
        .iter()
        .filter(|r| now.iter().any(|s| s == server_of(&r.name)))
    {
        match live.iter().find(|l| l.name == r.name) {
            None => out.push(format!("MCP tool `{}` is gone", r.name)),
            Some(l) if l.effect != r.effect => out.push(format!(
                "MCP tool `{}` was {} and is {} now",
                r.name, r.effect, l.effect
            )),
            Some(l) if l.schema != r.schema => out.push(format!(
                "MCP tool `{}` changed its description or input schema",
                r.name
            )),
            Some(_) => {}
        }
    }
    for l in live
        .iter()
        .filter(|l| was.iter().any(|s| s == server_of(&l.name)))
    {
        if !recorded.iter().any(|r| r.name == l.name) {
            out.push(format!("MCP tool `{}` is new", l.name));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(name: &str, effect: &str, schema: &str) -> McpToolRecord {
        McpToolRecord {
            name: name.into(),
            effect: effect.into(),
            schema: schema.into(),
        }
    }

    #[test]
    fn differences_name_each_change() {
        let was = vec![
            rec("fs__read", "read-only", "a"),
            rec("fs__write", "mutating", "b"),
            rec("fs__list", "read-only", "c"),
            rec("mem__graph", "read-only", "d"),
        ];
        assert!(differences(&was, &was).is_empty());
        let now = vec![
            rec("fs__read", "mutating", "a"),
            rec("fs__write", "mutating", "x"),
            rec("fs__move", "mutating", "e"),
            rec("time__now", "read-only", "f"),
        ];
        let d = differences(&was, &now).join("\n");
        for needle in [
            "`mem` gave the run tools",
            "`time` is configured now",
            "`fs__list` is gone",
            "`fs__read` was read-only and is mutating",
            "`fs__write` changed",
            "`fs__move` is new",
        ] {
            assert!(d.contains(needle), "{needle}: {d}");
        }
    }

    #[test]
    fn a_servers_own_files_are_its_program_its_paths_and_their_package_tree() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let bin = root.join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::write(bin.join("node"), "").unwrap();
        let script = root.join("p/node_modules/@s/srv/dist/index.js");
        let spec = |command: &str, args: &[&str]| ServerSpec {
            name: "s".into(),
            command: command.into(),
            args: args.iter().map(|a| a.to_string()).collect(),
            env: BTreeMap::from([("PATH".to_string(), bin.display().to_string())]),
            startup_timeout: DEFAULT_STARTUP_TIMEOUT,
            call_timeout: DEFAULT_CALL_TIMEOUT,
            cwd: root.join("ws"),
            hide: vec![],
            confine: None,
        };
        let s = script.display().to_string();
        assert_eq!(
            spec("node", &[&s, "stdio", "/data/x"]).own_files(),
            vec![
                PathBuf::from("/data/x"),
                bin.join("node"),
                root.join("p"),
                script.clone()
            ]
        );
        // Words within an argument; a program given as a path.
        let shell = format!("node '{s}'; true");
        assert_eq!(
            spec("./run.sh", &["-c", &shell, "--root=/srv/a"]).own_files(),
            vec![
                PathBuf::from("/srv/a"),
                root.join("p"),
                script.clone(),
                root.join("ws/./run.sh"),
            ]
        );
    }

    #[test]
    fn disabled_servers_are_left_out() {
        let mut servers = BTreeMap::new();
        for (name, enabled) in [("a", None), ("b", Some(false)), ("c", Some(true))] {
            servers.insert(
                name.to_string(),
                McpServerSection {
                    command: "x".into(),
                    args: vec![],
                    env: BTreeMap::new(),
                    enabled,
                    startup_timeout_ms: Some(5),
                    timeout_s: (name == "c").then_some(9),
                },
            );
        }
        let specs = ServerSpec::enabled(&servers, Path::new("/w"), &[]);
        let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["a", "c"]);
        assert_eq!(specs[0].startup_timeout, Duration::from_millis(5));
        assert_eq!(specs[0].call_timeout, DEFAULT_CALL_TIMEOUT);
        assert_eq!(specs[1].call_timeout, Duration::from_secs(9));
    }
}
