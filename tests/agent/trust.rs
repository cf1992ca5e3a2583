//! What a log or trajectory says is not configuration (contract section 8):
//! hooks come from the local config only, a sandboxed run resumes only
//! sandboxed, a foreign trajectory's workspace is confirmed by `--cwd`, and
//! numbers from flags, config and servers are checked at the door.

use crate::support::contract;
use crate::support::e2e::{self, Sandbox, forge_run_started, output, stderr};
use crate::support::mock::{MockReply, MockServer};
use crate::support::require;
use serde_json::json;
use std::process::Command;

fn crashed_run(sb: &Sandbox, server: &MockServer, toml: &str) {
    e2e::crash_after(
        sb.run_cmd_cfg(&server.base_url(), "trust", toml),
        "model.response:1",
    );
}

#[test]
fn a_hand_forged_log_naming_a_hook_runs_no_hook_on_resume() {
    let sb = Sandbox::new();
    let server = MockServer::start(vec![
        MockReply::tool_call("read", json!({"path": "a.txt"})),
        MockReply::text("done"),
    ]);
    crashed_run(&sb, &server, "");
    let marker = sb.path("PWNED");
    forge_run_started(&sb.wal(), |r| {
        r.settings.hooks_pre_tool = Some(format!("touch '{}'", marker.display()));
        r.settings.hooks_post_tool = Some(format!("touch '{}'", marker.display()));
    });
    let before = std::fs::read(sb.wal()).unwrap();
    let out = output(sb.resume_cmd());
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("hooks.pre_tool") && err.contains("PWNED"),
        "{err}"
    );
    assert!(err.contains("--no-hooks"), "{err}");
    assert!(!marker.exists(), "a hook from the log ran");
    assert_eq!(
        std::fs::read(sb.wal()).unwrap(),
        before,
        "the refused resume changed the log"
    );
    // --no-hooks goes on without them.
    let mut resume = sb.resume_cmd();
    resume.arg("--no-hooks");
    let out = output(resume);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(!marker.exists(), "a hook from the log ran");
    // The same hook configured locally is the person's choice: it runs.
    let sb = Sandbox::new();
    let server = MockServer::start(vec![
        MockReply::tool_call("read", json!({"path": "a.txt"})),
        MockReply::tool_call("read", json!({"path": "b.txt"})),
        MockReply::text("done"),
    ]);
    let toml = format!(
        "[hooks]\npre_tool = \"touch '{}'\"\n",
        sb.path("RAN").display()
    );
    crashed_run(&sb, &server, &toml);
    let out = output(sb.resume_cmd());
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(sb.path("RAN").exists(), "the locally configured hook ran");
}

#[test]
fn a_log_forged_to_turn_the_sandbox_off_still_resumes_sandboxed() {
    let sb = Sandbox::new();
    if require::require(
        "bwrap",
        "a_log_forged_to_turn_the_sandbox_off",
        require::bwrap(&sb.ws(), false),
    )
    .is_none()
    {
        return;
    }
    let server = MockServer::start(vec![
        MockReply::tool_call("bash", json!({"command": "echo hi"})),
        MockReply::tool_call("bash", json!({"command": "echo again"})),
        MockReply::text("done"),
    ]);
    let sandbox = "[env]\nkind = \"sandbox\"\n";
    crashed_run(&sb, &server, sandbox);
    // The local config still says sandbox (the config file is rewritten by
    // every run_cmd_cfg; resume reads it): the log says local.
    forge_run_started(&sb.wal(), |r| {
        r.settings.env = Some(tinyagent::config::EnvKind::Local);
    });
    let out = output(sb.resume_cmd());
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let recs = contract::read(&sb.wal());
    let envs: Vec<_> = recs
        .iter()
        .filter(|r| r.kind == "tool.started")
        .filter_map(|r| r.data["process"]["env"].as_str().map(str::to_string))
        .collect();
    assert!(!envs.is_empty());
    assert!(envs.iter().all(|e| e == "sandbox"), "{envs:?}");
}

