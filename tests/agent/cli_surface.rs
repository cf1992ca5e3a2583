//! The everyday surface of the command line (contract section 12): base
//! URLs from the environment, help texts, completions and the man page.

use crate::support::e2e::{Sandbox, bin, output, stderr};
use crate::support::mock::{MockReply, MockServer};
use crate::support::plan::{read_log, records_of};
use std::process::{Command, Stdio};

fn tinyagent(sb: &Sandbox) -> Command {
    let mut c = Command::new(bin());
    c.current_dir(sb.dir.path())
        .env("TINYAGENT_HOME", sb.home())
        .env("XDG_CONFIG_HOME", sb.config_home())
        .env_remove("OPENAI_API_KEY")
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .env_remove("ANTHROPIC_BASE_URL")
        .stdin(Stdio::null());
    c
}

/// `tinyagent run <args> --wal <wal> --cwd <workspace>`; the caller adds
/// the task.
fn run_with(sb: &Sandbox, args: &[&str], wal: &std::path::Path) -> Command {
    let mut c = tinyagent(sb);
    c.arg("run")
        .args(args)
        .arg("--wal")
        .arg(wal)
        .arg("--cwd")
        .arg(sb.ws());
    c
}

#[test]
fn openai_and_anthropic_base_url_variables_are_honoured_below_flags_and_config() {
    let sb = Sandbox::new();
    let server = MockServer::start(vec![MockReply::text("via env")]);
    let mut c = run_with(&sb, &["--model", "m"], &sb.wal());
    c.arg("t").env("OPENAI_BASE_URL", server.base_url());
    let out = output(c);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(server.request_count(), 1);
    let recs = read_log(&sb.wal());
    assert_eq!(
        records_of(&recs, "run.started")[0].data["base_url"],
        server.base_url().as_str()
    );

    // A flag wins over the variable.
    let flagged = MockServer::start(vec![MockReply::text("via flag")]);
    let mut c = run_with(
        &sb,
        &["--model", "m", "--base-url", &flagged.base_url()],
        &sb.path("two.wal"),
    );
    c.arg("t").env("OPENAI_BASE_URL", server.base_url());
    let out = output(c);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!((flagged.request_count(), server.request_count()), (1, 1));

    // Anthropic's variable for the anthropic provider.
    let anthropic = MockServer::start(vec![MockReply::json(serde_json::json!({
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude",
        "content": [{"type": "text", "text": "hello"}],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 3, "output_tokens": 1}
    }))]);
    let mut c = run_with(
        &sb,
        &["--provider", "anthropic", "--model", "claude"],
        &sb.path("three.wal"),
    );
    c.arg("t")
        .env("ANTHROPIC_BASE_URL", anthropic.root_url())
        .env("ANTHROPIC_API_KEY", "sk-ant-test");
    let out = output(c);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(anthropic.request_count(), 1);
    assert_eq!(anthropic.recorded()[0].path, "/v1/messages");
}

/// Every option and argument of every command says what it does; the
/// options whose value has a default name it.
#[test]
fn every_flag_is_described_and_run_and_resume_show_examples() {
    use clap::CommandFactory;
    fn walk(cmd: &clap::Command, path: &str, missing: &mut Vec<String>) {
        for arg in cmd.get_arguments() {
            let id = arg.get_id().as_str();
            if id == "help" || id == "version" {
                continue;
            }
            if arg.get_help().is_none() && arg.get_long_help().is_none() {
                missing.push(format!("{path} {id}"));
            }
        }
        for sub in cmd.get_subcommands() {
            if sub.get_about().is_none() {
                missing.push(format!("{path} {} (the command)", sub.get_name()));
            }
            walk(sub, &format!("{path} {}", sub.get_name()), missing);
        }
    }
    let mut missing = Vec::new();
    walk(
        &tinyagent::cli::args::Cli::command(),
        "tinyagent",
        &mut missing,
    );
    assert!(missing.is_empty(), "undescribed: {missing:#?}");

    let sb = Sandbox::new();
    let help = |args: &[&str]| {
        let mut c = tinyagent(&sb);
        c.args(args);
        let out = output(c);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        String::from_utf8(out.stdout).unwrap()
    };
    let run = help(&["run", "--help"]);
    assert!(
        run.contains("Examples:") && run.contains("tinyagent run \""),
        "{run}"
    );
    for default in [
        "else 80% of the context window",
        "else 1000",
        "else 3",
        "else unlimited",
        "OPENAI_BASE_URL",
    ] {
        assert!(run.contains(default), "{default} in {run}");
    }
    let resume = help(&["resume", "--help"]);
    assert!(
        resume.contains("Examples:") && resume.contains("--last"),
        "{resume}"
    );
    assert!(resume.contains("the log's"), "{resume}");
}

