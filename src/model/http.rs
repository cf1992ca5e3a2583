//! What the HTTP providers share: the client, the retry policy (exponential
//! backoff with jitter, `Retry-After` honoured), status checks and the
//! non-streaming JSON exchange.

use super::error::{ModelError, from_reqwest, redact};
use super::{Encoded, ProviderConfig};
use std::sync::Once;
use std::time::Duration;

/// Longest wait a server's `Retry-After` may impose.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);
/// Longest computed backoff delay.
const MAX_BACKOFF: Duration = Duration::from_secs(30);

static CRYPTO: Once = Once::new();

/// Builds a client for `cfg` (installing the ring TLS provider once per process).
pub(crate) fn build_client(cfg: &ProviderConfig) -> Result<reqwest::Client, ModelError> {
    CRYPTO.call_once(|| {
        // Err means another provider is already installed, which is fine.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
    let mut builder = reqwest::Client::builder()
        .connect_timeout(cfg.request_timeout)
        .user_agent(concat!("tinyagent/", env!("CARGO_PKG_VERSION")));
    if cfg
        .effective_base_url()
        .is_some_and(|url| url.starts_with("http://"))
    {
        // Plain HTTP (a model server on this machine or the LAN): no
        // certificate is ever checked, so the platform's root store is not
        // loaded (parsing it is most of a short run's start-up). A redirect
        // to https then fails verification instead of trusting anything.
        builder = builder.tls_certs_only([]);
    }
    builder
        .build()
        .map_err(|e| ModelError::Client(redact(&e.to_string(), cfg.api_key.as_deref())))
}

/// Checks the settings an HTTP provider needs and returns the base URL.
pub(crate) fn checked_base_url(cfg: &ProviderConfig) -> Result<String, ModelError> {
    if cfg.model.trim().is_empty() {
        return Err(ModelError::Config(format!(
            "a model name is required for the {} provider (--model)",
            cfg.provider
        )));
    }
    let url = cfg
        .effective_base_url()
        .ok_or_else(|| ModelError::Config("this provider has no base URL".into()))?;
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        return Err(ModelError::Config(format!(
            "base URL {:?} must start with http:// or https://",
            redact(&url, cfg.api_key.as_deref())
        )));
    }
    Ok(url)
}

/// Where a provider posts, parsed once, and the headers every request
/// carries, built once: a step's request only clones them.
#[derive(Debug)]
pub(crate) struct Endpoint {
    url: reqwest::Url,
    headers: reqwest::header::HeaderMap,
}

impl Endpoint {
    /// `url` with `headers` (name, value, whether it is a secret kept out
    /// of debug output). A URL that does not parse, or a value no header
    /// may carry (an API key with a line break, say), is a config error
    /// now, not a failure of every request later.
    pub(crate) fn new(
        cfg: &ProviderConfig,
        url: &str,
        headers: &[(reqwest::header::HeaderName, &str, bool)],
    ) -> Result<Endpoint, ModelError> {
        let key = cfg.api_key.as_deref();
        let parsed = reqwest::Url::parse(url).map_err(|e| {
            ModelError::Config(format!(
                "base URL {:?} is not a valid URL: {e}",
                redact(url, key)
            ))
        })?;
        let mut map = reqwest::header::HeaderMap::new();
        for (name, value, secret) in headers {
            let mut value = reqwest::header::HeaderValue::from_str(value).map_err(|_| {
                ModelError::Config(if *secret {
                    "the API key contains characters not allowed in a header".to_string()
                } else {
                    format!("header {name} has characters not allowed in a header")
                })
            })?;
            value.set_sensitive(*secret);
            map.insert(name.clone(), value);
        }
        Ok(Endpoint {
            url: parsed,
            headers: map,
        })
    }

    /// A POST of `body` with the headers.
    pub(crate) fn post(&self, client: &reqwest::Client, body: &Encoded) -> reqwest::RequestBuilder {
        client
            .request(reqwest::Method::POST, self.url.clone())
            .headers(self.headers.clone())
            .body(body.bytes())
    }
}

/// How long a refused connection is retried, in all: nothing listens
/// there, and a server that is starting is up within this.
pub(crate) const MAX_REFUSED_RETRY: Duration = Duration::from_secs(5);

/// Counts attempts and sleeps between them.
pub(crate) struct Backoff<'a> {
    cfg: &'a ProviderConfig,
    attempts: u32,
    /// When the first attempt failed.
    first_failure: Option<std::time::Instant>,
}

