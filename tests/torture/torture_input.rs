//! Bad input everywhere a user gives it, through the real binary: configs,
//! script files, trajectory files (for `resume` and `log import`), flags,
//! tool arguments from the model, plan updates and hook output. Each gives a
//! clear error and the contract's exit code, never a panic, and leaves every
//! input file byte-for-byte unchanged (and no half-made log behind).

use crate::support::contract;
use crate::support::e2e::{Sandbox, bin, output, stderr};
use crate::support::torture::panicked;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn cmd(sb: &Sandbox, args: &[&str]) -> Command {
    let mut c = Command::new(bin());
    c.args(args)
        .current_dir(sb.dir.path())
        .stdin(Stdio::null())
        .env_remove("OPENAI_API_KEY")
        .env_remove("TINYAGENT_FAULTS");
    c
}

/// A refusal: exit `code`, one `tinyagent:` line (clap: `error:`; `log
/// verify`: its `unreadable:` verdict) naming
/// `names`, no panic, `inputs` unchanged.
fn refused(what: &str, out: &Output, code: i32, names: &str, inputs: &[(PathBuf, Vec<u8>)]) {
    let err = stderr(out);
    assert_eq!(
        out.status.code(),
        Some(code),
        "{what}: exit code; stderr:\n{err}"
    );
    assert!(!panicked(&err), "{what}: panicked:\n{err}");
    let line = err
        .lines()
        .find(|l| {
            ["tinyagent:", "error:", "unreadable:"]
                .iter()
                .any(|p| l.starts_with(p))
        })
        .unwrap_or_else(|| panic!("{what}: no error line:\n{err}"));
    // clap (usage errors) names the argument on the lines after `error:`.
    let said = if line.starts_with("error:") {
        err.as_str()
    } else {
        line
    };
    assert!(
        said.to_lowercase().contains(&names.to_lowercase()),
        "{what}: {names:?} not in {said:?}"
    );
    for (p, bytes) in inputs {
        assert_eq!(
            &std::fs::read(p).unwrap(),
            bytes,
            "{what}: {} changed",
            p.display()
        );
    }
}

fn file(sb: &Sandbox, name: &str, bytes: &[u8]) -> (PathBuf, Vec<u8>) {
    let p = sb.path(name);
    std::fs::write(&p, bytes).unwrap();
    (p, bytes.to_vec())
}

fn good_script(sb: &Sandbox) -> PathBuf {
    let p = sb.path("good.json");
    let turns = json!({"turns": [{"tool_calls": [{"name": "bash", "arguments": {"command": "echo hi"}}]},
                                 {"content": "done"}]});
    std::fs::write(&p, turns.to_string()).unwrap();
    p
}

fn script_run<'a>(sb: &Sandbox, script: &'a Path, extra: &[&'a str]) -> Command {
    let mut c = cmd(sb, &["run", "--provider", "script", "--script"]);
    c.arg(script)
        .arg("--wal")
        .arg(sb.wal())
        .arg("--cwd")
        .arg(sb.ws())
        .args(extra)
        .arg("bad input");
    c
}

#[test]
fn bad_configs_are_refused_with_exit_2() {
    for (name, toml, names) in [
        ("syntax", "[model\nname = ", "tinyagent.toml"),
        ("type", "[limits]\nmax_steps = \"ten\"", "max_steps"),
        ("unknown key", "[model]\nnmae = \"x\"", "nmae"),
        ("unknown table", "[modle]\nname = \"x\"", "modle"),
        (
            "zero snapshot interval",
            "[wal]\nsnapshot_every = 0",
            "snapshot_every",
        ),
        ("negative price", "[model]\nprice_in = -1.0", "price_in"),
        ("not UTF-8", "[model]\nname = \"\u{0}\"", "tinyagent.toml"),
    ] {
        let sb = Sandbox::new();
        let script = good_script(&sb);
        let cfg = file(&sb, "tinyagent.toml", toml.as_bytes());
        let mut c = script_run(&sb, &script, &[]);
        c.arg("--config").arg(&cfg.0);
        let out = output(c);
        refused(name, &out, 2, names, &[cfg]);
        assert!(!sb.wal().exists(), "{name}: no log for refused input");
    }
}

