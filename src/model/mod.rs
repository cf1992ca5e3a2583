//! Model providers: an OpenAI-compatible Chat Completions client, an OpenAI
//! Responses client, an Anthropic Messages client and an offline script,
//! behind one enum.

use crate::event::{Message, StopReason, Usage};
use crate::tools::ToolSpec;

/// Why a request is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// A normal step of the loop.
    Step,
    /// A compaction summary: the run's own prefix (tools, system prompt,
    /// messages), so it is served from the prompt cache, with `tool_choice`
    /// none and the summarizer's instruction last.
    Summary,
}

/// One model request, provider-neutral. `messages` is exactly what is sent,
/// system prompt and plan messages included.
#[derive(Debug, Clone)]
pub struct ModelRequest {
    /// The view, shared with the state (see [`crate::session::View`]).
    pub messages: crate::session::View,
    /// The advertised tools, shared with the registry.
    pub tools: std::sync::Arc<Vec<ToolSpec>>,
    pub purpose: Purpose,
    /// The step this request is for (the script provider picks its turn by it).
    pub step: u64,
    /// The run's id: the OpenAI APIs' `prompt_cache_key`, which routes a
    /// run's requests to the servers that hold its cached prefix.
    pub cache_key: Option<std::sync::Arc<str>>,
}

/// A request as its provider puts it on the wire: the JSON body, serialized
/// once. Its length is what the compaction decision measures, and the same
/// bytes are what is sent (on every retry).
#[derive(Debug, Clone)]
pub struct Encoded {
    body: bytes::Bytes,
}

impl Encoded {
    fn json(value: &serde_json::Value) -> Encoded {
        // Serializing a `Value` cannot fail (its keys are strings).
        Encoded::from_bytes(serde_json::to_vec(value).unwrap_or_default())
    }

    pub(crate) fn from_bytes(body: Vec<u8>) -> Encoded {
        Encoded { body: body.into() }
    }

    /// A body whose buffer may be shared with a cache (see
    /// `wire::WireCache`).
    pub(crate) fn from_shared(body: bytes::Bytes) -> Encoded {
        Encoded { body }
    }

    /// The body's length in bytes.
    pub fn len(&self) -> usize {
        self.body.len()
    }

    /// Whether the body is empty (never, for a real request).
    pub fn is_empty(&self) -> bool {
        self.body.is_empty()
    }

    pub(crate) fn bytes(&self) -> bytes::Bytes {
        self.body.clone()
    }
}

/// The assistant's answer.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelReply {
    /// Role assistant, with content and tool calls (raw argument strings).
    pub message: Message,
    pub usage: Usage,
    /// Why the model stopped, in tinyagent's words.
    pub stop_reason: StopReason,
    /// The server's own word for it, when it gave one.
    pub stop_reason_raw: Option<String>,
}

impl ModelReply {
    /// A reply that ended its turn normally: `tool_calls` when it made
    /// calls, `end_turn` otherwise (the script provider's, and a server's
    /// that says nothing).
    pub fn finished(message: Message, usage: Usage) -> ModelReply {
        ModelReply {
            stop_reason: natural_stop(&message),
            message,
            usage,
            stop_reason_raw: None,
        }
    }
}

/// `tool_calls` for a message with calls, `end_turn` otherwise.
pub(crate) fn natural_stop(message: &Message) -> StopReason {
    if message.tool_calls.is_empty() {
        StopReason::EndTurn
    } else {
        StopReason::ToolCalls
    }
}

mod anthropic;
mod anthropic_stream;
mod error;
mod http;
mod native;
mod openai;
mod props;
mod responses;
mod script;
mod sse;
mod wire;

pub use anthropic::{ANTHROPIC_DEFAULT_MAX_TOKENS, AnthropicProvider};
pub use error::ModelError;
pub use openai::OpenAiProvider;
pub use props::server_context_window;
pub use responses::ResponsesProvider;
pub use script::ScriptProvider;

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

/// Default Chat Completions base URL.
pub const OPENAI_DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";
/// Default Anthropic base URL (the path `/v1/messages` is appended).
pub const ANTHROPIC_DEFAULT_BASE_URL: &str = "https://api.anthropic.com";

pub use crate::config::ProviderKind;

/// Everything needed to build a [`Provider`]. The `Debug` output never shows
/// the API key.
#[derive(Clone)]
pub struct ProviderConfig {
    pub provider: ProviderKind,
    pub model: String,
    /// `None` means the provider's public endpoint.
    pub base_url: Option<String>,
    /// The secret. Never logged, never part of an error or of `Debug` output.
    pub api_key: Option<String>,
    /// Script file for [`ProviderKind::Script`].
    pub script: Option<PathBuf>,
    /// Ask for server-sent events.
    pub stream: bool,
    /// Most tokens one reply may have: Anthropic's `max_tokens` (which
    /// must be sent: [`ANTHROPIC_DEFAULT_MAX_TOKENS`] when `None`).
    pub max_output_tokens: Option<u32>,
    /// Chat Completions' `reasoning_effort`, the Responses API's
    /// `reasoning.effort`.
    pub reasoning_effort: Option<crate::kinds::ReasoningEffort>,
    /// Anthropic extended thinking: `thinking.budget_tokens`.
    pub thinking_budget: Option<u32>,
    /// Limit for one attempt (for streams: for the headers and for each gap
    /// between chunks).
    pub request_timeout: Duration,
    /// Retries after the first attempt on 429, 5xx, connection errors and timeouts.
    pub max_retries: u32,
    /// First backoff delay; doubled on every retry, with jitter.
    pub retry_base: Duration,
    /// Told of every retry before its wait, in words for a person
    /// (`retrying in 4 s (HTTP 429, attempt 2 of 6)`).
    pub on_retry: Option<RetryNotice>,
}

