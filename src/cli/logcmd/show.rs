//! `tinyagent log show <WAL>`: the run as a person reads it: the task, each
//! step's text, calls and results (folded to a few lines), plan updates,
//! compactions, resumes and the end, with the time of each step.
//!
//! It streams: every record is printed as the reader gives it, so a log of
//! any length is shown in the memory of one record. On a terminal the text
//! goes through `$PAGER` (default `less -FRX`); elsewhere it is written as
//! is. A damaged log is shown up to where reading stopped, and says so.

use super::CliError;
use crate::event::Event;
use std::io::{IsTerminal, Write};
use std::path::Path;

/// Lines of a tool result shown before the rest is folded.
const RESULT_LINES: usize = 6;
/// Characters of one shown line.
const LINE_CHARS: usize = 200;

fn cut(line: &str) -> String {
    crate::text::cut_chars(line, LINE_CHARS, "…")
}

/// `text` indented, at most `max` lines, the rest counted.
fn folded(out: &mut dyn Write, text: &str, indent: &str, max: usize) -> std::io::Result<()> {
    let lines: Vec<&str> = text.lines().collect();
    for line in lines.iter().take(max) {
        writeln!(out, "{indent}{}", cut(line))?;
    }
    if lines.len() > max {
        let more = lines.len() - max;
        writeln!(
            out,
            "{indent}… {more} more line{}",
            if more == 1 { "" } else { "s" }
        )?;
    }
    Ok(())
}

/// `2026-12-01T16:05:53.123Z` -> `16:05:53`.
fn clock(ts: &str) -> &str {
    ts.get(11..19).unwrap_or(ts)
}

fn record(out: &mut dyn Write, ts: &str, event: &Event, full: bool) -> std::io::Result<()> {
    match event {
        Event::RunStarted(r) => {
            writeln!(
                out,
                "run {} · {} ({}) · started {ts}",
                r.run_id, r.model, r.provider
            )?;
            writeln!(out, "workspace {}", r.settings.cwd)?;
            if let Some(f) = &r.forked_from {
                writeln!(out, "forked from {} at step {}", f.run_id, f.step)?;
            }
            writeln!(out, "\ntask:")?;
            folded(out, &r.task, "  ", 40)?;
        }
        Event::ModelResponse(r) => {
            writeln!(out, "\nstep {} · {}", r.step, clock(ts))?;
            if !r.message.content.trim().is_empty() {
                folded(out, r.message.content.trim(), "  ", 60)?;
            }
            for c in &r.message.tool_calls {
                writeln!(out, "  → {} {}", c.name, cut(&c.arguments))?;
            }
        }
        Event::ToolResult(r) => {
            let mark = if r.interrupted {
                "⚠ interrupted"
            } else if r.is_error {
                "✗ error"
            } else {
                "✓"
            };
            let f = crate::text::fold(&r.content, RESULT_LINES, RESULT_LINES);
            let exit = f
                .exit_code
                .map(|c| format!(" · exit {c}"))
                .unwrap_or_default();
            writeln!(
                out,
                "  {mark} {} {}{exit} ({} line{})",
                r.name,
                r.call_id,
                f.lines,
                if f.lines == 1 { "" } else { "s" }
            )?;
            if full {
                for line in r.content.lines() {
                    writeln!(out, "    {line}")?;
                }
            } else {
                for line in &f.head {
                    writeln!(out, "    {}", cut(line))?;
                }
                if f.hidden > 0 {
                    writeln!(
                        out,
                        "    … {} more line{} (log show --full shows them)",
                        f.hidden,
                        if f.hidden == 1 { "" } else { "s" }
                    )?;
                }
                for line in &f.tail {
                    writeln!(out, "    {}", cut(line))?;
                }
            }
        }
        // The update_plan result above shows the plan itself.
        Event::PlanUpdated(p) => writeln!(out, "  ◇ plan v{} recorded", p.version)?,
        Event::Compaction(c) if !c.failed => {
            writeln!(
                out,
                "\ncompacted at step {} ({} messages summarized):",
                c.step, c.replaced
            )?;
            folded(out, &c.summary, "  ", 12)?;
        }
        Event::HookBlocked(h) => {
            writeln!(
                out,
                "  ⛔ {} blocked {}: {}",
                h.hook,
                h.call_id,
                cut(&h.reason)
            )?;
        }
        Event::ProcessStarted(p) => {
            writeln!(out, "  ↳ background {} started: {}", p.id, cut(&p.command))?;
        }
        Event::ProcessExited(p) => {
            let how = p
                .exit_code
                .map_or_else(|| "by a signal".to_string(), |c| format!("with {c}"));
            writeln!(out, "  ↳ background {} exited {how}", p.id)?;
        }
        Event::Resume(r) => {
            writeln!(out, "\nresumed · {}", clock(ts))?;
            folded(out, &r.notice, "  ", 20)?;
            if let Some(m) = &r.message {
                writeln!(out, "  new message:")?;
                folded(out, m, "    ", 20)?;
            }
        }
        Event::RunFinished(f) => {
            let why = f
                .reason
                .as_deref()
                .map(|r| format!(" ({r})"))
                .unwrap_or_default();
            writeln!(out, "\nfinished: {}{why} · {ts}", f.status.as_str())?;
        }
        Event::WorkspaceCheckpoint(c) if c.changed_count > 0 => {
            writeln!(
                out,
                "  ◇ checkpoint: {} file{} changed",
                c.changed_count,
                if c.changed_count == 1 { "" } else { "s" }
            )?;
        }
        Event::WorkspaceRestored(r) if r.undo => {
            writeln!(
                out,
                "  ⎌ restore to step {} undone (restore --undo): {} path{} put back, {} left as \
                 they were",
                r.step,
                r.paths.len(),
                if r.paths.len() == 1 { "" } else { "s" },
                r.conflicts.len()
            )?;
        }
        Event::WorkspaceRestored(r) => {
            writeln!(
                out,
                "  ⎌ workspace restored to step {}: {} path{} changed, {} left as they were",
                r.step,
                r.paths.len(),
                if r.paths.len() == 1 { "" } else { "s" },
                r.conflicts.len()
            )?;
        }
        Event::UserMessage(m) => {
            writeln!(out, "\nyou ({}) · {}:", m.source, clock(ts))?;
            folded(out, &m.content, "  ", 20)?;
        }
        Event::ChatWaiting(w) => {
            if let Some(sig) = &w.interrupted {
                writeln!(out, "  turn interrupted ({sig})")?;
            }
        }
        Event::ApprovalRequested(a) => {
            writeln!(out, "  ? approval asked for {} {}", a.tool, cut(&a.preview))?;
        }
        Event::ApprovalDecided(d) => {
            let why = d
                .reason
                .as_deref()
                .map(|r| format!(": {}", cut(r)))
                .unwrap_or_default();
            writeln!(
                out,
                "  {} {} by {}{why}",
                d.decision.shown(),
                d.call_id,
                d.by
            )?;
        }
        Event::SettingsChanged(c) => {
            writeln!(out, "  settings changed by {}: {}", c.by, c.shown())?
        }
        Event::CompactionRequested(c) => writeln!(out, "  compaction asked for by {}", c.by)?,
        Event::Compaction(_)
        | Event::ToolStarted(_)
        | Event::StepSaved(_)
        | Event::WorkspaceCheckpoint(_) => {}
    }
    Ok(())
}