impl<'a> Backoff<'a> {
    pub(crate) fn new(cfg: &'a ProviderConfig) -> Self {
        Backoff {
            cfg,
            attempts: 0,
            first_failure: None,
        }
    }

    /// Records a failed attempt. Returns `Ok` after sleeping when another
    /// attempt should be made, or the error to give up with.
    pub(crate) async fn failed(&mut self, err: ModelError) -> Result<(), ModelError> {
        self.attempts += 1;
        if !err.is_retryable() {
            return Err(err);
        }
        if self.attempts > self.cfg.max_retries {
            return Err(ModelError::Exhausted {
                attempts: self.attempts,
                last: Box::new(err),
            });
        }
        let mut delay = backoff_delay(self.cfg.retry_base, self.attempts, err.retry_after());
        let since = *self
            .first_failure
            .get_or_insert_with(std::time::Instant::now);
        if err.is_refused() {
            let left = MAX_REFUSED_RETRY.saturating_sub(since.elapsed());
            if left.is_zero() {
                return Err(ModelError::Exhausted {
                    attempts: self.attempts,
                    last: Box::new(err),
                });
            }
            delay = delay.min(left);
        }
        if let Some(notice) = &self.cfg.on_retry {
            notice(&format!(
                "retrying in {} ({}, attempt {} of {})",
                wait_text(delay),
                err.short(),
                self.attempts + 1,
                self.cfg.max_retries + 1
            ));
        }
        tokio::time::sleep(delay).await;
        Ok(())
    }
}

/// Makes `attempt` until one succeeds, or [`Backoff`] gives up: the one
/// retry loop of every HTTP provider.
pub(crate) async fn with_retries<T>(
    cfg: &ProviderConfig,
    mut attempt: impl AsyncFnMut() -> Result<T, ModelError>,
) -> Result<T, ModelError> {
    let mut backoff = Backoff::new(cfg);
    loop {
        match attempt().await {
            Ok(v) => return Ok(v),
            Err(e) => backoff.failed(e).await?,
        }
    }
}

/// `4 s`, `1.5 s`, `250 ms`.
fn wait_text(d: Duration) -> String {
    if d < Duration::from_secs(1) {
        format!("{} ms", d.as_millis())
    } else if d.subsec_millis() == 0 {
        format!("{} s", d.as_secs())
    } else {
        format!("{:.1} s", d.as_secs_f64())
    }
}

/// The wait before retry number `retry` (1-based): the server's
/// `Retry-After` when given (capped at a minute), otherwise
/// `base * 2^(retry-1)` with jitter in its upper half (capped at 30 s).
pub(crate) fn backoff_delay(base: Duration, retry: u32, retry_after: Option<Duration>) -> Duration {
    if let Some(wait) = retry_after {
        return wait.min(MAX_RETRY_AFTER);
    }
    let factor = 1u32
        .checked_shl(retry.saturating_sub(1).min(20))
        .unwrap_or(u32::MAX);
    let full = base.saturating_mul(factor).min(MAX_BACKOFF);
    let half = full / 2;
    let jitter_ms = u64::try_from(half.as_millis()).unwrap_or(u64::MAX);
    half + Duration::from_millis(fastrand::u64(0..=jitter_ms))
}

/// `Retry-After` in whole (or decimal) seconds, or as an HTTP date (the
/// wait until then; none for a date past).
pub(crate) fn parse_retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let value = headers.get(reqwest::header::RETRY_AFTER)?.to_str().ok()?;
    retry_after_at(value.trim(), std::time::SystemTime::now())
}

/// [`parse_retry_after`] of one value, at `now`.
fn retry_after_at(value: &str, now: std::time::SystemTime) -> Option<Duration> {
    let wait = match value.parse::<f64>() {
        Ok(secs) if secs.is_finite() && secs >= 0.0 => {
            Duration::from_secs_f64(secs.min(MAX_RETRY_AFTER.as_secs_f64()))
        }
        Ok(_) => return None,
        Err(_) => httpdate::parse_http_date(value)
            .ok()?
            .duration_since(now)
            .unwrap_or(Duration::ZERO),
    };
    Some(wait.min(MAX_RETRY_AFTER))
}

