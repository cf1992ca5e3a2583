//! `tinyagent sessions` and `resume --last` (contract section 12): the runs
//! under `$TINYAGENT_HOME`, newest first, with their status read from the
//! log and the lock; `log inspect` says whether a run is live and when it
//! ran.

use crate::support::e2e::{Sandbox, bin, output, stderr};
use crate::support::mock::{MockReply, MockServer};
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

/// `tinyagent <args>` in `dir` with the sandbox's home.
fn cmd(sb: &Sandbox, dir: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(bin());
    c.current_dir(dir)
        .args(args)
        .env("TINYAGENT_HOME", sb.home())
        .env("XDG_CONFIG_HOME", sb.config_home())
        .env_remove("OPENAI_API_KEY")
        .stdin(Stdio::null());
    c
}

/// A run in `ws` with its log in the default place.
fn run_in(sb: &Sandbox, ws: &Path, server: &MockServer, task: &str) -> Command {
    let config = sb.fast_config("");
    let mut c = cmd(
        sb,
        ws,
        &["run", "--base-url", &server.base_url(), "--model", "m"],
    );
    c.arg("--config").arg(config).arg(task);
    c
}

fn sessions(sb: &Sandbox, dir: &Path, all: bool) -> Vec<Value> {
    let mut args = vec!["sessions", "--json"];
    if all {
        args.push("--all");
    }
    let out = output(cmd(sb, dir, &args));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    serde_json::from_slice::<Vec<Value>>(&out.stdout).unwrap()
}

#[test]
fn sessions_lists_this_workspaces_runs_newest_first_and_resume_last_takes_the_newest() {
    let sb = Sandbox::new();
    let other = sb.path("other-ws");
    std::fs::create_dir_all(&other).unwrap();
    let server = MockServer::start_with(vec![], |_| MockReply::text("done"));
    let out = output(run_in(&sb, &sb.ws(), &server, "first task"));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // Run ids (and start times) have a resolution of a millisecond.
    std::thread::sleep(Duration::from_millis(20));
    let out = output(run_in(&sb, &other, &server, "elsewhere"));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    std::thread::sleep(Duration::from_millis(20));
    let mut crashed = run_in(&sb, &sb.ws(), &server, "second task");
    crashed.env("TINYAGENT_CRASH_AFTER", "model.response:1");
    let out = output(crashed);
    assert_eq!(out.status.code(), None, "killed: {}", stderr(&out));

    let here = sessions(&sb, &sb.ws(), false);
    assert_eq!(here.len(), 2, "{here:#?}");
    assert_eq!(here[0]["task"], "second task", "newest first");
    assert_eq!(here[0]["status"], "stopped", "crashed: no run.finished");
    assert_eq!(here[1]["task"], "first task");
    assert_eq!(here[1]["status"], "completed");
    assert_eq!(here[1]["steps"], 1);
    for s in &here {
        let log = s["log"].as_str().unwrap();
        assert!(log.starts_with(&sb.home().join("runs").display().to_string()));
        assert!(log.ends_with(&format!("{}.wal", s["run_id"].as_str().unwrap())));
        assert!(s["started_at"].as_str().unwrap().starts_with("20"));
    }
    let all = sessions(&sb, &sb.ws(), true);
    assert_eq!(all.len(), 3);
    assert_eq!(all[1]["task"], "elsewhere");

    // A file that is not a log is listed as such with --all, never skipped
    // in silence, and never taken by --last.
    std::fs::write(sb.home().join("runs/zzz-garbage.wal"), b"not a log\n").unwrap();
    let all = sessions(&sb, &sb.ws(), true);
    assert_eq!(all.len(), 4);
    let bad: Vec<&Value> = all.iter().filter(|s| s["status"] == "unreadable").collect();
    assert_eq!(bad.len(), 1);
    assert!(bad[0]["error"].as_str().is_some_and(|e| !e.is_empty()));

    // The human list names the runs.
    let out = output(cmd(&sb, &sb.ws(), &["sessions"]));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(here[0]["run_id"].as_str().unwrap()), "{text}");
    assert!(
        text.contains("stopped") && text.contains("second task"),
        "{text}"
    );

    // --last resumes the newest run here: the crashed one.
    let newest = here[0]["log"].as_str().unwrap().to_string();
    let before = std::fs::metadata(&newest).unwrap().len();
    let out = output(cmd(&sb, &sb.ws(), &["resume", "--last"]));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stderr(&out).contains(&newest), "{}", stderr(&out));
    assert!(std::fs::metadata(&newest).unwrap().len() > before);
    let here = sessions(&sb, &sb.ws(), false);
    assert_eq!(here[0]["status"], "completed");

    // Nowhere to go: a clear refusal.
    let empty = sb.path("empty-ws");
    std::fs::create_dir_all(&empty).unwrap();
    let out = output(cmd(&sb, &empty, &["resume", "--last"]));
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("no run of"), "{}", stderr(&out));
    let out = output(cmd(&sb, &sb.ws(), &["resume", "--last", "x.wal"]));
    assert_eq!(out.status.code(), Some(2), "--last and a path conflict");
}

#[test]
fn a_run_going_on_now_shows_as_running_and_inspect_says_live() {
    let sb = Sandbox::new();
    let server = MockServer::start_with(vec![], |_| {
        MockReply::text("slow").delayed(Duration::from_secs(3))
    });
    let mut child = run_in(&sb, &sb.ws(), &server, "slow task")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let row = loop {
        let rows = sessions(&sb, &sb.ws(), false);
        if let Some(r) = rows.first().filter(|_| server.request_count() > 0) {
            break r.clone();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the run never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(row["status"], "running", "{row:#}");
    let log = row["log"].as_str().unwrap();
    let out = output(cmd(&sb, &sb.ws(), &["log", "inspect", "--json", log]));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["live"], true);
    assert_eq!(
        report["workspace"],
        std::fs::canonicalize(sb.ws())
            .unwrap()
            .display()
            .to_string()
    );
    assert!(child.wait().unwrap().success());
    let out = output(cmd(&sb, &sb.ws(), &["log", "inspect", "--json", log]));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["live"], false);
    assert_eq!(report["status"], "completed");
    let started = report["started_at"].as_str().unwrap();
    let ended = report["last_write_at"].as_str().unwrap();
    assert!(started <= ended, "{started} {ended}");
    assert!(report["duration_s"].as_f64().unwrap() >= 2.5, "{report:#}");
    // The one step waited three seconds for the model.
    let times = &report["step_times"];
    assert_eq!(times["steps"], 1, "{report:#}");
    assert_eq!(times["slowest_step"], 1);
    assert!(times["median_s"].as_f64().unwrap() >= 2.5, "{times}");
    assert_eq!(times["last"][0][0], 1);
    let out = output(cmd(&sb, &sb.ws(), &["log", "inspect", log]));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("started ") && text.contains("workspace"),
        "{text}"
    );
}
