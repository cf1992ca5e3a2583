//! API keys never reach a child of the agent (contract section 8): the real
//! binary with canary keys in its environment (`OPENAI_API_KEY`, a variable
//! named with `--api-key-env`, `AWS_SECRET_ACCESS_KEY`), a foreground and a
//! background bash probe, and a pre and a post hook probe. Each probe prints
//! its own environment, the agent's `/proc/$PPID/environ` and its command
//! line. No canary may show in any of that, nor in any file the run leaves;
//! the mock server must still have been sent the right key.
//!
//! These tests run as root (as CI does). Root reads any process's
//! `/proc/<pid>/environ`, dumpable or not, so what keeps the key out of it
//! here is that the agent re-executes itself without the key variables (the
//! environ of a process is the one its last exec was given). The last test
//! runs the agent and its probes as `nobody`, where the agent being
//! non-dumpable is what keeps a same-user process out of its environ and
//! memory.

use crate::support::e2e::{Sandbox, all_files, output, stderr};
use crate::support::mock::{MockReply, MockServer, RecordedRequest};
use crate::support::require::{require, root};
use serde_json::{Value, json};
use std::process::Command;

/// What each probe prints: its environment, the agent's environ (one
/// variable a line) and the agent's command line, in marked sections.
const PROBE: &str = "env; echo ==environ; cat /proc/$PPID/environ | tr '\\0' '\\n'; echo; \
                     echo ==cmdline; cat /proc/$PPID/cmdline | tr '\\0' ' '; echo; echo ==end";

fn canary() -> String {
    format!("sk-canary-{:016x}", fastrand::u64(..))
}

/// A variable that is not a key: the probes must see it, which shows that
/// they really read the environments they print.
const MARKER_VAR: &str = "SECRETS_TEST_MARKER";

struct Scene {
    sb: Sandbox,
    /// Key values that must not leak.
    canaries: Vec<String>,
    marker: String,
}

impl Scene {
    fn new(canaries: usize) -> Scene {
        Scene {
            sb: Sandbox::new(),
            canaries: (0..canaries).map(|_| canary()).collect(),
            marker: format!("visible-{:08x}", fastrand::u32(..)),
        }
    }

    fn hook_out(&self, which: &str) -> String {
        self.sb.path(&format!("{which}.out")).display().to_string()
    }

    /// `[hooks]` whose pre hook appends the probe to `pre.out` and whose
    /// post hook appends it to `post.out` and prints it (which the agent
    /// logs as the hook's feedback).
    fn hooks_toml(&self) -> String {
        let pre = format!(
            "cat >/dev/null; ({PROBE}) >>'{}' 2>&1",
            self.hook_out("pre")
        );
        let post = format!(
            "cat >/dev/null; ({PROBE}) 2>&1 | tee -a '{}'",
            self.hook_out("post")
        );
        format!(
            "[hooks]\npre_tool = {}\npost_tool = {}\n",
            Value::String(pre),
            Value::String(post)
        )
    }

    /// The model's probing step: a background probe, then a foreground probe
    /// that waits for the background one to finish.
    fn probe_step() -> MockReply {
        let wait = "for i in $(seq 100); do grep -q '^==bg-done' ../run.wal.d/p1.log 2>/dev/null \
                    && break; sleep 0.05; done";
        MockReply::tool_calls(vec![
            (
                "bash",
                json!({"command": format!("({PROBE}) 2>&1; echo ==bg-done"), "background": true}),
            ),
            (
                "bash",
                json!({"command": format!("({PROBE}) 2>&1; {wait}")}),
            ),
        ])
    }

    /// `text` holds no canary.
    fn assert_clean(&self, what: &str, text: &str) {
        for c in &self.canaries {
            assert!(
                !text.contains(c.as_str()),
                "a key leaked into {what}:\n{text}"
            );
        }
    }

    /// `text` is a probe's output that read the agent's environ (as root it
    /// can): the marker shows in the environ section.
    fn assert_probed(&self, what: &str, text: &str) {
        let environ = text
            .split("==environ")
            .nth(1)
            .and_then(|rest| rest.split("==cmdline").next())
            .unwrap_or_else(|| panic!("{what} did not run the probe:\n{text}"));
        assert!(
            environ.contains(&self.marker),
            "{what} did not read the agent's environ:\n{text}"
        );
        assert!(text.contains("==end"), "{what} did not finish:\n{text}");
        self.assert_clean(what, text);
    }

