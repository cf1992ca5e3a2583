//! A realistic synthetic run for the benchmarks: a system prompt, a task, then
//! steps of one assistant tool call and one tool output of a few KB, as the
//! log records them (`model.response`, `tool.started`, `tool.result`,
//! `step.saved`) and as a whole-file trajectory JSON holds them.
//!
//! Everything is deterministic (a fixed seed), so two runs of the benchmark
//! save the same bytes.

use crate::event::{
    Compaction, Event, Limits, Message, ModelResponse, RunSettings, RunStarted, SCHEMA_VERSION,
    StepSaved, ToolCall, ToolResult, ToolStarted, Usage,
};
use serde::Serialize;
use tinyagent_store::wal::frame;

/// Timestamp written into benchmark records (its length is what matters).
pub const TS: &str = "2026-01-01T00:00:00.000000Z";

const WORDS: &[&str] = &[
    "src/agent/loop.rs",
    "fn",
    "let",
    "match",
    "Ok(())",
    "error:",
    "warning:",
    "test",
    "passed",
    "->",
    "self.state",
    "cargo",
    "build",
    "Compiling",
    "tinyagent",
    "=>",
    "0x7f3a",
    "return",
    "impl",
    "String",
];

/// Text of exactly `bytes` bytes that looks like compiler or grep output.
pub fn tool_output(rng: &mut fastrand::Rng, bytes: usize) -> String {
    let mut out = String::with_capacity(bytes + 32);
    while out.len() < bytes {
        let line_no = rng.u32(1..2000);
        out.push_str(&format!("src/module_{}.rs:{line_no}:", rng.u32(0..64)));
        for _ in 0..rng.usize(4..12) {
            out.push(' ');
            out.push_str(WORDS[rng.usize(0..WORDS.len())]);
        }
        out.push('\n');
    }
    out.truncate(bytes);
    out
}

/// A run of about `messages` messages, in both of its persisted forms.
pub struct SyntheticRun {
    /// The records a log of this run holds, `run.started` first.
    pub events: Vec<Event>,
    /// The conversation as a trajectory file holds it.
    pub messages: Vec<Message>,
    pub steps: u64,
    /// The "one more event" every method saves: a tool result of the same size.
    pub next: Event,
    /// The message `next` adds to the conversation.
    pub next_message: Message,
}

fn run_started() -> RunStarted {
    RunStarted {
        schema_version: SCHEMA_VERSION,
        run_id: "bench".into(),
        task: "Find why the integration tests fail and fix it.".into(),
        model: "bench-model".into(),
        provider: crate::config::ProviderKind::Script,
        base_url: None,
        plan_enabled: false,
        read_only: false,
        tool_signature: "bench".into(),
        tools: vec!["bash".into(), "read".into(), "write".into()],
        mcp_tools: Vec::new(),
        limits: Limits::default(),
        forked_from: None,
        system_prompt: "You are a careful coding agent.".into(),
        settings: RunSettings::default(),
    }
}

impl SyntheticRun {
    /// Builds a run of `messages` messages (at least 2: system prompt and
    /// task), tool outputs of `output_bytes` bytes.
    pub fn new(messages: u64, output_bytes: usize) -> SyntheticRun {
        Self::build(messages, output_bytes, None)
    }

    /// Like [`SyntheticRun::new`], with a `compaction` record every
    /// `every_steps` steps that keeps the last four messages, the way a long
    /// real run stays under its compaction threshold.
    pub fn compacting(messages: u64, output_bytes: usize, every_steps: u64) -> SyntheticRun {
        Self::build(messages, output_bytes, Some(every_steps.max(1)))
    }

    fn build(messages: u64, output_bytes: usize, compact_every: Option<u64>) -> SyntheticRun {
        let mut rng = fastrand::Rng::with_seed(7);
        let started = run_started();
        let mut msgs = vec![
            Message::system(started.system_prompt.clone()),
            Message::user(started.task.clone()),
        ];
        let mut events = vec![Event::RunStarted(started)];
        let steps = messages.saturating_sub(2) / 2;
        let mut total = Usage::default();
        for step in 1..=steps {
            let id = format!("call_{step}");
            let args = format!(
                "{{\"command\":\"cargo test --test suite_{} -- --nocapture\"}}",
                rng.u32(0..100)
            );
            let call = ToolCall {
                id: id.clone(),
                name: "bash".into(),
                arguments: args,
            };
            let assistant = Message::assistant("Running the failing suite.", vec![call]);
            let usage = Usage {
                input_tokens: 1000 + step * 800,
                output_tokens: 60,
                ..Usage::default()
            };
            total.add(&usage);
            events.push(Event::ModelResponse(ModelResponse {
                context_tokens: 0,
                request_bytes: 0,
                stop_reason: None,
                stop_reason_raw: None,
                step,
                message: assistant.clone(),
                usage,
                cost_usd: 0.001,
                pending: vec![id.clone()],
            }));
            events.push(Event::ToolStarted(ToolStarted {
                step,
                call_id: id.clone(),
                name: "bash".into(),
                process: None,
            }));
            let content = tool_output(&mut rng, output_bytes);
            events.push(Event::ToolResult(ToolResult::new(
                step,
                &id,
                "bash",
                content.clone(),
                false,
            )));
            events.push(Event::StepSaved(StepSaved {
                step,
                usage_total: total,
                cost_usd_total: 0.001 * step as f64,
            }));
            msgs.push(assistant);
            msgs.push(Message::tool(&id, "bash", content, false));
            if compact_every.is_some_and(|n| step % n == 0) {
                let summary =
                    format!("Steps 1 to {step}: ran the failing suites, read their output.");
                let mut view = vec![Message::user(format!(
                    "[Summary of earlier work]\n{summary}"
                ))];
                view.extend_from_slice(&msgs[msgs.len() - 4..]);
                events.push(Event::Compaction(Compaction {
                    context_tokens: 0,
                    step,
                    summary,
                    view,
                    plan_version: 0,
                    usage: Usage {
                        input_tokens: 5000,
                        output_tokens: 300,
                        ..Usage::default()
                    },
                    cost_usd: 0.002,
                    replaced: 0,
                    failed: false,
                }));
            }
        }
        let content = tool_output(&mut rng, output_bytes);
        let next_id = format!("call_{}", steps + 1);
        let next = Event::ToolResult(ToolResult::new(
            steps + 1,
            &next_id,
            "bash",
            content.clone(),
            false,
        ));
        SyntheticRun {
            events,
            messages: msgs,
            steps,
            next,
            next_message: Message::tool(&next_id, "bash", content, false),
        }
    }

