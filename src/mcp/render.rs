//! A tool's answer as the model is shown it.

use crate::tools::ToolOutcome;
use rmcp::model::CallToolResult;

/// The most of a result's text the model is shown.
pub(super) const RESULT_CAP: usize = 100 * 1024;

/// A tool's answer as the model is shown it: text blocks as they are, any
/// other content as its type and what describes it; `isError` makes it an
/// error result.
pub(super) fn render(result: &CallToolResult) -> ToolOutcome {
    let mut parts = Vec::new();
    for block in &result.content {
        let value = serde_json::to_value(block).unwrap_or_default();
        parts.push(render_block(&value));
    }
    if parts.is_empty()
        && let Some(structured) = &result.structured_content
    {
        parts.push(structured.to_string());
    }
    let mut text = parts.join("\n");
    if text.is_empty() {
        text = "(no content)".into();
    }
    if text.len() > RESULT_CAP {
        let mut cut = RESULT_CAP;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        let total = text.len();
        text.truncate(cut);
        text.push_str(&format!("\n[output cut at {cut} of {total} bytes]"));
    }
    if result.is_error == Some(true) {
        ToolOutcome::error(text)
    } else {
        ToolOutcome::ok(text)
    }
}

fn render_block(v: &serde_json::Value) -> String {
    let kind = v.get("type").and_then(|t| t.as_str()).unwrap_or("unknown");
    let s = |k: &str| v.get(k).and_then(|x| x.as_str());
    match kind {
        "text" => s("text").unwrap_or_default().to_string(),
        "image" | "audio" => format!(
            "[{kind} content, {}, {} bytes of base64 data]",
            s("mimeType").unwrap_or("no MIME type"),
            s("data").map_or(0, str::len)
        ),
        "resource" => {
            let r = v.get("resource").cloned().unwrap_or_default();
            let uri = r.get("uri").and_then(|x| x.as_str()).unwrap_or("?");
            match r.get("text").and_then(|x| x.as_str()) {
                Some(text) => format!("[resource content {uri}]\n{text}"),
                None => format!(
                    "[resource content {uri}, {} bytes of base64 data]",
                    r.get("blob").and_then(|x| x.as_str()).map_or(0, str::len)
                ),
            }
        }
        "resource_link" => format!(
            "[resource_link content {}{}]",
            s("uri").unwrap_or("?"),
            s("name").map(|n| format!(" ({n})")).unwrap_or_default()
        ),
        other => format!("[{other} content] {v}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn blocks_render_as_text_with_their_type() {
        assert_eq!(render_block(&json!({"type": "text", "text": "hi"})), "hi");
        let img = render_block(&json!({"type": "image", "data": "AAAA", "mimeType": "image/png"}));
        assert_eq!(img, "[image content, image/png, 4 bytes of base64 data]");
        let res = render_block(
            &json!({"type": "resource", "resource": {"uri": "file:///a", "text": "body"}}),
        );
        assert_eq!(res, "[resource content file:///a]\nbody");
        let link = render_block(&json!({"type": "resource_link", "uri": "u", "name": "n"}));
        assert_eq!(link, "[resource_link content u (n)]");
        assert!(render_block(&json!({"type": "weird", "x": 1})).starts_with("[weird content]"));
    }

    #[test]
    fn is_error_makes_an_error_result() {
        let r: CallToolResult = serde_json::from_value(json!({
            "content": [{"type": "text", "text": "no such file"}],
            "isError": true
        }))
        .unwrap();
        let o = render(&r);
        assert!(o.is_error && !o.format_error);
        assert_eq!(o.content, "no such file");
        let empty: CallToolResult = serde_json::from_value(json!({"content": []})).unwrap();
        assert_eq!(render(&empty).content, "(no content)");
    }
}
