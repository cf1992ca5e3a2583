//! Helpers of the fault-injection tests: an offline scripted task, the
//! acknowledged records (`--json` events with a `seq`), and the check that
//! each of them is intact in the log after a failure.

use crate::support::e2e::{Sandbox, bin};
use serde_json::{Value, json};
use std::path::Path;
use std::process::{Command, Stdio};

/// Writes a script-provider file: `turns` turns, each one bash call
/// appending `s<n>` to `ledger.txt`, then a final answer.
pub fn write_script(sb: &Sandbox, turns: u64) -> std::path::PathBuf {
    let mut list: Vec<Value> = (1..=turns)
        .map(|n| {
            json!({"tool_calls": [{"id": format!("s{n}"), "name": "bash",
                "arguments": {"command": format!("echo s{n} >> ledger.txt")}}],
                "usage": {"input_tokens": 10 + n, "output_tokens": 2}})
        })
        .collect();
    list.push(json!({"content": "finished", "usage": {"input_tokens": 5, "output_tokens": 1}}));
    let path = sb.path("script.json");
    std::fs::write(&path, json!({"turns": list}).to_string()).expect("script");
    path
}

/// The arguments of an offline `run` of that script (after the binary).
pub fn run_args(sb: &Sandbox, script: &Path) -> Vec<String> {
    let s = |p: &Path| p.display().to_string();
    vec![
        "run".into(),
        "--provider".into(),
        "script".into(),
        "--script".into(),
        s(script),
        "--wal".into(),
        s(&sb.wal()),
        "--cwd".into(),
        s(&sb.ws()),
        "--snapshot-every".into(),
        "3".into(),
        "--json".into(),
        "fault test".into(),
    ]
}

/// `tinyagent run` of the script with nothing injected.
pub fn run_cmd(sb: &Sandbox, script: &Path) -> Command {
    let mut c = Command::new(bin());
    c.args(run_args(sb, script))
        .current_dir(sb.dir.path())
        .stdin(Stdio::null())
        .env_remove("TINYAGENT_FAULTS");
    homes(&mut c, sb);
    c
}

/// The sandbox's own `TINYAGENT_HOME` and `XDG_CONFIG_HOME`, as the
/// sandbox's commands have: what a run records of its workspace there is
/// what its resume reads, and nothing is written to the real home.
pub fn homes<'a>(c: &'a mut Command, sb: &Sandbox) -> &'a mut Command {
    c.env("TINYAGENT_HOME", sb.home())
        .env("XDG_CONFIG_HOME", sb.config_home())
}

/// (seq, record type) of every record the process reported saved.
pub fn acknowledged(stdout: &[u8]) -> Vec<(u64, String)> {
    String::from_utf8_lossy(stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|v| {
            let seq = v["seq"].as_u64()?;
            // `tool.result` is reported as `tool.finished` (contract section 4).
            let kind = match v["event"].as_str()? {
                "tool.finished" => "tool.result",
                // Its seq is the snapshot's, not a new record's.
                "snapshot.saved" => return None,
                other => other,
            };
            Some((seq, kind.to_string()))
        })
        .collect()
}

/// Lines of `ledger.txt` in the workspace.
pub fn ledger(sb: &Sandbox) -> Vec<String> {
    std::fs::read_to_string(sb.ws().join("ledger.txt"))
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}
