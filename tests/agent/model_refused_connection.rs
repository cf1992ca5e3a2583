//! Contract section 15: "A connection that is refused is not retried for
//! more than 5 seconds in all before exit 1", end to end: the binary, a
//! port nothing listens on and retry settings that would wait over a
//! minute; the run ends with exit 1, `run.finished {status: "error"}`
//! saying the server could not be reached, and the advice to resume.

use crate::support::contract::{self, of_kind};
use crate::support::e2e::{Sandbox, output, stderr};
use std::time::{Duration, Instant};

#[test]
fn a_refused_connection_ends_the_run_exit_1_within_five_seconds_with_its_record() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap()
        .port();
    let sb = Sandbox::new();
    let c = sb.run_cmd(&format!("http://127.0.0.1:{port}/v1"), "say hello");
    // Ten retries from one second: over a minute, were they all made.
    std::fs::write(
        sb.path("tinyagent.toml"),
        "[model]\nmax_retries = 10\nretry_base_ms = 1000\n",
    )
    .unwrap();
    let started = Instant::now();
    let out = output(c);
    let took = started.elapsed();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        took < Duration::from_secs(8),
        "took {took:?}: {}",
        stderr(&out)
    );
    assert!(
        stderr(&out).contains("could not reach the model server"),
        "{}",
        stderr(&out)
    );
    let recs = contract::read(&sb.wal());
    contract::check_write_order(&recs);
    assert!(of_kind(&recs, "model.response").is_empty());
    let finished = of_kind(&recs, "run.finished");
    assert_eq!(finished.len(), 1);
    assert_eq!(finished[0].data["status"], "error");
    assert!(
        finished[0].data["reason"]
            .as_str()
            .is_some_and(|r| r.contains("could not reach the model server")),
        "{}",
        finished[0].data
    );
}