#[test]
fn completions_and_the_man_page_come_from_the_same_definitions() {
    let sb = Sandbox::new();
    // A bash script with the binary on PATH; it must succeed.
    let bash = |script: &str| {
        let bin_dir = bin().parent().unwrap().display().to_string();
        let out = Command::new("bash")
            .arg("-c")
            .arg(script)
            .env("PATH", format!("{bin_dir}:/usr/bin:/bin"))
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{script}: {err}");
        (String::from_utf8_lossy(&out.stdout).into_owned(), err)
    };
    // bash loads the completion and registers it for the command.
    let (registered, _) = bash("source <(tinyagent completions bash) && complete -p tinyagent");
    assert!(registered.contains("_tinyagent"), "{registered}");
    for shell in ["zsh", "fish", "elvish", "powershell"] {
        let mut c = tinyagent(&sb);
        c.args(["completions", shell]);
        let out = output(c);
        assert_eq!(out.status.code(), Some(0), "{shell}: {}", stderr(&out));
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains("sessions") && text.contains("resume"),
            "{shell}"
        );
    }
    let mut c = tinyagent(&sb);
    c.arg("man");
    let out = output(c);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let man = String::from_utf8_lossy(&out.stdout);
    assert!(man.contains(".TH tinyagent 1"), "{man}");
    assert!(man.contains("sessions") && man.contains("completions"));
    // A reader that stops early is not an error.
    let (_, err) = bash("set -o pipefail; tinyagent man | head -c 10 >/dev/null");
    assert!(err.is_empty(), "{err}");
}

#[test]
fn bench_lengths_take_commas_or_spaces() {
    let sb = Sandbox::new();
    for lengths in [vec!["10,20"], vec!["10", "20"]] {
        let mut c = tinyagent(&sb);
        c.args(["bench", "save", "--json", "--samples", "1", "--lengths"])
            .args(&lengths)
            .arg("--dir")
            .arg(sb.dir.path());
        let out = output(c);
        assert_eq!(out.status.code(), Some(0), "{lengths:?}: {}", stderr(&out));
        let rows: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let got: Vec<u64> = rows
            .iter()
            .map(|r| r["messages"].as_u64().unwrap())
            .collect();
        assert_eq!(got, [10, 20], "{lengths:?}");
    }
}

#[test]
fn a_global_config_sits_under_the_projects_and_under_the_flags() {
    let sb = Sandbox::new();
    let global = sb.config_home().join("tinyagent/config.toml");
    std::fs::create_dir_all(global.parent().unwrap()).unwrap();
    std::fs::write(
        &global,
        "[model]\nname = \"global-model\"\nprice_in = 2.0\n[limits]\nmax_steps = 1\n",
    )
    .unwrap();
    let server = MockServer::start_with(vec![], |_| {
        MockReply::tool_call("bash", serde_json::json!({"command": "true"}))
    });
    // The project file raises the step limit; the model name comes from the
    // global file (run_cmd passes --model, so build the command here).
    let project = sb.fast_config("[limits]\nmax_steps = 2\n");
    let mut c = run_with(&sb, &["--base-url", &server.base_url()], &sb.wal());
    c.arg("--config")
        .arg(&project)
        .arg("t")
        .env("XDG_CONFIG_HOME", sb.config_home());
    let out = output(c);
    assert_eq!(
        out.status.code(),
        Some(3),
        "stopped by the limit: {}",
        stderr(&out)
    );
    let requests = server.requests();
    assert_eq!(requests.len(), 2, "the project's limit of 2 steps");
    assert_eq!(requests[0]["model"], "global-model");
    let recs = read_log(&sb.wal());
    let started = &records_of(&recs, "run.started")[0].data;
    assert_eq!(started["settings"]["price_in"], 2.0);

    // A flag over both.
    let mut c = run_with(
        &sb,
        &["--base-url", &server.base_url(), "--model", "flag-model"],
        &sb.path("two.wal"),
    );
    c.args(["--max-steps", "1", "t"])
        .env("XDG_CONFIG_HOME", sb.config_home());
    let out = output(c);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert_eq!(server.requests()[2]["model"], "flag-model");

    // A bad global file is refused, naming it, and nothing is written.
    std::fs::write(&global, "[model]\nnmae = \"typo\"\n").unwrap();
    let mut c = run_with(
        &sb,
        &["--base-url", &server.base_url()],
        &sb.path("three.wal"),
    );
    c.arg("t").env("XDG_CONFIG_HOME", sb.config_home());
    let out = output(c);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&global.display().to_string()),
        "{}",
        stderr(&out)
    );
    assert!(stderr(&out).contains("nmae"), "{}", stderr(&out));
    assert!(!sb.path("three.wal").exists());
}

