//! Model errors: retryable ones (429, 5xx, connection failures, timeouts)
//! and fatal ones (bad requests, bad keys, responses that make no sense).
//!
//! No variant ever holds the API key: every text that comes from the network
//! goes through [`redact`] first.

use std::time::Duration;

/// Longest piece of a server's error body kept in an error message.
const MAX_BODY_CHARS: usize = 600;

/// Why a model call failed.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// The provider settings cannot work (missing model, bad URL, ...).
    #[error("invalid model configuration: {0}")]
    Config(String),
    /// The script file of the script provider is unreadable or malformed.
    #[error("bad script file {path}: {message}")]
    Script { path: String, message: String },
    /// The HTTP client could not be built.
    #[error("could not set up the HTTP client: {0}")]
    Client(String),
    /// The server answered with a non-success status.
    #[error("the model server answered HTTP {}: {}", status_text(*.status), server_message(.body))]
    Status {
        status: u16,
        /// The start of the response body, with the key redacted.
        body: String,
        /// The server's `Retry-After`, when it gave one in seconds.
        retry_after: Option<Duration>,
    },
    /// No answer (or no next chunk of a stream) within the request timeout.
    #[error("the model server did not answer within {} (the request timeout)", humantime::format_duration(*.0))]
    Timeout(Duration),
    /// The connection could not be made or broke off.
    #[error("could not reach the model server: {0}")]
    Transport(String),
    /// The server said something that is not a valid reply.
    #[error("the model server sent a response that could not be understood: {0}")]
    BadResponse(String),
    /// A retryable failure persisted through every attempt.
    #[error("gave up after {attempts} attempt{}: {last}", if *.attempts == 1 { "" } else { "s" })]
    Exhausted {
        attempts: u32,
        last: Box<ModelError>,
    },
}

/// `401 Unauthorized`: the code and its reason phrase when it has one.
fn status_text(status: u16) -> String {
    match reqwest::StatusCode::from_u16(status)
        .ok()
        .and_then(|s| s.canonical_reason())
    {
        Some(reason) => format!("{status} {reason}"),
        None => status.to_string(),
    }
}

/// What a server said in an error body, for a person: the `message` of a
/// JSON error (OpenAI's and Anthropic's shapes, and a bare `error` string),
/// the title of an HTML page (a proxy's error page), else the text itself.
pub fn server_message(body: &str) -> String {
    let body = body.trim();
    if body.is_empty() {
        return "(no message)".into();
    }
    if let Ok(v) = serde_json::from_str::<serde_json::Value>(body) {
        let message = v["error"]["message"]
            .as_str()
            .or_else(|| v["message"].as_str())
            .or_else(|| v["error"].as_str())
            .or_else(|| v["detail"].as_str());
        if let Some(m) = message {
            return crate::text::first_line(m.trim(), 300);
        }
    }
    if body.starts_with('<') {
        let lower = body.to_ascii_lowercase();
        let title = lower.find("<title>").and_then(|start| {
            let from = start + "<title>".len();
            lower[from..]
                .find("</title>")
                .map(|end| body[from..from + end].trim().to_string())
        });
        return match title {
            Some(t) if !t.is_empty() => format!("an HTML page titled {t:?}"),
            _ => "an HTML page".into(),
        };
    }
    crate::text::first_line(body, 300)
}

impl ModelError {
    /// A few words for a retry notice: `HTTP 429`, `timeout`, ...
    pub fn short(&self) -> String {
        match self {
            ModelError::Status { status, .. } => format!("HTTP {status}"),
            ModelError::Timeout(_) => "timeout".into(),
            ModelError::Transport(_) => "connection failed".into(),
            ModelError::Exhausted { last, .. } => last.short(),
            ModelError::Config(_)
            | ModelError::Script { .. }
            | ModelError::Client(_)
            | ModelError::BadResponse(_) => "error".into(),
        }
    }

    /// The server refused the credentials (401, 403): the key is missing,
    /// wrong or not allowed this model.
    pub fn is_auth(&self) -> bool {
        match self {
            ModelError::Status { status, .. } => *status == 401 || *status == 403,
            ModelError::Exhausted { last, .. } => last.is_auth(),
            _ => false,
        }
    }

    /// True for failures that another attempt may cure: 408, 429, 5xx,
    /// connection errors and timeouts.
    pub fn is_retryable(&self) -> bool {
        match self {
            ModelError::Status { status, .. } => {
                *status == 408 || *status == 429 || (500..600).contains(status)
            }
            ModelError::Timeout(_) | ModelError::Transport(_) => true,
            ModelError::Config(_)
            | ModelError::Script { .. }
            | ModelError::Client(_)
            | ModelError::BadResponse(_)
            | ModelError::Exhausted { .. } => false,
        }
    }

    /// The connection was refused: nothing listens at the address.
    pub fn is_refused(&self) -> bool {
        match self {
            ModelError::Transport(text) => text.to_ascii_lowercase().contains("connection refused"),
            ModelError::Exhausted { last, .. } => last.is_refused(),
            _ => false,
        }
    }

