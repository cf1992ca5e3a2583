//! grep and glob over real trees: ignore rules, filters, bounds, confinement.

use crate::support::tools::*;
use serde_json::json;

fn tree() -> Fixture {
    let fx = Fixture::new();
    fx.write(".gitignore", "target/\n*.log\n");
    fx.write("src/main.rs", "fn main() {\n    hello();\n}\n");
    fx.write("src/lib.rs", "pub fn hello() {}\n// hello again\n");
    fx.write("src/deep/x.py", "print('hello')\n");
    fx.write("README.md", "Say hello.\n");
    fx.write("target/debug/out.rs", "hello from build output\n");
    fx.write("run.log", "hello log\n");
    fx.write(".git/config", "hello git\n");
    fx.write(".tinyagent/runs/r.wal", "hello wal\n");
    fx.write(".github/ci.yml", "hello: ci\n");
    std::fs::write(fx.ws.join("src/blob.bin"), b"hello\x00\x01binary").unwrap();
    fx
}

#[test]
fn grep_lists_matches_as_path_line_text_sorted_respecting_gitignore() {
    let fx = tree();
    let out = fx.call("grep", r#"{"pattern":"hel+o"}"#);
    assert_ok(&out);
    assert_eq!(
        out.content,
        [
            ".github/ci.yml:1:hello: ci",
            "README.md:1:Say hello.",
            "src/deep/x.py:1:print('hello')",
            "src/lib.rs:1:pub fn hello() {}",
            "src/lib.rs:2:// hello again",
            "src/main.rs:2:    hello();",
        ]
        .join("\n")
    );
}

#[test]
fn grep_glob_and_path_filters() {
    let fx = tree();
    let out = fx.call("grep", r#"{"pattern":"hello","glob":"*.rs"}"#);
    assert_eq!(
        out.content,
        "src/lib.rs:1:pub fn hello() {}\nsrc/lib.rs:2:// hello again\nsrc/main.rs:2:    hello();"
    );
    let out = fx.call("grep", r#"{"pattern":"hello","glob":"src/deep/*"}"#);
    assert_eq!(out.content, "src/deep/x.py:1:print('hello')");
    let out = fx.call("grep", r#"{"pattern":"hello","path":"src/deep"}"#);
    assert_eq!(out.content, "src/deep/x.py:1:print('hello')");
    let out = fx.call("grep", r#"{"pattern":"again","path":"src/lib.rs"}"#);
    assert_eq!(out.content, "src/lib.rs:2:// hello again");
    let out = fx.call("grep", r#"{"pattern":"nothing-like-this"}"#);
    assert_ok(&out);
    assert!(
        out.content
            .starts_with("No matches for `nothing-like-this`")
    );
}

#[test]
fn grep_errors() {
    let fx = tree();
    assert_tool_error(
        &fx.call("grep", r#"{"pattern":"a(b"}"#),
        "invalid regex `a(b`",
    );
    assert_tool_error(
        &fx.call("grep", r#"{"pattern":"x","glob":"a[b"}"#),
        "invalid glob",
    );
    assert_tool_error(
        &fx.call("grep", r#"{"pattern":"x","path":"nope"}"#),
        "path not found: nope",
    );
    assert_tool_error(
        &fx.call("grep", r#"{"pattern":"x","path":".."}"#),
        "path escapes the workspace",
    );
}

#[test]
fn grep_stops_at_200_matches_and_says_so() {
    let fx = Fixture::new();
    let text: String = (0..300).map(|i| format!("match {i}\n")).collect();
    fx.write("many.txt", &text);
    let out = fx.call("grep", r#"{"pattern":"match"}"#);
    assert_ok(&out);
    let lines: Vec<&str> = out.content.lines().collect();
    assert_eq!(lines.len(), 201);
    assert_eq!(lines[199], "many.txt:200:match 199");
    assert!(lines[200].contains("stopped after 200 matches"));
}

#[test]
fn grep_does_not_follow_symlinks_out_of_the_workspace() {
    let fx = Fixture::new();
    std::fs::write(fx.outside().join("outside.txt"), "needle\n").unwrap();
    std::os::unix::fs::symlink(fx.outside(), fx.ws.join("up")).unwrap();
    std::os::unix::fs::symlink(fx.outside().join("outside.txt"), fx.ws.join("f")).unwrap();
    let out = fx.call("grep", r#"{"pattern":"needle"}"#);
    assert!(out.content.starts_with("No matches"), "{}", out.content);
    assert_tool_error(
        &fx.call("grep", r#"{"pattern":"needle","path":"up"}"#),
        "path escapes the workspace",
    );
}

#[test]
fn glob_lists_sorted_paths_respecting_gitignore() {
    let fx = tree();
    let out = fx.call("glob", r#"{"pattern":"**/*.rs"}"#);
    assert_ok(&out);
    assert_eq!(out.content, "src/lib.rs\nsrc/main.rs");
    let out = fx.call("glob", r#"{"pattern":"*.md"}"#);
    assert_eq!(out.content, "README.md");
    let out = fx.call("glob", r#"{"pattern":"*.rs","path":"src"}"#);
    assert_eq!(out.content, "src/lib.rs\nsrc/main.rs");
    let out = fx.call("glob", r#"{"pattern":"./src/*/*.py"}"#);
    assert_eq!(out.content, "src/deep/x.py");
    let out = fx.call("glob", r#"{"pattern":"*.py"}"#);
    assert_ok(&out);
    assert!(
        out.content.contains("use `**/*.py` for every depth"),
        "{}",
        out.content
    );
}

#[test]
fn glob_is_bounded_and_confined() {
    let fx = Fixture::new();
    for i in 0..520 {
        fx.write(&format!("f/{i:04}.txt"), "");
    }
    let out = fx.call("glob", r#"{"pattern":"f/*.txt"}"#);
    let lines: Vec<&str> = out.content.lines().collect();
    assert_eq!(lines.len(), 501);
    assert_eq!(lines[0], "f/0000.txt");
    assert_eq!(lines[499], "f/0499.txt");
    assert_eq!(
        lines[500],
        "[20 more paths not shown; narrow the pattern or path]"
    );
    let out = fx.call_json(
        "glob",
        json!({"pattern": "*", "path": fx.outside().display().to_string()}),
    );
    assert_tool_error(&out, "path escapes the workspace");
    assert_tool_error(
        &fx.call("glob", r#"{"pattern":"a[","path":"f"}"#),
        "invalid glob",
    );
}

#[test]
fn glob_lists_files_of_any_size() {
    let fx = Fixture::new();
    let f = std::fs::File::create(fx.ws.join("big.bin")).unwrap();
    f.set_len(30 * 1024 * 1024).unwrap();
    fx.write("small.txt", "s\n");
    let out = fx.call("glob", r#"{"pattern":"*"}"#);
    assert_ok(&out);
    assert_eq!(out.content, "big.bin\nsmall.txt");
}

#[test]
fn grep_never_reads_through_a_symlink_swapped_in() {
    let fx = Fixture::new();
    fx.write("inside.txt", "inside\n");
    let outside = fx.outside().join("outside.txt");
    std::fs::write(&outside, "OUTSIDE-SECRET\n").unwrap();
    let mut escapes = 0;
    let attempts = race_swaps(&fx.ws, &outside, 2000, |_| {
        let out = fx.call("grep", r#"{"pattern":"SECRET"}"#);
        if out.content.contains("OUTSIDE-SECRET") {
            escapes += 1;
        }
    });
    assert_eq!(
        escapes, 0,
        "{escapes} of {attempts} greps read the outside file"
    );
}

#[test]
fn glob_never_lists_through_a_directory_swapped_for_a_symlink() {
    let fx = Fixture::new();
    let out_dir = fx.outside().join("elsewhere");
    std::fs::create_dir(&out_dir).unwrap();
    std::fs::write(out_dir.join("outside-name.txt"), "x\n").unwrap();
    fx.write("d/inside-name.txt", "x\n");
    let done = std::sync::atomic::AtomicBool::new(false);
    let mut escapes = 0;
    let mut attempts = 0;
    std::thread::scope(|s| {
        s.spawn(|| {
            let (d, l, real) = (fx.ws.join("d"), fx.ws.join(".l"), fx.ws.join(".real"));
            for _ in 0..2000 {
                // d: from the real directory to a link to the outside one...
                std::os::unix::fs::symlink(&out_dir, &l).unwrap();
                std::fs::rename(&d, &real).unwrap();
                std::fs::rename(&l, &d).unwrap();
                // ...and back.
                std::fs::rename(&d, &l).unwrap();
                std::fs::remove_file(&l).unwrap();
                std::fs::rename(&real, &d).unwrap();
            }
            done.store(true, std::sync::atomic::Ordering::SeqCst);
        });
        while !done.load(std::sync::atomic::Ordering::SeqCst) {
            let out = fx.call("glob", r#"{"pattern":"**/*.txt"}"#);
            let grep = fx.call("grep", r#"{"pattern":"x","glob":"*.txt"}"#);
            // The swapped directory as the search root itself.
            let rooted = fx.call("glob", r#"{"pattern":"*","path":"d"}"#);
            if [out, grep, rooted]
                .iter()
                .any(|o| o.content.contains("outside-name"))
            {
                escapes += 1;
            }
            attempts += 1;
        }
    });
    assert_eq!(
        escapes, 0,
        "{escapes} of {attempts} walks listed the outside directory"
    );
}

#[test]
fn grep_and_glob_skip_the_runs_own_files() {
    let mut fx = Fixture::new();
    fx.write("run.wal", "needle log\n");
    fx.write("run.wal.snapshot", "needle snap\n");
    fx.write("run.wal.d/p1.log", "needle out\n");
    fx.write("tinyagent.toml", "# needle\n");
    fx.write("src/a.txt", "needle\n");
    let mut p = tinyagent::exec::protected::Protected::none();
    p.add_log(&fx.ws.join("run.wal"));
    p.add(&fx.ws.join("tinyagent.toml"));
    fx.protected = p;
    assert_eq!(
        fx.call("grep", r#"{"pattern":"needle"}"#).content,
        "src/a.txt:1:needle"
    );
    assert_eq!(
        fx.call("glob", r#"{"pattern":"**/*"}"#).content,
        "src/a.txt"
    );
    let out = fx.call("grep", r#"{"pattern":"needle","path":"run.wal"}"#);
    assert_tool_error(&out, "is one of this run's own files");
    let out = fx.call("glob", r#"{"pattern":"*","path":"run.wal.d"}"#);
    assert_tool_error(&out, "is one of this run's own files");
}
