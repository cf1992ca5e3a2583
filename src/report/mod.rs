//! What a run shows the user: `--json` events on stdout (one object per line,
//! each with an `"event"` member), or a live human view on stderr.
//!
//! Events about a record are emitted only after that record is durable: the
//! loop calls [`Output::record`] after `Store::append` returned, and the
//! events it adds (`checkpoint.saved`, `snapshot.saved`, `resume.*`) follow
//! the records they describe. `hook.ran` is the one event ahead of the log:
//! it is printed when the hook returns (a pre hook's before `tool.started`),
//! and the run it reports is recorded afterwards, in the call's
//! `hook.blocked` or `tool.result`.

mod json;
mod stdio;
mod wording;

pub use json::json_event;
use json::{now_stamp, record_line, round_floats};
pub use stdio::{err_line, err_text, out_line};
pub(crate) use wording::call_preview;
use wording::{home_as_tilde, indent, preview, usage_text};

use crate::event::Event;
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::{Value, json};
use std::cell::RefCell;
use std::io::{IsTerminal, Write};
use std::time::Duration;

/// Turns model text into what the terminal shows, a piece at a time as it
/// streams in (a chat renders Markdown a line at a time).
pub trait TextView: Send {
    /// What to show of `text` now.
    fn chunk(&mut self, text: &str) -> String;
    /// What is left once the text is complete.
    fn finish(&mut self) -> String;
}

/// Where the run's output goes.
#[allow(
    clippy::struct_excessive_bools,
    reason = "independent switches of the output: mode, colour, live text, a streamed step"
)]
pub struct Output {
    json: bool,
    spinner: Option<ProgressBar>,
    streamed: bool,
    /// The step the model is answering (for the streamed text's header).
    step: u64,
    /// Model text is shown as it streams in (`--stream`); otherwise it is
    /// shown with its record (a final answer on stdout).
    live_text: bool,
    /// ANSI colour in human output (`--color`, `NO_COLOR`).
    color: bool,
    /// Members the next `run.finished` event carries (the run's totals).
    totals: RefCell<Option<Value>>,
    /// `--json` lines held back to go out in one write (see [`Output::hold`]).
    held: RefCell<Option<Vec<u8>>>,
    /// How model text is shown (`None`: as it is).
    view: Option<Box<dyn TextView>>,
}

impl Output {
    pub fn new(json: bool) -> Output {
        Output {
            json,
            spinner: None,
            streamed: false,
            step: 0,
            live_text: false,
            color: false,
            totals: RefCell::new(None),
            held: RefCell::new(None),
            view: None,
        }
    }

    /// Shows model text through `view` (human mode).
    pub fn set_text_view(&mut self, view: Box<dyn TextView>) {
        self.view = Some(view);
    }

    /// Whether a running command's progress is shown: human mode, with
    /// stderr on a terminal.
    pub fn live_progress(&self) -> bool {
        !self.json && std::io::stderr().is_terminal()
    }

    /// The totals the `run.finished` event is to carry.
    pub fn set_totals(&self, totals: Value) {
        *self.totals.borrow_mut() = Some(totals);
    }

    /// Colours human output (diffs, marks).
    pub fn set_color(&mut self, on: bool) {
        self.color = on;
    }

    /// `text` in ANSI colour `code` when colour is on.
    fn paint(&self, code: &str, text: &str) -> String {
        if self.color {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_string()
        }
    }

    /// A folded tool result's lines for a person, indented: the first
    /// few, how many are left out (and how to see them), the last few; a
    /// diff's lines coloured.
    fn result_lines(&self, f: &crate::text::Folded, call_id: &str) -> String {
        let mut out = String::new();
        let mut line_out = |line: &str| {
            let line = crate::text::cut_chars(line, crate::text::RESULT_LINE_CHARS, "…");
            let painted = if line.starts_with("@@") {
                self.paint("36", &line)
            } else if line.starts_with('+') && !line.starts_with("+++") {
                self.paint("32", &line)
            } else if line.starts_with('-') && !line.starts_with("---") {
                self.paint("31", &line)
            } else {
                line
            };
            out.push_str(&format!("\n      {painted}"));
        };
        for line in &f.head {
            line_out(line);
        }
        if f.hidden > 0 {
            let more = f.hidden;
            line_out(&self.paint(
                "2",
                &format!(
                    "… {more} more line{} (Ctrl-O or /show {call_id} in a chat, or log show --full)",
                    if more == 1 { "" } else { "s" }
                ),
            ));
        }
        for line in &f.tail {
            line_out(line);
        }
        out
    }

    /// Shows model text as it streams in (see [`Output::text`]).
    pub fn set_live_text(&mut self, on: bool) {
        self.live_text = on;
    }