    /// Every probe's output and every file the run left is clean.
    fn check_outputs(&self, server: &MockServer, outs: &[&std::process::Output]) {
        let last = server.recorded().pop().expect("a request");
        let results = last.tool_results();
        assert!(results.len() >= 2, "{results:?}");
        for (id, content) in &results[results.len() - 2..] {
            self.assert_probed(&format!("tool result {id}"), content);
        }
        let read = |name: &str| {
            std::fs::read_to_string(self.sb.path(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
        };
        self.assert_probed("the background process", &read("run.wal.d/p1.log"));
        self.assert_probed("the pre hook", &read("pre.out"));
        self.assert_probed("the post hook", &read("post.out"));
        for f in all_files(self.sb.dir.path()) {
            let bytes = std::fs::read(&f).unwrap();
            self.assert_clean(&f.display().to_string(), &String::from_utf8_lossy(&bytes));
        }
        for out in outs {
            self.assert_clean("the agent's stdout", &String::from_utf8_lossy(&out.stdout));
            self.assert_clean("the agent's stderr", &stderr(out));
        }
    }

    fn run_cmd(&self, server: &MockServer) -> Command {
        let mut cmd = self
            .sb
            .run_cmd_cfg(&server.base_url(), "probe the keys", &self.hooks_toml());
        cmd.env(MARKER_VAR, &self.marker)
            .env("TINYAGENT_HOME", self.sb.path("home"));
        cmd
    }
}

/// The server was sent `key` (so the key really was used).
fn assert_bearer(r: &RecordedRequest, key: &str) {
    assert_eq!(
        r.header("authorization"),
        Some(format!("Bearer {key}").as_str()),
        "request {}",
        r.index
    );
}

#[test]
fn run_keeps_the_default_key_and_aws_secrets_from_every_child() {
    let s = Scene::new(3);
    let server = MockServer::start(vec![Scene::probe_step(), MockReply::text("done")]);
    let mut cmd = s.run_cmd(&server);
    cmd.env("OPENAI_API_KEY", &s.canaries[0])
        .env("AWS_SECRET_ACCESS_KEY", &s.canaries[1])
        .env("AWS_SESSION_TOKEN", &s.canaries[2]);
    let out = output(cmd);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    for r in server.recorded() {
        assert_bearer(&r, &s.canaries[0]);
    }
    s.check_outputs(&server, &[&out]);
}

#[test]
fn run_keeps_a_key_named_with_api_key_env_from_every_child() {
    let s = Scene::new(2);
    let server = MockServer::start(vec![Scene::probe_step(), MockReply::text("done")]);
    let mut cmd = s.run_cmd(&server);
    cmd.args(["--api-key-env", "MY_KEY"])
        .env("MY_KEY", &s.canaries[0])
        .env("OPENAI_API_KEY", &s.canaries[1]);
    let out = output(cmd);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    for r in server.recorded() {
        assert_bearer(&r, &s.canaries[0]);
    }
    s.check_outputs(&server, &[&out]);
}

#[test]
fn resume_with_an_overriding_api_key_env_keeps_that_key_from_every_child() {
    let s = Scene::new(2);
    // The run starts without a key and stops at its step limit.
    let server = MockServer::start(vec![MockReply::tool_call(
        "bash",
        json!({"command": "true"}),
    )]);
    let mut first = s.run_cmd(&server);
    first.args(["--max-steps", "1"]);
    let out1 = output(first);
    assert_eq!(out1.status.code(), Some(3), "{}", stderr(&out1));
    let before = server.request_count();
    server.push(Scene::probe_step());
    server.push(MockReply::text("done"));
    // Resumed with the key in a variable of its own, the usual one set too.
    let mut resume = s.sb.resume_cmd();
    resume
        .args(["--max-steps", "5", "--api-key-env", "MY_KEY", "--config"])
        .arg(s.sb.path("tinyagent.toml"))
        .env(MARKER_VAR, &s.marker)
        .env("MY_KEY", &s.canaries[0])
        .env("OPENAI_API_KEY", &s.canaries[1]);
    let out2 = output(resume);
    assert_eq!(out2.status.code(), Some(0), "{}", stderr(&out2));
    let recorded = server.recorded();
    assert!(recorded.len() > before, "the resumed run sent nothing");
    for r in &recorded[before..] {
        assert_bearer(r, &s.canaries[0]);
    }
    s.check_outputs(&server, &[&out1, &out2]);
}

/// The run's key and a resume's key, both in the environment of the
/// resume: the variable named on `run` was recorded (by name) and is kept
/// from every child of the resumed run too, with the one named now; the
/// bucket's endpoint and region reach no tool's environment either.
fn run_key_then_resume_key(toml: &str) {
    let s = Scene::new(3);
    let server = MockServer::start(vec![MockReply::tool_call(
        "bash",
        json!({"command": "true"}),
    )]);
    let config = format!("{}{toml}", s.hooks_toml());
    let mut first =
        s.sb.run_cmd_cfg(&server.base_url(), "probe the keys", &config);
    first
        .env(MARKER_VAR, &s.marker)
        .env("TINYAGENT_HOME", s.sb.path("home"))
        .args(["--max-steps", "1", "--api-key-env", "TA_RUN_KEY"])
        .env("TA_RUN_KEY", &s.canaries[0]);
    let out1 = output(first);
    assert_eq!(out1.status.code(), Some(3), "{}", stderr(&out1));
    for r in server.recorded() {
        assert_bearer(&r, &s.canaries[0]);
    }
    let before = server.request_count();
    server.push(Scene::probe_step());
    server.push(MockReply::text("done"));
    let endpoint = format!("http://127.0.0.1:1/{}", canary());
    let region = format!("region-{}", canary());
    let mut resume = s.sb.resume_cmd();
    resume
        .args([
            "--max-steps",
            "5",
            "--api-key-env",
            "TA_RESUME_KEY",
            "--config",
        ])
        .arg(s.sb.path("tinyagent.toml"))
        .env(MARKER_VAR, &s.marker)
        .env("TINYAGENT_HOME", s.sb.path("home"))
        .env("TA_RUN_KEY", &s.canaries[0])
        .env("TA_RESUME_KEY", &s.canaries[1])
        .env("OPENAI_API_KEY", &s.canaries[2])
        .env("AWS_ENDPOINT_URL", &endpoint)
        .env("AWS_REGION", &region);
    let out2 = output(resume);
    assert_eq!(out2.status.code(), Some(0), "{}", stderr(&out2));
    let recorded = server.recorded();
    assert!(recorded.len() > before, "the resumed run sent nothing");
    for r in &recorded[before..] {
        assert_bearer(r, &s.canaries[1]);
    }
    s.check_outputs(&server, &[&out1, &out2]);
    // The resume recorded the name it was given, never a value.
    let log = std::fs::read_to_string(s.sb.wal()).unwrap();
    assert!(log.contains(r#""api_key_env":"TA_RESUME_KEY""#), "{log}");
    // A tool's own environment (what it prints before the agent's) holds
    // neither bucket setting.
    let last = server.recorded().pop().unwrap();
    for (id, content) in last.tool_results() {
        let own = content.split("==environ").next().unwrap_or_default();
        assert!(
            !own.contains(&endpoint) && !own.contains(&region),
            "AWS_ENDPOINT_URL or AWS_REGION reached tool {id}:\n{own}"
        );
    }
}

#[test]
fn a_run_key_and_a_resume_key_set_together_reach_no_child() {
    run_key_then_resume_key("");
}

#[test]
fn a_run_key_and_a_resume_key_set_together_reach_no_sandboxed_child() {
    let s = Sandbox::new();
    let Some(_) = require(
        "bwrap",
        "a_run_key_and_a_resume_key_set_together_reach_no_sandboxed_child",
        crate::support::require::bwrap(&s.ws(), false),
    ) else {
        return;
    };
    run_key_then_resume_key("[env]\nkind = \"sandbox\"\n");
}

/// The agent and its probe as `nobody`: a same-user, non-root process can
/// neither read the agent's environ nor open its memory (the agent is not
/// dumpable).
#[test]
fn a_same_user_process_cannot_read_the_agents_environ_or_memory() {
    let Some(()) = require(
        "root",
        "a_same_user_process_cannot_read_the_agents_environ_or_memory",
        root().and_then(|()| crate::support::require::nobody()),
    ) else {
        return;
    };
    let s = Scene::new(1);
    let probe = "echo ==environ; cat /proc/$PPID/environ | tr '\\0' '\\n'; echo; echo ==mem; \
                 if (exec 3</proc/$PPID/mem) 2>/dev/null; then echo MEM-OPEN; \
                 else echo MEM-DENIED; fi; id -u";
    let server = MockServer::start(vec![
        MockReply::tool_call("bash", json!({"command": probe})),
        MockReply::text("done"),
    ]);
    // Everything the run writes belongs to nobody.
    let inner = s.sb.run_cmd_cfg(&server.base_url(), "probe as nobody", "");
    let chown = Command::new("chown")
        .arg("-R")
        .arg("65534:65534")
        .arg(s.sb.dir.path())
        .status()
        .unwrap();
    assert!(chown.success());
    let mut cmd = Command::new("setpriv");
    cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(inner.get_program())
        .args(inner.get_args())
        .current_dir(s.sb.dir.path())
        .env("HOME", s.sb.path("home"))
        .env("TINYAGENT_HOME", s.sb.path("home"))
        .env(MARKER_VAR, &s.marker)
        .env("OPENAI_API_KEY", &s.canaries[0])
        .stdin(std::process::Stdio::null());
    let out = output(cmd);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_bearer(&server.recorded()[0], &s.canaries[0]);
    let last = server.recorded().pop().unwrap();
    let (_, content) = last.tool_results().pop().expect("the probe's result");
    assert!(content.contains("65534"), "not run as nobody:\n{content}");
    s.assert_clean("the probe run as nobody", &content);
    assert!(
        content.contains("MEM-DENIED"),
        "a same-user process opened the agent's memory:\n{content}"
    );
    let environ = content
        .split("==environ")
        .nth(1)
        .and_then(|r| r.split("==mem").next())
        .unwrap();
    assert!(
        !environ.contains(&s.marker),
        "a same-user process read the agent's environ:\n{content}"
    );
}
