//! The agent's own overhead per step: a real run of the binary against a
//! loopback OpenAI-compatible server that answers at once, each step one
//! `read` of a small file. The run reports (event `run.stats`) its wall
//! time, the time spent waiting for the model and in tools; the overhead is
//! what remains (building the request, parsing the reply, the log appends
//! with their fdatasync, events). Criterion is given that overhead (and,
//! separately, the fdatasync part of it) per step.

#[path = "../tests/common/mod.rs"]
mod common;

use common::{MockReply, MockServer};
use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::{Value, json};
use std::process::{Command, Stdio};
use std::time::Duration;

fn run_stats(server: &MockServer, steps: u64) -> Value {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("small.txt"), "hello\n").expect("file");
    for _ in 0..steps {
        server.push(MockReply::tool_call("read", json!({"path": "small.txt"})));
    }
    server.push(MockReply::text("done"));
    let out = Command::new(env!("CARGO_BIN_EXE_tinyagent"))
        .args([
            "run",
            "--json",
            "--model",
            "m",
            "--base-url",
            &server.base_url(),
        ])
        .arg("--cwd")
        .arg(dir.path())
        .arg("--wal")
        .arg(dir.path().join("run.wal"))
        .arg("bench a step")
        .env_remove("OPENAI_API_KEY")
        .stdin(Stdio::null())
        .output()
        .expect("run tinyagent");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|e| e["event"] == "run.stats")
        .expect("run.stats event")
}

fn ms(v: &Value, key: &str) -> Duration {
    Duration::from_secs_f64(v[key].as_f64().unwrap_or(0.0) / 1000.0)
}

fn step_overhead(c: &mut Criterion) {
    let server = MockServer::start(vec![]);
    let mut g = c.benchmark_group("agent_step");
    g.sample_size(10).measurement_time(Duration::from_secs(20));
    // Each "iteration" is one step; steps+1 model calls per run.
    g.bench_function("overhead_per_step", |b| {
        b.iter_custom(|iters| ms(&run_stats(&server, iters), "overhead_ms"))
    });
    g.bench_function("fdatasync_per_step", |b| {
        b.iter_custom(|iters| ms(&run_stats(&server, iters), "fsync_ms"))
    });
    g.finish();
}

criterion_group!(benches, step_overhead);
criterion_main!(benches);
