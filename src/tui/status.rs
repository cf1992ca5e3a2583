//! The status line under the input: model, workspace, approval mode,
//! environment, tokens in (with the cached share) and out, cost (`$?` when
//! the price is unknown) and the context the last request used of what
//! the run allows before it compacts.

use crate::agent::Agent;

/// What the status line shows.
#[derive(Debug, Clone, PartialEq)]
pub struct Status {
    pub model: String,
    pub workspace: String,
    pub approvals: &'static str,
    pub env: &'static str,
    pub input: u64,
    /// Input tokens the server served from its cache (when it said).
    pub cached: Option<u64>,
    pub output: u64,
    /// `None`: the price is unknown.
    pub cost: Option<f64>,
    pub context: u64,
    pub window: u64,
}

/// A token count as a person reads it: 950, 12.3k, 1.2M.
pub fn tokens(n: u64) -> String {
    match n {
        0..1_000 => n.to_string(),
        1_000..1_000_000 => format!("{:.1}k", n as f64 / 1e3),
        _ => format!("{:.1}M", n as f64 / 1e6),
    }
}

/// A path with the home directory as `~`.
pub fn tilde(path: &std::path::Path) -> String {
    if let Some(home) = std::env::var_os("HOME").map(std::path::PathBuf::from)
        && home.as_os_str().len() > 1
        && let Ok(rest) = path.strip_prefix(&home)
    {
        return format!("~/{}", rest.display());
    }
    path.display().to_string()
}

pub fn approvals_name(mode: crate::kinds::ApproveMode) -> &'static str {
    match mode {
        crate::kinds::ApproveMode::Never => "never",
        crate::kinds::ApproveMode::Mutating => "mutating",
    }
}

pub fn env_name(env: crate::kinds::EnvKind) -> &'static str {
    match env {
        crate::kinds::EnvKind::Local => "local",
        crate::kinds::EnvKind::Sandbox => "sandbox",
        crate::kinds::EnvKind::Container => "container",
    }
}

impl Status {
    pub fn of(agent: &Agent) -> Status {
        let config = agent.config();
        let state = agent.state();
        // The cached share, once the usage records it.
        let cached = serde_json::to_value(state.usage)
            .ok()
            .and_then(|u| u.get("cached_input_tokens")?.as_u64());
        let priced = config.model.price_in > 0.0 || config.model.price_out > 0.0;
        Status {
            model: config.model.name.clone(),
            workspace: tilde(&config.workspace),
            approvals: approvals_name(config.approvals.mode),
            env: env_name(config.env),
            input: state.usage.input_tokens,
            cached,
            output: state.usage.output_tokens,
            cost: priced.then_some(state.cost_usd),
            context: state.last_request.map_or(0, |r| r.tokens),
            window: config.compact_at,
        }
    }

    /// The cost as shown: `$0.0123`, or `$?` when the price is unknown.
    pub fn cost_text(&self) -> String {
        self.cost
            .map_or_else(|| "$?".to_string(), |c| format!("${c:.4}"))
    }

    pub fn line(&self) -> String {
        let cached = match self.cached {
            Some(c) if self.input > 0 => {
                format!(" ({}% cached)", c.saturating_mul(100) / self.input)
            }
            _ => String::new(),
        };
        let share = self
            .context
            .saturating_mul(100)
            .checked_div(self.window)
            .map(|p| format!(" ({p}%)"))
            .unwrap_or_default();
        format!(
            "{} · {} · approvals {} · env {} · {} in{cached} / {} out · {} · context {}/{}{share}",
            self.model,
            self.workspace,
            self.approvals,
            self.env,
            tokens(self.input),
            tokens(self.output),
            self.cost_text(),
            tokens(self.context),
            tokens(self.window),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::Status;

    #[test]
    fn the_line_names_everything_and_an_unknown_price_is_a_question_mark() {
        let mut s = Status {
            model: "m".into(),
            workspace: "/w".into(),
            approvals: "mutating",
            env: "local",
            input: 12_345,
            cached: Some(6_000),
            output: 950,
            cost: None,
            context: 24_000,
            window: 96_000,
        };
        assert_eq!(
            s.line(),
            "m · /w · approvals mutating · env local · 12.3k in (48% cached) / 950 out · $? · \
             context 24.0k/96.0k (25%)"
        );
        s.cost = Some(0.01234);
        s.cached = None;
        assert!(s.line().contains("12.3k in / 950 out · $0.0123 ·"));
    }
}