/// `{base_url}/{path}` taking a JSON body, with `Authorization: Bearer`
/// when there is a key (both OpenAI APIs).
pub(crate) fn bearer_endpoint(cfg: &ProviderConfig, path: &str) -> Result<Endpoint, ModelError> {
    let url = format!("{}/{path}", checked_base_url(cfg)?);
    let bearer = cfg.api_key.as_ref().map(|key| format!("Bearer {key}"));
    let mut headers = vec![(reqwest::header::CONTENT_TYPE, "application/json", false)];
    if let Some(value) = &bearer {
        headers.push((reqwest::header::AUTHORIZATION, value, true));
    }
    Endpoint::new(cfg, &url, &headers)
}

/// One streamed attempt: `request` sent, then each server-sent event handed
/// to `event` until it gives the reply (`Some`). `Ok(None)`: the stream
/// ended first (each provider says what that means). The request timeout
/// bounds the wait for the headers and for each chunk.
pub(crate) async fn stream_events<T>(
    cfg: &ProviderConfig,
    request: reqwest::RequestBuilder,
    mut event: impl FnMut(&str) -> Result<Option<T>, ModelError>,
) -> Result<Option<T>, ModelError> {
    let timeout = cfg.request_timeout;
    let key = cfg.api_key.as_deref();
    let mut response = tokio::time::timeout(timeout, send(cfg, request))
        .await
        .map_err(|_| ModelError::Timeout(timeout))??;
    let mut decoder = super::sse::SseDecoder::default();
    loop {
        let next = tokio::time::timeout(timeout, response.chunk())
            .await
            .map_err(|_| ModelError::Timeout(timeout))?
            .map_err(|e| from_reqwest(&e, timeout, key))?;
        let ended = next.is_none();
        let events = match next {
            Some(chunk) => decoder.push(&chunk),
            None => decoder.finish().into_iter().collect(),
        };
        for data in events {
            if let Some(reply) = event(&data)? {
                return Ok(Some(reply));
            }
        }
        if ended {
            return Ok(None);
        }
    }
}

/// Sends one attempt and turns a non-success status into an error (reading
/// the body for the message).
pub(crate) async fn send(
    cfg: &ProviderConfig,
    request: reqwest::RequestBuilder,
) -> Result<reqwest::Response, ModelError> {
    let key = cfg.api_key.as_deref();
    let response = request
        .send()
        .await
        .map_err(|e| from_reqwest(&e, cfg.request_timeout, key))?;
    let status = response.status();
    if status.is_success() {
        return Ok(response);
    }
    let retry_after = parse_retry_after(response.headers());
    let body = response.text().await.unwrap_or_default();
    Err(ModelError::Status {
        status: status.as_u16(),
        body: redact(&body, key),
        retry_after,
    })
}

/// One non-streaming attempt: send, check the status, read the body.
pub(crate) async fn exchange(
    cfg: &ProviderConfig,
    request: reqwest::RequestBuilder,
) -> Result<bytes::Bytes, ModelError> {
    let response = send(cfg, request.timeout(cfg.request_timeout)).await?;
    response
        .bytes()
        .await
        .map_err(|e| from_reqwest(&e, cfg.request_timeout, cfg.api_key.as_deref()))
}

/// One non-streaming attempt of a provider whose replies carry native
/// items (Anthropic's messages, OpenAI's responses): the request sent, the
/// body read by `parse`, its items kept in the server's member order (at
/// `items`, see [`super::native::keep_server_order`]), its text handed to
/// `on_text`.
pub(crate) async fn native_attempt(
    cfg: &ProviderConfig,
    request: reqwest::RequestBuilder,
    items: &str,
    parse: impl FnOnce(&serde_json::Value) -> Result<super::ModelReply, ModelError>,
    on_text: &mut (dyn FnMut(&str) + Send),
) -> Result<super::ModelReply, ModelError> {
    let bytes = exchange(cfg, request).await?;
    let mut reply = parse(&json_of(cfg, &bytes)?)?;
    super::native::keep_server_order(&mut reply, &bytes, &[items]);
    if !reply.message.content.is_empty() {
        on_text(&reply.message.content);
    }
    Ok(reply)
}

