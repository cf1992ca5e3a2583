//! The rules every request to the mock server must follow. Each broken rule
//! becomes one violation line; tests assert there are none.
//!
//! Chat Completions (`.../chat/completions`):
//! - only standard top-level and message fields; `model` set; `messages` not empty;
//! - `tools`, when present, a non-empty array of `{type:"function", function:{name, parameters}}`;
//! - every assistant tool call (`id`, `type:"function"`, `function.name`,
//!   string `function.arguments`) is answered by exactly one `role:"tool"`
//!   message with its `tool_call_id`, in call order, right after the
//!   assistant message; no tool message without its call; no id used twice.
//!
//! Anthropic Messages (`.../v1/messages`): `max_tokens` set; every `tool_use`
//! block is answered, in order, by `tool_result` blocks at the start of the
//! next (user) message; no `tool_result` without its `tool_use`; at most
//! four `cache_control` breakpoints, each `{"type":"ephemeral"}` (or with a
//! `ttl`), none on a thinking block; `tool_choice` one of the documented
//! shapes.

use serde_json::Value;
use std::collections::HashSet;

const TOP_FIELDS: &[&str] = &[
    "model",
    "messages",
    "tools",
    "tool_choice",
    "stream",
    "stream_options",
    "temperature",
    "top_p",
    "max_tokens",
    "max_completion_tokens",
    "n",
    "stop",
    "seed",
    "parallel_tool_calls",
    "user",
    "response_format",
    "presence_penalty",
    "frequency_penalty",
    "logit_bias",
    "logprobs",
    "top_logprobs",
    "reasoning_effort",
    "prompt_cache_key",
];
const MESSAGE_FIELDS: &[&str] = &["role", "content", "tool_calls", "tool_call_id", "name"];

/// Violations of the Chat Completions rules by one request body.
pub fn check_chat(body: &Value) -> Vec<String> {
    let mut v = Vec::new();
    let Some(obj) = body.as_object() else {
        return vec!["body is not a JSON object".into()];
    };
    for key in obj.keys() {
        if !TOP_FIELDS.contains(&key.as_str()) {
            v.push(format!("non-standard top-level field {key:?}"));
        }
    }
    if body["model"].as_str().is_none_or(str::is_empty) {
        v.push("no model".into());
    }
    if let Some(tools) = obj.get("tools") {
        check_tools(tools, &mut v);
    }
    let Some(messages) = body["messages"].as_array().filter(|m| !m.is_empty()) else {
        v.push("messages missing or empty".into());
        return v;
    };
    let mut seen_ids = HashSet::new();
    let mut i = 0;
    while i < messages.len() {
        let m = &messages[i];
        if let Some(o) = m.as_object() {
            for key in o.keys() {
                // DeepSeek's, vLLM's and llama.cpp's documented extension:
                // an assistant message's reasoning, sent back as received.
                let reasoning =
                    key == "reasoning_content" && m["role"] == "assistant" && o[key].is_string();
                if !MESSAGE_FIELDS.contains(&key.as_str()) && !reasoning {
                    v.push(format!("messages[{i}]: non-standard field {key:?}"));
                }
            }
        }
        match m["role"].as_str() {
            Some("system") | Some("user") => {
                if !m["content"].is_string() {
                    v.push(format!("messages[{i}]: content is not a string"));
                }
                i += 1;
            }
            Some("assistant") => {
                let ids = assistant_call_ids(m, i, &mut v);
                if !(m["content"].is_string() || m["content"].is_null()) {
                    v.push(format!("messages[{i}]: content is neither string nor null"));
                }
                for (k, id) in ids.iter().enumerate() {
                    if !seen_ids.insert(id.clone()) {
                        v.push(format!("messages[{i}]: tool call id {id:?} used twice"));
                    }
                    let at = i + 1 + k;
                    let answer = messages.get(at);
                    let ok = answer.is_some_and(|a| {
                        a["role"] == "tool" && a["tool_call_id"].as_str() == Some(id.as_str())
                    });
                    if !ok {
                        v.push(format!(
                            "messages[{i}]: tool call {id:?} is not answered by messages[{at}] \
                             (each call needs one tool message, in order, right after the call)"
                        ));
                    } else if !answer.is_some_and(|a| a["content"].is_string()) {
                        v.push(format!("messages[{at}]: tool content is not a string"));
                    }
                }
                i += 1;
                // Skip the tool messages that answered this call (checked above).
                let mut k = 0;
                while k < ids.len()
                    && messages.get(i).is_some_and(|a| {
                        a["role"] == "tool" && a["tool_call_id"].as_str() == Some(ids[k].as_str())
                    })
                {
                    i += 1;
                    k += 1;
                }
            }
            Some("tool") => {
                v.push(format!(
                    "messages[{i}]: tool message for {:?} without its call right before it",
                    m["tool_call_id"]
                ));
                i += 1;
            }
            other => {
                v.push(format!("messages[{i}]: bad role {other:?}"));
                i += 1;
            }
        }
    }
    v
}