#[test]
fn a_foreign_trajectory_needs_cwd_to_say_where_it_works() {
    let sb = Sandbox::new();
    let server = MockServer::start(vec![
        MockReply::tool_call("bash", json!({"command": "pwd"})),
        MockReply::text("done"),
    ]);
    crashed_run(&sb, &server, "");
    let json_path = sb.path("foreign.json");
    let out = output({
        let mut c = Command::new(e2e::bin());
        c.args(["log", "export"])
            .arg(sb.wal())
            .arg("-o")
            .arg(&json_path);
        c
    });
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // It names a workspace that is not ours to trust.
    let mut doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json_path).unwrap()).unwrap();
    doc["settings"]["cwd"] = json!("/");
    std::fs::write(&json_path, doc.to_string()).unwrap();
    let wal = sb.path("foreign.json.wal");
    let resume = |cwd: Option<&std::path::Path>| {
        let mut c = Command::new(e2e::bin());
        c.current_dir(sb.dir.path())
            .arg("resume")
            .arg(&json_path)
            .args(["--base-url", &server.base_url()])
            .env_remove("OPENAI_API_KEY");
        if let Some(d) = cwd {
            c.arg("--cwd").arg(d);
        }
        output(c)
    };
    let out = resume(None);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("--cwd"), "{}", stderr(&out));
    assert!(!wal.exists(), "a refused import wrote a log");
    let here = sb.path("here");
    std::fs::create_dir(&here).unwrap();
    let out = resume(Some(&here));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let recs = contract::read(&wal);
    let started = &recs[0].data;
    assert_eq!(
        started["settings"]["cwd"],
        json!(here.canonicalize().unwrap().display().to_string())
    );
}

#[test]
fn a_v1_trajectory_that_names_no_workspace_resumes_in_the_current_directory() {
    let sb = Sandbox::new();
    let server = MockServer::start(vec![
        MockReply::tool_call("bash", json!({"command": "pwd"})).with_ids(&["where"]),
        MockReply::text("done"),
    ]);
    // Schema v1 (contract section 6) has no member for the workspace.
    let v1 = json!({
        "schema_version": 1, "run_id": "r-v1", "task": "say where", "model": "test-model",
        "messages": [
            {"role": "system", "content": "You are a coding agent."},
            {"role": "user", "content": "say where"}
        ],
        "compaction": null, "background": "",
        "usage": {"input_tokens": 0, "output_tokens": 0, "cost_usd": 0.0},
        "steps": 0, "format_errors": 0, "limits": {"max_steps": 50}
    });
    let here = sb.path("here");
    std::fs::create_dir(&here).unwrap();
    let json_path = here.join("old.json");
    std::fs::write(&json_path, v1.to_string()).unwrap();
    let mut c = Command::new(e2e::bin());
    c.current_dir(&here)
        .arg("resume")
        .arg(&json_path)
        .args(["--base-url", &server.base_url(), "--message", "go on"])
        .env_remove("OPENAI_API_KEY")
        .env("TINYAGENT_HOME", sb.home());
    let out = output(c);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let recs = contract::read(&here.join("old.json.wal"));
    let cwd = here.canonicalize().unwrap().display().to_string();
    assert_eq!(recs[0].data["settings"]["cwd"], json!(cwd));
    let result = recs
        .iter()
        .find(|r| r.kind == "tool.result" && r.data["call_id"] == "where")
        .expect("the call's result");
    let content = result.data["content"].as_str().unwrap();
    assert_eq!(content.lines().next(), Some(cwd.as_str()), "{content}");
}

