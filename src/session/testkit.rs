//! Builders for records, shared by the fold's and the trajectory's tests.

use crate::event::*;

pub fn run_started(plan_enabled: bool) -> Event {
    run_started_pinned(plan_enabled.then_some(crate::kinds::PlanPin::Head))
}

/// A run with the plan where `pin` says (`None`: no plan).
pub fn run_started_pinned(pin: Option<crate::kinds::PlanPin>) -> Event {
    let plan_enabled = pin.is_some();
    Event::RunStarted(RunStarted {
        schema_version: SCHEMA_VERSION,
        run_id: "r1".into(),
        task: "fix the bug".into(),
        model: "m".into(),
        provider: crate::config::ProviderKind::Script,
        base_url: None,
        plan_enabled,
        read_only: false,
        tool_signature: "sig".into(),
        tools: vec!["bash".into(), "read".into()],
        mcp_tools: Vec::new(),
        limits: Limits {
            max_steps: Some(20),
            max_cost_usd: Some(1.5),
            max_format_errors: 3,
        },
        forked_from: None,
        system_prompt: "you are an agent".into(),
        settings: RunSettings {
            plan_pin: pin,
            ..RunSettings::default()
        },
    })
}

pub fn call(id: &str, name: &str) -> ToolCall {
    ToolCall {
        id: id.into(),
        name: name.into(),
        arguments: format!("{{\"arg\":\"{id}\"}}"),
    }
}

pub fn response(
    step: u64,
    content: &str,
    calls: Vec<ToolCall>,
    usage: (u64, u64),
    cost: f64,
) -> Event {
    let pending = calls.iter().map(|c| c.id.clone()).collect();
    Event::ModelResponse(ModelResponse {
        context_tokens: 0,
        request_bytes: 0,
        stop_reason: None,
        stop_reason_raw: None,
        step,
        message: Message::assistant(content, calls),
        usage: Usage {
            input_tokens: usage.0,
            output_tokens: usage.1,
            ..Usage::default()
        },
        cost_usd: cost,
        pending,
    })
}

pub fn started(step: u64, id: &str, name: &str) -> Event {
    Event::ToolStarted(ToolStarted {
        step,
        call_id: id.into(),
        name: name.into(),
        process: None,
    })
}

pub fn result(step: u64, id: &str, name: &str, content: &str, format_error: bool) -> Event {
    Event::ToolResult(ToolResult {
        format_error,
        ..ToolResult::new(step, id, name, content, format_error)
    })
}

pub fn saved(step: u64) -> Event {
    Event::StepSaved(StepSaved {
        step,
        usage_total: Usage::default(),
        cost_usd_total: 0.0,
    })
}

pub fn item(id: &str, text: &str, status: PlanStatus) -> PlanItem {
    PlanItem {
        id: id.into(),
        text: text.into(),
        status,
    }
}

pub fn plan_updated(step: u64, version: u64, items: Vec<PlanItem>, diff: &str) -> Event {
    Event::PlanUpdated(PlanUpdated {
        step,
        version,
        items,
        note: None,
        diff: diff.into(),
    })
}

pub fn compaction(
    step: u64,
    summary: &str,
    kept: Vec<Message>,
    usage: (u64, u64),
    cost: f64,
) -> Event {
    let mut view = vec![Message::user(summary)];
    view.extend(kept);
    Event::Compaction(Compaction {
        context_tokens: 0,
        step,
        summary: summary.into(),
        view,
        plan_version: 0,
        usage: Usage {
            input_tokens: usage.0,
            output_tokens: usage.1,
            ..Usage::default()
        },
        cost_usd: cost,
        replaced: 0,
        failed: false,
    })
}

pub fn process_started(id: &str, pid: u32, command: &str, step: u64) -> Event {
    Event::ProcessStarted(ProcessStarted {
        id: id.into(),
        pid,
        command: command.into(),
        step,
        env: "local".into(),
        start_time: Some(12345),
        output: None,
        container: None,
        engine: None,
    })
}

pub fn process_exited(id: &str, code: Option<i32>) -> Event {
    Event::ProcessExited(ProcessExited {
        id: id.into(),
        exit_code: code,
        signal: None,
    })
}

pub fn resume(notice: &str, message: Option<&str>, limits: Option<Limits>) -> Event {
    Event::Resume(Resume {
        interrupted: vec![],
        lost_processes: vec![],
        reattached_processes: Vec::new(),
        notice: notice.into(),
        limits,
        message: message.map(str::to_string),
        stopped_processes: vec![],
        compact_at: None,
        api_key_env: None,
    })
}

pub fn finished(status: RunStatus) -> Event {
    Event::RunFinished(RunFinished {
        status,
        reason: None,
    })
}

/// Folds records into a fresh state.
pub fn fold(events: &[Event]) -> crate::session::State {
    let mut s = crate::session::State::default();
    for e in events {
        s.apply(e);
    }
    s
}