/// Where a provider reports the retries it makes.
pub type RetryNotice = std::sync::Arc<dyn Fn(&str) + Send + Sync>;

impl ProviderConfig {
    /// A configuration with the defaults: no key, no streaming, a 5 minute
    /// request timeout, 5 retries starting at 500 ms.
    pub fn new(provider: ProviderKind, model: impl Into<String>) -> Self {
        ProviderConfig {
            provider,
            model: model.into(),
            base_url: None,
            api_key: None,
            script: None,
            stream: false,
            max_output_tokens: None,
            reasoning_effort: None,
            thinking_budget: None,
            request_timeout: Duration::from_secs(300),
            max_retries: 5,
            retry_base: Duration::from_millis(500),
            on_retry: None,
        }
    }

    /// The base URL requests go to (trailing slash removed), or `None` for
    /// the script provider.
    pub fn effective_base_url(&self) -> Option<String> {
        let default = match self.provider {
            ProviderKind::OpenAi | ProviderKind::Responses => OPENAI_DEFAULT_BASE_URL,
            ProviderKind::Anthropic => ANTHROPIC_DEFAULT_BASE_URL,
            ProviderKind::Script => return None,
        };
        let url = self.base_url.as_deref().unwrap_or(default);
        Some(url.trim_end_matches('/').to_string())
    }
}

impl fmt::Debug for ProviderConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProviderConfig")
            .field("provider", &self.provider)
            .field("model", &self.model)
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("script", &self.script)
            .field("stream", &self.stream)
            .field("max_output_tokens", &self.max_output_tokens)
            .field("reasoning_effort", &self.reasoning_effort)
            .field("thinking_budget", &self.thinking_budget)
            .field("request_timeout", &self.request_timeout)
            .field("max_retries", &self.max_retries)
            .field("retry_base", &self.retry_base)
            .field("on_retry", &self.on_retry.is_some())
            .finish()
    }
}

/// A model backend.
#[derive(Debug)]
pub enum Provider {
    OpenAi(OpenAiProvider),
    Anthropic(AnthropicProvider),
    Responses(ResponsesProvider),
    Script(ScriptProvider),
}

impl Provider {
    /// Builds the provider: an HTTP client for the remote kinds, a parsed
    /// script for [`ProviderKind::Script`] (a bad script file fails here).
    pub fn new(cfg: ProviderConfig) -> Result<Provider, ModelError> {
        match cfg.provider {
            ProviderKind::OpenAi => Ok(Provider::OpenAi(OpenAiProvider::new(cfg)?)),
            ProviderKind::Anthropic => Ok(Provider::Anthropic(AnthropicProvider::new(cfg)?)),
            ProviderKind::Responses => Ok(Provider::Responses(ResponsesProvider::new(cfg)?)),
            ProviderKind::Script => {
                let path = cfg.script.as_ref().ok_or_else(|| {
                    ModelError::Config("the script provider needs a script file (--script)".into())
                })?;
                Ok(Provider::Script(ScriptProvider::load(path)?))
            }
        }
    }

    /// Asks another model of the same server from the next request on (a
    /// chat's `/model`).
    pub fn set_model(&mut self, model: &str) {
        match self {
            Provider::OpenAi(p) => p.set_model(model),
            Provider::Anthropic(p) => p.set_model(model),
            Provider::Responses(p) => p.set_model(model),
            Provider::Script(_) => {}
        }
    }

    /// Serializes `req` exactly as [`Provider::send`] will send it. The
    /// script provider has no wire; its body is the same Chat Completions
    /// JSON the OpenAI-compatible client would send, so sizes compare.
    pub fn encode(&self, req: &ModelRequest) -> Encoded {
        match self {
            Provider::OpenAi(p) => p.encode(req),
            Provider::Anthropic(p) => p.encode(req),
            Provider::Responses(p) => p.encode(req),
            Provider::Script(_) => Encoded::from_shared(
                wire::WireCache::default().request_bytes("script", req, false, None),
            ),
        }
    }

    /// Asks the model for the next assistant message, serializing the
    /// request first; see [`Provider::send`].
    pub async fn complete(
        &self,
        req: &ModelRequest,
        on_text: &mut (dyn FnMut(&str) + Send),
    ) -> Result<ModelReply, ModelError> {
        let body = self.encode(req);
        self.send(req, &body, on_text).await
    }

    /// Sends `body`, which [`Provider::encode`] made of `req`, for the next
    /// assistant message. Retries transient
    /// failures with backoff. The reply's text is passed to `on_text` before
    /// this returns: piece by piece as it streams in, or in one piece for
    /// non-streaming providers (nothing is passed when the text is empty).
    /// When a stream breaks and is retried, pieces of the failed attempt may
    /// already have been passed.
    pub async fn send(
        &self,
        req: &ModelRequest,
        body: &Encoded,
        on_text: &mut (dyn FnMut(&str) + Send),
    ) -> Result<ModelReply, ModelError> {
        match self {
            Provider::OpenAi(p) => p.complete(req, body, on_text).await,
            Provider::Anthropic(p) => p.complete(req, body, on_text).await,
            Provider::Responses(p) => p.complete(req, body, on_text).await,
            Provider::Script(p) => p.complete(req, on_text).await,
        }
    }
}
