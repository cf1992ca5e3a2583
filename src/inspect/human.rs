//! The human form of `log inspect`: an aligned key/value header, one integrity
//! line, then small tables for pending calls and processes and the plan with
//! status markers. Everything fits on one screen for a normal run.

use super::Report;
use crate::event::PlanStatus;
use crate::session::plan::marker;
use crate::text::first_line;
use std::io::{self, Write};

/// `12_345_678` -> `12,345,678`.
pub fn group(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn row(out: &mut dyn Write, key: &str, value: &str) -> io::Result<()> {
    writeln!(out, "{key:<10} {value}")
}

fn or_dash(v: &Option<String>) -> &str {
    v.as_deref().filter(|s| !s.is_empty()).unwrap_or("-")
}

fn integrity(r: &Report) -> String {
    let head = format!("{} records, {} bytes", group(r.records), group(r.bytes));
    if let Some(c) = &r.corruption {
        format!(
            "{head}: CORRUPT at record seq {} (byte {}): {}; reading stopped there",
            c.seq,
            group(c.offset),
            c.reason
        )
    } else if let Some(t) = &r.torn_tail {
        format!(
            "{head}: torn tail of {} bytes at byte {} (a live writer may be mid-record; resume or `log repair` cuts it)",
            group(t.bytes),
            group(t.offset)
        )
    } else {
        format!("{head}: clean")
    }
}

fn limits(r: &Report) -> String {
    let steps = r
        .limits
        .max_steps
        .map_or("unlimited".to_string(), |n| n.to_string());
    let cost = r
        .limits
        .max_cost_usd
        .map_or("unlimited".to_string(), |c| format!("${c:.2}"));
    format!(
        "steps {steps}, cost {cost}, format errors {}",
        r.limits.max_format_errors
    )
}

fn header(r: &Report, out: &mut dyn Write) -> io::Result<()> {
    row(out, "log", &r.path)?;
    let schema = r
        .schema_version
        .map_or(String::new(), |v| format!("  (schema {v})"));
    row(out, "run", &format!("{}{schema}", or_dash(&r.run_id)))?;
    row(
        out,
        "task",
        &first_line(r.task.as_deref().unwrap_or("-"), 70),
    )?;
    let via = match &r.base_url {
        Some(url) if !url.is_empty() => format!(" at {url}"),
        _ => String::new(),
    };
    row(
        out,
        "model",
        &format!("{} via {}{via}", or_dash(&r.model), or_dash(&r.provider)),
    )?;
    let liveness = if r.live {
        " (live: a process holds the log)"
    } else if r.status == "running" {
        " (stopped: no process holds the log; `tinyagent resume` continues it)"
    } else {
        ""
    };
    let mut status = format!(
        "{}{liveness}  step {} (saved {}), {} messages",
        r.status, r.steps, r.saved_step, r.messages
    );
    if r.read_only {
        status.push_str(", read-only");
    }
    row(out, "status", &status)?;
    if let Some(w) = &r.waiting {
        row(out, "waiting for", &w.line(&r.path))?;
    }
    if let Some(ws) = &r.workspace {
        row(out, "workspace", ws)?;
    }
    if let Some(start) = &r.started_at {
        let mut when = format!("started {start}");
        if let Some(end) = &r.last_write_at {
            when.push_str(&format!(", last written {end}"));
        }
        if let Some(d) = r.duration_s {
            when.push_str(&format!(" ({d} s)"));
        }
        row(out, "time", &when)?;
    }
    if let Some(t) = &r.step_times {
        row(
            out,
            "steps",
            &format!(
                "{} timed: median {:.2} s, p90 {:.2} s, slowest step {} ({:.2} s)",
                t.steps, t.median_s, t.p90_s, t.slowest_step, t.max_s
            ),
        )?;
    }
    row(out, "integrity", &integrity(r))?;
    if let Some(c) = &r.container {
        row(
            out,
            "container",
            &format!(
                "{} ({}, {})",
                c.name,
                c.engine.as_deref().unwrap_or("-"),
                c.state
            ),
        )?;
    }
    let snapshot = r.snapshot.as_ref().map_or("none".to_string(), |s| {
        format!("seq {} ({})", group(s.seq), s.path)
    });
    row(out, "snapshot", &snapshot)?;
    row(
        out,
        "usage",
        &format!(
            "{} in{} / {} out tokens, {}",
            group(r.usage.input_tokens),
            if r.usage.cached_input_tokens + r.usage.cache_write_tokens > 0 {
                format!(
                    " (+{} cached, +{} written to the cache)",
                    group(r.usage.cached_input_tokens),
                    group(r.usage.cache_write_tokens)
                )
            } else {
                String::new()
            },
            group(r.usage.output_tokens),
            if r.usage.cost_known {
                format!("${:.4}", r.usage.cost_usd)
            } else {
                "$?".to_string()
            }
        ),
    )?;
    cache(r, out)?;
    if r.context_tokens > 0 {
        row(
            out,
            "context",
            &format!("{} tokens in the latest request", group(r.context_tokens)),
        )?;
    }
    row(out, "limits", &limits(r))?;
    for w in &r.warnings {
        row(out, "warning", w)?;
    }
    row(
        out,
        "events",
        &format!(
            "{} compactions, {} hooks blocked, {} resumes, {} format errors in a row",
            r.compactions, r.hooks_blocked, r.resumes, r.format_errors
        ),
    )?;
    hooks(r, out)
}

/// What the prompt cache did: the share of input it served, each kind's
/// cost, and the latest steps' input read from it and not.
fn cache(r: &Report, out: &mut dyn Write) -> io::Result<()> {
    let u = &r.usage;
    let all = u.input_tokens + u.cached_input_tokens + u.cache_write_tokens;
    if all == 0 {
        return Ok(());
    }
    let mut line = format!(
        "{}% of input read from the cache",
        u.cached_input_tokens * 100 / all
    );
    if let Some(c) = &u.cost_by_kind {
        line.push_str(&format!(
            " · input ${:.4} · cached ${:.4} · written ${:.4} · output ${:.4}",
            c.input_usd, c.cached_input_usd, c.cache_write_usd, c.output_usd
        ));
    }
    row(out, "cache", &line)?;
    for s in &u.last_steps {
        let cost = if u.cost_known {
            format!(" · ${:.4}", s.cost_usd)
        } else {
            String::new()
        };
        row(
            out,
            "",
            &format!(
                "step {}: {} in, {} cached, {} written / {} out{cost}",
                s.step,
                group(s.input_tokens),
                group(s.cached_input_tokens),
                group(s.cache_write_tokens),
                group(s.output_tokens)
            ),
        )?;
    }
    Ok(())
}

fn hooks(r: &Report, out: &mut dyn Write) -> io::Result<()> {
    let h = &r.hooks;
    if h.runs == 0 {
        return Ok(());
    }
    row(
        out,
        "hooks",
        &format!(
            "{} runs: {} allowed, {} blocked, {} failed",
            h.runs, h.allow, h.block, h.failed
        ),
    )?;
    for run in &h.recent {
        let detail = run
            .detail
            .as_deref()
            .map(|d| format!(": {}", first_line(d, 60)))
            .unwrap_or_default();
        writeln!(
            out,
            "{:<10}   step {} {} {} {} -> {}{detail}",
            "", run.step, run.call_id, run.tool, run.hook, run.outcome
        )?;
    }
    Ok(())
}

/// A column's width in bytes: its widest cell or its heading.
fn width<'a>(heading: &str, cells: impl Iterator<Item = &'a str>) -> usize {
    cells.map(str::len).fold(heading.len(), usize::max)
}

