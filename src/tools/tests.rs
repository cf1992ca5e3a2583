//! What the registry derives from each tool's [`Effect`], and registering a
//! tool that is not built in.

use super::*;
use crate::event::ToolCall;
use crate::exec::LocalEnv;
use serde_json::{Value, json};

fn set(read_only: bool, plan: bool) -> ToolSet {
    ToolSet::new(ToolSetOptions { read_only, plan })
}

const ALL: [&str; 8] = [
    "bash",
    "process",
    "read",
    "write",
    "edit",
    "grep",
    "glob",
    "update_plan",
];

/// Runs `f` with a context on a scratch workspace.
fn with_ctx(f: impl FnOnce(&ToolContext)) {
    let dir = tempfile::tempdir().unwrap();
    let table = ProcessTable::new(dir.path().join("procs"));
    let ctx = ToolContext {
        workspace: dir.path(),
        step: 1,
        env: &LocalEnv,
        processes: &table,
        plan: None,
        launch: &crate::exec::group::Unrecorded,
        protected: &crate::exec::protected::Protected::none(),
        stop: &crate::signals::StopToken::new(),
    };
    f(&ctx);
}

fn call(name: &str, arguments: &str) -> ToolCall {
    ToolCall {
        id: "c1".into(),
        name: name.into(),
        arguments: arguments.into(),
    }
}

#[test]
fn every_builtin_has_its_effect() {
    let full = set(false, true);
    let expected = [
        ("bash", Effect::Mutating),
        ("process", Effect::Mutating),
        ("read", Effect::ReadOnly),
        ("write", Effect::Mutating),
        ("edit", Effect::Mutating),
        ("grep", Effect::ReadOnly),
        ("glob", Effect::ReadOnly),
        ("update_plan", Effect::Plan),
    ];
    for (name, effect) in expected {
        assert_eq!(full.effect(name), Some(effect), "{name}");
    }
    assert_eq!(full.effect("nope"), None);
}

#[test]
fn rerunnable_is_exactly_read_grep_glob() {
    for s in [set(false, false), set(false, true), set(true, true)] {
        let rerunnable: Vec<&str> = ALL.into_iter().filter(|n| s.is_rerunnable(n)).collect();
        assert_eq!(rerunnable, ["read", "grep", "glob"]);
        assert!(!s.is_rerunnable("nope"));
    }
}

#[test]
fn mutating_is_exactly_bash_process_write_edit() {
    let full = set(false, true);
    let mutating: Vec<&str> = ALL
        .into_iter()
        .filter(|n| full.effect(n) == Some(Effect::Mutating))
        .collect();
    assert_eq!(mutating, ["bash", "process", "write", "edit"]);
    // A read-only set offers none of them, so none of them is mutating there.
    assert!(
        ALL.iter()
            .all(|n| set(true, true).effect(n) != Some(Effect::Mutating))
    );
}

#[test]
fn read_only_sets_offer_no_mutating_tool() {
    assert_eq!(set(true, false).names(), ["read", "grep", "glob"]);
    assert_eq!(
        set(true, true).names(),
        ["read", "grep", "glob", "update_plan"]
    );
    for name in ["bash", "process", "write", "edit"] {
        assert_eq!(set(true, true).effect(name), None, "{name}");
    }
}

#[test]
fn options_offer_by_effect() {
    let ro = ToolSetOptions {
        read_only: true,
        plan: false,
    };
    assert!(ro.offers(Effect::ReadOnly));
    assert!(!ro.offers(Effect::Mutating));
    assert!(!ro.offers(Effect::Plan));
    let all = ToolSetOptions {
        read_only: false,
        plan: true,
    };
    assert!(all.offers(Effect::Mutating) && all.offers(Effect::Plan));
}

