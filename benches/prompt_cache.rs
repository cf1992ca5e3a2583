//! What a prompt cache saves (`cargo bench --bench prompt_cache`): the
//! scripted 60-step session of section 16, its plan changed every 4 steps,
//! run by the binary against a loopback server that plays each provider
//! (tests/support/cache.rs), once with the plan appended (the default) and
//! once with `plan.pin = "head"` (the layout before). From the captured
//! requests it prints, per provider and layout, the bytes sent, the bytes a
//! prefix cache could not serve, the floor (what the requests grew by), their
//! ratio, and the input tokens billed at full price (bytes / 4): the uncached
//! part where the provider caches prefixes by itself (OpenAI), all of the
//! input for Anthropic without breakpoints (the layout before had none).
//! docs/performance.md quotes it.
//!
//! Criterion times one whole session per provider (wall time of the run,
//! the server's answers included), so a slower request builder shows.
//!
//! With `TINYAGENT_LLAMA_SERVER` and `TINYAGENT_LLAMA_MODEL` set (see
//! tests/support/llama.rs), the same session runs against llama.cpp
//! through a proxy that has it evaluate every prompt, and the least share of
//! a later prompt it reports cached is printed.
//!
//! `TINYAGENT_BENCH_BIN` runs another build of the binary. Under `cargo test
//! --benches` the session shrinks to a quick check.

#[path = "../tests/support/cache.rs"]
#[allow(dead_code, reason = "shared with the tests, which use all of it")]
mod cache;
#[path = "../tests/support/llama.rs"]
#[allow(dead_code, reason = "shared with the tests, which use all of it")]
mod llama;
#[path = "../tests/support/mock/mod.rs"]
mod mock;

/// The tests' support modules, where the shared ones look for each other.
mod support {
    pub(crate) use super::{cache, llama, mock};
}

use criterion::Criterion;
use serde_json::Value;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;
use support::cache::{Api, estimated, script, uncached_and_floor};
use support::mock::MockServer;

fn binary() -> PathBuf {
    std::env::var_os("TINYAGENT_BENCH_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_tinyagent")))
}

/// One session of `steps` steps against `server`, with `toml` in the
/// config; returns the requests' bodies and the `usage` of each
/// `model.response` in its log.
fn session(api: Api, server: &MockServer, toml: &str, steps: u64) -> (Vec<Value>, Vec<Value>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).expect("ws");
    let config = dir.path().join("tinyagent.toml");
    std::fs::write(&config, format!("[model]\nmax_retries = 0\n{toml}")).expect("config");
    let url = match api {
        Api::Anthropic => server.root_url(),
        _ => server.base_url(),
    };
    let status = Command::new(binary())
        .arg("run")
        .args([
            "--provider",
            api.provider(),
            "--plan",
            "--model",
            "test-model",
        ])
        .arg("--base-url")
        .arg(url)
        .args(["--max-steps", &steps.to_string()])
        .arg("--wal")
        .arg(dir.path().join("run.wal"))
        .arg("--cwd")
        .arg(&ws)
        .arg("--config")
        .arg(&config)
        .arg("do all the parts")
        .env("OPENAI_API_KEY", "sk-bench")
        .env("ANTHROPIC_API_KEY", "sk-ant-bench")
        .env("TINYAGENT_HOME", dir.path().join("home"))
        .env("XDG_CONFIG_HOME", dir.path().join("config-home"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("run the binary");
    assert!(status.code().is_some_and(|c| c == 0 || c == 3), "{status}");
    let log = std::fs::read_to_string(dir.path().join("run.wal")).expect("the log");
    let usages = log
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|r| r["type"] == "model.response")
        .map(|r| r["data"]["usage"].clone())
        .collect();
    (server.requests(), usages)
}

/// Bytes of a request's parts.
fn bytes(parts: &[String]) -> u64 {
    parts.iter().map(|p| p.len() as u64).sum()
}

/// One line of the table: sent, uncached, floor, ratio, billed in full.
fn measure(api: Api, toml: &str, steps: u64, breakpoints: bool) -> (u64, u64, u64, u64) {
    let server = script(api, estimated(api));
    let (bodies, _) = session(api, &server, toml, steps);
    let parts: Vec<Vec<String>> = bodies.iter().map(|b| api.parts(b)).collect();
    let sent: u64 = parts.iter().map(|p| bytes(p)).sum();
    let (uncached, floor) = uncached_and_floor(&parts, &[]);
    // The first request is never in a cache.
    let first = parts.first().map_or(0, |p| bytes(p));
    let billed = if api == Api::Anthropic && !breakpoints {
        sent
    } else {
        uncached + first
    };
    (sent, uncached, floor, billed / 4)
}

fn table(steps: u64) {
    println!(
        "\n{steps}-step session, plan changed every 4 steps (bytes; tokens = bytes / 4)\n\
         {:<10} {:<7} {:>10} {:>10} {:>10} {:>6} {:>14}",
        "provider", "layout", "sent", "uncached", "floor", "ratio", "full-price tok"
    );
    for api in Api::ALL {
        for (layout, toml) in [("head", "[plan]\npin = \"head\"\n"), ("append", "")] {
            let before = layout == "head";
            let (sent, uncached, floor, billed) = measure(api, toml, steps, !before);
            println!(
                "{:<10} {:<7} {:>10} {:>10} {:>10} {:>6.2} {:>14}",
                api.provider(),
                layout,
                sent,
                uncached,
                floor,
                uncached as f64 / floor.max(1) as f64,
                billed
            );
        }
    }
}

/// The session against llama.cpp: the least share of a later prompt it
/// reports cached, per provider.
fn llama(steps: u64) {
    let Ok(_) = support::llama::available() else {
        println!("\nllama.cpp: not set up (TINYAGENT_LLAMA_SERVER, TINYAGENT_LLAMA_MODEL)");
        return;
    };
    let server =
        std::sync::Arc::new(support::llama::Llama::start(16_384).expect("llama-server starts"));
    for api in Api::ALL {
        let llama = std::sync::Arc::clone(&server);
        let proxy = script(api, move |req| {
            let (path, body) = support::cache::one_token(api, req);
            llama.post(&path, &body).expect("llama-server answers")["usage"].clone()
        });
        let (_, usages) = session(api, &proxy, "", steps);
        let n = |u: &Value, k: &str| u[k].as_u64().unwrap_or(0);
        let least = usages
            .iter()
            .skip(1)
            .map(|u| {
                let cached = n(u, "cached_input_tokens");
                let all = n(u, "input_tokens") + cached + n(u, "cache_write_tokens");
                100.0 * cached as f64 / all.max(1) as f64
            })
            .fold(100.0f64, f64::min);
        println!(
            "llama.cpp {:<10} least cached share of a later prompt: {least:.1}%",
            api.provider()
        );
    }
}

fn main() {
    let quick = !std::env::args().any(|a| a == "--bench");
    let steps = if quick { 12 } else { support::cache::STEPS };
    let mut c = Criterion::default()
        .sample_size(10)
        .measurement_time(Duration::from_secs(if quick { 1 } else { 20 }))
        .warm_up_time(Duration::from_millis(if quick { 100 } else { 1000 }))
        .configure_from_args();
    let mut group = c.benchmark_group("prompt_cache");
    for api in Api::ALL {
        group.bench_function(format!("session/{}", api.provider()), |b| {
            b.iter(|| {
                let server = script(api, estimated(api));
                session(api, &server, "", steps).0.len()
            });
        });
    }
    group.finish();
    c.final_summary();
    table(steps);
    llama(steps);
}
