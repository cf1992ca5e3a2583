//! Tests of the restore plan: directories and files replacing each other, only
//! plain relative paths planned, a path already as wanted is done and one
//! edited since is a conflict.

use super::*;

#[test]
fn a_file_the_run_put_where_a_directory_was_goes_before_its_files_come_back() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    std::fs::write(ws.join("sub"), b"a file now\n").unwrap();
    let e = |b: &[u8]| {
        Some(Entry {
            mode: "100644".into(),
            id: hex(&object_id(Kind::Blob, b)),
        })
    };
    let changes = vec![
        Change {
            path: "sub".into(),
            want: None,
            expect: e(b"a file now\n"),
        },
        Change {
            path: "sub/x".into(),
            want: e(b"x\n"),
            expect: None,
        },
    ];
    let none = crate::exec::protected::Protected::none();
    let p = plan(ws, &changes, &none, &[], &|_| false, false);
    assert_eq!(p.delete, vec!["sub".to_string()]);
    assert_eq!(p.restore, vec!["sub/x".to_string()]);
    assert!(p.conflicts.is_empty(), "{:?}", p.conflicts);
}

#[test]
fn only_plain_relative_paths_are_planned() {
    assert!(sane("a/b.txt"));
    assert!(!sane("../x"));
    assert!(!sane("/etc/passwd"));
    assert!(!sane("a/.git/config"));
    assert!(!sane(""));
}

#[test]
fn a_path_already_as_wanted_is_done_and_another_edit_is_a_conflict() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    std::fs::write(ws.join("done.txt"), b"old\n").unwrap();
    std::fs::write(ws.join("mine.txt"), b"person\n").unwrap();
    std::fs::write(ws.join("run.txt"), b"run\n").unwrap();
    let e = |b: &[u8]| {
        Some(Entry {
            mode: "100644".into(),
            id: hex(&object_id(Kind::Blob, b)),
        })
    };
    let changes = vec![
        Change {
            path: "done.txt".into(),
            want: e(b"old\n"),
            expect: e(b"new\n"),
        },
        Change {
            path: "mine.txt".into(),
            want: e(b"old\n"),
            expect: e(b"run\n"),
        },
        Change {
            path: "run.txt".into(),
            want: None,
            expect: e(b"run\n"),
        },
    ];
    let none = crate::exec::protected::Protected::none();
    let p = plan(ws, &changes, &none, &[], &|_| false, false);
    assert_eq!(p.done, 1);
    assert_eq!(p.delete, vec!["run.txt".to_string()]);
    assert_eq!(
        p.conflicts,
        vec![Conflict {
            path: "mine.txt".into(),
            why: "changed since the run's last checkpoint".into()
        }]
    );
    let forced = plan(ws, &changes, &none, &[], &|_| false, true);
    assert_eq!(forced.restore, vec!["mine.txt".to_string()]);
    assert!(forced.conflicts.is_empty());
}
