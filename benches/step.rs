//! The agent's own overhead per step: a real run of the binary against a
//! loopback OpenAI-compatible server that answers at once, each step one
//! `read` of a small file. The run reports (event `run.stats`) its wall
//! time, the time spent waiting for the model and in tools; the overhead is
//! what remains (building the request, parsing the reply, the log appends
//! with their fdatasync, events). Criterion is given that overhead (and,
//! separately, the fdatasync part of it) per step.

#[path = "../tests/support/mock/mod.rs"]
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
    // The same runs' overhead minus the time spent in fdatasync.
    g.bench_function("overhead_without_fdatasync_per_step", |b| {
        b.iter_custom(|iters| {
            let v = run_stats(&server, iters);
            ms(&v, "overhead_ms").saturating_sub(ms(&v, "fsync_ms"))
        })
    });
    g.finish();
    share_of_fdatasync(&server);
}

/// Several runs of 100 steps: per run, the overhead per step and the share
/// of it spent in fdatasync (both from the same run), then the medians.
fn share_of_fdatasync(server: &MockServer) {
    let mut per_step = Vec::new();
    let mut share = Vec::new();
    for _ in 0..7 {
        let v = run_stats(server, 100);
        let overhead = v["overhead_ms"].as_f64().unwrap_or(0.0);
        let fsync = v["fsync_ms"].as_f64().unwrap_or(0.0);
        per_step.push(overhead / v["steps"].as_f64().unwrap_or(1.0));
        share.push(if overhead > 0.0 {
            fsync / overhead
        } else {
            0.0
        });
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    println!(
        "agent_step summary over 7 runs of 100 steps: overhead {:.3} ms/step (median), \
         fdatasync share of it {:.0}% (median)",
        median(&mut per_step),
        100.0 * median(&mut share)
    );
}

criterion_group!(benches, step_overhead);
criterion_main!(benches);
