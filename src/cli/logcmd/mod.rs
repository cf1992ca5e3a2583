//! `tinyagent log ...`: inspect, verify, repair, export, import, diff.

mod show;

use super::CliError;
use super::args::LogCommand;
use crate::inspect;
use crate::store;
use std::path::Path;

fn export(wal: &Path, output: Option<&Path>) -> Result<i32, CliError> {
    let loaded = store::load(wal)?;
    if let Some(c) = &loaded.scan.corruption {
        return Err(CliError::new(
            2,
            format!(
                "{}: corrupt at seq {} (byte offset {}): {}; refusing to export part of a run",
                wal.display(),
                c.seq,
                c.offset,
                c.reason
            ),
        ));
    }
    let doc = crate::trajectory::export_v2(&loaded.state);
    let text = serde_json::to_string_pretty(&doc)
        .map_err(|e| CliError::new(1, format!("cannot serialise the trajectory: {e}")))?;
    match output {
        Some(path) => {
            if path == wal {
                return Err(CliError::refused("the output must not be the log itself"));
            }
            tinyagent_store::fsutil::atomic_write(path, format!("{text}\n").as_bytes())
                .map_err(|e| CliError::new(1, format!("cannot write {}: {e}", path.display())))?;
            crate::report::err_line(&format!("wrote {}", path.display()));
        }
        None => crate::report::out_line(&text),
    }
    Ok(0)
}

fn import(json: &Path, output: &Path) -> Result<i32, CliError> {
    let background = crate::launch::trajectory::import_trajectory(json, output)?;
    crate::report::err_line(&format!(
        "imported {} into {}",
        json.display(),
        output.display()
    ));
    if let Some(bg) = background {
        crate::report::err_line(&format!(
            "background processes from the earlier run (not tracked): {bg}"
        ));
    }
    Ok(0)
}

/// Runs one `log` subcommand.
pub fn log(cmd: LogCommand) -> Result<i32, CliError> {
    let (mut out, mut err) = (std::io::stdout(), std::io::stderr());
    match cmd {
        // A file that cannot be read as a log is refused input, as for
        // `log verify`.
        LogCommand::Inspect { wal, json } => {
            inspect::inspect(&wal, json, &mut out).map_err(|e| CliError::refused(format!("{e:#}")))
        }
        LogCommand::Verify { wal } => Ok(inspect::verify(&wal, &mut err)?),
        LogCommand::Repair { wal } => Ok(inspect::repair(&wal, &mut err)?),
        LogCommand::Export { wal, output } => export(&wal, output.as_deref()),
        LogCommand::Show { wal, full } => show::show(&wal, full),
        LogCommand::Import { json, output } => import(&json, &output),
        LogCommand::Diff { wal, step, call } => {
            crate::launch::fork::diff(&wal, step, call.as_deref()).map_err(CliError::from)
        }
    }
}
