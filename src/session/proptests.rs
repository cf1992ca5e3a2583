//! Property tests of the fold: random plausible runs (and random junk) never
//! make it panic, replay from a JSON snapshot of any prefix equals the live
//! fold, and totals match the records.

use super::testkit::*;
use super::*;
use crate::event::{Event, Limits, Message, PlanStatus, Role, RunStatus, ToolResult, Usage};
use crate::kinds::PlanPin;
use proptest::prelude::*;

/// One thing that can happen in a generated run.
#[derive(Debug, Clone)]
enum Op {
    /// A model response with calls: (tool index, started, answered, format error).
    Step {
        calls: Vec<(usize, bool, bool, bool)>,
        usage: (u64, u64),
        cost: f64,
        text: String,
    },
    Plan(Vec<u8>),
    Compact {
        keep: usize,
        usage: (u64, u64),
        cost: f64,
    },
    ProcStart,
    ProcExit(usize),
    Resume {
        message: bool,
        max_steps: Option<u64>,
    },
    Finish(u8),
}

const TOOLS: [&str; 4] = ["bash", "read", "update_plan", "grep"];

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (
            prop::collection::vec((0..TOOLS.len(), any::<bool>(), prop::bool::weighted(0.9), prop::bool::weighted(0.2)), 0..4),
            (0u64..5000, 0u64..500),
            0.0f64..0.5,
            "[a-z é\n]{0,12}",
        )
            .prop_map(|(calls, usage, cost, text)| Op::Step { calls, usage, cost, text }),
        2 => prop::collection::vec(0u8..4, 0..6).prop_map(Op::Plan),
        1 => (0usize..4, (0u64..900, 0u64..90), 0.0f64..0.1)
            .prop_map(|(keep, usage, cost)| Op::Compact { keep, usage, cost }),
        1 => Just(Op::ProcStart),
        1 => (0usize..4).prop_map(Op::ProcExit),
        1 => (any::<bool>(), prop::option::of(1u64..100))
            .prop_map(|(message, max_steps)| Op::Resume { message, max_steps }),
        1 => (0u8..5).prop_map(Op::Finish),
    ]
}

