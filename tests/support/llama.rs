//! A real model server for the provider tests: llama.cpp's `llama-server`
//! with SmolLM2-135M-Instruct, both built or fetched by `.ci/llama-server`
//! (which `.ci/run` calls) and named by `TINYAGENT_LLAMA_SERVER` (the
//! binary) and `TINYAGENT_LLAMA_MODEL` (the GGUF file).
//!
//! One server serves Chat Completions (`/v1/chat/completions`), Anthropic
//! Messages (`/v1/messages`) and Responses (`/v1/responses`).
//!
//! [`shared`] starts one server per test binary on a free loopback port
//! (from a thread that lives as long as the binary, so `setpriv --pdeathsig`
//! stops the server when the binary exits), with a context of
//! [`SHARED_CONTEXT`] tokens. [`Llama::start`] starts a test's own server
//! with another context size (the overflow tests use a small one); drop
//! kills it.
//!
//! The prerequisite is named `llama` (tests/support/require.rs).

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The variable naming the `llama-server` binary.
pub const SERVER_VAR: &str = "TINYAGENT_LLAMA_SERVER";
/// The variable naming the model's GGUF file.
pub const MODEL_VAR: &str = "TINYAGENT_LLAMA_MODEL";
/// The shared server's context, in tokens: room for the system prompt, the
/// tools and a few steps.
pub const SHARED_CONTEXT: u32 = 8192;

/// The binary and the model, when both are named and exist.
pub fn available() -> Result<(PathBuf, PathBuf), String> {
    let path = |var: &str| -> Result<PathBuf, String> {
        let p = std::env::var_os(var)
            .map(PathBuf::from)
            .ok_or_else(|| format!("{var} is not set (.ci/llama-server builds llama-server)"))?;
        if p.is_file() {
            Ok(p)
        } else {
            Err(format!("{var}={} is not a file", p.display()))
        }
    };
    let server = path(SERVER_VAR)?;
    let model = path(MODEL_VAR)?;
    Command::new("setpriv")
        .arg("--version")
        .output()
        .map_err(|e| format!("no setpriv here ({e})"))?;
    Ok((server, model))
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
        .port()
}

/// One `llama-server` on 127.0.0.1.
pub struct Llama {
    port: u16,
    context: u32,
    child: Mutex<Option<Child>>,
    dir: tempfile::TempDir,
}

impl Llama {
    /// Starts a server of this test's own with a context of `context`
    /// tokens (killed on drop).
    pub fn start(context: u32) -> Result<Llama, String> {
        let (server, model) = available()?;
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let port = free_port();
        let log = std::fs::File::create(dir.path().join("llama.log")).map_err(|e| e.to_string())?;
        let mut cmd = Command::new("setpriv");
        cmd.args(["--pdeathsig", "KILL", "--"])
            .arg(server)
            .arg("-m")
            .arg(model)
            .args(["--host", "127.0.0.1", "--port"])
            .arg(port.to_string())
            .arg("-c")
            .arg(context.to_string())
            // One slot: the whole context is one conversation's; the tests
            // of a binary share the server one request at a time.
            .args(["-np", "1", "-t", "2", "--jinja", "--no-webui"])
            // Greedy: the same prompt gives the same answer.
            .args(["--temp", "0", "--seed", "1"])
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log);
        let child = cmd
            .spawn()
            .map_err(|e| format!("could not start llama-server: {e}"))?;
        let l = Llama {
            port,
            context,
            child: Mutex::new(Some(child)),
            dir,
        };
        l.wait_ready()?;
        Ok(l)
    }

    /// Waits until `GET /health` answers 200 (the model is loaded) and
    /// `GET /props` shows the context asked for: the port is this server's
    /// (another server may have taken a port found free).
    fn wait_ready(&self) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            if let Some(c) = self.child.lock().unwrap().as_mut()
                && let Ok(Some(st)) = c.try_wait()
            {
                return Err(format!("llama-server exited ({st}): {}", self.log()));
            }
            if self
                .get("/health")
                .is_ok_and(|r| r.starts_with("HTTP/1.1 200"))
            {
                let props = self.get("/props").unwrap_or_default();
                if props.contains(&format!("\"n_ctx\":{}", self.context)) {
                    return Ok(());
                }
                return Err(format!(
                    "the server on port {} is not the one started with -c {}: {}",
                    self.port,
                    self.context,
                    props.lines().last().unwrap_or_default()
                ));
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "llama-server did not come up in 120 s: {}",
                    self.log()
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// A plain `GET path`: the whole response, status line first.
    pub fn get(&self, path: &str) -> Result<String, String> {
        use std::io::{Read, Write};
        let mut s =
            std::net::TcpStream::connect(("127.0.0.1", self.port)).map_err(|e| e.to_string())?;
        s.set_read_timeout(Some(Duration::from_secs(10))).ok();
        write!(
            s,
            "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
        )
        .map_err(|e| e.to_string())?;
        let mut resp = String::new();
        s.read_to_string(&mut resp).map_err(|e| e.to_string())?;
        Ok(resp)
    }

    /// `POST path` with a JSON body: the response's JSON body, or the
    /// status line and body of a response that is not a 200.
    pub fn post(&self, path: &str, body: &serde_json::Value) -> Result<serde_json::Value, String> {
        use std::io::{Read, Write};
        let body = body.to_string();
        let mut s =
            std::net::TcpStream::connect(("127.0.0.1", self.port)).map_err(|e| e.to_string())?;
        s.set_read_timeout(Some(Duration::from_secs(300))).ok();
        write!(
            s,
            "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .map_err(|e| e.to_string())?;
        let mut resp = String::new();
        s.read_to_string(&mut resp).map_err(|e| e.to_string())?;
        let (head, json) = resp.split_once("\r\n\r\n").unwrap_or((&resp, ""));
        if !head.starts_with("HTTP/1.1 200") {
            return Err(format!(
                "{}: {json}",
                head.lines().next().unwrap_or_default()
            ));
        }
        serde_json::from_str(json).map_err(|e| format!("{e}: {json}"))
    }

    /// `http://127.0.0.1:<port>`: Anthropic's base URL (it appends
    /// `/v1/messages`).
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// `http://127.0.0.1:<port>/v1`: the OpenAI base URL (Chat Completions
    /// and Responses).
    pub fn v1(&self) -> String {
        format!("{}/v1", self.url())
    }

    /// The context the server was started with, in tokens.
    pub fn context(&self) -> u32 {
        self.context
    }

    /// The end of the server's log, for failure messages.
    pub fn log(&self) -> String {
        let text = std::fs::read_to_string(self.dir.path().join("llama.log")).unwrap_or_default();
        let start = text.len().saturating_sub(3000);
        String::from_utf8_lossy(&text.as_bytes()[start..]).into_owned()
    }
}

impl Drop for Llama {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.lock().unwrap().take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// One run at a time against the shared server: it has one slot, and on
/// two shared cores queued requests would wait past any sane timeout.
pub fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static TURN: Mutex<()> = Mutex::new(());
    TURN.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The test binary's own server, started on first use.
pub fn shared() -> Result<&'static Llama, String> {
    static SHARED: OnceLock<Result<&'static Llama, String>> = OnceLock::new();
    SHARED
        .get_or_init(|| {
            // Started from a thread that never ends: the server's
            // parent-death signal fires when the binary exits, not when
            // the first test's thread does.
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                let started = Llama::start(SHARED_CONTEXT).map(|l| &*Box::leak(Box::new(l)));
                let _ = tx.send(started);
                loop {
                    std::thread::park();
                }
            });
            rx.recv().map_err(|e| e.to_string())?
        })
        .clone()
}
