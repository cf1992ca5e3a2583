//! `tinyagent mcp list`: the configured MCP servers, started, their tools
//! listed with each tool's effect, then stopped.

use super::CliError;
use super::args::McpListArgs;
use crate::config::Config;
use crate::mcp::{McpServers, McpTool, Server, ServerSpec, effect_name};
use crate::tools::Tool;
use serde_json::json;
use std::sync::Arc;

/// Exit 0 when every enabled server started, 2 otherwise (each failure is
/// named; the others are still listed).
pub fn list(args: &McpListArgs) -> Result<i32, CliError> {
    let file = Config::load(args.config.as_deref())?;
    let cwd = args.cwd.clone().unwrap_or_else(|| ".".into());
    let workspace = std::fs::canonicalize(&cwd)
        .map_err(|e| CliError::refused(format!("--cwd {}: {e}", cwd.display())))?;
    let hide: Vec<String> = file.model.api_key_env.iter().cloned().collect();
    let mut listed = Vec::new();
    let mut failed = false;
    for (name, section) in &file.mcp.servers {
        if section.enabled == Some(false) {
            listed.push(json!({"name": name, "enabled": false, "tools": []}));
            continue;
        }
        let spec = ServerSpec::enabled(
            &std::iter::once((name.clone(), section.clone())).collect(),
            &workspace,
            &hide,
        );
        match McpServers::start(spec, &crate::signals::StopToken::new()) {
            Ok(started) => {
                for server in started.servers() {
                    listed.push(describe(server));
                }
            }
            Err(e) => {
                failed = true;
                listed.push(json!({"name": name, "enabled": true, "error": e, "tools": []}));
            }
        }
    }
    let out = if args.json {
        format!("{}\n", json!({ "servers": listed }))
    } else {
        human(&listed)
    };
    use std::io::Write;
    let _ = std::io::stdout().write_all(out.as_bytes());
    Ok(if failed { 2 } else { 0 })
}

fn describe(server: &Arc<Server>) -> serde_json::Value {
    let tools: Vec<serde_json::Value> = server
        .tools()
        .iter()
        .map(|info| {
            let tool = McpTool::new(server, info);
            json!({
                "name": tool.name(),
                "effect": effect_name(tool.effect()),
                "description": tool.description(),
                "input_schema": tool.parameters(),
            })
        })
        .collect();
    json!({
        "name": server.name(),
        "enabled": true,
        "command": server.command_line(),
        "tools": tools,
    })
}

fn human(listed: &[serde_json::Value]) -> String {
    if listed.is_empty() {
        return "no MCP servers are configured ([mcp.servers.<name>] in tinyagent.toml)\n".into();
    }
    let mut out = String::new();
    for s in listed {
        let name = s["name"].as_str().unwrap_or_default();
        if s["enabled"] == false {
            out.push_str(&format!("{name}: disabled\n"));
            continue;
        }
        if let Some(e) = s["error"].as_str() {
            out.push_str(&format!("{name}: {e}\n"));
            continue;
        }
        let tools = s["tools"].as_array().map(Vec::as_slice).unwrap_or_default();
        out.push_str(&format!(
            "{name}: {} ({} tools)\n",
            s["command"].as_str().unwrap_or_default(),
            tools.len()
        ));
        for t in tools {
            out.push_str(&format!(
                "  {:<40} {:<9}  {}\n",
                t["name"].as_str().unwrap_or_default(),
                t["effect"].as_str().unwrap_or_default(),
                crate::text::first_line(t["description"].as_str().unwrap_or_default(), 70)
            ));
        }
    }
    out
}
