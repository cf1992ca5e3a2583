//! The loopback mock model server: axum on 127.0.0.1:0, on its own thread
//! with its own runtime, answering scripted replies in order and recording
//! (and checking) every request.
//!
//! Answering comes first: the server keeps a request's raw parts and
//! answers, and parses and checks them only when something asks for the
//! requests or the rules they broke (or when a reply is computed from its
//! request). Every request is still checked, in arrival order, before any
//! result is read; but a run is not slowed by the server's own parsing of
//! a 100 KB request (a third of a millisecond here), which a benchmark of
//! the client would otherwise measure as a longer wait between its steps.

use super::checks::{check_anthropic, check_chat, check_responses};
use super::reply::{MockReply, ReplyFn, call_ids, chat_json, chat_sse};
use super::timed::TimedListener;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::Response;
use serde_json::Value;
use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// One request the server received.
#[derive(Debug, Clone)]
pub struct RecordedRequest {
    /// 1-based, in arrival order.
    pub index: usize,
    pub method: String,
    pub path: String,
    /// Header names lowercased.
    pub headers: BTreeMap<String, String>,
    /// The JSON body (`Null` when it was not JSON).
    pub body: Value,
    /// The body's bytes as sent (lossy UTF-8).
    pub raw: String,
}

impl RecordedRequest {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .get(&name.to_ascii_lowercase())
            .map(String::as_str)
    }

    /// The request's `messages` (empty when absent).
    pub fn messages(&self) -> &[Value] {
        self.body["messages"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or(&[])
    }

    /// True when the request advertises tools.
    pub fn has_tools(&self) -> bool {
        self.body.get("tools").is_some()
    }

    /// True for a summarizer request: one whose tools may not be called
    /// (`tool_choice` none), or that advertises none.
    pub fn is_summary(&self) -> bool {
        is_summary(&self.body)
    }

    /// True when the request asked for a stream.
    pub fn is_stream(&self) -> bool {
        self.body["stream"] == Value::Bool(true)
    }

    /// (tool_call_id, content) of every tool message, in order.
    pub fn tool_results(&self) -> Vec<(String, String)> {
        self.messages()
            .iter()
            .filter(|m| m["role"] == "tool")
            .map(|m| {
                (
                    m["tool_call_id"].as_str().unwrap_or("").to_string(),
                    m["content"].as_str().unwrap_or("").to_string(),
                )
            })
            .collect()
    }
}

/// A request as it came in, not yet parsed or checked.
struct Received {
    index: usize,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
}

impl Received {
    /// Parses the request and checks it against the rules for its path.
    fn settle(self) -> (RecordedRequest, Vec<String>) {
        let parsed: Result<Value, _> = serde_json::from_slice(&self.body);
        let path = self.uri.path().to_string();
        let mut problems = Vec::new();
        if self.method != Method::POST {
            problems.push(format!("method {}, expected POST", self.method));
        }
        match &parsed {
            Err(e) => problems.push(format!("body is not JSON: {e}")),
            Ok(v) if path.ends_with("/chat/completions") => problems.extend(check_chat(v)),
            Ok(v) if path.ends_with("/v1/messages") => problems.extend(check_anthropic(v)),
            Ok(v) if path.ends_with("/responses") => problems.extend(check_responses(v)),
            Ok(_) => problems.push(format!("unexpected path {path}")),
        }
        let request = RecordedRequest {
            index: self.index,
            method: self.method.to_string(),
            path,
            headers: self
                .headers
                .iter()
                .map(|(k, v)| {
                    (
                        k.as_str().to_string(),
                        String::from_utf8_lossy(v.as_bytes()).into_owned(),
                    )
                })
                .collect(),
            body: parsed.unwrap_or(Value::Null),
            raw: String::from_utf8_lossy(&self.body).into_owned(),
        };
        (request, problems)
    }
}

#[derive(Default)]
struct Shared {
    replies: VecDeque<MockReply>,
    fallback: Option<ReplyFn>,
    /// Answered, in order, and not yet moved to `requests` ([`Shared::settle`]).
    received: Vec<Received>,
    requests: Vec<RecordedRequest>,
    violations: Vec<String>,
    /// Set by [`MockServer::expect_violations`]: the known bug they show.
    expected: Option<String>,
}

impl Shared {
    /// Parses and checks every request received so far, in order.
    fn settle(&mut self) -> &mut Self {
        for r in std::mem::take(&mut self.received) {
            let (request, problems) = r.settle();
            let index = request.index;
            self.violations.extend(
                problems
                    .into_iter()
                    .map(|p| format!("request {index}: {p}")),
            );
            self.requests.push(request);
        }
        self
    }
}

/// Whether a request body is a summarizer's: `tool_choice` none (Chat
/// Completions and Responses `"none"`, Anthropic `{"type":"none"}`), or no
/// tools at all.
pub fn is_summary(body: &Value) -> bool {
    body.get("tools").is_none()
        || body["tool_choice"] == "none"
        || body["tool_choice"]["type"] == "none"
}