fn last_line(err: &str) -> &str {
    err.lines().last().unwrap_or("")
}

#[test]
fn a_refused_key_says_which_variable_to_check_once_and_how_to_resume() {
    let sb = Sandbox::new();
    let server = MockServer::start(vec![MockReply::Status {
        code: 401,
        retry_after: None,
        body:
            r#"{"error":{"message":"Incorrect API key provided","type":"invalid_request_error"}}"#
                .into(),
    }]);
    let mut c = sb.run_cmd(&server.base_url(), "t");
    c.env("OPENAI_API_KEY", "sk-test-wrong");
    let out = output(c);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let line = last_line(&err);
    assert!(
        line.starts_with(
            "tinyagent: the model server answered HTTP 401 Unauthorized: Incorrect API key provided"
        ),
        "{line}"
    );
    assert!(
        line.contains("$OPENAI_API_KEY") && line.contains("--api-key-env"),
        "{line}"
    );
    assert!(
        line.ends_with(&format!(
            "resume with: tinyagent resume {}",
            sb.wal().display()
        )),
        "{line}"
    );
    assert_eq!(
        err.matches("Incorrect API key").count(),
        1,
        "said once: {err}"
    );
    assert!(
        !err.contains("invalid_request_error"),
        "the message, not the JSON: {err}"
    );
}

#[test]
fn a_proxy_error_page_is_named_not_printed_and_retries_are_announced() {
    let sb = Sandbox::new();
    let page = "<html><head><title>502 Bad Gateway</title></head><body><h1>502 Bad Gateway</h1>\
                <hr><center>nginx</center></body></html>";
    let server = MockServer::start_with(vec![], move |_| MockReply::Status {
        code: 502,
        retry_after: None,
        body: page.into(),
    });
    let out = output(sb.run_cmd(&server.base_url(), "t"));
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    // fast_config allows 2 retries.
    let retries: Vec<&str> = err.lines().filter(|l| l.contains("retrying in")).collect();
    assert_eq!(retries.len(), 2, "{err}");
    assert!(retries[0].contains("HTTP 502, attempt 2 of 3"), "{err}");
    assert!(retries[1].contains("attempt 3 of 3"), "{err}");
    let line = last_line(&err);
    assert!(line.contains("gave up after 3 attempts"), "{line}");
    assert!(
        line.contains("HTTP 502 Bad Gateway: an HTML page titled \"502 Bad Gateway\""),
        "{line}"
    );
    assert!(!err.contains("<html"), "{err}");
    assert!(line.contains("resume with: tinyagent resume"), "{line}");

    // A 429 with Retry-After says so too, and the run goes on.
    let sb = Sandbox::new();
    let server = MockServer::start(vec![
        MockReply::Status {
            code: 429,
            retry_after: Some("0".into()),
            body: r#"{"error":{"message":"slow down"}}"#.into(),
        },
        MockReply::text("done"),
    ]);
    let out = output(sb.run_cmd(&server.base_url(), "t"));
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains("retrying in 0 ms (HTTP 429, attempt 2 of 3)"),
        "{err}"
    );
}

