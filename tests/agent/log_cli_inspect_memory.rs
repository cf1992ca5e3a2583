//! `log inspect` reads a log in bounded memory (contract section 9): on a log
//! of large tool outputs its peak RSS stays far below the log's size, because
//! it folds counts and the few things it reports, not the whole history.
//!
//! The log is streamed to disk record by record with the crate's pure
//! `frame::encode` (never held whole in the test's memory), under the cargo
//! target directory; the binary's peak RSS is its `VmHWM`, polled from
//! `/proc/<pid>/status` until it exits.

use crate::support::e2e::bin;
use serde_json::Value;
use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tinyagent::event::*;
use tinyagent_store::wal::frame;

const TS: &str = "2026-01-01T00:00:00.000000Z";
/// Bytes of each tool output.
const OUTPUT: usize = 256 << 10;
/// Steps of one call and one output each: about 60 MB of log.
const STEPS: u64 = 240;
/// Peak RSS `log inspect` may reach on that log.
const BOUND: u64 = 40 << 20;

/// A tool output of exactly `bytes` bytes, different for every step.
fn output(step: u64, bytes: usize) -> String {
    let mut out = String::with_capacity(bytes + 64);
    let mut line = 0u64;
    while out.len() < bytes {
        line += 1;
        out.push_str(&format!(
            "src/module_{}.rs:{line}: warning: unused variable `x{step}` (\"quoted\")\n",
            (step * 31 + line) % 97
        ));
    }
    out.truncate(bytes);
    out
}

/// Writes a run of `steps` steps (the last call left pending) to `path`;
/// returns the number of records.
fn write_log(path: &Path, steps: u64) -> u64 {
    let mut w = BufWriter::new(File::create(path).unwrap());
    let mut records = vec![Event::RunStarted(RunStarted {
        schema_version: SCHEMA_VERSION,
        run_id: "r-big".into(),
        task: "read every log".into(),
        model: "m1".into(),
        provider: tinyagent::config::ProviderKind::Script,
        base_url: None,
        plan_enabled: false,
        read_only: false,
        tool_signature: "sig".into(),
        tools: vec!["bash".into()],
        mcp_tools: Vec::new(),
        limits: Limits::default(),
        forked_from: None,
        system_prompt: "sys".into(),
        settings: RunSettings::default(),
    })];
    let (mut seq, mut prev, mut line) = (0u64, 0u32, Vec::new());
    let mut total = Usage::default();
    for step in 1..=steps {
        let id = format!("c{step}");
        let usage = Usage {
            input_tokens: 1000,
            output_tokens: 10,
            ..Usage::default()
        };
        total.add(&usage);
        let call = ToolCall {
            id: id.clone(),
            name: "bash".into(),
            arguments: r#"{"command":"cat build.log"}"#.into(),
        };
        records.push(Event::ModelResponse(ModelResponse {
            context_tokens: 0,
            request_bytes: 0,
            stop_reason: None,
            stop_reason_raw: None,
            step,
            message: Message::assistant("", vec![call]),
            usage,
            cost_usd: 0.01,
            pending: vec![id.clone()],
        }));
        records.push(Event::ToolStarted(ToolStarted {
            step,
            call_id: id.clone(),
            name: "bash".into(),
            process: None,
        }));
        if step < steps {
            records.push(Event::ToolResult(ToolResult::new(
                step,
                &id,
                "bash",
                output(step, OUTPUT),
                false,
            )));
            records.push(Event::StepSaved(StepSaved {
                step,
                usage_total: total,
                cost_usd_total: 0.01 * step as f64,
            }));
        }
        for ev in records.drain(..) {
            seq += 1;
            line.clear();
            prev = frame::encode(seq, prev, TS, &ev, &mut line).unwrap();
            w.write_all(&line).unwrap();
        }
    }
    w.into_inner().unwrap().sync_all().unwrap();
    seq
}

/// `VmHWM` of a live process, in bytes (None once it has exited).
fn peak_rss(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kb = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))?
        .trim()
        .strip_suffix("kB")?
        .trim()
        .parse::<u64>()
        .ok()?;
    Some(kb * 1024)
}

#[test]
fn inspect_json_of_a_60_mb_log_stays_far_below_its_size() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let wal = dir.path().join("big.wal");
    let records = write_log(&wal, STEPS);
    let bytes = std::fs::metadata(&wal).unwrap().len();
    assert!(bytes > 60_000_000, "{bytes}");

    let mut child = Command::new(bin())
        .args(["log", "inspect", "--json"])
        .arg(&wal)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    // The report is small: reading stdout only at the end cannot block it.
    let mut peak = 0;
    let deadline = Instant::now() + Duration::from_secs(300);
    let status = loop {
        if let Some(rss) = peak_rss(pid) {
            peak = peak.max(rss);
        }
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "inspect did not finish");
        std::thread::sleep(Duration::from_millis(2));
    };
    let (mut out, mut err) = (String::new(), String::new());
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(status.success(), "{status}: {err}");

    let report: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["records"], records);
    assert_eq!(report["bytes"], bytes);
    assert_eq!(report["steps"], STEPS);
    assert_eq!(report["saved_step"], STEPS - 1);
    assert_eq!(report["messages"], 2 + 2 * STEPS - 1);
    assert_eq!(report["pending_calls"][0]["id"], format!("c{STEPS}"));
    assert_eq!(report["usage"]["input_tokens"], 1000 * STEPS);
    assert!(peak > 0, "no VmHWM read from /proc/{pid}/status");
    assert!(
        peak < BOUND,
        "log inspect peaked at {} MB on a {} MB log (bound {} MB)",
        peak >> 20,
        bytes >> 20,
        BOUND >> 20
    );
}