/// A running mock server; stops when dropped, and then fails the test if
/// any request broke a rule (see [`checks`](super::checks)), unless the
/// test declared them with [`MockServer::expect_violations`].
pub struct MockServer {
    addr: std::net::SocketAddr,
    shared: Arc<Mutex<Shared>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
    /// The server's busy time in nanoseconds (see [`super::timed`]).
    busy: Arc<AtomicU64>,
}

impl MockServer {
    /// Starts a server that answers `replies` in order, then plain "done"
    /// messages.
    pub fn start(replies: Vec<MockReply>) -> MockServer {
        Self::launch(replies, None)
    }

    /// Like [`MockServer::start`], but once `replies` run out every request
    /// is answered by `fallback(request)`.
    pub fn start_with(
        replies: Vec<MockReply>,
        fallback: impl Fn(&RecordedRequest) -> MockReply + Send + Sync + 'static,
    ) -> MockServer {
        Self::launch(replies, Some(Arc::new(fallback)))
    }

    fn launch(replies: Vec<MockReply>, fallback: Option<ReplyFn>) -> MockServer {
        let shared = Arc::new(Mutex::new(Shared {
            replies: replies.into(),
            fallback,
            ..Shared::default()
        }));
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        listener
            .set_nonblocking(true)
            .expect("nonblocking listener");
        let addr = listener.local_addr().expect("local addr");
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let busy = Arc::new(AtomicU64::new(0));
        let counter = Arc::clone(&busy);
        let app = axum::Router::new()
            .fallback(handle)
            .with_state(shared.clone());
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("mock server runtime");
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).expect("tokio listener");
                let listener = TimedListener::new(listener, counter);
                tokio::select! {
                    result = axum::serve(listener, app) => {
                        if let Err(e) = result { eprintln!("mock server stopped: {e}"); }
                    }
                    _ = stopped => {}
                }
            });
        });
        MockServer {
            addr,
            shared,
            stop: Some(stop),
            thread: Some(thread),
            busy,
        }
    }

    /// `http://127.0.0.1:PORT/v1`: the OpenAI-compatible base URL.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// `http://127.0.0.1:PORT`: the base URL for the Anthropic provider.
    pub fn root_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Adds replies after the ones still queued.
    pub fn push(&self, reply: MockReply) {
        self.lock().replies.push_back(reply);
    }

    /// Every request body received, in order.
    pub fn requests(&self) -> Vec<Value> {
        self.lock()
            .settle()
            .requests
            .iter()
            .map(|r| r.body.clone())
            .collect()
    }

    /// Every request received, with path and headers.
    pub fn recorded(&self) -> Vec<RecordedRequest> {
        self.lock().settle().requests.clone()
    }

    /// The content the model was sent for `call_id` in the last request
    /// (the test fails when there is none).
    pub fn sent_result(&self, call_id: &str) -> String {
        self.recorded()
            .last()
            .expect("a request")
            .tool_results()
            .into_iter()
            .find(|(id, _)| id == call_id)
            .map(|(_, c)| c)
            .unwrap_or_else(|| panic!("no result for {call_id} sent to the model"))
    }

    /// Total time the server spent on requests, each from the last read of
    /// it off the socket to the last write of its answer (see
    /// [`super::timed`]): what a client's wait for this server costs beyond
    /// its own work. A request's time is added once the server's last
    /// write of its answer returns, a moment after the client may have it.
    pub fn busy(&self) -> std::time::Duration {
        std::time::Duration::from_nanos(self.busy.load(Ordering::Relaxed))
    }

    pub fn request_count(&self) -> usize {
        let s = self.lock();
        s.requests.len() + s.received.len()
    }

    /// Rules broken by the requests so far ("request N: ...").
    pub fn violations(&self) -> Vec<String> {
        self.lock().settle().violations.clone()
    }

    /// Panics with the list when any request broke a rule (dropping the
    /// server does the same; this checks at a chosen point).
    pub fn assert_no_violations(&self) {
        let v = self.violations();
        assert!(
            v.is_empty(),
            "the mock server saw bad requests:\n{}",
            v.join("\n")
        );
    }

    /// Declares that this test's requests break rules because of a known
    /// agent bug, named in `bug`: dropping the server then requires at
    /// least one violation (so the opt-out goes once the bug is fixed)
    /// instead of none. Only for bugs outside the tests, and always with
    /// a comment at the call.
    pub fn expect_violations(&self, bug: &str) {
        self.lock().expected = Some(bug.to_string());
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Shared> {
        self.shared.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for MockServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        if std::thread::panicking() {
            return;
        }
        let (violations, expected) = {
            let mut s = self.lock();
            let s = s.settle();
            (s.violations.clone(), s.expected.clone())
        };
        match expected {
            None => assert!(
                violations.is_empty(),
                "the mock server saw bad requests:\n{}",
                violations.join("\n")
            ),
            Some(bug) => assert!(
                !violations.is_empty(),
                "the mock server expected bad requests ({bug}) but saw none: \
                 remove the expect_violations opt-out"
            ),
        }
    }
}

