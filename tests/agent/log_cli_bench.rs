//! `bench save` with tiny lengths and samples: it runs on real files with real
//! fsyncs, prints sane JSON or a table, and cleans up. No timing assertions.

use serde_json::Value;
use tinyagent::bench::bench_save;
use tinyagent::cli::args::BenchSaveArgs;

fn args(dir: &std::path::Path, json: bool) -> BenchSaveArgs {
    BenchSaveArgs {
        json,
        lengths: vec![4, 40],
        samples: 3,
        output_bytes: 500,
        dir: Some(dir.to_path_buf()),
    }
}

#[test]
fn json_mode_prints_one_sane_object_per_length_and_cleans_up() {
    let dir = tempfile::tempdir().unwrap();
    let (mut out, mut err) = (Vec::new(), Vec::new());
    assert_eq!(
        bench_save(&args(dir.path(), true), &mut out, &mut err).unwrap(),
        0
    );
    let text = String::from_utf8(out).unwrap();
    let rows: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 2, "{text}");
    for (row, messages) in rows.iter().zip([4, 40]) {
        assert_eq!(row["messages"], messages);
        assert_eq!(row["samples"], 3);
        for key in [
            "log_append_us",
            "raw_fdatasync_us",
            "checkpoint_fsync_us",
            "checkpoint_nofsync_us",
            "log_append_p90_us",
            "raw_fdatasync_p90_us",
            "checkpoint_fsync_p90_us",
            "checkpoint_nofsync_p90_us",
            "log_over_raw",
            "checkpoint_over_log",
        ] {
            let x = row[key].as_f64().unwrap_or(-1.0);
            assert!(x > 0.0 && x.is_finite(), "{key} = {} in {row}", row[key]);
        }
        let median = row["log_append_us"].as_f64().unwrap();
        assert!(
            row["log_append_p90_us"].as_f64().unwrap() >= median,
            "{row}"
        );
        // One event is a tool result of 500 bytes plus its framing.
        let event = row["event_bytes"].as_u64().unwrap();
        assert!((500..800).contains(&event), "{row}");
    }
    // The whole-file checkpoint grows with the run; the event does not (only
    // its seq and call id get longer).
    assert!(rows[1]["checkpoint_bytes"].as_u64() > rows[0]["checkpoint_bytes"].as_u64());
    let (a, b) = (
        rows[0]["event_bytes"].as_i64(),
        rows[1]["event_bytes"].as_i64(),
    );
    assert!(a.zip(b).is_some_and(|(a, b)| (a - b).abs() < 16), "{text}");
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "scratch files left behind"
    );
}

#[test]
fn table_mode_prints_a_row_per_length() {
    let dir = tempfile::tempdir().unwrap();
    let (mut out, mut err) = (Vec::new(), Vec::new());
    assert_eq!(
        bench_save(&args(dir.path(), false), &mut out, &mut err).unwrap(),
        0
    );
    let text = String::from_utf8(out).unwrap();
    assert!(
        text.lines()
            .any(|l| l.contains("messages") && l.contains("log append")),
        "{text}"
    );
    for n in ["4", "40"] {
        assert!(
            text.lines().any(|l| l.split_whitespace().next() == Some(n)),
            "no row for {n}: {text}"
        );
    }
}

#[test]
fn nothing_to_measure_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut a = args(dir.path(), true);
    a.samples = 0;
    let (mut out, mut err) = (Vec::new(), Vec::new());
    assert_eq!(bench_save(&a, &mut out, &mut err).unwrap(), 2);
    assert!(out.is_empty());
}