fn check_tools(tools: &Value, v: &mut Vec<String>) {
    let Some(list) = tools.as_array() else {
        v.push("tools is not an array".into());
        return;
    };
    if list.is_empty() {
        v.push("tools is an empty array (omit it instead)".into());
    }
    for (i, t) in list.iter().enumerate() {
        if t["type"] != "function"
            || !t["function"]["name"].is_string()
            || !t["function"]["parameters"].is_object()
        {
            v.push(format!(
                "tools[{i}] is not {{type:function, function:{{name, parameters}}}}"
            ));
        }
    }
}

fn assistant_call_ids(m: &Value, i: usize, v: &mut Vec<String>) -> Vec<String> {
    let Some(calls) = m.get("tool_calls") else {
        return Vec::new();
    };
    let Some(calls) = calls.as_array() else {
        v.push(format!("messages[{i}]: tool_calls is not an array"));
        return Vec::new();
    };
    if calls.is_empty() {
        v.push(format!("messages[{i}]: tool_calls is an empty array"));
    }
    let mut ids = Vec::new();
    for (k, c) in calls.iter().enumerate() {
        let id = c["id"].as_str().unwrap_or("");
        if id.is_empty() {
            v.push(format!("messages[{i}].tool_calls[{k}]: no id"));
        }
        if c["type"] != "function" || !c["function"]["name"].is_string() {
            v.push(format!(
                "messages[{i}].tool_calls[{k}]: not a function call with a name"
            ));
        }
        if !c["function"]["arguments"].is_string() {
            v.push(format!(
                "messages[{i}].tool_calls[{k}]: arguments is not a string"
            ));
        }
        ids.push(id.to_string());
    }
    ids
}

/// Violations of the Anthropic Messages rules by one request body.
pub fn check_anthropic(body: &Value) -> Vec<String> {
    let mut v = Vec::new();
    if !body["max_tokens"].is_u64() {
        v.push("max_tokens missing".into());
    }
    let Some(messages) = body["messages"].as_array().filter(|m| !m.is_empty()) else {
        v.push("messages missing or empty".into());
        return v;
    };
    let blocks = |m: &Value| m["content"].as_array().cloned().unwrap_or_default();
    let mut expected: Vec<String> = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        if i > 0 && messages[i - 1]["role"] == m["role"] {
            v.push(format!("messages[{i}]: same role as the message before it"));
        }
        let results: Vec<String> = blocks(m)
            .iter()
            .take_while(|b| b["type"] == "tool_result")
            .map(|b| b["tool_use_id"].as_str().unwrap_or("").to_string())
            .collect();
        let later_results = blocks(m)
            .iter()
            .skip(results.len())
            .any(|b| b["type"] == "tool_result");
        if later_results {
            v.push(format!("messages[{i}]: tool_result after other blocks"));
        }
        if results != expected {
            v.push(format!(
                "messages[{i}]: tool results {results:?}, expected {expected:?}"
            ));
        }
        expected = if m["role"] == "assistant" {
            blocks(m)
                .iter()
                .filter(|b| b["type"] == "tool_use")
                .map(|b| b["id"].as_str().unwrap_or("").to_string())
                .collect()
        } else {
            Vec::new()
        };
    }
    if !expected.is_empty() {
        v.push(format!("tool uses {expected:?} are never answered"));
    }
    check_cache_points(body, &mut v);
    if let Some(choice) = body.get("tool_choice") {
        let ok = match choice["type"].as_str() {
            Some("auto" | "any" | "none") => true,
            Some("tool") => choice["name"].is_string(),
            _ => false,
        };
        if !ok {
            v.push(format!("tool_choice {choice} is not a documented shape"));
        }
    }
    v
}

