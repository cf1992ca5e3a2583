//! Project instructions (contract section 12): `AGENTS.md` files from the
//! workspace up to its git root are part of the system prompt, recorded in
//! `run.started`, so a resume sends the same text.

use crate::support::e2e::{Sandbox, output, stderr};
use crate::support::mock::{MockReply, MockServer};
use crate::support::plan::{read_log, records_of};
use serde_json::{Value, json};

fn system_text(req: &Value) -> String {
    req["messages"][0]["content"].as_str().unwrap().to_string()
}

#[test]
fn agents_md_files_up_to_the_git_root_are_in_the_prompt_and_resume_sends_the_same() {
    let sb = Sandbox::new();
    // The sandbox directory is the repository; the workspace is inside it.
    std::fs::create_dir_all(sb.dir.path().join(".git")).unwrap();
    std::fs::write(
        sb.dir.path().join("AGENTS.md"),
        "ROOT: run the tests with make\n",
    )
    .unwrap();
    std::fs::write(sb.ws().join("AGENTS.md"), "WS: never touch vendor/\n").unwrap();
    let server = MockServer::start(vec![
        MockReply::tool_call("bash", json!({"command": "true"})),
        MockReply::text("done"),
    ]);
    let mut cmd = sb.run_cmd(&server.base_url(), "follow the rules");
    cmd.env("TINYAGENT_CRASH_AFTER", "tool.result:1");
    let out = output(cmd);
    assert_eq!(out.status.code(), None, "killed: {}", stderr(&out));
    let first = system_text(&server.requests()[0]);
    let (root, ws) = (first.find("ROOT:").unwrap(), first.find("WS:").unwrap());
    assert!(root < ws, "the nearest file comes last: {first}");
    let recs = read_log(&sb.wal());
    let started = &records_of(&recs, "run.started")[0].data;
    assert_eq!(started["system_prompt"], first.as_str());
    let listed: Vec<&str> = started["settings"]["instructions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(listed.len(), 2);
    assert!(listed[0].ends_with("/AGENTS.md") && listed[1].ends_with("/ws/AGENTS.md"));

    // The files change; the resumed run is sent what the run started with.
    std::fs::write(sb.ws().join("AGENTS.md"), "WS: something else now\n").unwrap();
    let out = output(sb.resume_cmd());
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let last = server.requests().pop().unwrap();
    assert_eq!(system_text(&last), first);
}

#[test]
fn no_agents_md_leaves_them_out_and_a_linked_file_is_not_read() {
    let sb = Sandbox::new();
    let secret = sb.path("secret.txt");
    std::fs::write(&secret, "TOP SECRET").unwrap();
    std::os::unix::fs::symlink(&secret, sb.ws().join("AGENTS.md")).unwrap();
    let server = MockServer::start(vec![MockReply::text("done"), MockReply::text("done")]);
    let out = output(sb.run_cmd(&server.base_url(), "t"));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stderr(&out).contains("symbolic link"), "{}", stderr(&out));
    let prompt = system_text(&server.requests()[0]);
    assert!(!prompt.contains("TOP SECRET") && !prompt.contains("Project instructions"));

    std::fs::remove_file(sb.ws().join("AGENTS.md")).unwrap();
    std::fs::write(sb.ws().join("AGENTS.md"), "RULES").unwrap();
    std::fs::remove_file(sb.wal()).unwrap();
    let mut cmd = sb.run_cmd(&server.base_url(), "t");
    cmd.arg("--no-agents-md");
    let out = output(cmd);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(!system_text(&server.requests()[1]).contains("RULES"));
}