fn pending(r: &Report, out: &mut dyn Write) -> io::Result<()> {
    if r.pending_calls.is_empty() {
        return Ok(());
    }
    writeln!(out, "\npending calls ({})", r.pending_calls.len())?;
    let w = width("ID", r.pending_calls.iter().map(|c| c.id.as_str()));
    let n = width("NAME", r.pending_calls.iter().map(|c| c.name.as_str()));
    // The approval column only for a run that asked about a call.
    let asked = r.pending_calls.iter().any(|c| c.approval.is_some());
    writeln!(
        out,
        "  {:<w$}  {:<n$}  {:>5}  STARTED{}",
        "ID",
        "NAME",
        "STEP",
        if asked { "  APPROVAL" } else { "" }
    )?;
    for c in &r.pending_calls {
        let started = if c.started { "yes" } else { "no" };
        let approval = match &c.approval {
            _ if !asked => String::new(),
            None => "  -".to_string(),
            Some(crate::session::ApprovalMark::Requested { .. }) => "  waiting".to_string(),
            Some(crate::session::ApprovalMark::Decided { decision, by, .. }) => {
                format!("  {} by {by}", decision.as_str())
            }
        };
        let started = if asked {
            format!("{started:<7}")
        } else {
            started.to_string()
        };
        writeln!(
            out,
            "  {:<w$}  {:<n$}  {:>5}  {started}{approval}",
            c.id, c.name, c.step
        )?;
    }
    Ok(())
}

