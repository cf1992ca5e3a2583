//! `tinyagent sessions`: the runs of this workspace (or all), newest first
//! (the list itself is [`crate::inspect::runs`]).

use super::CliError;
use crate::inspect::runs::list;
use std::io::Write;

/// `tinyagent sessions [--all] [--json]`.
///
/// # Errors
/// No home to look in, or stdout closed.
pub fn sessions(all: bool, json: bool, out: &mut dyn Write) -> Result<i32, CliError> {
    let home = crate::launch::parts::home()?;
    let here = std::env::current_dir()
        .map_err(|e| CliError::new(1, format!("no current directory: {e}")))?;
    let rows = list(&home, (!all).then_some(here.as_path()));
    let io = |e: std::io::Error| CliError::new(1, format!("cannot write the list: {e}"));
    if json {
        serde_json::to_writer(&mut *out, &rows).map_err(|e| CliError::new(1, e.to_string()))?;
        writeln!(out).map_err(io)?;
        return Ok(0);
    }
    if rows.is_empty() {
        let whose = if all {
            String::new()
        } else {
            format!(" of {}", here.display())
        };
        writeln!(
            out,
            "no runs{whose} under {} (`tinyagent sessions --all` lists every workspace's)",
            home.join("runs").display()
        )
        .map_err(io)?;
        return Ok(0);
    }
    for s in &rows {
        let (when, task) = (
            crate::text::shown_time(s.started_at.as_deref()),
            crate::text::shown_task(s.task.as_deref()),
        );
        writeln!(
            out,
            "{:<22} {when}  {:<11} {:>4} steps  {:>7}  {task}",
            s.run_id.as_deref().unwrap_or("?"),
            s.status,
            s.steps,
            if s.cost_known {
                format!("${:.4}", s.cost_usd)
            } else {
                "$?".to_string()
            }
        )
        .map_err(io)?;
        let mut place = match (&s.error, all, &s.workspace) {
            (Some(e), _, _) => format!("unreadable: {e}"),
            (None, true, Some(ws)) => format!("in {ws}"),
            _ => String::new(),
        };
        if let Some(c) = &s.container {
            if !place.is_empty() {
                place.push_str("  ");
            }
            place.push_str(&format!("container {} ({})", c.name, c.state));
        }
        if let Some(why) = &s.failed_to_start {
            if !place.is_empty() {
                place.push_str("  ");
            }
            place.push_str(&format!("failed before its first model response: {why}"));
        }
        if let Some(w) = &s.waiting {
            if !place.is_empty() {
                place.push_str("  ");
            }
            place.push_str(&format!("waiting for {}", w.line(&s.log)));
        }
        writeln!(
            out,
            "    {}{}{place}",
            s.log,
            if place.is_empty() { "" } else { "  " }
        )
        .map_err(io)?;
    }
    Ok(0)
}
