//! A forged bucket is refused before anything is taken over (contract
//! section 20): a manifest naming a huge log, a checkpoint store file that
//! is not an object or pack (`objects/info/alternates`), and a tree with a
//! bad path each give exit 2 with one line, the manifest and lease as they
//! were, and nothing written on the machine.

use super::replication::{client, run_cmd, run_id, weed};
use crate::support::e2e::{Sandbox, output, stderr};
use crate::support::mock::{MockReply, MockServer};
use object_store::PutMode;
use std::path::Path;
use std::process::Command;

/// A loose object file (zlib, as git stores it) of a tree holding one
/// entry named `name`, and its object path (`objects/ab/cdef…`).
fn loose_tree_object(name: &str) -> (String, Vec<u8>) {
    let repo = tempfile::tempdir().unwrap();
    let git = |args: &[&str], input: Option<&[u8]>| -> Vec<u8> {
        let mut c = Command::new("git");
        c.arg("--git-dir").arg(repo.path()).args(args);
        c.stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped());
        let mut child = c.spawn().unwrap();
        if let Some(i) = input {
            use std::io::Write;
            child.stdin.take().unwrap().write_all(i).unwrap();
        }
        drop(child.stdin.take());
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "git {args:?}");
        out.stdout
    };
    git(&["init", "-q", "--bare"], None);
    let blob = String::from_utf8(git(&["hash-object", "-w", "--stdin"], Some(b"x\n"))).unwrap();
    let mut tree = format!("100644 {name}\0").into_bytes();
    tree.extend(hex_bytes(blob.trim()));
    let id = String::from_utf8(git(
        &["hash-object", "-w", "-t", "tree", "--literally", "--stdin"],
        Some(&tree),
    ))
    .unwrap();
    let id = id.trim();
    let rel = format!("objects/{}/{}", &id[..2], &id[2..]);
    (rel.clone(), std::fs::read(repo.path().join(&rel)).unwrap())
}

fn hex_bytes(h: &str) -> Vec<u8> {
    (0..h.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&h[i..i + 2], 16).unwrap())
        .collect()
}

fn nothing_under(dir: &Path) {
    let left: Vec<_> = std::fs::read_dir(dir)
        .map(|d| d.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "left {left:?} in {}", dir.display());
}

#[test]
fn a_forged_manifest_alternates_or_bad_tree_is_refused_with_nothing_taken_over() {
    let Some(w) =
        weed("a_forged_manifest_alternates_or_bad_tree_is_refused_with_nothing_taken_over")
    else {
        return;
    };
    let url = format!("{}/runs", w.bucket("forged"));
    let server = MockServer::start(vec![
        MockReply::tool_call(
            "write",
            serde_json::json!({"path": "a.txt", "content": "one\n"}),
        ),
        MockReply::text("done"),
        MockReply::text("nothing more"),
    ]);
    let one = Sandbox::new();
    let out = output(run_cmd(&one, w, &server.base_url(), &url, ""));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let id = run_id(&one.wal());
    let bucket = client(w, &url);
    let key = |rel: &str| bucket.url.key(&format!("{id}/{rel}"));
    let (manifest, _) = bucket.get(&key("manifest.json")).unwrap();
    let (lease, _) = bucket.get(&key("lease.json")).unwrap();
    let huge = {
        let mut m: serde_json::Value = serde_json::from_slice(&manifest).unwrap();
        let n = m["segments"].as_array().unwrap().len();
        m["segments"][n - 1]["len"] = serde_json::json!(u64::MAX / 4);
        m["log_len"] = serde_json::json!(u64::MAX / 4);
        serde_json::to_vec(&m).unwrap()
    };
    let (bad_rel, bad_tree) = loose_tree_object("..");
    // Each forgery, what undoes it, and what the refusal says.
    type Forge<'a> = (&'a str, Box<dyn Fn() + 'a>, Box<dyn Fn() + 'a>, &'a str);
    let cases: Vec<Forge> = vec![
        (
            "a huge log_len",
            Box::new(|| {
                bucket
                    .put(&key("manifest.json"), huge.clone(), PutMode::Overwrite)
                    .unwrap();
            }),
            Box::new(|| {
                bucket
                    .put(&key("manifest.json"), manifest.clone(), PutMode::Overwrite)
                    .unwrap();
            }),
            "at most",
        ),
        (
            "alternates",
            Box::new(|| {
                bucket
                    .put(
                        &key("checkpoints/objects/info/alternates"),
                        one.dir
                            .path()
                            .join("objects")
                            .display()
                            .to_string()
                            .into_bytes(),
                        PutMode::Overwrite,
                    )
                    .unwrap();
            }),
            Box::new(|| {
                bucket
                    .delete(&key("checkpoints/objects/info/alternates"))
                    .unwrap()
            }),
            "not a checkpoint object or pack",
        ),
        (
            "a tree with a `..` entry",
            Box::new(|| {
                bucket
                    .put(
                        &key(&format!("checkpoints/{bad_rel}")),
                        bad_tree.clone(),
                        PutMode::Overwrite,
                    )
                    .unwrap();
            }),
            Box::new(|| {
                bucket
                    .delete(&key(&format!("checkpoints/{bad_rel}")))
                    .unwrap()
            }),
            "hasDotdot",
        ),
    ];
    let two = Sandbox::new();
    let run_url = format!("{url}/{id}");
    for (what, forge, undo, says) in &cases {
        let (manifest_before, _) = bucket.get(&key("manifest.json")).unwrap();
        forge();
        let (forged_manifest, _) = bucket.get(&key("manifest.json")).unwrap();
        let out = output(super::replication::resume_cmd(&two, w, &run_url, ""));
        assert_eq!(out.status.code(), Some(2), "{what}: {}", stderr(&out));
        let err = stderr(&out);
        assert_eq!(err.trim().lines().count(), 1, "{what}: one line: {err}");
        assert!(err.contains(says), "{what}: {err}");
        assert!(!err.contains("panicked"), "{what}: {err}");
        // The bucket is as the forgery left it: not taken over.
        assert_eq!(
            bucket.get(&key("manifest.json")).unwrap().0,
            forged_manifest,
            "{what}"
        );
        assert_eq!(bucket.get(&key("lease.json")).unwrap().0, lease, "{what}");
        nothing_under(&two.home().join("runs"));
        nothing_under(&two.ws());
        undo();
        assert_eq!(
            bucket.get(&key("manifest.json")).unwrap().0,
            manifest_before
        );
    }
    // Unforged, the same resume goes on (the refusals were the forgeries').
    let mut c = super::replication::resume_cmd(&two, w, &run_url, "");
    c.arg("--message").arg("and now?");
    let out = output(c);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        std::fs::read_to_string(two.ws().join("a.txt")).unwrap(),
        "one\n"
    );
}
