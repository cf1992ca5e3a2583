//! What a chat asks of the agent between and during turns: the person's
//! message, `/model`, `/approvals` and `/compact`, Ctrl-C ending only the
//! turn, Ctrl-D or a signal at the prompt ending the run. Each is a record
//! appended (durable) before it takes effect.

use super::{Agent, AgentError, Turn};
use crate::event::{ChatWaiting, Event, RunStatus, UserMessage};
use nix::sys::signal::Signal;

impl Agent {
    /// A signal stopped the turn. In a chat, Ctrl-C (SIGINT) ends only the
    /// turn: what it ran is stopped and recorded already, the model is told
    /// (`chat.waiting` with `interrupted`) and the chat waits for the next
    /// message. Any other signal, or one outside a chat, ends the run.
    pub(super) fn stop_turn(&mut self, sig: Signal) -> Result<Turn, AgentError> {
        if self.config.chat && sig == Signal::SIGINT {
            self.stop.clear();
            let step = self.state().step;
            self.append(Event::ChatWaiting(ChatWaiting {
                step,
                interrupted: Some(crate::signals::name(sig).to_string()),
            }))?;
            self.out
                .say("turn interrupted; type the next message (Ctrl-D ends the chat)");
            return Ok(Turn::Waiting);
        }
        self.interrupted(sig).map(Turn::Finished)
    }

    /// The person's message at the chat prompt: durable (`user.message`)
    /// before the model sees it.
    pub fn add_user_message(&mut self, content: &str, source: &str) -> Result<(), AgentError> {
        let step = self.state().step;
        self.append(Event::UserMessage(UserMessage {
            step,
            content: content.to_string(),
            source: source.to_string(),
        }))?;
        Ok(())
    }

    /// A chat's `/model` or `/approvals`: recorded (durable before the next
    /// request), then in force.
    pub fn change_settings(
        &mut self,
        model: Option<String>,
        approvals: Option<crate::kinds::ApproveMode>,
    ) -> Result<(), AgentError> {
        let step = self.state().step;
        self.append(Event::SettingsChanged(crate::event::SettingsChanged {
            step,
            model: model.clone(),
            approvals,
            by: "chat".into(),
        }))?;
        if let Some(m) = &model {
            self.config.model.name.clone_from(m);
            self.provider.set_model(m);
        }
        if let Some(a) = approvals {
            self.config.approvals.mode = a;
        }
        Ok(())
    }

    /// A chat's `/compact`: recorded; the next request is compacted first.
    pub fn request_compaction(&mut self) -> Result<(), AgentError> {
        let step = self.state().step;
        self.append(Event::CompactionRequested(
            crate::event::CompactionRequested {
                step,
                by: "chat".into(),
            },
        ))?;
        Ok(())
    }

    /// The size in tokens of the next step's request as compaction counts
    /// it ([`Agent::context_tokens`]): what the status line shows against
    /// the compaction threshold.
    pub fn next_context_tokens(&self) -> u64 {
        let (_, body) = self.step_request(self.state().step + 1);
        self.context_tokens(&body)
    }

    /// Time spent waiting for the person (a chat's prompt): not the agent's
    /// own overhead.
    pub fn add_waiting(&mut self, d: std::time::Duration) {
        self.timing.waiting += d;
    }

    /// Ctrl-D at the chat prompt: the chat ends (`run.finished` completed).
    pub fn end_chat(&mut self) -> Result<RunStatus, AgentError> {
        self.finish(RunStatus::Completed, None)
    }

    /// A stopping signal at the chat prompt: the run ends interrupted.
    pub fn stop_at_prompt(&mut self, sig: Signal) -> Result<RunStatus, AgentError> {
        self.interrupted(sig)
    }
}
