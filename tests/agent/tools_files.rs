//! read, write and edit on real files, and path confinement for each.

use crate::support::tools::*;
use serde_json::json;

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