/// Writes the transcript of `wal` to `out`.
///
/// # Errors
/// The log cannot be read at all, or `out` fails.
pub fn transcript(wal: &Path, out: &mut dyn Write, full: bool) -> Result<(), CliError> {
    let mut failed = None;
    let scan = tinyagent_store::wal::reader::scan::<Event>(wal, None, |frame, _| {
        if failed.is_none()
            && let Err(e) = record(out, &frame.ts, &frame.event, full)
        {
            failed = Some(e);
        }
    })
    .map_err(|e| CliError::refused(format!("{}: {e}", wal.display())))?;
    if scan.records == 0 {
        return Err(CliError::refused(format!(
            "{}: no valid record: not a log",
            wal.display()
        )));
    }
    let tail = if let Some(c) = &scan.corruption {
        format!(
            "\n[the log is corrupt at seq {} (byte {}): {}; the rest is not shown]",
            c.seq, c.offset, c.reason
        )
    } else if let Some(t) = &scan.torn_tail {
        format!(
            "\n[a torn last record of {} bytes is not shown (a live writer may be mid-record)]",
            t.bytes
        )
    } else {
        String::new()
    };
    if !tail.is_empty()
        && let Err(e) = writeln!(out, "{tail}")
    {
        failed.get_or_insert(e);
    }
    match failed {
        Some(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(CliError::new(
            1,
            format!("cannot write the transcript: {e}"),
        )),
        _ => Ok(()),
    }
}

/// `tinyagent log show <WAL>`: paged on a terminal.
///
/// # Errors
/// See [`transcript`].
pub fn show(wal: &Path, full: bool) -> Result<i32, CliError> {
    if std::io::stdout().is_terminal() {
        let pager = std::env::var("PAGER")
            .ok()
            .filter(|p| !p.trim().is_empty())
            .unwrap_or_else(|| "less -FRX".into());
        let mut words = pager.split_whitespace();
        if let Some(program) = words.next()
            && let Ok(mut child) = std::process::Command::new(program)
                .args(words)
                .stdin(std::process::Stdio::piped())
                .spawn()
        {
            let result = match child.stdin.take() {
                Some(mut stdin) => transcript(wal, &mut stdin, full),
                None => Ok(()),
            };
            let _ = child.wait();
            return result.map(|()| 0);
        }
    }
    transcript(wal, &mut std::io::stdout().lock(), full).map(|()| 0)
}