    /// The request did not fit the model's context window: OpenAI's
    /// `context_length_exceeded`, Anthropic's "prompt is too long",
    /// llama.cpp's "exceeds the available context size" (and vLLM's and
    /// Ollama's words for it), as a status or inside a stream.
    pub fn is_context_overflow(&self) -> bool {
        let text = match self {
            ModelError::Status { status, body, .. } if (400..500).contains(status) => body,
            ModelError::BadResponse(text) => text,
            ModelError::Exhausted { last, .. } => return last.is_context_overflow(),
            _ => return false,
        };
        let text = text.to_ascii_lowercase();
        [
            "context_length_exceeded",
            "prompt is too long",
            "exceeds the available context size",
            "maximum context length",
            "context window",
            "too many tokens",
        ]
        .iter()
        .any(|words| text.contains(words))
    }

    /// The server's requested wait, if any.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            ModelError::Status { retry_after, .. } => *retry_after,
            _ => None,
        }
    }
}

/// Removes every occurrence of the key from `text` and cuts it to a
/// readable length.
pub(crate) fn redact(text: &str, key: Option<&str>) -> String {
    let mut out = match key {
        Some(k) if k.len() >= 4 => text.replace(k, "<redacted>"),
        _ => text.to_string(),
    };
    out = crate::text::cut_chars(&out, MAX_BODY_CHARS, "…");
    out.trim().to_string()
}

/// Turns a reqwest failure into a [`ModelError`], walking the source chain so
/// the root cause ("connection refused") is visible.
pub(crate) fn from_reqwest(
    err: &reqwest::Error,
    timeout: Duration,
    key: Option<&str>,
) -> ModelError {
    if err.is_timeout() {
        return ModelError::Timeout(timeout);
    }
    let mut text = err.to_string();
    let mut source = std::error::Error::source(err);
    while let Some(s) = source {
        let piece = s.to_string();
        if !text.contains(&piece) {
            text.push_str(": ");
            text.push_str(&piece);
        }
        source = s.source();
    }
    let text = redact(&text, key);
    if err.is_builder() {
        ModelError::Config(text)
    } else {
        ModelError::Transport(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redact_hides_the_key_and_bounds_length() {
        let s = redact("bad key sk-secret-123 given", Some("sk-secret-123"));
        assert_eq!(s, "bad key <redacted> given");
        let long = "x".repeat(5000);
        assert!(redact(&long, None).chars().count() <= MAX_BODY_CHARS + 1);
    }

    #[test]
    fn retryable_classes() {
        let st = |status| ModelError::Status {
            status,
            body: String::new(),
            retry_after: None,
        };
        assert!(st(429).is_retryable());
        assert!(st(503).is_retryable());
        assert!(!st(400).is_retryable());
        assert!(!st(401).is_retryable());
        assert!(!st(404).is_retryable());
        assert!(ModelError::Timeout(Duration::from_secs(1)).is_retryable());
        assert!(!ModelError::BadResponse("x".into()).is_retryable());
    }

    #[test]
    fn context_overflow_in_each_servers_words() {
        let st = |status, body: &str| ModelError::Status {
            status,
            body: body.into(),
            retry_after: None,
        };
        assert!(st(400, r#"{"error":{"code":"context_length_exceeded"}}"#).is_context_overflow());
        assert!(
            st(400, "prompt is too long: 210000 tokens > 200000 maximum").is_context_overflow()
        );
        assert!(
            st(
                400,
                "request (935 tokens) exceeds the available context size (256 tokens)"
            )
            .is_context_overflow()
        );
        assert!(
            ModelError::BadResponse(
                r#"server reported an error: {"code":"context_length_exceeded"}"#.into()
            )
            .is_context_overflow()
        );
        assert!(!st(500, "prompt is too long").is_context_overflow());
        assert!(!st(400, "bad key").is_context_overflow());
    }

    #[test]
    fn exhausted_message_names_attempts() {
        let e = ModelError::Exhausted {
            attempts: 3,
            last: Box::new(ModelError::Transport("connection refused".into())),
        };
        assert_eq!(
            e.to_string(),
            "gave up after 3 attempts: could not reach the model server: connection refused"
        );
    }

    #[test]
    fn a_server_message_is_the_message_of_its_error_not_its_markup() {
        let openai = r#"{"error":{"message":"Incorrect API key","type":"invalid_request_error"}}"#;
        assert_eq!(server_message(openai), "Incorrect API key");
        let anthropic =
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
        assert_eq!(server_message(anthropic), "Overloaded");
        assert_eq!(
            server_message(r#"{"error":"model not found"}"#),
            "model not found"
        );
        assert_eq!(
            server_message("<HTML><HEAD><TITLE> 504 Gateway Time-out </TITLE></HEAD></HTML>"),
            "an HTML page titled \"504 Gateway Time-out\""
        );
        assert_eq!(
            server_message("<html><body>oops</body></html>"),
            "an HTML page"
        );
        assert_eq!(server_message("  "), "(no message)");
        assert_eq!(server_message("plain text\nsecond line"), "plain text…");
        let e = ModelError::Status {
            status: 429,
            body: r#"{"error":{"message":"slow down"}}"#.into(),
            retry_after: None,
        };
        assert_eq!(
            e.to_string(),
            "the model server answered HTTP 429 Too Many Requests: slow down"
        );
        assert!(!e.is_auth());
        let e = ModelError::Exhausted {
            attempts: 1,
            last: Box::new(ModelError::Status {
                status: 403,
                body: String::new(),
                retry_after: None,
            }),
        };
        assert!(e.is_auth());
    }
}