/// Turns generated operations into a record sequence the agent could have
/// written: unanswered calls get synthesized results and a resume record
/// before the run goes on.
fn build(pin: Option<PlanPin>, ops: &[Op]) -> Vec<Event> {
    let plan_enabled = pin.is_some();
    let mut events = vec![run_started_pinned(pin)];
    let mut step = 0u64;
    let mut next_call = 0usize;
    let mut procs = 0usize;
    let mut plan_version = 0u64;
    let mut pending: Vec<(String, String)> = Vec::new();
    let mut recent: Vec<Message> = Vec::new();
    for op in ops {
        if !pending.is_empty() && !matches!(op, Op::Plan(_) | Op::ProcStart | Op::ProcExit(_)) {
            let ids: Vec<String> = pending.iter().map(|(id, _)| id.clone()).collect();
            for (id, name) in pending.drain(..) {
                events.push(Event::ToolResult(ToolResult {
                    interrupted: true,
                    ..ToolResult::new(step, &id, &name, "[interrupted]", true)
                }));
                recent.push(Message::tool(&id, &name, "[interrupted]", true));
            }
            events.push(Event::Resume(crate::event::Resume {
                interrupted: ids,
                lost_processes: vec![],
                reattached_processes: Vec::new(),
                notice: "[Resumed] after a crash".into(),
                limits: None,
                message: None,
                stopped_processes: vec![],
                compact_at: None,
                api_key_env: None,
            }));
            recent.push(Message::user("[Resumed] after a crash"));
        }
        match op {
            Op::Step {
                calls,
                usage,
                cost,
                text,
            } => {
                step += 1;
                let made: Vec<_> = calls
                    .iter()
                    .map(|(t, ..)| {
                        next_call += 1;
                        call(&format!("c{next_call}"), TOOLS[*t])
                    })
                    .collect();
                events.push(response(step, text, made.clone(), *usage, *cost));
                recent.push(Message::assistant(text.as_str(), made.clone()));
                for (c, (_, was_started, answered, bad)) in made.iter().zip(calls) {
                    if *was_started || *answered {
                        events.push(started(step, &c.id, &c.name));
                    }
                    if *answered {
                        events.push(result(step, &c.id, &c.name, "out", *bad));
                        recent.push(Message::tool(&c.id, &c.name, "out", *bad));
                    } else {
                        pending.push((c.id.clone(), c.name.clone()));
                    }
                }
                if pending.is_empty() {
                    events.push(saved(step));
                }
            }
            Op::Plan(statuses) if plan_enabled => {
                plan_version += 1;
                let items = statuses
                    .iter()
                    .enumerate()
                    .map(|(n, s)| {
                        let status = match s {
                            0 => PlanStatus::Pending,
                            1 => PlanStatus::InProgress,
                            2 => PlanStatus::Done,
                            _ => PlanStatus::Blocked,
                        };
                        item(&n.to_string(), "do it", status)
                    })
                    .collect();
                events.push(plan_updated(step, plan_version, items, "+ changes"));
            }
            Op::Plan(_) => {}
            Op::Compact { keep, usage, cost } => {
                let kept = recent[recent.len().saturating_sub(*keep)..].to_vec();
                events.push(compaction(step, "summary so far", kept, *usage, *cost));
            }
            Op::ProcStart => {
                procs += 1;
                events.push(process_started(
                    &format!("p{procs}"),
                    1000 + procs as u32,
                    "sleep 60",
                    step,
                ));
            }
            Op::ProcExit(n) => events.push(process_exited(&format!("p{}", n + 1), Some(0))),
            Op::Resume { message, max_steps } => {
                let limits = max_steps.map(|m| Limits {
                    max_steps: Some(m),
                    ..Limits::default()
                });
                let message = message.then_some("carry on");
                events.push(resume("[Resumed] by hand", message, limits));
            }
            Op::Finish(s) => {
                let status = match s {
                    0 => RunStatus::Completed,
                    1 => RunStatus::MaxSteps,
                    2 => RunStatus::MaxCost,
                    3 => RunStatus::FormatErrors,
                    _ => RunStatus::Error,
                };
                events.push(finished(status));
            }
        }
    }
    events
}

/// Random plausible runs (also used by the trajectory round-trip tests).
pub(crate) fn run() -> impl Strategy<Value = Vec<Event>> {
    let pin = prop_oneof![
        Just(None),
        Just(Some(PlanPin::Head)),
        Just(Some(PlanPin::Append))
    ];
    (pin, prop::collection::vec(op(), 0..40)).prop_map(|(pin, ops)| build(pin, &ops))
}