#[test]
fn a_run_stopped_by_a_limit_says_which_flag_to_raise() {
    let sb = Sandbox::new();
    let server = MockServer::start_with(vec![], |_| {
        MockReply::tool_call("bash", serde_json::json!({"command": "true"}))
    });
    let mut c = sb.run_cmd(&server.base_url(), "t");
    c.args(["--max-steps", "1"]);
    let out = output(c);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(
        err.contains(&format!(
            "continue with: tinyagent resume {} --max-steps <more>",
            sb.wal().display()
        )),
        "{err}"
    );
}

#[test]
fn timeout_bounds_each_attempt_and_says_so() {
    let sb = Sandbox::new();
    let server = MockServer::start_with(vec![], |_| {
        MockReply::text("late").delayed(std::time::Duration::from_secs(5))
    });
    let mut c = sb.run_cmd(&server.base_url(), "t");
    c.args(["--timeout", "1"]);
    let out = output(c);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(
        server.request_count(),
        3,
        "every attempt was cut at a second"
    );
    assert_eq!(err.matches("(timeout, attempt").count(), 2, "{err}");
    assert!(
        last_line(&err).contains("did not answer within 1s"),
        "{err}"
    );
    let mut c = sb.run_cmd(&server.base_url(), "t");
    c.args(["--timeout", "0"]);
    std::fs::remove_file(sb.wal()).unwrap();
    let out = output(c);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("request_timeout_s"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn the_final_answer_goes_to_stdout_and_everything_else_to_stderr() {
    let sb = Sandbox::new();
    let answer = "## Result\nThe bug was in parse.rs; fixed and tested.";
    let server = MockServer::start(vec![
        MockReply::tool_call("bash", serde_json::json!({"command": "echo looked"}))
            .with_content("let me look first"),
        MockReply::text(answer),
    ]);
    let out = output(sb.run_cmd(&server.base_url(), "t"));
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), format!("{answer}\n"));
    assert!(!err.contains("fixed and tested"), "not twice: {err}");
    assert!(
        err.contains("let me look first") && err.contains("log: "),
        "{err}"
    );
}

#[test]
fn a_cost_limit_without_prices_is_refused_and_known_prices_show_per_step() {
    let sb = Sandbox::new();
    let server = MockServer::start(vec![MockReply::text("done")]);
    let mut c = sb.run_cmd(&server.base_url(), "t");
    c.args(["--max-cost", "1"]);
    let out = output(c);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("--max-cost needs a price"), "{err}");
    assert!(err.contains("--price-in"), "{err}");
    assert!(!sb.wal().exists(), "refused before the log is made");
    assert_eq!(server.request_count(), 0);

    // Without a limit the unknown cost is shown as unknown, never $0.
    let out = output(sb.run_cmd(&server.base_url(), "t"));
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("· $?"), "{err}");
    assert!(!err.contains("$0.0000"), "{err}");
    let inspect = output({
        let mut c = std::process::Command::new(crate::support::e2e::bin());
        c.args(["log", "inspect", "--json"]).arg(sb.wal());
        c
    });
    let report: serde_json::Value = serde_json::from_slice(&inspect.stdout).unwrap();
    assert_eq!(report["usage"]["cost_known"], false);

    // With prices each step says what it cost (the mock reports 10 in, 5 out).
    std::fs::remove_file(sb.wal()).unwrap();
    server.push(MockReply::text("done"));
    let mut c = sb.run_cmd(&server.base_url(), "t");
    c.args(["--price-in", "100", "--price-out", "200", "--max-cost", "1"]);
    let out = output(c);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(!err.contains("no prices are known"), "{err}");
    assert!(err.contains("step 1 · "), "{err}");
    assert!(err.contains("$0.0020 · answer"), "{err}");
}