#[test]
fn prices_out_of_range_are_refused_at_every_door() {
    let sb = Sandbox::new();
    let server = MockServer::start(vec![]);
    for (flag, value) in [
        ("--price-in", "1e308"),
        ("--price-out", "inf"),
        ("--price-in", "-1"),
    ] {
        let mut cmd = sb.run_cmd(&server.base_url(), "priced");
        cmd.args([flag, value]);
        let out = output(cmd);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{flag} {value}: {}",
            stderr(&out)
        );
        assert!(!sb.wal().exists());
    }
    let out = output(sb.run_cmd_cfg(&server.base_url(), "priced", "price_in = 1e308\n"));
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("model.price_in"), "{}", stderr(&out));
    assert_eq!(server.request_count(), 0);
    // A log carrying such a price is refused on resume, unchanged.
    let sb = Sandbox::new();
    let server = MockServer::start(vec![MockReply::text("hi"), MockReply::text("hi")]);
    crashed_run(&sb, &server, "");
    forge_run_started(&sb.wal(), |r| r.settings.price_in = Some(1e308));
    let before = std::fs::read(sb.wal()).unwrap();
    let out = output(sb.resume_cmd());
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert_eq!(std::fs::read(sb.wal()).unwrap(), before);
}

#[test]
fn token_counts_near_the_limit_saturate_and_the_log_stays_valid() {
    let sb = Sandbox::new();
    let server = MockServer::start(vec![
        MockReply::tool_call("bash", json!({"command": "true"})).with_usage(u64::MAX - 9, 9),
        MockReply::text("done").with_usage(u64::MAX - 9, 9),
    ]);
    let mut cmd = sb.run_cmd(&server.base_url(), "greedy server");
    cmd.args(["--price-in", "1000000", "--price-out", "1000000"]);
    let out = output(cmd);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    for line in std::fs::read_to_string(sb.wal()).unwrap().lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        for key in ["cost_usd", "cost_usd_total"] {
            if let Some(c) = v["data"].get(key) {
                assert!(
                    c.as_f64().is_some_and(f64::is_finite),
                    "{key} is {c} in {line}"
                );
            }
        }
    }
    let out = output({
        let mut c = Command::new(e2e::bin());
        c.args(["log", "verify"]).arg(sb.wal());
        c
    });
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let recs = contract::read(&sb.wal());
    let saved = recs.iter().rev().find(|r| r.kind == "step.saved").unwrap();
    assert_eq!(saved.data["usage_total"]["input_tokens"], json!(u64::MAX));
    assert!(saved.data["cost_usd_total"].as_f64().unwrap().is_finite());
}

/// A hook script in the workspace rewritten by a tool (bash can, in local
/// mode) is not run: hooks run only as they were checked when the run
/// started.
#[test]
fn a_hook_script_rewritten_by_a_tool_is_not_run() {
    let sb = Sandbox::new();
    let hook = sb.ws().join("guard.sh");
    std::fs::write(&hook, "cat >/dev/null\nexit 0\n").unwrap();
    let marker = sb.path("PWNED");
    let evil = format!("printf 'touch {}\\\\n' > guard.sh", marker.display());
    let server = MockServer::start(vec![
        MockReply::tool_call("bash", json!({"command": evil})).with_ids(&["rewrite"]),
        MockReply::tool_call("bash", json!({"command": "echo next"})).with_ids(&["next"]),
        MockReply::text("done"),
    ]);
    let toml = format!("[hooks]\npre_tool = \"sh '{}'\"\n", hook.display());
    let out = output(sb.run_cmd_cfg(&server.base_url(), "rewrite the guard", &toml));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        std::fs::read_to_string(&hook).unwrap().contains("touch"),
        "the tool did rewrite the script"
    );
    assert!(!marker.exists(), "the rewritten hook ran");
    let recs = contract::read(&sb.wal());
    let blocked = recs
        .iter()
        .find(|r| r.kind == "hook.blocked" && r.data["call_id"] == "next")
        .expect("the next call was blocked");
    assert!(
        blocked.data["reason"]
            .as_str()
            .unwrap()
            .contains("changed since the run started"),
        "{}",
        blocked.data
    );
}