/// The content of the last `[Current plan]` message of `messages`.
fn last_plan(messages: &[Message]) -> Option<&str> {
    messages
        .iter()
        .rev()
        .find(|m| is_plan_message(m))
        .map(|m| m.content.as_str())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn any_prefix_replays_without_panicking(events in run()) {
        let mut live = State::default();
        for (n, e) in events.iter().enumerate() {
            live.apply(e);
            let _ = live.model_messages();
            prop_assert_eq!(live.records, n as u64 + 1);
        }
        prop_assert_eq!(&fold(&events), &live);
    }

    #[test]
    fn snapshot_of_any_prefix_then_tail_equals_the_live_fold(events in run(), cut in any::<prop::sample::Index>()) {
        let k = cut.index(events.len() + 1);
        let live = fold(&events);
        let prefix = fold(&events[..k]);
        let text = serde_json::to_string(&prefix).unwrap();
        let mut restored: State = serde_json::from_str(&text).unwrap();
        prop_assert_eq!(&restored, &prefix);
        // Records come back from the log as JSON too.
        for e in &events[k..] {
            let line = serde_json::to_string(e).unwrap();
            let back: Event = serde_json::from_str(&line).unwrap();
            restored.apply(&back);
        }
        prop_assert_eq!(&restored, &live);
        let text = serde_json::to_string(&live).unwrap();
        let back: State = serde_json::from_str(&text).unwrap();
        prop_assert_eq!(back, live);
    }

    #[test]
    fn totals_and_counters_match_the_records(events in run()) {
        let s = fold(&events);
        let mut usage = Usage::default();
        let mut cost = 0.0;
        let mut messages = 2;
        for e in &events {
            match e {
                Event::ModelResponse(r) => { usage.add(&r.usage); cost += r.cost_usd; messages += 1; }
                Event::Compaction(c) => { usage.add(&c.usage); cost += c.cost_usd; }
                Event::ToolResult(_) => messages += 1,
                Event::Resume(r) => messages += 1 + usize::from(r.message.is_some()),
                _ => {}
            }
        }
        prop_assert_eq!(s.usage, usage);
        prop_assert_eq!(s.cost_usd, cost);
        prop_assert_eq!(s.messages.len(), messages);
        // The view never holds more than the history plus the summary
        // (and the plan's messages).
        let plans = s.view.iter().filter(|m| is_plan_message(m)).count();
        prop_assert!(s.view.len() <= s.messages.len() + 1 + plans);
        prop_assert_eq!(s.view[0].role, Role::System);
        let sent = s.model_messages();
        if s.plan_enabled() {
            let at = if s.compacted() { 2 } else { 1 };
            if s.plan_appended() {
                // The plan is the last plan message, whatever came after.
                let block = s.plan_block();
                prop_assert_eq!(last_plan(&sent), block.as_ref().map(|b| b.content.as_str()));
            } else {
                prop_assert!(sent[at.min(s.view.len())].content.starts_with(plan::BLOCK_HEADER));
            }
        } else {
            prop_assert_eq!(sent, s.view.clone());
        }
    }

    /// With the plan appended, every request is the previous one plus what
    /// was added, except the first after a compaction or a resume; and its
    /// last plan message is the current plan.
    #[test]
    fn appended_plan_requests_only_grow(ops in prop::collection::vec(op(), 0..40)) {
        let events = build(Some(PlanPin::Append), &ops);
        let mut s = State::default();
        let mut last: Option<Vec<Message>> = None;
        for e in &events {
            if matches!(e, Event::Compaction(_) | Event::Resume(_)) {
                last = None;
            }
            if matches!(e, Event::ModelResponse(_)) {
                // The request this response answered.
                let sent = s.model_messages().to_vec();
                if let Some(before) = &last {
                    prop_assert!(sent.len() >= before.len());
                    prop_assert_eq!(&sent[..before.len()], &before[..]);
                }
                let block = s.plan_block();
                prop_assert_eq!(last_plan(&sent), block.as_ref().map(|b| b.content.as_str()));
                // No plan message splits a call from its results.
                for (i, m) in sent.iter().enumerate().skip(1) {
                    let prev = &sent[i - 1];
                    let in_results = prev.role == Role::Tool
                        || (prev.role == Role::Assistant && !prev.tool_calls.is_empty());
                    if is_plan_message(m) && in_results {
                        prop_assert!(sent.get(i + 1).is_none_or(|n| n.role != Role::Tool));
                    }
                }
                last = Some(sent);
            }
            s.apply(e);
        }
    }

    /// Records in any order, most of them out of place: still no panic.
    #[test]
    fn junk_sequences_never_panic(events in run(), order in prop::collection::vec(any::<prop::sample::Index>(), 0..60)) {
        if events.is_empty() { return Ok(()); }
        let mut s = State::default();
        for i in order {
            s.apply(&events[i.index(events.len())]);
            let _ = s.model_messages();
        }
    }
}
