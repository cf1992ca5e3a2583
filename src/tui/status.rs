//! The status line under the input: model, workspace, approval mode,
//! environment, tokens in (with the cached share) and out, cost (`$?` when
//! the price is unknown) and the context: the size of the next request as
//! compaction counts it, of the model's context window, with the share of
//! the window at which the run compacts.

use crate::agent::Agent;

/// What the status line shows.
#[derive(Debug, Clone, PartialEq)]
pub struct Status {
    pub model: String,
    pub workspace: String,
    pub approvals: &'static str,
    pub env: &'static str,
    /// Every input token sent so far, cached or not.
    pub input: u64,
    /// Of those, the tokens the server served from its cache (when it
    /// said so).
    pub cached: Option<u64>,
    pub output: u64,
    /// `None`: the price is unknown.
    pub cost: Option<f64>,
    /// The next request's size in tokens, as compaction counts it: the
    /// last request's input tokens as the server counted them plus a
    /// quarter of the bytes added since.
    pub context: u64,
    /// The model's context window.
    pub window: u64,
    /// The size above which the run compacts (80% of the window unless set).
    pub compact_at: u64,
}

pub use crate::text::tokens;

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
        let usage = &agent.state().usage;
        Status {
            model: config.model.name.clone(),
            workspace: tilde(&config.workspace),
            approvals: approvals_name(config.approvals.mode),
            env: env_name(config.env),
            input: usage.all_input(),
            cached: (usage.cached_input_tokens > 0).then_some(usage.cached_input_tokens),
            output: usage.output_tokens,
            cost: config.model.price_known.then_some(agent.state().cost_usd),
            context: agent.next_context_tokens(),
            window: config.context_window(),
            compact_at: config.compact_at,
        }
    }

    /// The cost as shown: `$0.0123`, or `$?` when the price is unknown.
    pub fn cost_text(&self) -> String {
        self.cost
            .map_or_else(|| "$?".to_string(), |c| format!("${c:.4}"))
    }

    /// The line in at most `width` columns where it can be: a path too
    /// long gives way first (its last part is kept), then the share the
    /// run compacts at. What still does not fit is cut by the terminal.
    pub fn line_in(&self, width: usize) -> String {
        let fits = |l: &String| l.chars().count() <= width;
        let line = self.line();
        if fits(&line) {
            return line;
        }
        let mut short = self.clone();
        if let Some(last) = std::path::Path::new(&self.workspace).file_name() {
            short.workspace = format!("…/{}", last.to_string_lossy());
        }
        let line = short.line();
        if fits(&line) {
            return line;
        }
        short.compact_at = 0;
        short.line()
    }

    pub fn line(&self) -> String {
        let cached = match self.cached {
            Some(c) if self.input > 0 => {
                format!(" ({}% cached)", c.saturating_mul(100) / self.input)
            }
            _ => String::new(),
        };
        let percent = |n: u64| n.saturating_mul(100).checked_div(self.window);
        let share = match (percent(self.context), percent(self.compact_at)) {
            (Some(p), Some(at)) if at > 0 => format!(" ({p}%, compacts at {at}%)"),
            (Some(p), _) => format!(" ({p}%)"),
            _ => String::new(),
        };
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
            window: 128_000,
            compact_at: 102_400,
        };
        assert_eq!(
            s.line(),
            "m · /w · approvals mutating · env local · 12.3k in (48% cached) / 950 out · $? · \
             context 24.0k/128.0k (18%, compacts at 80%)"
        );
        s.cost = Some(0.01234);
        s.cached = None;
        assert!(s.line().contains("12.3k in / 950 out · $0.0123 ·"));
        // A price of nothing is known: free, not unknown.
        s.cost = Some(0.0);
        assert!(s.line().contains(" · $0.0000 · "));
        // Narrow: the path gives way first, then where compaction starts.
        s.workspace = "/home/someone/src/a-project-with-a-long-name".into();
        assert_eq!(s.line_in(200), s.line());
        let narrow = s.line_in(145);
        assert!(
            narrow.starts_with("m · …/a-project-with-a-long-name · approvals mutating")
                && narrow.ends_with("(18%, compacts at 80%)"),
            "{narrow}"
        );
        assert!(s.line_in(130).ends_with("context 24.0k/128.0k (18%)"));
    }
}