#[test]
fn log_show_is_a_readable_transcript_with_results_folded() {
    let sb = Sandbox::new();
    let server = MockServer::start(vec![
        MockReply::tool_call("bash", serde_json::json!({"command": "seq 1 30"}))
            .with_content("counting first"),
        MockReply::text("All twelve counted."),
    ]);
    let out = output(sb.run_cmd(&server.base_url(), "count to twelve"));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let show = |wal: &std::path::Path| {
        let mut c = tinyagent(&sb);
        c.args(["log", "show"]).arg(wal);
        output(c)
    };
    let out = show(&sb.wal());
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    for want in [
        "task:\n  count to twelve",
        "step 1 · ",
        "  counting first",
        "  → bash {\"command\":\"seq 1 30\"}",
        // Folded to its first and last lines, the exit code on its line.
        "  ✓ bash call_1_0 · exit 0 (30 lines)",
        "    1\n    2\n",
        "    … 18 more lines (log show --full shows them)\n    25\n",
        "    30\n",
        "step 2 · ",
        "  All twelve counted.",
        "finished: completed",
    ] {
        assert!(text.contains(want), "{want:?} in:\n{text}");
    }
    assert!(!text.contains("    12\n"), "folded: {text}");
    let mut c = tinyagent(&sb);
    c.args(["log", "show", "--full"]).arg(sb.wal());
    let full = String::from_utf8_lossy(&output(c).stdout).into_owned();
    assert!(full.contains("    12\n    13\n"), "unfolded: {full}");

    // A damaged log is shown as far as it reads, and says where it stops.
    let damaged = sb.path("damaged.wal");
    let mut bytes = std::fs::read(sb.wal()).unwrap();
    bytes.truncate(bytes.len() - 10);
    std::fs::write(&damaged, &bytes).unwrap();
    let text = String::from_utf8_lossy(&show(&damaged).stdout).into_owned();
    assert!(
        text.contains("step 2 · ") && text.contains("torn last record"),
        "{text}"
    );
    // Not a log at all: refused.
    let junk = sb.path("junk.wal");
    std::fs::write(&junk, "hello\n").unwrap();
    let out = show(&junk);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
}

#[test]
fn results_are_folded_diffs_coloured_on_request_and_calls_name_their_target_first() {
    let sb = Sandbox::new();
    std::fs::write(sb.ws().join("a.txt"), "one\ntwo\nthree\n").unwrap();
    let replies = || {
        vec![
            MockReply::tool_call(
                "edit",
                serde_json::json!({"path": "a.txt", "old_string": "two", "new_string": "TWO"}),
            ),
            MockReply::tool_call("bash", serde_json::json!({"command": "seq 1 9"})),
            MockReply::text("done"),
        ]
    };
    let run = |extra: &[&str], no_color: bool| {
        let server = MockServer::start(replies());
        let _ = std::fs::remove_file(sb.wal());
        std::fs::write(sb.ws().join("a.txt"), "one\ntwo\nthree\n").unwrap();
        let mut c = sb.run_cmd(&server.base_url(), "t");
        c.args(extra);
        if no_color {
            c.env("NO_COLOR", "1");
        }
        let out = output(c);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        stderr(&out)
    };
    let plain = run(&[], true);
    assert!(!plain.contains('\u{1b}'), "{plain}");
    assert!(
        plain.contains("  → edit a.txt (replace 1 line with 1)"),
        "the path first: {plain}"
    );
    assert!(plain.contains("  → bash: seq 1 9"), "{plain}");
    assert!(
        plain.contains("\n      1\n      2\n"),
        "one line each: {plain}"
    );
    assert!(plain.contains("… 3 more lines"), "{plain}");
    assert!(plain.contains("\n      9\n"), "the last lines: {plain}");
    assert!(plain.contains("\n      +TWO"), "{plain}");
    let coloured = run(&["--color", "always"], true);
    assert!(coloured.contains("\u{1b}[32m+TWO\u{1b}[0m"), "{coloured}");
    assert!(coloured.contains("\u{1b}[31m-two\u{1b}[0m"), "{coloured}");
    let never = run(&["--color", "never"], false);
    assert!(!never.contains('\u{1b}'), "{never}");
}

