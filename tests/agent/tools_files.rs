//! read, write and edit on real files, and path confinement for each.

use crate::support::tools::*;
use serde_json::json;
use tinyagent::tools::ToolOutcome;

#[test]
fn read_numbers_lines_like_cat_n() {
    let fx = Fixture::new();
    fx.write("a.txt", "one\ntwo\r\nthree");
    let out = fx.call("read", r#"{"path":"a.txt"}"#);
    assert_ok(&out);
    assert_eq!(out.content, "     1\tone\n     2\ttwo\n     3\tthree\n");
}

#[test]
fn read_offset_and_limit() {
    let fx = Fixture::new();
    let text: String = (1..=10).map(|i| format!("line {i}\n")).collect();
    fx.write("a.txt", &text);
    let out = fx.call("read", r#"{"path":"a.txt","offset":4,"limit":2}"#);
    assert_ok(&out);
    assert_eq!(
        out.content,
        "     4\tline 4\n     5\tline 5\n[more lines follow; continue with offset=6]\n"
    );
    let out = fx.call("read", r#"{"path":"a.txt","offset":9}"#);
    assert_eq!(out.content, "     9\tline 9\n    10\tline 10\n");
    let out = fx.call("read", r#"{"path":"a.txt","offset":11}"#);
    assert_tool_error(
        &out,
        "offset 11 is past the end of a.txt, which has 10 lines",
    );
}

#[test]
fn read_default_limit_is_2000_lines() {
    let fx = Fixture::new();
    let text: String = (1..=2500).map(|i| format!("{i}\n")).collect();
    fx.write("big.txt", &text);
    let out = fx.call("read", r#"{"path":"big.txt"}"#);
    assert_ok(&out);
    assert!(out.content.contains("  2000\t2000\n"));
    assert!(!out.content.contains("\t2001\n"));
    assert!(
        out.content
            .ends_with("[more lines follow; continue with offset=2001]\n")
    );
}

#[test]
fn read_cuts_long_lines() {
    let fx = Fixture::new();
    fx.write("long.txt", &format!("{}\nshort\n", "y".repeat(5000)));
    let out = fx.call("read", r#"{"path":"long.txt"}"#);
    assert_ok(&out);
    assert!(
        out.content
            .contains(&format!("{}... [3000 more bytes]\n", "y".repeat(2000)))
    );
    assert!(out.content.contains("     2\tshort\n"));
}

#[test]
fn read_errors_missing_directory_binary_huge_empty() {
    let fx = Fixture::new();
    assert_tool_error(
        &fx.call("read", r#"{"path":"nope.txt"}"#),
        "file not found: nope.txt",
    );
    std::fs::create_dir(fx.ws.join("dir")).unwrap();
    assert_tool_error(&fx.call("read", r#"{"path":"dir"}"#), "dir is a directory");
    std::fs::write(fx.ws.join("bin"), b"ELF\x00\x01\x02").unwrap();
    assert_tool_error(&fx.call("read", r#"{"path":"bin"}"#), "binary file");
    let huge: String = (0..40_000).map(|i| format!("row {i:08}\n")).collect();
    fx.write("huge.log", &huge);
    assert_tool_error(
        &fx.call("read", r#"{"path":"huge.log"}"#),
        "read it in parts with offset and limit",
    );
    let out = fx.call("read", r#"{"path":"huge.log","offset":30000,"limit":2}"#);
    assert_ok(&out);
    assert!(
        out.content
            .starts_with(" 30000\trow 00029999\n 30001\trow 00030000\n"),
        "{}",
        out.content
    );
    fx.write("empty", "");
    let out = fx.call("read", r#"{"path":"empty"}"#);
    assert_ok(&out);
    assert!(out.content.contains("empty"));
}

#[test]
fn write_creates_parents_and_overwrites() {
    let fx = Fixture::new();
    let out = fx.call("write", r#"{"path":"a/b/c.txt","content":"héllo\n"}"#);
    assert_ok(&out);
    assert_eq!(out.content, "Created a/b/c.txt: 7 bytes written");
    assert_eq!(fx.read("a/b/c.txt"), "héllo\n");
    let out = fx.call("write", r#"{"path":"a/b/c.txt","content":""}"#);
    assert_eq!(out.content, "Overwrote a/b/c.txt: 0 bytes written");
    assert_eq!(fx.read("a/b/c.txt"), "");
    assert_tool_error(
        &fx.call("write", r#"{"path":"a/b","content":"x"}"#),
        "a/b is a directory",
    );
}

#[test]
fn edit_replaces_a_unique_match_and_shows_a_diff() {
    let fx = Fixture::new();
    fx.write("m.rs", "fn main() {\n    println!(\"hi\");\n}\n");
    let out = fx.call_json(
        "edit",
        json!({"path": "m.rs", "old_string": "\"hi\"", "new_string": "\"bye\""}),
    );
    assert_ok(&out);
    assert_eq!(fx.read("m.rs"), "fn main() {\n    println!(\"bye\");\n}\n");
    assert!(out.content.starts_with("Edited m.rs: 1 replacement.\n"));
    assert!(
        out.content.contains("--- a/m.rs\n+++ b/m.rs\n"),
        "{}",
        out.content
    );
    assert!(
        out.content
            .contains("-    println!(\"hi\");\n+    println!(\"bye\");\n")
    );
}

#[test]
fn edit_refuses_ambiguous_missing_and_noop_edits() {
    let fx = Fixture::new();
    fx.write("t.txt", "a x a x a\n");
    let before = fx.read("t.txt");
    let edit = |old: &str, new: &str| {
        fx.call_json(
            "edit",
            json!({"path": "t.txt", "old_string": old, "new_string": new}),
        )
    };
    assert_tool_error(&edit("a", "b"), "old_string matches 3 places in t.txt");
    assert_tool_error(&edit("zzz", "b"), "old_string was not found in t.txt");
    assert_tool_error(&edit("x", "x"), "are the same");
    assert_tool_error(&edit("", "b"), "old_string is empty");
    assert_eq!(fx.read("t.txt"), before, "failed edits change nothing");
    let out = fx.call_json(
        "edit",
        json!({"path": "nope.txt", "old_string": "a", "new_string": "b"}),
    );
    assert_tool_error(&out, "file not found: nope.txt (use write to create it)");
}

#[test]
fn edit_replace_all() {
    let fx = Fixture::new();
    fx.write("t.txt", "a x a x a\n");
    let out = fx.call_json(
        "edit",
        json!({"path": "t.txt", "old_string": "a", "new_string": "bb", "replace_all": true}),
    );
    assert_ok(&out);
    assert!(out.content.starts_with("Edited t.txt: 3 replacements."));
    assert_eq!(fx.read("t.txt"), "bb x bb x bb\n");
}

#[test]
fn edit_refuses_non_utf8() {
    let fx = Fixture::new();
    std::fs::write(fx.ws.join("l1.txt"), b"caf\xe9\n").unwrap();
    let out = fx.call_json(
        "edit",
        json!({"path": "l1.txt", "old_string": "caf", "new_string": "tea"}),
    );
    assert_tool_error(&out, "not UTF-8");
}

#[test]
fn paths_escaping_the_workspace_are_refused_everywhere() {
    let fx = Fixture::new();
    let outside = fx.outside().join("secret.txt");
    std::fs::write(&outside, "secret\n").unwrap();
    std::os::unix::fs::symlink(fx.outside(), fx.ws.join("up")).unwrap();
    std::os::unix::fs::symlink(&outside, fx.ws.join("secret-link")).unwrap();
    let abs = outside.display().to_string();
    for path in [
        "../secret.txt",
        "sub/../../secret.txt",
        abs.as_str(),
        "up/secret.txt",
        "secret-link",
    ] {
        let read = fx.call_json("read", json!({"path": path}));
        assert_tool_error(&read, "path escapes the workspace");
        let write = fx.call_json("write", json!({"path": path, "content": "pwned"}));
        assert_tool_error(&write, "path escapes the workspace");
        let edit = fx.call_json(
            "edit",
            json!({"path": path, "old_string": "secret", "new_string": "pwned"}),
        );
        assert_tool_error(&edit, "path escapes the workspace");
    }
    assert_tool_error(
        &fx.call_json("write", json!({"path": "up/new.txt", "content": "x"})),
        "path escapes the workspace",
    );
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "secret\n");
    assert!(!fx.outside().join("new.txt").exists());
    // A dangling link is refused rather than written through.
    std::os::unix::fs::symlink(fx.outside().join("created.txt"), fx.ws.join("dangling")).unwrap();
    assert_tool_error(
        &fx.call_json("write", json!({"path": "dangling", "content": "x"})),
        "dangling symbolic link",
    );
    assert!(!fx.outside().join("created.txt").exists());
}

#[test]
fn absolute_paths_inside_the_workspace_are_fine() {
    let fx = Fixture::new();
    let abs = fx.ws.join("in.txt").display().to_string();
    assert_ok(&fx.call_json("write", json!({"path": abs, "content": "ok\n"})));
    assert_eq!(fx.read("in.txt"), "ok\n");
    let out = fx.call_json("read", json!({"path": abs}));
    assert_eq!(out.content, "     1\tok\n");
}

/// The file outside the workspace the races aim at, with its bytes and mtime.
fn outside_target(fx: &Fixture) -> (std::path::PathBuf, Vec<u8>, std::time::SystemTime) {
    let outside = fx.outside().join("outside.txt");
    std::fs::write(&outside, "OUTSIDE-SECRET side\n").unwrap();
    let meta = std::fs::metadata(&outside).unwrap();
    (
        outside.clone(),
        std::fs::read(&outside).unwrap(),
        meta.modified().unwrap(),
    )
}

#[track_caller]
fn assert_untouched(outside: &std::path::Path, bytes: &[u8], mtime: std::time::SystemTime) {
    assert_eq!(
        std::fs::read(outside).unwrap(),
        bytes,
        "outside file changed"
    );
    assert_eq!(
        std::fs::metadata(outside).unwrap().modified().unwrap(),
        mtime,
        "outside file's mtime changed"
    );
}

#[test]
fn a_symlink_swapped_in_never_lets_read_reach_outside() {
    let fx = Fixture::new();
    fx.write("inside.txt", "inside side\n");
    let (outside, bytes, mtime) = outside_target(&fx);
    let mut escapes = 0;
    let attempts = race_swaps(&fx.ws, &outside, 2000, |_| {
        let out = fx.call("read", r#"{"path":"x"}"#);
        if out.content.contains("OUTSIDE-SECRET") {
            escapes += 1;
        }
    });
    assert_eq!(
        escapes, 0,
        "{escapes} of {attempts} reads reached the outside file"
    );
    assert_untouched(&outside, &bytes, mtime);
}

#[test]
fn a_symlink_swapped_in_never_lets_write_reach_outside() {
    let fx = Fixture::new();
    fx.write("inside.txt", "inside side\n");
    let (outside, bytes, mtime) = outside_target(&fx);
    let mut escapes = 0;
    let mut last = bytes.clone();
    let attempts = race_swaps(&fx.ws, &outside, 2000, |i| {
        fx.call_json(
            "write",
            json!({"path": "x", "content": format!("pwned {i}\n")}),
        );
        let now = std::fs::read(&outside).unwrap();
        if now != last {
            escapes += 1;
            last = now;
        }
    });
    assert_eq!(
        escapes, 0,
        "{escapes} of {attempts} writes reached the outside file"
    );
    assert_untouched(&outside, &bytes, mtime);
}

#[test]
fn a_symlink_swapped_in_never_lets_edit_reach_outside() {
    let fx = Fixture::new();
    fx.write("inside.txt", "inside side\n");
    let (outside, bytes, mtime) = outside_target(&fx);
    let mut escapes = 0;
    let mut last = bytes.clone();
    let attempts = race_swaps(&fx.ws, &outside, 2000, |i| {
        let (old, new) = if i % 2 == 0 {
            ("side", "SIDE")
        } else {
            ("SIDE", "side")
        };
        fx.call_json(
            "edit",
            json!({"path": "x", "old_string": old, "new_string": new, "replace_all": true}),
        );
        let now = std::fs::read(&outside).unwrap();
        if now != last {
            escapes += 1;
            last = now;
        }
    });
    assert_eq!(
        escapes, 0,
        "{escapes} of {attempts} edits reached the outside file"
    );
    assert_untouched(&outside, &bytes, mtime);
}

/// Runs `name` on a FIFO in a thread; if it has not answered in two seconds
/// the FIFO is opened from this side to let it go, and None is returned.
fn call_on_fifo(fx: &Fixture, name: &str, args: serde_json::Value) -> Option<(ToolOutcome, f64)> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::scope(|s| {
        s.spawn(|| {
            let start = std::time::Instant::now();
            let out = fx.call_json(name, args);
            let _ = tx.send((out, start.elapsed().as_secs_f64()));
        });
        match rx.recv_timeout(std::time::Duration::from_secs(2)) {
            Ok(r) => Some(r),
            Err(_) => {
                // Unblock the tool: a reader and a writer for the FIFO.
                let fifo = fx.ws.join("pipe");
                let _r = std::fs::OpenOptions::new()
                    .read(true)
                    .custom_flags(nix::fcntl::OFlag::O_NONBLOCK.bits())
                    .open(&fifo);
                let _w = std::fs::OpenOptions::new().write(true).open(&fifo);
                None
            }
        }
    })
}

use std::os::unix::fs::OpenOptionsExt;

#[test]
fn fifos_and_sockets_are_refused_quickly() {
    let fx = Fixture::new();
    nix::unistd::mkfifo(
        &fx.ws.join("pipe"),
        nix::sys::stat::Mode::from_bits_truncate(0o644),
    )
    .unwrap();
    let calls = [
        ("read", json!({"path": "pipe"})),
        ("write", json!({"path": "pipe", "content": "x"})),
        (
            "edit",
            json!({"path": "pipe", "old_string": "a", "new_string": "b"}),
        ),
        ("grep", json!({"pattern": "a", "path": "pipe"})),
    ];
    for (name, args) in calls {
        let Some((out, secs)) = call_on_fifo(&fx, name, args) else {
            panic!("{name} on a FIFO still hung after 2 s");
        };
        eprintln!("{name} on a FIFO answered in {:.1} ms", secs * 1000.0);
        assert!(secs < 1.0, "{name} took {secs} s");
        assert_tool_error(&out, "pipe is a FIFO (named pipe), not a regular file");
    }
    let _sock = std::os::unix::net::UnixListener::bind(fx.ws.join("sock")).unwrap();
    for (name, args) in [
        ("read", json!({"path": "sock"})),
        ("write", json!({"path": "sock", "content": "x"})),
        (
            "edit",
            json!({"path": "sock", "old_string": "a", "new_string": "b"}),
        ),
        ("grep", json!({"pattern": "a", "path": "sock"})),
    ] {
        assert_tool_error(
            &fx.call_json(name, args),
            "sock is a socket, not a regular file",
        );
    }
    // A walk passes them by without a word.
    fx.write("a.txt", "a\n");
    assert_eq!(fx.call("grep", r#"{"pattern":"a"}"#).content, "a.txt:1:a");
}

/// The child half of the memory test: reads the file the parent names and
/// prints how far the read raised the peak resident set (VmHWM).
#[test]
fn read_memory_probe() {
    let Ok(ws) = std::env::var("TINYAGENT_READ_PROBE_WS") else {
        return;
    };
    fn hwm_kb() -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    }
    let mut fx = Fixture::new();
    fx.ws = ws.into();
    let before = hwm_kb();
    let out = fx.call("read", r#"{"path":"one-line.txt","offset":1,"limit":1}"#);
    let after = hwm_kb();
    assert_ok(&out);
    assert!(
        out.content
            .starts_with(&format!("     1\t{}... [", "a".repeat(2000))),
        "{}",
        &out.content[..out.content.len().min(100)]
    );
    println!("PROBE peak_growth_kb={}", after - before);
}

#[test]
fn read_with_offset_and_limit_uses_memory_bounded_by_the_limit() {
    let fx = Fixture::new();
    // One line of 1 GiB: text first (the binary sniff looks at the start),
    // then a hole the file system does not store.
    let mut f = std::fs::File::create(fx.ws.join("one-line.txt")).unwrap();
    std::io::Write::write_all(&mut f, &vec![b'a'; 16 * 1024]).unwrap();
    f.set_len(1 << 30).unwrap();
    drop(f);
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "tools_files::read_memory_probe",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("TINYAGENT_READ_PROBE_WS", &fx.ws)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let kb: u64 = stdout
        .split("PROBE peak_growth_kb=")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .unwrap_or_else(|| panic!("no probe line in {stdout}"))
        .parse()
        .unwrap();
    eprintln!("read of a 1 GiB line with offset/limit raised the peak RSS by {kb} KiB");
    assert!(kb < 16 * 1024, "peak RSS grew by {kb} KiB");
}

/// A run's own files, inside the workspace here, for the protected tests.
fn protected_fixture() -> Fixture {
    let mut fx = Fixture::new();
    fx.write("run.wal", "LOG\n");
    fx.write("run.wal.snapshot", "SNAP\n");
    fx.write("run.wal.d/p1.log", "OUT\n");
    fx.write("tinyagent.toml", "[model]\nmax_retries = 2\n");
    fx.write("hooks/pre.sh", "#!/bin/sh\nexit 0\n");
    fx.write("src/ok.txt", "fine\n");
    let mut p = tinyagent::exec::protected::Protected::none();
    p.add_log(&fx.ws.join("run.wal"));
    p.add(&fx.ws.join("tinyagent.toml"));
    p.add(&fx.ws.join("hooks/pre.sh"));
    fx.protected = p;
    fx
}

#[test]
fn the_runs_own_files_are_refused_by_read_write_and_edit() {
    let fx = protected_fixture();
    std::os::unix::fs::symlink("run.wal", fx.ws.join("alias")).unwrap();
    let before: Vec<(&str, String)> = [
        "run.wal",
        "run.wal.snapshot",
        "run.wal.d/p1.log",
        "tinyagent.toml",
        "hooks/pre.sh",
    ]
    .into_iter()
    .map(|p| (p, fx.read(p)))
    .collect();
    for path in [
        "run.wal",
        "./run.wal",
        "alias",
        "run.wal.snapshot",
        "run.wal.d/p1.log",
        "run.wal.d/new.log",
        "run.wal.torn-7",
        "tinyagent.toml",
        "src/../tinyagent.toml",
        "hooks/pre.sh",
    ] {
        let read = fx.call_json("read", json!({"path": path}));
        assert_tool_error(&read, "is one of this run's own files");
        let write = fx.call_json("write", json!({"path": path, "content": "forged\n"}));
        assert_tool_error(&write, "is one of this run's own files");
        let edit = fx.call_json(
            "edit",
            json!({"path": path, "old_string": "\n", "new_string": "forged\n"}),
        );
        assert_tool_error(&edit, "is one of this run's own files");
    }
    for (p, content) in before {
        assert_eq!(fx.read(p), content, "{p} changed");
    }
    assert!(!fx.ws.join("run.wal.d/new.log").exists());
    assert!(!fx.ws.join("run.wal.torn-7").exists());
    // Everything else stays usable.
    assert_ok(&fx.call("read", r#"{"path":"src/ok.txt"}"#));
    assert_ok(&fx.call("write", r#"{"path":"run.walrus","content":"x"}"#));
}

#[test]
fn a_run_with_its_log_and_config_in_the_workspace_cannot_touch_them() {
    use crate::support::contract;
    use crate::support::e2e::{Sandbox, bin, output, stderr};
    use crate::support::mock::{MockReply, MockServer};
    let sb = Sandbox::new();
    let wal = sb.ws().join("run.wal");
    let config = sb.ws().join("tinyagent.toml");
    let config_text = "[model]\nmax_retries = 2\nretry_base_ms = 5\nrequest_timeout_s = 20\n";
    std::fs::write(&config, config_text).unwrap();
    let server = MockServer::start(vec![
        MockReply::tool_call("write", json!({"path": "run.wal", "content": "forged"})),
        MockReply::tool_call(
            "edit",
            json!({"path": "tinyagent.toml", "old_string": "max_retries = 2", "new_string": "max_retries = 9"}),
        ),
        MockReply::text("done"),
    ]);
    let mut c = std::process::Command::new(bin());
    c.current_dir(sb.dir.path())
        .args([
            "run",
            "--base-url",
            &server.base_url(),
            "--model",
            "test-model",
        ])
        .arg("--wal")
        .arg(&wal)
        .arg("--cwd")
        .arg(sb.ws())
        .arg("--config")
        .arg(&config)
        .arg("forge the log")
        .env_remove("OPENAI_API_KEY")
        .stdin(std::process::Stdio::null());
    let out = output(c);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(std::fs::read_to_string(&config).unwrap(), config_text);
    let recs = contract::read(&wal);
    let results: Vec<_> = recs.iter().filter(|r| r.kind == "tool.result").collect();
    assert_eq!(results.len(), 2);
    for r in results {
        assert_eq!(r.data["is_error"], true, "{}", r.data);
        assert!(
            r.data["content"]
                .as_str()
                .unwrap()
                .contains("is one of this run's own files"),
            "{}",
            r.data
        );
    }
    let verify = std::process::Command::new(bin())
        .args(["log", "verify"])
        .arg(&wal)
        .output()
        .unwrap();
    assert_eq!(
        verify.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&verify.stdout)
    );
}