async fn handle(
    State(shared): State<Arc<Mutex<Shared>>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    // What tinyagent asks of a local server before a run (llama.cpp's
    // `/props`): this server is not llama.cpp, and says so as an
    // OpenAI-compatible server would. Not a model request: not recorded.
    if method == Method::GET && uri.path().ends_with("/props") {
        return axum::response::IntoResponse::into_response((StatusCode::NOT_FOUND, "not found"));
    }
    let (index, mut reply) = {
        let mut s = shared.lock().unwrap_or_else(|p| p.into_inner());
        let index = s.requests.len() + s.received.len() + 1;
        s.received.push(Received {
            index,
            method,
            uri,
            headers,
            body: body.clone(),
        });
        let reply = match (s.replies.pop_front(), &s.fallback) {
            (Some(r), _) => r,
            (None, Some(f)) => MockReply::Func(f.clone()),
            (None, None) => MockReply::text("done"),
        };
        (index, reply)
    };
    let asked = Asked { index, body: &body };
    loop {
        match reply {
            MockReply::Func(f) => {
                // A reply made from the request needs it parsed now.
                let request = {
                    let mut s = shared.lock().unwrap_or_else(|p| p.into_inner());
                    s.settle().requests[index - 1].clone()
                };
                reply = f(&request);
            }
            MockReply::Delay(wait, inner) => {
                tokio::time::sleep(wait).await;
                reply = *inner;
            }
            MockReply::Cut(inner) => return cut(render(*inner, &asked)).await,
            other => return render(other, &asked),
        }
    }
}

/// What an answer needs of its request: its number and whether it asked
/// for a stream.
struct Asked<'a> {
    index: usize,
    body: &'a [u8],
}

impl Asked<'_> {
    /// `stream` and `stream_options.include_usage`, each true only when the
    /// body says `true`, as [`RecordedRequest::is_stream`] reads them. A body
    /// whose bytes hold no `stream` and no `\u` escape (that could spell
    /// it) names neither, and is not parsed.
    fn stream(&self) -> (bool, bool) {
        let has = |needle: &[u8]| memchr::memmem::find(self.body, needle).is_some();
        if !has(b"stream") && !has(b"\\u") {
            return (false, false);
        }
        let v: Value = serde_json::from_slice(self.body).unwrap_or(Value::Null);
        (
            v["stream"] == Value::Bool(true),
            v["stream_options"]["include_usage"] == Value::Bool(true),
        )
    }
}

/// Keeps the status and headers and the first half of the body, then fails
/// the body so the connection is cut.
async fn cut(full: Response) -> Response {
    let (parts, body) = full.into_parts();
    let bytes = axum::body::to_bytes(body, usize::MAX)
        .await
        .expect("mock body");
    let half = bytes.slice(..bytes.len() / 2).to_vec();
    let items: Vec<Result<Vec<u8>, std::io::Error>> =
        vec![Ok(half), Err(std::io::Error::other("mock: connection cut"))];
    Response::from_parts(parts, Body::from_stream(futures_util::stream::iter(items)))
}

fn render(reply: MockReply, req: &Asked<'_>) -> Response {
    let build = |status: StatusCode, content_type: &str, body: Body| {
        Response::builder()
            .status(status)
            .header("content-type", content_type)
            .body(body)
            .expect("response")
    };
    match reply {
        MockReply::Chat {
            content,
            tool_calls,
            usage,
        } => {
            let ids = call_ids(&tool_calls, req.index);
            let (stream, include) = req.stream();
            if stream {
                let text = chat_sse(&content, &tool_calls, &ids, usage, include);
                // Small odd-sized chunks, so events and even characters are split.
                let chunks: Vec<Result<Vec<u8>, std::io::Error>> = text
                    .into_bytes()
                    .chunks(7)
                    .map(|c| Ok(c.to_vec()))
                    .collect();
                build(
                    StatusCode::OK,
                    "text/event-stream",
                    Body::from_stream(futures_util::stream::iter(chunks)),
                )
            } else {
                let body = chat_json(&content, &tool_calls, &ids, usage).to_string();
                build(StatusCode::OK, "application/json", Body::from(body))
            }
        }
        MockReply::Status {
            code,
            retry_after,
            body,
        } => {
            let mut r = build(
                StatusCode::from_u16(code).expect("status code"),
                "application/json",
                Body::from(body),
            );
            if let Some(ra) = retry_after {
                r.headers_mut()
                    .insert("retry-after", ra.parse().expect("retry-after value"));
            }
            r
        }
        MockReply::Json(v) => build(
            StatusCode::OK,
            "application/json",
            Body::from(v.to_string()),
        ),
        MockReply::Drop => {
            let broken = futures_util::stream::once(async {
                Err::<Vec<u8>, std::io::Error>(std::io::Error::other("mock: connection dropped"))
            });
            build(
                StatusCode::OK,
                "application/json",
                Body::from_stream(broken),
            )
        }
        MockReply::Func(_) | MockReply::Delay(..) | MockReply::Cut(_) => {
            unreachable!("resolved before rendering")
        }
    }
}