fn plan(r: &Report, out: &mut dyn Write) -> io::Result<()> {
    let Some(plan) = &r.plan else {
        return Ok(());
    };
    let done = plan
        .items
        .iter()
        .filter(|i| i.status == PlanStatus::Done)
        .count();
    writeln!(
        out,
        "\nplan v{} ({} of {} done, updated in step {})",
        plan.version,
        done,
        plan.items.len(),
        plan.updated_step
    )?;
    for item in &plan.items {
        writeln!(
            out,
            "  {} {}  {}",
            marker(item.status),
            item.id,
            first_line(&item.text, 70)
        )?;
    }
    if let Some(note) = plan.note.as_deref().filter(|n| !n.is_empty()) {
        writeln!(out, "  note: {}", first_line(note, 70))?;
    }
    Ok(())
}

fn processes(r: &Report, out: &mut dyn Write) -> io::Result<()> {
    if r.processes.is_empty() {
        return Ok(());
    }
    writeln!(out, "\nprocesses ({})", r.processes.len())?;
    let w = width("ID", r.processes.iter().map(|p| p.id.as_str()));
    writeln!(
        out,
        "  {:<w$}  {:>7}  {:<12}  COMMAND",
        "ID", "PID", "STATE"
    )?;
    for p in &r.processes {
        let state = match (p.running, p.exit_code, p.signal) {
            (true, _, _) => "running".to_string(),
            (false, None, None) if p.lost => "lost".to_string(),
            (false, Some(code), _) => format!("exited {code}"),
            (false, None, Some(sig)) => format!("signal {sig}"),
            (false, None, None) => "exited".to_string(),
        };
        writeln!(
            out,
            "  {:<w$}  {:>7}  {:<12}  {}",
            p.id,
            p.pid,
            state,
            first_line(&p.command, 60)
        )?;
    }
    Ok(())
}

fn checkpoints(r: &Report, out: &mut dyn Write) -> io::Result<()> {
    let c = &r.checkpoints;
    if let Some(f) = &r.forked_from {
        writeln!(
            out,
            "\nforked from run {} at step {} (seq {})",
            f.run_id, f.step, f.seq
        )?;
    }
    if c.count == 0 {
        return Ok(());
    }
    writeln!(out, "\ncheckpoints ({}) in {}", c.count, c.store)?;
    writeln!(
        out,
        "  {:>5}  {:<20}  {:<12}  CHANGED",
        "STEP", "CALL", "TREE"
    )?;
    for step in &c.steps {
        for m in &step.checkpoints {
            let oversized = if m.oversized > 0 {
                format!(" ({} over the size cap)", m.oversized)
            } else {
                String::new()
            };
            let walk = m
                .walk
                .as_deref()
                .map_or_else(String::new, |w| format!(" [{w}]"));
            writeln!(
                out,
                "  {:>5}  {:<20}  {:<12}  {}{oversized}{walk}",
                step.step,
                m.call_id.as_deref().unwrap_or("-"),
                &m.tree[..m.tree.len().min(12)],
                m.changed_count
            )?;
        }
    }
    Ok(())
}

/// Writes the whole human report.
pub fn render(r: &Report, out: &mut dyn Write) -> io::Result<()> {
    header(r, out)?;
    pending(r, out)?;
    plan(r, out)?;
    processes(r, out)?;
    checkpoints(r, out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_thousands() {
        assert_eq!(group(0), "0");
        assert_eq!(group(999), "999");
        assert_eq!(group(1000), "1,000");
        assert_eq!(group(12_345_678), "12,345,678");
    }
}