/// A log naming an ordinary variable as the key's (to have its value sent
/// to the server it names) is refused; `--api-key-env` is the person's way
/// to choose.
#[test]
fn a_log_naming_a_non_key_variable_as_the_key_is_refused() {
    let sb = Sandbox::new();
    let server = MockServer::start(vec![MockReply::text("hi"), MockReply::text("hi")]);
    crashed_run(&sb, &server, "");
    forge_run_started(&sb.wal(), |r| r.settings.api_key_env = Some("HOME".into()));
    let before = std::fs::read(sb.wal()).unwrap();
    let out = output(sb.resume_cmd());
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("\"HOME\""), "{}", stderr(&out));
    assert_eq!(std::fs::read(sb.wal()).unwrap(), before);
    assert!(
        server
            .recorded()
            .iter()
            .skip(1)
            .all(|r| r.header("authorization").is_none()),
        "nothing was sent"
    );
    let mut resume = sb.resume_cmd();
    resume.args(["--api-key-env", "MY_KEY"]);
    let out = output(resume);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

/// A log forged to name another model server never gets the person's key
/// sent there: resume refuses (exit 2, naming the server and the flag that
/// trusts it) and changes nothing; the server the run was given is trusted,
/// and so is one the person names with --base-url.
#[test]
fn a_log_forged_to_name_another_server_does_not_get_the_key() {
    let sb = Sandbox::new();
    let server = MockServer::start(vec![MockReply::text("hi"), MockReply::text("resumed")]);
    let evil = MockServer::start(vec![MockReply::text("thanks for the key")]);
    let mut cmd = sb.run_cmd(&server.base_url(), "trust");
    cmd.env("OPENAI_API_KEY", "sk-test-forged-url");
    e2e::crash_after(cmd, "model.response:1");
    let home_file = sb.home().join("endpoints");
    assert!(
        std::fs::read_to_string(&home_file)
            .unwrap()
            .contains(&server.base_url()),
        "the run remembered the server it was given"
    );

    // The real log resumes against its own server, key and all.
    let untouched = sb.path("untouched.wal");
    std::fs::copy(sb.wal(), &untouched).unwrap();
    forge_run_started(&sb.wal(), |r| r.base_url = Some(evil.base_url()));
    let before = std::fs::read(sb.wal()).unwrap();
    let mut resume = sb.resume_cmd();
    resume.env("OPENAI_API_KEY", "sk-test-forged-url");
    let out = output(resume);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains(&evil.base_url()), "{err}");
    assert!(
        err.contains("OPENAI_API_KEY") && err.contains("--base-url"),
        "{err}"
    );
    assert_eq!(std::fs::read(sb.wal()).unwrap(), before, "nothing changed");
    assert_eq!(evil.request_count(), 0, "nothing was sent there");

    // Without a key nothing is at stake.
    let mut resume = sb.resume_cmd();
    resume.args(["--message", "go on"]);
    let out = output(resume);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(evil.request_count(), 1);
    assert!(evil.recorded()[0].header("authorization").is_none());

    // The person can choose to trust it.
    let evil2 = MockServer::start(vec![MockReply::text("chosen")]);
    let mut resume = sb.resume_cmd();
    resume.env("OPENAI_API_KEY", "sk-test-forged-url").args([
        "--base-url",
        &evil2.base_url(),
        "--message",
        "again",
    ]);
    let out = output(resume);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        evil2.recorded()[0].header("authorization"),
        Some("Bearer sk-test-forged-url")
    );
    assert!(
        std::fs::read_to_string(&home_file)
            .unwrap()
            .contains(&evil2.base_url())
    );

    // The log as the run wrote it resumes with the key, to its own server.
    std::fs::rename(&untouched, sb.wal()).unwrap();
    let mut resume = sb.resume_cmd();
    resume.env("OPENAI_API_KEY", "sk-test-forged-url");
    let out = output(resume);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        server.recorded().last().unwrap().header("authorization"),
        Some("Bearer sk-test-forged-url")
    );
}