    /// The framed log bytes of `events`, exactly as the writer lays them out.
    pub fn log_bytes(&self) -> Result<Vec<u8>, serde_json::Error> {
        let mut out = Vec::new();
        let mut prev = 0;
        for (i, ev) in self.events.iter().enumerate() {
            prev = frame::encode(i as u64 + 1, prev, TS, ev, &mut out)?;
        }
        Ok(out)
    }

    /// The framed line of `next` as record `events.len() + 1`.
    pub fn next_line(&self) -> Result<Vec<u8>, serde_json::Error> {
        let mut out = Vec::new();
        frame::encode(self.events.len() as u64 + 1, 0, TS, &self.next, &mut out)?;
        Ok(out)
    }

    /// The whole-file trajectory of this run plus `next_message`, the way the
    /// old design saved it after every event.
    pub fn trajectory(&self) -> Trajectory<'_> {
        Trajectory {
            schema_version: 2,
            run_id: "bench",
            task: "Find why the integration tests fail and fix it.",
            model: "bench-model",
            messages: &self.messages,
            next: &self.next_message,
            pending_calls: Vec::new(),
            usage: UsageTotals {
                input_tokens: 0,
                output_tokens: 0,
                cost_usd: 0.001 * self.steps as f64,
            },
            steps: self.steps,
            format_errors: 0,
        }
    }
}

#[derive(Serialize)]
pub struct UsageTotals {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cost_usd: f64,
}

/// A whole-file trajectory (schema v2's main members) of the history plus
/// one new message, serialised without copying the history.
pub struct Trajectory<'a> {
    pub schema_version: u32,
    pub run_id: &'a str,
    pub task: &'a str,
    pub model: &'a str,
    pub messages: &'a [Message],
    pub next: &'a Message,
    pub pending_calls: Vec<String>,
    pub usage: UsageTotals,
    pub steps: u64,
    pub format_errors: u32,
}

impl Trajectory<'_> {
    /// Serialises the trajectory, history plus the new message, as compact JSON.
    pub fn to_json(&self, out: &mut Vec<u8>) -> Result<(), serde_json::Error> {
        #[derive(Serialize)]
        struct Whole<'b> {
            schema_version: u32,
            run_id: &'b str,
            task: &'b str,
            model: &'b str,
            messages: Chain<'b>,
            pending_calls: &'b [String],
            usage: &'b UsageTotals,
            steps: u64,
            format_errors: u32,
        }
        struct Chain<'b>(&'b [Message], &'b Message);
        impl Serialize for Chain<'_> {
            fn serialize<S: serde::Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
                ser.collect_seq(self.0.iter().chain(std::iter::once(self.1)))
            }
        }
        out.clear();
        serde_json::to_writer(
            &mut *out,
            &Whole {
                schema_version: self.schema_version,
                run_id: self.run_id,
                task: self.task,
                model: self.model,
                messages: Chain(self.messages, self.next),
                pending_calls: &self.pending_calls,
                usage: &self.usage,
                steps: self.steps,
                format_errors: self.format_errors,
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builds_the_asked_number_of_messages_and_sizes() {
        let run = SyntheticRun::new(100, 3000);
        assert_eq!(run.messages.len(), 100);
        assert_eq!(run.events.len(), 1 + 49 * 4);
        let mut json = Vec::new();
        run.trajectory().to_json(&mut json).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&json).unwrap();
        assert_eq!(v["messages"].as_array().unwrap().len(), 101);
        assert_eq!(v["schema_version"], 2);
        assert!(json.len() > 100 * 1500);
        assert_eq!(
            tool_output(&mut fastrand::Rng::with_seed(1), 3000).len(),
            3000
        );
    }
}
