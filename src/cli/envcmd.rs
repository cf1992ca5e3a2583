//! `tinyagent env prune`: removes the containers of the container
//! environment that nothing will use again.
//!
//! Every container tinyagent starts is named `tinyagent-<run_id>` and
//! labelled with its log's path ([`crate::exec::container::WAL_LABEL`]).
//! One goes when its log is gone, is not a log of that run, or says the run
//! finished; a run whose log says it is still running (live, or crashed and
//! waiting for a resume) keeps its container. Containers with the name but
//! no label are not tinyagent's to judge and are left.

use super::CliError;
use super::args::EnvPruneArgs;
use crate::exec::container;
use std::path::Path;

/// Why a container may go, or `None` when its run may still use it.
fn prune_reason(name: &str, wal: &Path) -> Option<String> {
    if !wal.exists() {
        return Some(format!("its log {} is gone", wal.display()));
    }
    match crate::inspect::read_report(wal) {
        Ok(report) => {
            let ours = report
                .run_id
                .as_deref()
                .is_some_and(|id| container::container_name(id) == name);
            if !ours {
                Some(format!("{} is not the log of its run", wal.display()))
            } else if report.status == "running" {
                None
            } else {
                Some(format!("its run is {}", report.status))
            }
        }
        // A log that cannot be read is kept with its container: the
        // person may repair it and resume.
        Err(_) => None,
    }
}

/// `tinyagent env prune`.
pub fn prune(args: &EnvPruneArgs) -> Result<i32, CliError> {
    let (engine, binary) = container::find_engine(args.engine).map_err(CliError::refused)?;
    let all = container::list_containers(&binary)
        .map_err(|e| CliError::new(1, format!("{engine}: cannot list containers: {e}")))?;
    let mut failed = false;
    for (name, wal) in all {
        let Some(wal) = wal else {
            super::say(&format!(
                "kept {name}: it has no {} label",
                container::WAL_LABEL
            ));
            continue;
        };
        match prune_reason(&name, &wal) {
            Some(why) => match container::remove(&binary, &name) {
                Ok(()) => println!("removed {name} ({why})"),
                Err(e) => {
                    failed = true;
                    super::say(&format!("could not remove {name}: {e}"));
                }
            },
            None => super::say(&format!(
                "kept {name}: its run may be resumed ({})",
                wal.display()
            )),
        }
    }
    Ok(i32::from(failed))
}