/// A response body as a JSON tree, or why it is none (its start quoted,
/// the key kept out).
pub(crate) fn json_of(cfg: &ProviderConfig, bytes: &[u8]) -> Result<serde_json::Value, ModelError> {
    serde_json::from_slice(bytes).map_err(|e| {
        let start = String::from_utf8_lossy(&bytes[..bytes.len().min(200)]).into_owned();
        let key = cfg.api_key.as_deref();
        ModelError::BadResponse(format!("body is not JSON ({e}): {}", redact(&start, key)))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_and_is_capped() {
        let base = Duration::from_millis(100);
        for retry in 1..6 {
            let d = backoff_delay(base, retry, None);
            let full = base * 2u32.pow(retry - 1);
            assert!(d >= full / 2 && d <= full, "retry {retry}: {d:?}");
        }
        assert!(backoff_delay(base, 40, None) <= MAX_BACKOFF);
        assert_eq!(
            backoff_delay(base, 1, Some(Duration::from_secs(7))),
            Duration::from_secs(7)
        );
        assert_eq!(
            backoff_delay(base, 1, Some(Duration::from_secs(7200))),
            MAX_RETRY_AFTER
        );
    }

    /// A key no header can carry and a URL that does not parse are refused
    /// when the provider is made, with the key kept out of the message;
    /// a good key is sent marked secret.
    #[test]
    fn an_endpoint_refuses_a_bad_key_or_url_up_front_and_marks_the_key_secret() {
        use super::super::{ProviderKind, anthropic::AnthropicProvider, openai::OpenAiProvider};
        let cfg = |url: &str, key: &str| {
            let mut c = ProviderConfig::new(ProviderKind::OpenAi, "m");
            c.base_url = Some(url.to_string());
            c.api_key = Some(key.to_string());
            c
        };
        let secret = "sk-line\nbreak-7f3a";
        for kind in [ProviderKind::OpenAi, ProviderKind::Anthropic] {
            let mut bad_key = cfg("http://127.0.0.1:9", secret);
            bad_key.provider = kind;
            let made = match kind {
                ProviderKind::OpenAi => OpenAiProvider::new(bad_key).map(|_| ()),
                _ => AnthropicProvider::new(bad_key).map(|_| ()),
            };
            let e = made.expect_err("a key with a line break is refused");
            assert!(matches!(e, ModelError::Config(_)), "{e:?}");
            assert!(e.to_string().contains("API key"), "{e}");
            assert!(!e.to_string().contains("7f3a"), "the key leaked: {e}");
        }
        let e = OpenAiProvider::new(cfg("http://exa mple.com", "k"))
            .expect_err("a URL with a space is refused");
        assert!(
            matches!(&e, ModelError::Config(m) if m.contains("not a valid URL")),
            "{e:?}"
        );
        let c = cfg("http://127.0.0.1:9/v1", "sk-good");
        let url = format!("{}/chat/completions", checked_base_url(&c).unwrap());
        let bearer = "Bearer sk-good";
        let endpoint =
            Endpoint::new(&c, &url, &[(reqwest::header::AUTHORIZATION, bearer, true)]).unwrap();
        assert_eq!(
            endpoint.url.as_str(),
            "http://127.0.0.1:9/v1/chat/completions"
        );
        let value = &endpoint.headers[reqwest::header::AUTHORIZATION];
        assert!(value.is_sensitive());
        assert_eq!(value.to_str().unwrap(), bearer);
        // The providers' debug output, headers and all, never shows the key.
        let mut anthropic = cfg("http://127.0.0.1:9", "sk-good");
        anthropic.provider = ProviderKind::Anthropic;
        let shown = [
            format!("{:?}", OpenAiProvider::new(c).unwrap()),
            format!("{:?}", AnthropicProvider::new(anthropic).unwrap()),
        ];
        for text in shown {
            assert!(
                text.contains("Sensitive") && !text.contains("sk-good"),
                "{text}"
            );
        }
    }

    #[test]
    fn retry_after_parses_seconds_and_http_dates() {
        let mut h = reqwest::header::HeaderMap::new();
        assert_eq!(parse_retry_after(&h), None);
        h.insert(reqwest::header::RETRY_AFTER, "3".parse().unwrap());
        assert_eq!(parse_retry_after(&h), Some(Duration::from_secs(3)));
        let now = httpdate::parse_http_date("Wed, 21 Oct 2015 07:28:00 GMT").unwrap();
        assert_eq!(
            retry_after_at("Wed, 21 Oct 2015 07:28:07 GMT", now),
            Some(Duration::from_secs(7))
        );
        // A date past: no wait; far ahead: the cap.
        assert_eq!(
            retry_after_at("Wed, 21 Oct 2015 07:27:00 GMT", now),
            Some(Duration::ZERO)
        );
        assert_eq!(
            retry_after_at("Thu, 22 Oct 2015 07:28:00 GMT", now),
            Some(MAX_RETRY_AFTER)
        );
        assert_eq!(retry_after_at("soon", now), None);
        assert_eq!(retry_after_at("-1", now), None);
    }
}
