//! `tinyagent approve <WAL> <CALL_ID> [--deny --reason TEXT]`: the answer
//! to a run's waiting approval question, from another process.
//!
//! This process never writes the log: it checks that the call waits for an
//! answer (reading the log as `log inspect` does), then leaves the answer in
//! the run's channel directory (see [`crate::agent::approval`]); the run
//! that waits (or the next resume) reads it and records `approval.decided`.

use super::CliError;
use super::args::ApproveArgs;
use crate::agent::approval::{Answer, write_answer};
use crate::event::Decision;
use crate::session::ApprovalMark;
use std::os::unix::fs::MetadataExt;

/// `tinyagent approve`.
pub fn approve(args: &ApproveArgs) -> Result<i32, CliError> {
    let wal = &args.wal;
    let meta =
        std::fs::metadata(wal).map_err(|e| CliError::refused(format!("{}: {e}", wal.display())))?;
    if !meta.is_file() {
        return Err(CliError::refused(format!(
            "{}: not a log file",
            wal.display()
        )));
    }
    let me = nix::unistd::geteuid().as_raw();
    if meta.uid() != me {
        return Err(CliError::refused(format!(
            "{}: only the log's owner (uid {}) can answer its questions",
            wal.display(),
            meta.uid()
        )));
    }
    if args.reason.as_deref().is_some_and(|r| r.len() > 4096) {
        return Err(CliError::refused("--reason is longer than 4096 bytes"));
    }
    let report =
        crate::inspect::read_report(wal).map_err(|e| CliError::refused(format!("{e:#}")))?;
    let Some(call) = report.pending_calls.iter().find(|c| c.id == args.call_id) else {
        let waiting: Vec<&str> = report
            .pending_calls
            .iter()
            .filter(|c| c.awaiting_approval())
            .map(|c| c.id.as_str())
            .collect();
        return Err(CliError::refused(format!(
            "{}: no pending call {:?}{}",
            wal.display(),
            args.call_id,
            if waiting.is_empty() {
                "; no call waits for approval".to_string()
            } else {
                format!("; waiting for approval: {}", waiting.join(", "))
            }
        )));
    };
    match &call.approval {
        Some(ApprovalMark::Requested { .. }) => {}
        Some(ApprovalMark::Decided { decision, by, .. }) => {
            return Err(CliError::refused(format!(
                "{}: call {} was decided already ({} by {by})",
                wal.display(),
                call.id,
                decision.as_str()
            )));
        }
        None => {
            return Err(CliError::refused(format!(
                "{}: call {} is not waiting for approval",
                wal.display(),
                call.id
            )));
        }
    }
    let decision = if args.deny {
        Decision::Deny
    } else {
        Decision::Allow
    };
    let answer = Answer {
        step: call.step,
        call_id: call.id.clone(),
        decision,
        reason: args.reason.clone().filter(|r| !r.trim().is_empty()),
    };
    write_answer(wal, &answer).map_err(|e| {
        if e.kind() == std::io::ErrorKind::AlreadyExists {
            CliError::refused(format!("{}: call {}: {e}", wal.display(), call.id))
        } else {
            CliError::new(1, format!("cannot leave the answer: {e}"))
        }
    })?;
    let when = if report.live {
        "the run records it now"
    } else {
        "no process runs this log now: `tinyagent resume` records it"
    };
    super::say(&format!(
        "{} {} ({}); {when}",
        if args.deny { "denied" } else { "allowed" },
        call.id,
        call.name
    ));
    Ok(0)
}
