//! [`McpTool`]: one tool of an MCP server, as a [`Tool`] of the run.

use super::Server;
use crate::tools::{Effect, Tool, ToolContext, ToolOutcome};
use rmcp::model::Tool as McpToolInfo;
use serde_json::Value;
use std::sync::Arc;

const USAGE: &str = "a JSON object matching the tool's input schema";

/// `<server>__<tool>`: calls go to the server it came from.
pub struct McpTool {
    server: Arc<Server>,
    /// The name the server knows it by.
    tool: String,
    /// The name the model knows it by.
    name: String,
    description: String,
    schema: Value,
    effect: Effect,
}

impl McpTool {
    pub fn new(server: &Arc<Server>, info: &McpToolInfo) -> McpTool {
        let mut description = info
            .description
            .as_deref()
            .or(info.title.as_deref())
            .unwrap_or("")
            .to_string();
        if description.is_empty() {
            description = format!(
                "The `{}` tool of MCP server `{}`.",
                info.name,
                server.name()
            );
        }
        McpTool {
            server: server.clone(),
            tool: info.name.to_string(),
            name: format!("{}__{}", server.name(), model_name(&info.name)),
            description,
            schema: Value::Object((*info.input_schema).clone()),
            effect: effect_of(info),
        }
    }
}

/// A tool name as model APIs accept it (letters, digits, `_`, `-`): any
/// other character becomes `_`. Calls still use the server's own name.
pub fn model_name(tool: &str) -> String {
    tool.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Read-only only when the server says `readOnlyHint: true` and does not
/// also say `destructiveHint: true`; anything else may change the world.
pub fn effect_of(info: &McpToolInfo) -> Effect {
    match &info.annotations {
        Some(a) if a.read_only_hint == Some(true) && a.destructive_hint != Some(true) => {
            Effect::ReadOnly
        }
        _ => Effect::Mutating,
    }
}

impl Tool for McpTool {
    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn parameters(&self) -> Value {
        self.schema.clone()
    }

    fn usage(&self) -> &str {
        USAGE
    }

    fn effect(&self) -> Effect {
        self.effect
    }

    fn call(&self, _ctx: &ToolContext, raw_args: &str) -> ToolOutcome {
        // No arguments at all is the empty object (tools without parameters).
        let args = if raw_args.trim().is_empty() {
            serde_json::Map::new()
        } else {
            match serde_json::from_str::<Value>(raw_args) {
                Ok(Value::Object(map)) => map,
                Ok(_) => {
                    return ToolOutcome::format_error(format!(
                        "Malformed call to `{}`: the arguments must be a JSON object. \
                         Expected arguments: {USAGE}",
                        self.name
                    ));
                }
                Err(e) => {
                    return ToolOutcome::format_error(format!(
                        "Malformed call to `{}`: the arguments are not valid JSON ({e}). \
                         Expected arguments: {USAGE}",
                        self.name
                    ));
                }
            }
        };
        self.server.call(&self.tool, args)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn info(annotations: Value) -> McpToolInfo {
        serde_json::from_value(json!({
            "name": "t",
            "inputSchema": {"type": "object"},
            "annotations": annotations,
        }))
        .unwrap()
    }

    #[test]
    fn names_are_made_acceptable_to_model_apis() {
        assert_eq!(model_name("read_file"), "read_file");
        assert_eq!(model_name("get-env"), "get-env");
        assert_eq!(model_name("files.read/all"), "files_read_all");
    }

    #[test]
    fn only_read_only_hint_makes_a_tool_read_only() {
        assert_eq!(
            effect_of(&info(json!({"readOnlyHint": true}))),
            Effect::ReadOnly
        );
        assert_eq!(
            effect_of(&info(
                json!({"readOnlyHint": true, "destructiveHint": false})
            )),
            Effect::ReadOnly
        );
        for a in [
            json!({}),
            json!({"readOnlyHint": false}),
            json!({"destructiveHint": false}),
            json!({"readOnlyHint": true, "destructiveHint": true}),
        ] {
            assert_eq!(effect_of(&info(a.clone())), Effect::Mutating, "{a}");
        }
        let bare: McpToolInfo =
            serde_json::from_value(json!({"name": "t", "inputSchema": {"type": "object"}}))
                .unwrap();
        assert_eq!(effect_of(&bare), Effect::Mutating);
    }
}