/// Anthropic's prompt-cache breakpoints: "A maximum of 4 blocks with
/// cache_control may be provided", and thinking blocks cannot carry one.
fn check_cache_points(body: &Value, v: &mut Vec<String>) {
    fn walk(x: &Value, found: &mut Vec<Value>, thinking: &mut bool) {
        match x {
            Value::Object(m) => {
                if let Some(c) = m.get("cache_control") {
                    found.push(c.clone());
                    if matches!(
                        m.get("type").and_then(Value::as_str),
                        Some("thinking" | "redacted_thinking")
                    ) {
                        *thinking = true;
                    }
                }
                m.values().for_each(|y| walk(y, found, thinking));
            }
            Value::Array(a) => a.iter().for_each(|y| walk(y, found, thinking)),
            _ => {}
        }
    }
    let (mut found, mut thinking) = (Vec::new(), false);
    walk(body, &mut found, &mut thinking);
    if found.len() > 4 {
        v.push(format!(
            "A maximum of 4 blocks with cache_control may be provided. Found {}.",
            found.len()
        ));
    }
    for c in &found {
        if c["type"] != "ephemeral" {
            v.push(format!("cache_control {c}: type must be ephemeral"));
        }
    }
    if thinking {
        v.push("cache_control on a thinking block".into());
    }
}

/// Violations of the Responses API rules (`POST /responses`, as tinyagent
/// uses it: `store: false`, encrypted reasoning included) by one request.
pub fn check_responses(body: &Value) -> Vec<String> {
    let mut v = Vec::new();
    if body["model"].as_str().is_none_or(str::is_empty) {
        v.push("no model".into());
    }
    if body["store"] != Value::Bool(false) {
        v.push(format!("store is {}, expected false", body["store"]));
    }
    let include = body["include"].as_array().cloned().unwrap_or_default();
    if !include.contains(&Value::from("reasoning.encrypted_content")) {
        v.push("include lacks reasoning.encrypted_content".into());
    }
    if let Some(tools) = body.get("tools") {
        for (i, t) in tools.as_array().into_iter().flatten().enumerate() {
            if t["type"] != "function" || !t["name"].is_string() || !t["parameters"].is_object() {
                v.push(format!("tools[{i}] is not a function tool: {t}"));
            }
        }
    }
    let Some(input) = body["input"].as_array().filter(|i| !i.is_empty()) else {
        v.push("input missing or empty".into());
        return v;
    };
    let mut calls: Vec<String> = Vec::new();
    let mut answered = HashSet::new();
    for (i, item) in input.iter().enumerate() {
        match item["type"].as_str() {
            Some("message") => {
                if !matches!(
                    item["role"].as_str(),
                    Some("system" | "developer" | "user" | "assistant")
                ) {
                    v.push(format!("input[{i}]: message role {}", item["role"]));
                }
                if !(item["content"].is_string() || item["content"].is_array()) {
                    v.push(format!("input[{i}]: content is neither text nor parts"));
                }
            }
            Some("reasoning") => {
                if !item["encrypted_content"].is_string() {
                    v.push(format!(
                        "input[{i}]: reasoning item without encrypted_content"
                    ));
                }
                let next = input.get(i + 1).map(|n| n["type"].clone());
                let follows = next
                    .as_ref()
                    .is_some_and(|t| t == "function_call" || t == "message" || t == "reasoning");
                if !follows {
                    v.push(format!(
                        "input[{i}]: reasoning item {} was provided without its required \
                         following item",
                        item["id"]
                    ));
                }
            }
            Some("function_call") => {
                let id = item["call_id"].as_str().unwrap_or_default().to_string();
                if id.is_empty() || !item["name"].is_string() || !item["arguments"].is_string() {
                    v.push(format!(
                        "input[{i}]: function_call without call_id, name or arguments"
                    ));
                }
                if calls.contains(&id) {
                    v.push(format!("input[{i}]: call_id {id:?} used twice"));
                }
                calls.push(id);
            }
            Some("function_call_output") => {
                let id = item["call_id"].as_str().unwrap_or_default().to_string();
                if !calls.contains(&id) {
                    v.push(format!(
                        "input[{i}]: output for {id:?} with no function_call before it"
                    ));
                }
                if !answered.insert(id.clone()) {
                    v.push(format!("input[{i}]: second output for {id:?}"));
                }
                if !item["output"].is_string() {
                    v.push(format!("input[{i}]: output is not a string"));
                }
            }
            other => v.push(format!("input[{i}]: unknown item type {other:?}")),
        }
    }
    for id in calls {
        if !answered.contains(&id) {
            v.push(format!("no function_call_output for call {id:?}"));
        }
    }
    v
}