#[test]
fn bad_script_files_are_refused_with_exit_2() {
    for (name, text) in [
        ("empty", &b""[..]),
        ("truncated", br#"{"turns": [{"content": "a"#),
        ("wrong shape", br#"{"turns": 5}"#),
        ("unknown member", br#"{"turns": [], "turnz": []}"#),
        (
            "unknown call member",
            br#"{"turns": [{"tool_calls": [{"name": "bash", "args": {}}]}]}"#,
        ),
        ("binary", &[0xff, 0xfe, 0x00, 0x01][..]),
    ] {
        let sb = Sandbox::new();
        let script = file(&sb, "script.json", text);
        let out = output(script_run(&sb, &script.0, &[]));
        refused(name, &out, 2, "script.json", &[script]);
        assert!(!sb.wal().exists(), "{name}: no log for a refused script");
    }
    let sb = Sandbox::new();
    let out = output(script_run(&sb, &sb.path("missing.json"), &[]));
    refused("missing script", &out, 2, "missing.json", &[]);
}

fn trajectory_variants() -> Vec<(&'static str, Vec<u8>)> {
    let v2 = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/trajectory_v2.json"
    ))
    .unwrap();
    let parsed: Value = serde_json::from_slice(&v2).unwrap();
    let with = |f: &dyn Fn(&mut Value)| {
        let mut v = parsed.clone();
        f(&mut v);
        serde_json::to_vec(&v).unwrap()
    };
    vec![
        ("truncated", v2[..v2.len() / 2].to_vec()),
        ("empty", Vec::new()),
        ("not JSON", b"schema_version: 2\n".to_vec()),
        ("array", b"[1, 2, 3]".to_vec()),
        ("unknown schema", with(&|v| v["schema_version"] = json!(99))),
        (
            "schema as text",
            with(&|v| v["schema_version"] = json!("2")),
        ),
        (
            "no messages",
            with(&|v| {
                v.as_object_mut().unwrap().remove("messages");
            }),
        ),
        (
            "message without role",
            with(&|v| {
                v["messages"][1].as_object_mut().unwrap().remove("role");
            }),
        ),
        (
            "messages not a list",
            with(&|v| v["messages"] = json!({"a": 1})),
        ),
        (
            "no task",
            with(&|v| {
                v.as_object_mut().unwrap().remove("task");
            }),
        ),
    ]
}

#[test]
fn bad_trajectories_are_refused_by_resume_and_import() {
    for (name, bytes) in trajectory_variants() {
        let sb = Sandbox::new();
        let traj = file(&sb, "traj.json", &bytes);
        let out = output(cmd(&sb, &["resume", "traj.json"]));
        refused(
            &format!("resume {name}"),
            &out,
            2,
            "traj.json",
            std::slice::from_ref(&traj),
        );
        assert!(
            !sb.path("traj.json.wal").exists(),
            "resume {name}: a half-made log is left"
        );
        let out = output(cmd(&sb, &["log", "import", "traj.json", "-o", "out.wal"]));
        refused(&format!("import {name}"), &out, 2, "traj.json", &[traj]);
        assert!(
            !sb.path("out.wal").exists(),
            "import {name}: a half-made log is left"
        );
    }
}

#[test]
fn bad_flags_are_refused_with_exit_2() {
    let sb = Sandbox::new();
    let script = good_script(&sb);
    let s = script.to_str().unwrap();
    let wal = sb.wal();
    let w = wal.to_str().unwrap();
    let cases: Vec<(&str, Vec<&str>, &str)> = vec![
        (
            "unknown flag",
            vec!["run", "--frobnicate", "t"],
            "--frobnicate",
        ),
        (
            "no task",
            vec!["run", "--provider", "script", "--script", s],
            "TASK",
        ),
        (
            "steps not a number",
            vec!["run", "--max-steps", "ten", "t"],
            "ten",
        ),
        (
            "negative steps",
            vec!["run", "--max-steps", "-1", "t"],
            "-1",
        ),
        (
            "unknown provider",
            vec!["run", "--provider", "nope", "t"],
            "nope",
        ),
        (
            "zero snapshot interval",
            vec![
                "run",
                "--provider",
                "script",
                "--script",
                s,
                "--wal",
                w,
                "--snapshot-every",
                "0",
                "t",
            ],
            "snapshot",
        ),
        (
            "compact-at text",
            vec!["run", "--compact-at", "lots", "t"],
            "lots",
        ),
        (
            "cost NaN",
            vec![
                "run",
                "--provider",
                "script",
                "--script",
                s,
                "--wal",
                w,
                "--max-cost",
                "NaN",
                "t",
            ],
            "max",
        ),
        (
            "plan file without plan",
            vec![
                "run",
                "--provider",
                "script",
                "--script",
                s,
                "--wal",
                w,
                "--plan-file",
                "p.md",
                "t",
            ],
            "--plan-file requires --plan",
        ),
        ("resume nothing", vec!["resume", "nope.wal"], "nope.wal"),
        ("verify a directory", vec!["log", "verify", "ws"], "ws"),
    ];
    for (name, args, names) in cases {
        let out = output(cmd(&sb, &args));
        refused(
            name,
            &out,
            2,
            names,
            &[(script.clone(), std::fs::read(&script).unwrap())],
        );
        assert!(!wal.exists(), "{name}: no log for refused flags");
    }
    // `log inspect` of a missing file: refused input (2), like `log verify`.
    let out = output(cmd(&sb, &["log", "inspect", "nope.wal"]));
    refused("inspect nothing", &out, 2, "nope.wal", &[]);
}

/// A run whose model sends `calls` (raw argument strings) one per turn.
fn run_calls(sb: &Sandbox, calls: &[(&str, &str)], extra: &[&str], cfg: &str) -> Output {
    let mut turns: Vec<Value> = calls
        .iter()
        .map(|(name, args)| json!({"tool_calls": [{"name": name, "arguments": args}]}))
        .collect();
    turns.push(json!({"content": "done"}));
    let script = sb.path("calls.json");
    std::fs::write(&script, json!({"turns": turns}).to_string()).unwrap();
    let config = sb.fast_config(cfg);
    let mut c = script_run(sb, &script, extra);
    c.arg("--config").arg(config).arg("--json");
    output(c)
}

/// Every call got exactly one result and the log is sound.
fn sound_log(sb: &Sandbox, what: &str) -> Vec<contract::Rec> {
    let recs = contract::read(&sb.wal());
    contract::check_write_order(&recs);
    let calls: usize = recs
        .iter()
        .filter(|r| r.kind == "model.response")
        .map(|r| r.data["pending"].as_array().unwrap().len())
        .sum();
    let results = recs.iter().filter(|r| r.kind == "tool.result").count();
    assert_eq!(calls, results, "{what}: one result per call");
    recs
}

#[test]
fn bad_tool_arguments_from_the_model_are_error_results() {
    let huge = format!("{{\"command\": \"echo {}\"}}", "x".repeat(200_000));
    let bad: Vec<(&str, &str)> = vec![
        ("bash", "{\"command\": "),
        ("bash", "{\"command\": 5}"),
        ("bash", "[]"),
        ("bash", "{\"command\": \"true\", \"timeout_ms\": -3}"),
        ("read", "{\"path\": \"../../etc/passwd\"}"),
        ("write", "{\"path\": \"\", \"content\": \"x\"}"),
        (
            "edit",
            "{\"path\": \"nope.txt\", \"old_string\": \"\", \"new_string\": \"y\"}",
        ),
        ("grep", "{\"pattern\": \"(unclosed\"}"),
        ("glob", "{\"pattern\": \"[\"}"),
        ("no_such_tool", "{}"),
        ("bash", "\u{0}\u{1}"),
        ("bash", &huge),
    ];
    for (name, args) in bad {
        let sb = Sandbox::new();
        let out = run_calls(&sb, &[(name, args)], &[], "");
        let err = stderr(&out);
        let what = format!("{name} {}", &args[..args.len().min(40)]);
        assert!(!panicked(&err), "{what}: {err}");
        assert_eq!(out.status.code(), Some(0), "{what}: {err}");
        let recs = sound_log(&sb, &what);
        let result = recs.iter().find(|r| r.kind == "tool.result").unwrap();
        assert_eq!(result.data["is_error"], true, "{what}: {:?}", result.data);
    }
    // Malformed calls in a row stop the run at the format-error limit (exit 3).
    let sb = Sandbox::new();
    let out = run_calls(
        &sb,
        &[("bash", "{"), ("bash", "{"), ("bash", "{"), ("bash", "{")],
        &[],
        "",
    );
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(!panicked(&stderr(&out)));
    sound_log(&sb, "format errors");
}

#[test]
fn bad_plan_updates_change_nothing() {
    let good = r#"{"items": [{"id": "a", "text": "first", "status": "in_progress"}]}"#;
    let dup = r#"{"items": [{"id": "a", "text": "x", "status": "done"}, {"id": "a", "text": "y", "status": "done"}]}"#;
    let long = format!(
        r#"{{"items": [{{"id": "a", "text": "{}", "status": "done"}}]}}"#,
        "t".repeat(100_000)
    );
    let many: Vec<Value> = (0..1000)
        .map(|i| json!({"id": format!("i{i}"), "text": "t", "status": "pending"}))
        .collect();
    let many = json!({"items": many}).to_string();
    let bad: Vec<&str> = vec![
        r#"{"items": [{"id": "a", "text": "x", "status": "finished"}]}"#,
        r#"{"items": [{"id": "", "text": "x", "status": "done"}]}"#,
        dup,
        r#"{"items": "all of it"}"#,
        r#"{"items": [{"id": "a", "text": "x", "status": "done", "extra": 1}]}"#,
        r#"{}"#,
        &long,
        &many,
    ];
    for b in bad {
        let sb = Sandbox::new();
        let out = run_calls(
            &sb,
            &[("update_plan", good), ("update_plan", b)],
            &["--plan"],
            "",
        );
        let what = &b[..b.len().min(60)];
        let err = stderr(&out);
        assert!(!panicked(&err), "{what}: {err}");
        assert_eq!(out.status.code(), Some(0), "{what}: {err}");
        let recs = sound_log(&sb, what);
        let plans: Vec<_> = recs.iter().filter(|r| r.kind == "plan.updated").collect();
        assert_eq!(
            plans.len(),
            1,
            "{what}: only the good update changed the plan"
        );
        let last = recs.iter().rev().find(|r| r.kind == "tool.result").unwrap();
        assert_eq!(last.data["is_error"], true, "{what}");
    }
}

#[test]
fn bad_hook_output_never_breaks_a_run() {
    let hooks = [
        ("pre_tool", "printf '{\"decision\": \"maybe\"}'"),
        ("pre_tool", "printf '{not json'"),
        ("pre_tool", "head -c 300000 /dev/zero | tr '\\\\0' x"),
        ("pre_tool", "printf '\\377\\376 bytes'; exit 2"),
        ("pre_tool", "exit 7"),
        ("pre_tool", "kill -9 $$"),
        ("post_tool", "printf '\\377\\376'"),
        ("post_tool", "printf '[1, 2'"),
        ("post_tool", "head -c 300000 /dev/urandom"),
        ("post_tool", "exit 2"),
    ];
    for (hook, command) in hooks {
        let sb = Sandbox::new();
        let cfg = format!("[hooks]\n{hook} = {}\n", toml_string(command));
        let out = run_calls(
            &sb,
            &[("bash", "{\"command\": \"echo ran >> ran.txt\"}")],
            &[],
            &cfg,
        );
        let err = stderr(&out);
        let what = format!("{hook} {command}");
        assert!(!panicked(&err), "{what}: {err}");
        assert_eq!(out.status.code(), Some(0), "{what}: {err}");
        let recs = sound_log(&sb, &what);
        let ran = std::fs::read_to_string(sb.ws().join("ran.txt")).unwrap_or_default();
        let blocked = recs.iter().any(|r| r.kind == "hook.blocked");
        assert_eq!(
            ran.lines().count(),
            usize::from(!blocked),
            "{what}: ran once unless blocked"
        );
    }
}

fn toml_string(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}
