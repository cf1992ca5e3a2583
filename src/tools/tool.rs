//! What a tool is: the [`Tool`] trait the registry holds, the [`TypedTool`]
//! shortcut the built-in tools implement, and the argument parser that turns a
//! malformed call into a format error.
//!
//! A tool's name, description and schema feed the tool signature, so changing
//! any of them changes the signature recorded in `run.started` (and a resumed
//! run with a different tool set is refused).

use super::{ToolContext, ToolOutcome};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What a model is told about one tool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    /// JSON Schema of the arguments object.
    pub parameters: Value,
}

/// What a call to a tool can do. The registry derives from it which tools a
/// read-only run offers and which calls resume may run again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Effect {
    /// Only looks at the workspace: offered in read-only runs, and an
    /// interrupted call is simply run again on resume.
    ReadOnly,
    /// Changes files, runs commands or stops processes: not offered in
    /// read-only runs, never run twice.
    Mutating,
    /// Changes only the run's plan (the loop records it): offered only when
    /// the plan is enabled, read-only or not; never run twice.
    Plan,
}

/// One tool the model can call.
///
/// `call` gets the raw argument string exactly as the model sent it; it must
/// turn every problem into a [`ToolOutcome`] (the registry still catches a
/// panic). Most tools implement [`TypedTool`] instead and get this trait
/// from it.
pub trait Tool: Send + Sync {
    fn name(&self) -> &str;
    fn description(&self) -> &str;
    /// JSON Schema of the arguments object.
    fn parameters(&self) -> Value;
    /// The argument shape in one line, quoted back in format errors.
    fn usage(&self) -> &str;
    fn effect(&self) -> Effect;
    fn call(&self, ctx: &ToolContext, raw_args: &str) -> ToolOutcome;

    /// Whether this call starts a foreground command through
    /// [`ToolContext::launch`]: its `tool.started` is then written by the
    /// launch, carrying the command's process group, before the command may
    /// act (instead of before the tool is called).
    fn launches(&self, _raw_args: &str) -> bool {
        false
    }

    /// What the model is told about this tool.
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: self.name().to_string(),
            description: self.description().to_string(),
            parameters: self.parameters(),
        }
    }
}

/// A tool whose arguments deserialize into one type. The blanket [`Tool`]
/// impl parses them with [`parse_args`] (any failure is a format error) and
/// hands the typed value to [`TypedTool::run`].
pub trait TypedTool: Send + Sync {
    const NAME: &'static str;
    const DESCRIPTION: &'static str;
    /// See [`Tool::usage`].
    const USAGE: &'static str;
    const EFFECT: Effect;
    type Args: DeserializeOwned;

    /// JSON Schema of [`TypedTool::Args`].
    fn schema(&self) -> Value;
    fn run(&self, ctx: &ToolContext, args: Self::Args) -> ToolOutcome;

    /// See [`Tool::launches`].
    fn launches(&self, _args: &Self::Args) -> bool {
        false
    }
}

impl<T: TypedTool> Tool for T {
    fn name(&self) -> &str {
        T::NAME
    }

    fn description(&self) -> &str {
        T::DESCRIPTION
    }

    fn parameters(&self) -> Value {
        self.schema()
    }

    fn usage(&self) -> &str {
        T::USAGE
    }

    fn effect(&self) -> Effect {
        T::EFFECT
    }

    fn call(&self, ctx: &ToolContext, raw_args: &str) -> ToolOutcome {
        match parse_args(T::NAME, T::USAGE, raw_args) {
            Ok(args) => self.run(ctx, args),
            Err(outcome) => outcome,
        }
    }

    fn launches(&self, raw_args: &str) -> bool {
        parse_args::<T::Args>(T::NAME, T::USAGE, raw_args)
            .is_ok_and(|a| TypedTool::launches(self, &a))
    }
}

/// Parses a call's raw argument string into a tool's typed arguments; any
/// failure is a format error naming the problem and quoting `usage`, the
/// expected shape.
pub fn parse_args<T: DeserializeOwned>(
    name: &str,
    usage: &str,
    raw: &str,
) -> Result<T, ToolOutcome> {
    let fail = |what: String| {
        ToolOutcome::format_error(format!(
            "Malformed call to `{name}`: {what}. Expected arguments: {usage}"
        ))
    };
    if raw.trim().is_empty() {
        return Err(fail(
            "the arguments are empty; they must be a JSON object".into(),
        ));
    }
    let value: Value = serde_json::from_str(raw)
        .map_err(|e| fail(format!("the arguments are not valid JSON ({e})")))?;
    if !value.is_object() {
        return Err(fail(format!(
            "the arguments must be a JSON object, not {}",
            json_kind(&value)
        )));
    }
    serde_json::from_value(value)
        .map_err(|e| fail(format!("the arguments do not match the schema: {e}")))
}

fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}