#[test]
fn every_json_event_has_a_time_floats_are_rounded_and_run_finished_has_the_totals() {
    let sb = Sandbox::new();
    let server = MockServer::start(vec![
        MockReply::tool_call("bash", serde_json::json!({"command": "echo hi"}))
            .with_usage(1234, 567),
        MockReply::text("streamed answer").with_usage(10, 3),
    ]);
    let mut c = sb.run_cmd(&server.base_url(), "t");
    c.args([
        "--json",
        "--stream",
        "--price-in",
        "0.15",
        "--price-out",
        "0.6",
    ]);
    let out = output(c);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let events: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    for e in &events {
        assert!(e["ts"].as_str().is_some_and(|t| t.ends_with('Z')), "{e}");
    }
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        // No float is printed with more than 6 decimals.
        for number in line.split(|c: char| !(c.is_ascii_digit() || c == '.')) {
            if let Some((_, decimals)) = number.split_once('.') {
                assert!(decimals.len() <= 6, "{number} in {line}");
            }
        }
    }
    let deltas: String = events
        .iter()
        .filter(|e| e["event"] == "model.delta")
        .map(|e| e["text"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(deltas, "streamed answer");
    let delta_at = events
        .iter()
        .position(|e| e["event"] == "model.delta")
        .unwrap();
    let answer_at = events
        .iter()
        .rposition(|e| e["event"] == "model.response")
        .unwrap();
    assert!(delta_at < answer_at, "the text comes before its record");
    let finished = events
        .iter()
        .find(|e| e["event"] == "run.finished")
        .unwrap();
    assert_eq!(finished["steps"], 2);
    assert_eq!(finished["usage"]["input_tokens"], 1244);
    assert_eq!(finished["usage"]["output_tokens"], 570);
    let cost = finished["cost_usd"].as_f64().unwrap();
    assert!(
        (cost - (1244.0 * 0.15 + 570.0 * 0.6) / 1e6).abs() < 1e-6,
        "{cost}"
    );
}

/// Quotes `s` for `sh`.
fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// The words of `run` against `server` with the sandbox's log, workspace
/// and fast config, `extra` flags and the task.
fn terminal_run_args(sb: &Sandbox, server: &MockServer, extra: &[&str], task: &str) -> Vec<String> {
    let fixed = [
        "run".to_string(),
        "--base-url".into(),
        server.base_url(),
        "--model".into(),
        "m".into(),
        "--wal".into(),
        sb.wal().display().to_string(),
        "--cwd".into(),
        sb.ws().display().to_string(),
        "--config".into(),
        sb.fast_config("").display().to_string(),
    ];
    fixed
        .into_iter()
        .chain(extra.iter().map(|a| (*a).to_string()))
        .chain([task.to_string()])
        .collect()
}

/// Runs `tinyagent <args>` on a pseudo-terminal (`script` gives it one);
/// its stdout is what the terminal showed.
fn on_terminal(sb: &Sandbox, args: &[String], env: &[(&str, &str)]) -> std::process::Output {
    let line = std::iter::once(bin().display().to_string())
        .chain(args.iter().cloned())
        .map(|a| sh_quote(&a))
        .collect::<Vec<_>>()
        .join(" ");
    let mut c = Command::new("script");
    c.args(["-q", "-e", "-c", &line, "/dev/null"])
        .current_dir(sb.dir.path())
        .env("TINYAGENT_HOME", sb.home())
        .env("XDG_CONFIG_HOME", sb.config_home())
        .env_remove("NO_COLOR")
        .env_remove("PAGER")
        .env_remove("OPENAI_API_KEY");
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().unwrap()
}

#[test]
fn a_long_command_shows_its_time_and_last_line_on_a_terminal_and_nowhere_else() {
    let sb = Sandbox::new();
    let slow = "for i in 1 2 3 4 5 6; do echo line$i; sleep 0.4; done";
    let replies = || {
        vec![
            MockReply::tool_call("bash", serde_json::json!({"command": slow})),
            MockReply::text("done"),
        ]
    };
    // On a terminal.
    let server = MockServer::start(replies());
    let args = terminal_run_args(&sb, &server, &[], "slow");
    let out = on_terminal(&sb, &args, &[("NO_COLOR", "1")]);
    let screen = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{screen}");
    assert!(screen.contains("\r\u{1b}[2K      … "), "{screen:?}");
    assert!(
        screen.contains(" s · line"),
        "the last line shown: {screen:?}"
    );
    // The log holds the output, not the progress.
    let recs = read_log(&sb.wal());
    let result = &records_of(&recs, "tool.result")[0].data["content"];
    assert_eq!(
        result.as_str().unwrap(),
        "line1\nline2\nline3\nline4\nline5\nline6\n[exit code: 0]"
    );

    // Not a terminal: no progress.
    let server = MockServer::start(replies());
    std::fs::remove_file(sb.wal()).unwrap();
    let out = output(sb.run_cmd(&server.base_url(), "slow"));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(!stderr(&out).contains("\u{1b}[2K"), "{}", stderr(&out));
}

#[test]
fn on_a_terminal_colour_is_on_unless_no_color_says_otherwise() {
    let sb = Sandbox::new();
    std::fs::write(sb.ws().join("a.txt"), "one\ntwo\n").unwrap();
    let run = |extra: &[&str], env: &[(&str, &str)]| {
        let server = MockServer::start(vec![
            MockReply::tool_call(
                "edit",
                serde_json::json!({"path": "a.txt", "old_string": "two", "new_string": "TWO"}),
            ),
            MockReply::text("done"),
        ]);
        let _ = std::fs::remove_file(sb.wal());
        std::fs::write(sb.ws().join("a.txt"), "one\ntwo\n").unwrap();
        let args = terminal_run_args(&sb, &server, extra, "t");
        let out = on_terminal(&sb, &args, env);
        let screen = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(out.status.success(), "{screen}");
        screen
    };
    let auto = run(&[], &[]);
    assert!(auto.contains("\u{1b}[32m+TWO\u{1b}[0m"), "{auto:?}");
    let plain = run(&[], &[("NO_COLOR", "1")]);
    assert!(plain.contains("+TWO"), "{plain:?}");
    assert!(!plain.contains("\u{1b}[32m"), "{plain:?}");
    // An empty NO_COLOR is not set; the flag wins over the variable.
    let empty = run(&[], &[("NO_COLOR", "")]);
    assert!(empty.contains("\u{1b}[32m+TWO"), "{empty:?}");
    let forced = run(&["--color", "always"], &[("NO_COLOR", "1")]);
    assert!(forced.contains("\u{1b}[31m-two"), "{forced:?}");
    let never = run(&["--color", "never"], &[]);
    assert!(!never.contains("\u{1b}[3"), "{never:?}");
}

#[test]
fn log_show_goes_through_the_pager_on_a_terminal_only() {
    let sb = Sandbox::new();
    let server = MockServer::start(vec![MockReply::text("The answer.")]);
    let out = output(sb.run_cmd(&server.base_url(), "ask"));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // A pager that keeps what it was given.
    let kept = sb.path("paged.txt");
    let pager = sb.path("pager.sh");
    std::fs::write(
        &pager,
        format!(
            "#!/bin/sh\ncat > {}\necho PAGER-RAN\n",
            sh_quote(&kept.display().to_string())
        ),
    )
    .unwrap();
    std::fs::set_permissions(&pager, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let args = ["log", "show", &sb.wal().display().to_string()].map(str::to_string);
    let pager_var = pager.display().to_string();
    let out = on_terminal(&sb, &args, &[("PAGER", &pager_var)]);
    let screen = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{screen}");
    assert!(screen.contains("PAGER-RAN"), "{screen:?}");
    let paged = std::fs::read_to_string(&kept).unwrap();
    assert!(
        paged.contains("task:\n  ask") && paged.contains("The answer."),
        "{paged}"
    );
    assert!(!screen.contains("The answer."), "{screen:?}");
    // Not a terminal: straight to stdout, no pager.
    std::fs::remove_file(&kept).unwrap();
    let mut c = tinyagent(&sb);
    c.args(["log", "show"])
        .arg(sb.wal())
        .env("PAGER", &pager_var);
    let out = output(c);
    assert!(String::from_utf8_lossy(&out.stdout).contains("The answer."));
    assert!(!kept.exists(), "the pager ran without a terminal");
}