    /// Holds `--json` lines back until [`Output::release`], which writes
    /// them in one `write`: the events of one sync point go out together
    /// (each a write of its own would wake whoever reads them once per
    /// line). Only events about durable records are held, and only for as
    /// long as it takes to format them.
    pub fn hold(&self) {
        if self.json {
            *self.held.borrow_mut() = Some(Vec::new());
        }
    }

    /// Writes what [`Output::hold`] held, best effort.
    pub fn release(&self) {
        let held = self.held.borrow_mut().take();
        if let Some(lines) = held.filter(|l| !l.is_empty()) {
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(&lines);
            let _ = out.flush();
        }
    }

    /// Prints one JSON event line on stdout (json mode only).
    pub fn event(&self, name: &str, mut body: Value) {
        if !self.json {
            return;
        }
        if let Value::Object(map) = &mut body {
            map.insert("event".into(), Value::String(name.into()));
        } else {
            body = json!({ "event": name, "data": body });
        }
        if let Value::Object(map) = &mut body {
            if name == "run.finished"
                && let Some(Value::Object(totals)) = self.totals.borrow_mut().take()
            {
                map.extend(totals);
            }
            map.entry("ts")
                .or_insert_with(|| Value::String(now_stamp()));
        }
        round_floats(&mut body);
        // Serialized straight into bytes (the same JSON `Display` prints,
        // without going through the formatter a piece at a time).
        let mut line = serde_json::to_vec(&body).unwrap_or_default();
        line.push(b'\n');
        self.emit(&line);
    }

    /// Writes one `--json` line: into what [`Output::hold`] holds, or to
    /// stdout at once.
    fn emit(&self, line: &[u8]) {
        if let Some(lines) = self.held.borrow_mut().as_mut() {
            lines.extend_from_slice(line);
            return;
        }
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(line);
        let _ = out.flush();
    }

    /// A human line on stderr (human mode only).
    pub fn say(&self, line: &str) {
        if self.json {
            return;
        }
        self.suspend(|| err_line(line));
    }

    /// A warning: shown in both modes (stderr).
    pub fn warn(&self, line: &str) {
        self.suspend(|| err_line(&format!("warning: {line}")));
    }

    fn suspend(&self, f: impl FnOnce()) {
        match &self.spinner {
            Some(sp) => sp.suspend(f),
            None => f(),
        }
    }

    /// Starts the "model is thinking" spinner (human mode, terminals only).
    pub fn thinking(&mut self, step: u64) {
        self.streamed = false;
        self.step = step;
        if self.json {
            return;
        }
        let sp = ProgressBar::new_spinner();
        sp.set_style(
            ProgressStyle::with_template("{spinner} step {msg} · thinking {elapsed}")
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        );
        sp.set_message(step.to_string());
        sp.enable_steady_tick(Duration::from_millis(100));
        self.spinner = Some(sp);
    }

    /// Streamed model text as it arrives (human mode, `--stream`; without
    /// it the text comes in one piece and is shown with its record).
    pub fn text(&mut self, chunk: &str) {
        if !self.live_text {
            return;
        }
        if self.json {
            // `--json --stream`: the text as it arrives, before its record.
            self.event("model.delta", json!({ "step": self.step, "text": chunk }));
            return;
        }
        if let Some(sp) = self.spinner.take() {
            sp.finish_and_clear();
        }
        if !self.streamed && self.view.is_none() {
            err_text(&format!("step {} · ", self.step));
        }
        self.streamed = true;
        match self.view.as_mut() {
            Some(v) => err_text(&v.chunk(chunk)),
            None => err_text(chunk),
        }
    }

    pub fn done_thinking(&mut self) {
        if let Some(sp) = self.spinner.take() {
            sp.finish_and_clear();
        }
        if self.streamed && !self.json {
            if let Some(v) = self.view.as_mut() {
                err_text(&v.finish());
            }
            err_text("\n");
        }
    }

    /// Reports a durable record: the matching `--json` event, or a human line.
    pub fn record(&mut self, seq: u64, event: &Event) {
        self.logged(seq, event, None);
    }

    /// [`Output::record`] of a record with its line in the log (`logged`,
    /// as the writer framed it): the `--json` event then takes the record's
    /// data from that line instead of serialising the record again.
    fn logged(&mut self, seq: u64, event: &Event, logged: Option<&[u8]>) {
        if self.json {
            if let Some(line) = record_line(seq, event, logged) {
                self.emit(&line);
            } else if let Some((name, body)) = json_event(seq, event) {
                self.event(name, body);
            }
        } else {
            self.human(event);
        }
    }