#[test]
fn unknown_tool_is_a_format_error_naming_the_offered_tools() {
    with_ctx(|ctx| {
        let out = set(true, false).call(ctx, &call("bash", r#"{"command":"true"}"#));
        assert!(out.is_error && out.format_error);
        assert_eq!(
            out.content,
            "Unknown tool `bash`. Available tools: read, grep, glob."
        );
    });
}

#[test]
fn format_errors_quote_the_tools_usage() {
    with_ctx(|ctx| {
        let out = set(false, false).call(ctx, &call("glob", "[]"));
        assert!(out.format_error);
        assert_eq!(
            out.content,
            format!(
                "Malformed call to `glob`: the arguments must be a JSON object, not an array. \
                 Expected arguments: {}",
                glob::GlobTool::USAGE
            )
        );
    });
}

/// A tool that is not built in, written against [`Tool`] directly (as an MCP
/// tool would be).
struct Echo {
    effect: Effect,
}

impl Tool for Echo {
    fn name(&self) -> &'static str {
        "echo"
    }
    fn description(&self) -> &'static str {
        "Say it back."
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {"text": {"type": "string"}}})
    }
    fn usage(&self) -> &'static str {
        r#"{"text": string}"#
    }
    fn effect(&self) -> Effect {
        self.effect
    }
    fn call(&self, _ctx: &ToolContext, raw_args: &str) -> ToolOutcome {
        assert!(raw_args != "boom", "echo exploded");
        let args: Value = match parse_args(self.name(), self.usage(), raw_args) {
            Ok(v) => v,
            Err(out) => return out,
        };
        ToolOutcome::ok(args["text"].as_str().unwrap_or_default())
    }
}

#[test]
fn a_registered_tool_is_advertised_signed_and_callable() {
    let plain = set(false, false);
    let mut more = plain.clone();
    assert_eq!(
        more.register(Box::new(Echo {
            effect: Effect::ReadOnly
        })),
        Ok(true)
    );
    assert_eq!(more.names().last().map(String::as_str), Some("echo"));
    assert_eq!(more.specs().len(), plain.specs().len() + 1);
    assert_eq!(more.specs()[..plain.specs().len()], *plain.specs());
    assert_eq!(more.specs().last().unwrap().description, "Say it back.");
    assert_ne!(more.signature(), plain.signature());
    assert!(more.is_rerunnable("echo") && more.effect("echo") != Some(Effect::Mutating));
    with_ctx(|ctx| {
        assert_eq!(
            more.call(ctx, &call("echo", r#"{"text":"hi"}"#)).content,
            "hi"
        );
        let bad = more.call(ctx, &call("echo", "1"));
        assert!(bad.format_error);
        assert!(
            bad.content
                .ends_with(r#"Expected arguments: {"text": string}"#)
        );
        // A panic inside a tool becomes an ordinary error.
        let out = more.call(ctx, &call("echo", "boom"));
        assert!(out.is_error && !out.format_error);
        assert_eq!(
            out.content,
            "internal error: the `echo` tool failed unexpectedly"
        );
    });
    // The clone it came from is unchanged.
    assert_eq!(plain.signature(), set(false, false).signature());
}

#[test]
fn register_follows_the_options_and_refuses_taken_names() {
    let mut ro = set(true, false);
    let sig = ro.signature();
    assert_eq!(
        ro.register(Box::new(Echo {
            effect: Effect::Mutating
        })),
        Ok(false)
    );
    assert_eq!(ro.signature(), sig);
    assert_eq!(ro.effect("echo"), None);

    let mut s = set(false, false);
    let echo = || {
        Box::new(Echo {
            effect: Effect::Mutating,
        })
    };
    assert_eq!(s.register(echo()), Ok(true));
    assert!(s.effect("echo") == Some(Effect::Mutating) && !s.is_rerunnable("echo"));
    assert_eq!(s.register(echo()), Err(DuplicateTool("echo".into())));
    assert_eq!(s.names().iter().filter(|n| *n == "echo").count(), 1);
}

#[test]
fn update_plan_names_the_pinned_block_by_its_header() {
    let desc = <update_plan::UpdatePlanTool as TypedTool>::DESCRIPTION;
    assert!(desc.contains(crate::session::plan::BLOCK_HEADER), "{desc}");
}
