//! The scripted model of the kill torture: a long task of numbered turns whose
//! reply depends only on what the request already contains, so a resumed run
//! gets exactly the turn that follows the last one its log holds.
//!
//! Every call id is `tq<turn>x<i>`. The turn a request is at is the largest
//! turn number found anywhere in its messages (assistant calls, tool results,
//! the compaction summary, the resume notice), plus one. The summarizer
//! (a request without tools) answers a summary that names that largest turn,
//! so compaction never makes the script forget where it was.

use crate::support::mock::{MockReply, RecordedRequest};
use serde_json::{Value, json};

/// Usage of a summarizer reply.
pub const SUMMARY_USAGE: (u64, u64) = (40, 6);

/// The shape of one scripted task.
#[derive(Debug, Clone, Copy)]
pub struct Script {
    /// Turns with tool calls; turn `turns + 1` answers the final text.
    pub turns: u64,
    /// Unique marker put in every background command (to kill leftovers).
    pub marker: u64,
}

/// One tool call of the script.
#[derive(Debug, Clone)]
pub struct Call {
    pub id: String,
    pub name: &'static str,
    pub args: Value,
}

/// What a finished call must have left behind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    /// One line `<id>` in `ledger.txt`.
    Ledger,
    /// One line `<id>` in `bg-ledger.txt` (background process).
    BgLedger,
    /// `w/<id>.txt` holds `<id>`.
    File,
    /// The plan: these (id, text, status) items.
    Plan(Vec<(String, String, String)>),
}

impl Script {
    /// The calls of turn `n` (1-based), with the side effect each proves.
    pub fn calls(&self, n: u64) -> Vec<(Call, Effect)> {
        let mut out = Vec::new();
        let count = 1 + (n * 7 % 3); // 1..=3 calls per turn
        for i in 0..count {
            let id = format!("tq{n}x{i}");
            let kind = (n * 5 + i * 3) % 8;
            let sleep = ((n * 37 + i * 11) % 30) as f64 / 100.0; // 0.00..0.29 s
            let (name, args, effect) = match kind {
                0 | 4 if i == 0 && n.is_multiple_of(4) => {
                    ("update_plan", plan_args(n), Effect::Plan(plan_items(n)))
                }
                1 if n + 2 <= self.turns => (
                    "bash",
                    json!({"command": format!("echo {id} >> bg-ledger.txt; sleep 1.5; : torture-bg-{}", self.marker),
                           "background": true}),
                    Effect::BgLedger,
                ),
                2 | 5 => (
                    "write",
                    json!({"path": format!("w/{id}.txt"), "content": id}),
                    Effect::File,
                ),
                _ => (
                    "bash",
                    json!({"command": format!("sleep {sleep:.2}; echo {id} >> ledger.txt; echo ran {id}")}),
                    Effect::Ledger,
                ),
            };
            out.push((Call { id, name, args }, effect));
        }
        out
    }

    /// The reply to `req`: a summary for the summarizer, the next turn's
    /// calls, or the final answer.
    pub fn reply(&self, req: &RecordedRequest) -> MockReply {
        let last = last_turn(req);
        // Prompt tokens as a server would count them, about a quarter of
        // the body's bytes, so the compaction decision sees real sizes.
        let prompt = serde_json::to_vec(&req.body).map_or(0, |b| b.len() as u64 / 4);
        if req.is_summary() {
            return MockReply::text(&format!("[torture summary] work done up to turn tq{last}x"))
                .with_usage(SUMMARY_USAGE.0, SUMMARY_USAGE.1);
        }
        let n = last + 1;
        if n > self.turns {
            return MockReply::text("all turns done").with_usage(prompt, 3);
        }
        let calls = self.calls(n);
        let ids: Vec<&str> = calls.iter().map(|(c, _)| c.id.as_str()).collect();
        MockReply::tool_calls(
            calls
                .iter()
                .map(|(c, _)| (c.name, c.args.clone()))
                .collect(),
        )
        .with_ids(&ids)
        .with_usage(prompt + n, 10 + n % 7)
    }

    /// The call with this id, if the script has it.
    pub fn find(&self, id: &str) -> Option<(Call, Effect)> {
        let n: u64 = id.strip_prefix("tq")?.split('x').next()?.parse().ok()?;
        self.calls(n).into_iter().find(|(c, _)| c.id == id)
    }
}

fn plan_items(n: u64) -> Vec<(String, String, String)> {
    let statuses = ["pending", "in_progress", "done", "blocked"];
    (0..(2 + n % 3))
        .map(|k| {
            (
                format!("p{k}"),
                format!("step {k} as of turn {}", n / 4),
                statuses[((n / 4 + k) % 4) as usize].to_string(),
            )
        })
        .collect()
}

fn plan_args(n: u64) -> Value {
    let items: Vec<Value> = plan_items(n)
        .into_iter()
        .map(|(id, text, status)| json!({"id": id, "text": text, "status": status}))
        .collect();
    json!({"items": items, "note": format!("revision {}", n / 4)})
}

/// The largest `tq<N>x` found in the request's messages (0 when none).
pub fn last_turn(req: &RecordedRequest) -> u64 {
    let text = serde_json::to_string(req.messages()).unwrap_or_default();
    let mut best = 0;
    for (at, _) in text.match_indices("tq") {
        let digits: String = text[at + 2..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        if text[at + 2 + digits.len()..].starts_with('x')
            && let Ok(n) = digits.parse::<u64>()
        {
            best = best.max(n);
        }
    }
    best
}