    /// Prints a sync point: the events of its durable records in order
    /// (each from its line in the log, `lines`, see [`Output::logged`]),
    /// each followed by the events that waited for it (`waiting`: the seq
    /// each is about, name, body), then the waiting ones left, all in one
    /// write. Whether a plan update was among the records.
    pub fn sync_point<'a>(
        &mut self,
        flushed: &[(u64, Event)],
        lines: impl Iterator<Item = &'a [u8]>,
        waiting: impl IntoIterator<Item = (u64, String, Value)>,
    ) -> bool {
        let mut plan_changed = false;
        let mut waiting = waiting.into_iter().peekable();
        let mut lines = lines.map(Some).chain(std::iter::repeat(None));
        self.hold();
        for (seq, event) in flushed {
            self.logged(*seq, event, lines.next().flatten());
            plan_changed |= matches!(event, Event::PlanUpdated(_));
            while let Some((_, name, body)) = waiting.next_if(|(s, _, _)| s <= seq) {
                self.event(&name, body);
            }
        }
        for (_, name, body) in waiting {
            self.event(&name, body);
        }
        self.release();
        plan_changed
    }

    #[allow(
        clippy::match_same_arms,
        reason = "one arm per record kind, in the vocabulary's order"
    )]
    fn human(&mut self, event: &Event) {
        match event {
            // The first line: what acts where, and how freely.
            Event::RunStarted(r) => self.say(&format!(
                "tinyagent · run {} · {} ({}) · workspace {} · approvals {} · env {}{}",
                r.run_id,
                r.model,
                r.provider,
                home_as_tilde(&r.settings.cwd),
                match r.settings.approve.unwrap_or_default() {
                    crate::kinds::ApproveMode::Never => "never (nothing is asked)",
                    crate::kinds::ApproveMode::Mutating => "mutating",
                },
                match r.settings.env.unwrap_or_default() {
                    crate::kinds::EnvKind::Local => "local (no sandbox)",
                    crate::kinds::EnvKind::Sandbox => "sandbox",
                    crate::kinds::EnvKind::Container => "container",
                },
                if r.plan_enabled { " · plan on" } else { "" }
            )),
            Event::ModelResponse(r) => {
                let text = r.message.content.trim();
                // A reply cut at the output limit is no answer.
                let cut = r.stop_reason == Some(crate::event::StopReason::MaxTokens);
                let answer = r.message.tool_calls.is_empty() && !text.is_empty() && !cut;
                // What the step's request read from the prompt cache and
                // what it did not, then its cost when prices are known.
                let cost = format!(
                    "{}{}",
                    usage_text(&r.usage),
                    if r.cost_usd > 0.0 {
                        format!(" · ${:.4}", r.cost_usd)
                    } else {
                        String::new()
                    }
                );
                if answer {
                    // The final answer: on stdout, whole, so `run … >
                    // answer.md` captures it. Streamed to a terminal that is
                    // also stdout, it is on the screen already.
                    // Streamed, the text had its header already.
                    if !self.streamed {
                        self.say(&format!("step {}{cost} · answer", r.step));
                    }
                    if !(self.streamed && std::io::stdout().is_terminal()) {
                        let shown = match self.view.as_mut() {
                            Some(v) => format!("{}{}", v.chunk(text), v.finish()),
                            None => text.to_string(),
                        };
                        self.suspend(|| out_line(&shown));
                    }
                } else if self.streamed {
                    // Streamed plain, the step was named before its text:
                    // only its cost follows.
                    if self.view.is_none() && r.cost_usd > 0.0 {
                        self.say(&format!("  cost ${:.4}", r.cost_usd));
                    } else if !cost.is_empty() {
                        self.say(&format!("step {}{cost}", r.step));
                    }
                } else if !text.is_empty() {
                    self.say(&format!("step {}{cost} · {text}", r.step));
                } else {
                    self.say(&format!("step {}{cost}", r.step));
                }
                for c in &r.message.tool_calls {
                    self.say(&format!("  → {}", call_preview(&c.name, &c.arguments)));
                }
            }
            Event::ToolStarted(_) => {}
            Event::ToolResult(r) => {
                let mark = if r.interrupted {
                    "⚠"
                } else if r.is_error {
                    "✗"
                } else {
                    "✓"
                };
                let mark = match mark {
                    "✓" => self.paint("32", mark),
                    "✗" => self.paint("31", mark),
                    other => self.paint("33", other),
                };
                let f = crate::text::fold_result(&r.content);
                let exit = f
                    .exit_code
                    .map(|c| format!(" · exit {c}"))
                    .unwrap_or_default();
                let first = r.content.trim().lines().next().unwrap_or("");
                // The plan itself follows with its record.
                if (f.lines <= 1 && f.exit_code.is_none())
                    || (r.name == "update_plan" && !r.is_error)
                {
                    self.say(&format!(
                        "    {mark} {}",
                        preview(first, crate::text::RESULT_LINE_CHARS)
                    ));
                } else {
                    self.say(&format!(
                        "    {mark} {} {}{exit} ({} line{}){}",
                        r.name,
                        r.call_id,
                        f.lines,
                        if f.lines == 1 { "" } else { "s" },
                        self.result_lines(&f, &r.call_id)
                    ));
                }
            }
            Event::PlanUpdated(p) => {
                let plan = crate::session::Plan {
                    version: p.version,
                    items: p.items.clone(),
                    note: p.note.clone(),
                    updated_step: p.step,
                };
                self.say(&format!(
                    "  plan v{}:\n{}",
                    p.version,
                    indent(&crate::session::plan::render(Some(&plan)))
                ));
            }
            Event::Compaction(c) if c.failed => self
                .say("  the summarizer gave no summary: nothing compacted (its cost is recorded)"),
            Event::Compaction(c) => self.say(&format!(
                "  compacted {} messages into a summary ({} kept)",
                c.replaced,
                c.view.len().saturating_sub(1)
            )),
            Event::HookBlocked(h) => self.say(&format!(
                "    ⛔ {} blocked {}: {}",
                h.hook, h.call_id, h.reason
            )),
            Event::ProcessStarted(p) => self.say(&format!(
                "    ↳ background {} pid {}: {}",
                p.id, p.pid, p.command
            )),
            Event::ProcessExited(p) => self.say(&format!(
                "    ↳ background {} exited ({})",
                p.id,
                p.exit_code
                    .map(|c| c.to_string())
                    .unwrap_or_else(|| "signal".into())
            )),
            Event::StepSaved(_) => {}
            Event::Resume(r) => self.say(&format!("resumed:\n{}", indent(&r.notice))),
            // An error's reason is the last line the command prints, with
            // what to do next: not said twice.
            Event::RunFinished(f) => self.say(&format!(
                "finished: {}{}",
                f.status.as_str(),
                f.reason
                    .as_ref()
                    .filter(|_| f.status != crate::event::RunStatus::Error)
                    .map(|r| format!(" ({r})"))
                    .unwrap_or_default()
            )),
            // The starting state (no call) changed nothing; neither did a
            // call whose checkpoint lists no path.
            Event::WorkspaceCheckpoint(c)
                if c.call_id.is_none() || (c.changed_count == 0 && c.oversized.is_empty()) => {}
            Event::WorkspaceCheckpoint(c) => self.say(&format!(
                "    ⎘ checkpoint {}: {} path{} changed{}",
                &c.tree[..c.tree.len().min(12)],
                c.changed_count,
                if c.changed_count == 1 { "" } else { "s" },
                if c.oversized.is_empty() {
                    String::new()
                } else {
                    format!(
                        " ({} over the size cap, recorded by hash only)",
                        c.oversized.len()
                    )
                }
            )),
            // The person typed it: not echoed.
            Event::WorkspaceRestored(r) if r.undo => self.say(&format!(
                "    ⎌ restore to step {} undone: {} path{} put back, {} conflict{}",
                r.step,
                r.paths.len(),
                if r.paths.len() == 1 { "" } else { "s" },
                r.conflicts.len(),
                if r.conflicts.len() == 1 { "" } else { "s" }
            )),
            Event::WorkspaceRestored(r) => self.say(&format!(
                "    ⎌ workspace restored to step {}: {} path{} changed, {} conflict{}",
                r.step,
                r.paths.len(),
                if r.paths.len() == 1 { "" } else { "s" },
                r.conflicts.len(),
                if r.conflicts.len() == 1 { "" } else { "s" }
            )),
            Event::UserMessage(_) | Event::ChatWaiting(_) => {}
            // On a terminal the question itself shows the call, once.
            Event::ApprovalRequested(_) if std::io::stdin().is_terminal() => {}
            Event::ApprovalRequested(a) => self.say(&format!(
                "    ? approval asked for {} ({}): {}",
                a.call_id, a.tool, a.preview
            )),
            Event::SettingsChanged(c) => self.say(&format!("settings: {}", c.shown())),
            Event::CompactionRequested(_) => {
                self.say("the history is compacted before the next request");
            }
            Event::ApprovalDecided(d) => self.say(&format!(
                "    {} {} by {}{}",
                d.decision.shown(),
                d.call_id,
                d.by,
                d.reason
                    .as_deref()
                    .map(|r| format!(" ({r})"))
                    .unwrap_or_default()
            )),
        }
    }
}

#[cfg(test)]
mod tests;
