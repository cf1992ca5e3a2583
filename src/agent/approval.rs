//! Approvals: the person's yes before a call that can change files or run
//! commands (`--approve mutating`, `[approvals]`).
//!
//! The protocol, in log order (docs/design.md, "Approvals"):
//!
//! 1. `approval.requested` {call_id, tool, preview} is durable before the
//!    question is asked anywhere;
//! 2. the answer comes from the terminal (y/n/a) or from `tinyagent approve`
//!    in another process, through an answer file in the run's channel
//!    directory (`<wal>.d/approvals/`, 0700; each answer 0600, owned by the
//!    log's owner). The answering process never writes the log: the running
//!    agent reads the file and appends
//! 3. `approval.decided` {decision, by, reason}, durable before the call's
//!    `tool.started` (or, denied, its error `tool.result`); then the answer
//!    file goes.
//!
//! A call an allow rule (or an earlier "always") covers gets only
//! `approval.decided` (by `rule` / `always`), staged with its
//! `tool.started`. Resume reads the marks the fold keeps on pending calls: a
//! decided call is never asked again, a requested one is asked again (an
//! answer file written while no agent ran is taken then).
//!
//! The agent never touches the terminal: the question goes to the
//! [`Asker`] it was given at launch (the command line's, `crate::cli`),
//! which waits for the person in front of the run, for `tinyagent approve`
//! (through the poll the agent hands it) and for a stop, whichever comes
//! first.

use super::{Agent, AgentError};
use crate::config::ApproveMode;
use crate::event::{ApprovalDecided, ApprovalRequested, Decision, Event, ToolCall};
use crate::session::ApprovalMark;
use crate::signals::StopToken;
use crate::tools::Effect;
use nix::sys::signal::Signal;
use serde::{Deserialize, Serialize};
use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The largest answer file read (a decision and a reason).
const MAX_ANSWER_BYTES: u64 = 64 * 1024;
/// How often a wait looks for an answer (file, terminal, signal).
pub const POLL: Duration = Duration::from_millis(50);

/// What the approval step says about a call.
pub(super) enum Approval {
    /// Run it.
    Allowed,
    /// Do not: its error result names who and why.
    Denied { by: String, reason: Option<String> },
    /// A stopping signal came while the question waited.
    Stopped(Signal),
}

/// One answer, as `tinyagent approve` writes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Answer {
    pub step: u64,
    pub call_id: String,
    pub decision: Decision,
    #[serde(default)]
    pub reason: Option<String>,
}

/// The run's channel directory: `<wal>.d/approvals`.
pub fn channel_dir(wal: &Path) -> PathBuf {
    crate::rundir::RunDir::of(wal).approvals()
}

/// The answer file of one call. The name is derived (the call id comes
/// from the model and is no file name).
pub fn answer_path(wal: &Path, step: u64, call_id: &str) -> PathBuf {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(call_id.as_bytes());
    let hex: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
    channel_dir(wal).join(format!("{step}-{hex}.json"))
}

/// Removes every answer file of the run of `wal` (best effort): called
/// once the run has finished, when no question is open.
pub fn clear_channel(wal: &Path) {
    let Ok(dir) = std::fs::read_dir(channel_dir(wal)) else {
        return;
    };
    for e in dir.flatten() {
        if e.file_name().to_string_lossy().ends_with(".json") {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// Writes an answer for the run of `wal` (from `tinyagent approve`): a new
/// file, 0600, complete (fsync'd, then renamed into place) or not there at
/// all. Refused when an answer is already waiting to be read.
pub fn write_answer(wal: &Path, answer: &Answer) -> std::io::Result<PathBuf> {
    let dir = channel_dir(wal);
    tinyagent_store::fsutil::create_dir_all_durable(&dir)?;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))?;
    let path = answer_path(wal, answer.step, &answer.call_id);
    if path.exists() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::AlreadyExists,
            "an answer to this call is already waiting for the run to read it",
        ));
    }
    let tmp = dir.join(format!(
        ".{}.{}.tmp",
        path.file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("answer"),
        std::process::id()
    ));
    let body = serde_json::to_vec(answer).map_err(std::io::Error::other)?;
    {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(nix::libc::O_NOFOLLOW)
            .open(&tmp)?;
        f.write_all(&body)?;
        f.sync_all()?;
    }
    if let Err(e) = std::fs::hard_link(&tmp, &path) {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    std::fs::remove_file(&tmp)?;
    std::fs::File::open(&dir)?.sync_all()?;
    Ok(path)
}

/// Reads the answer to `call_id` of `step`, if one is there. A file that
/// is not a regular file of `owner`'s with mode 0600, is too big, does not
/// parse or names another call is no answer: it is removed, and the reason
/// given.
fn read_answer(
    path: &Path,
    owner: u32,
    step: u64,
    call_id: &str,
) -> Option<Result<Answer, String>> {
    let mut f = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => {
            let _ = std::fs::remove_file(path);
            return Some(Err(format!("{}: {e}", path.display())));
        }
    };
    let refuse = |why: String| {
        let _ = std::fs::remove_file(path);
        Some(Err(format!(
            "ignored the answer file {}: {why}",
            path.display()
        )))
    };
    let meta = match f.metadata() {
        Ok(m) => m,
        Err(e) => return refuse(e.to_string()),
    };
    if !meta.file_type().is_file() {
        return refuse("not a regular file".into());
    }
    if meta.uid() != owner {
        return refuse(format!(
            "owned by uid {}, not by the log's owner (uid {owner})",
            meta.uid()
        ));
    }
    if meta.mode() & 0o077 != 0 {
        return refuse(format!("mode {:o}, not 0600", meta.mode() & 0o777));
    }
    if meta.len() > MAX_ANSWER_BYTES {
        return refuse(format!("{} bytes, more than an answer holds", meta.len()));
    }
    let mut text = String::new();
    if let Err(e) = Read::take(&mut f, MAX_ANSWER_BYTES).read_to_string(&mut text) {
        return refuse(e.to_string());
    }
    match serde_json::from_str::<Answer>(&text) {
        Ok(a) if a.step == step && a.call_id == call_id => Some(Ok(a)),
        Ok(_) => refuse("it answers another call".into()),
        Err(e) => refuse(format!("not an answer: {e}")),
    }
}

/// The command a bash call would run (for `bash:<glob>` rules).
fn bash_command(call: &ToolCall) -> Option<String> {
    let v: serde_json::Value = serde_json::from_str(&call.arguments).ok()?;
    v.get("command")?.as_str().map(str::to_string)
}

/// `text` with control characters shown as `�`: a preview comes from the
/// model and goes to the person's terminal.
fn printable(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() { '�' } else { c })
        .collect()
}

/// One approval question, as the person is shown it: every text is
/// printable (control characters from the model shown as `�`).
pub struct Question {
    /// The tool's name.
    pub tool: String,
    /// The call's id.
    pub call_id: String,
    /// The call in one line (`bash: cargo test`).
    pub preview: String,
    /// What is shown before the question (the command, the diff; indented,
    /// each line ending in a newline), or nothing.
    pub details: String,
    /// The question's "always" choice (` / [a]lways `cargo test``), empty
    /// when none is offered.
    pub always: String,
    /// The command that answers from another process.
    pub elsewhere: String,
}

/// What answered a question.
pub enum Reply {
    /// The person in front of the run: the decision, whether it was
    /// "always", the reason typed after it.
    Here(Decision, bool, Option<String>),
    /// `tinyagent approve`, from another process.
    Elsewhere(Answer),
    /// A stopping signal came first.
    Stopped(Signal),
}

/// Where the run's approval questions are asked. The command line owns
/// the terminal and gives the agent its asker at launch.
pub trait Asker: Send {
    /// Asks `question` and waits for its answer: from the person, from
    /// `elsewhere` (polled at least every [`POLL`]; it gives the answer
    /// `tinyagent approve` left, once one is there) or a stop on `stop`,
    /// whichever comes first.
    fn ask(
        &mut self,
        question: &Question,
        elsewhere: &mut dyn FnMut() -> Option<Answer>,
        stop: &StopToken,
    ) -> Reply;
}

impl Agent {
    /// The approval step of `call` (after its pre hook, before its
    /// `tool.started`). Every decision is in the log before this returns
    /// `Allowed` or `Denied`.
    pub(super) fn approve(&mut self, step: u64, call: &ToolCall) -> Result<Approval, AgentError> {
        let wal = self.store.path().to_path_buf();
        let mark = self
            .state()
            .pending
            .iter()
            .find(|c| c.id == call.id)
            .and_then(|c| c.approval.clone());
        // A call asked about before a stop is answered whatever the mode
        // is now.
        if mark.is_none()
            && (self.config.approvals.mode == ApproveMode::Never
                || self.tools.effect(&call.name) != Some(Effect::Mutating))
        {
            return Ok(Approval::Allowed);
        }
        match mark {
            Some(ApprovalMark::Decided {
                decision,
                by,
                reason,
            }) => {
                // Decided before a stop: never asked twice.
                let _ = std::fs::remove_file(answer_path(&wal, step, &call.id));
                return Ok(match decision {
                    Decision::Allow => Approval::Allowed,
                    Decision::Deny => Approval::Denied { by, reason },
                });
            }
            Some(ApprovalMark::Requested { .. }) => {}
            None => {
                let (by, reason) = if let Some(what) = self.always_covers(call) {
                    (
                        "always",
                        format!("{what} was allowed for the rest of the run"),
                    )
                } else if let Some(rule) = self.allow_rule(call) {
                    ("rule", format!("allowed by the rule {rule:?}"))
                } else {
                    ("", String::new())
                };
                if !by.is_empty() {
                    // Durable with the call's tool.started.
                    self.stage(Event::ApprovalDecided(ApprovalDecided {
                        step,
                        call_id: call.id.clone(),
                        tool: call.name.clone(),
                        decision: Decision::Allow,
                        by: by.into(),
                        reason: Some(reason),
                        always: false,
                        scope: None,
                    }))?;
                    return Ok(Approval::Allowed);
                }
                let preview = crate::text::cut_chars(
                    &crate::report::call_preview(&call.name, &call.arguments),
                    300,
                    "…",
                );
                self.stage(Event::ApprovalRequested(ApprovalRequested {
                    step,
                    call_id: call.id.clone(),
                    tool: call.name.clone(),
                    preview,
                }))?;
                self.flush()?;
            }
        }
        let asked = std::time::Instant::now();
        // "Always" for bash covers the command's prefix, and only a plain
        // command has one.
        let scope = (call.name == "bash")
            .then(|| bash_command(call).and_then(|c| super::approval_view::bash_prefix(&c)))
            .flatten();
        let offer_always = call.name != "bash" || scope.is_some();
        let details = super::approval_view::details(call, &self.config.workspace);
        let always = match (&scope, offer_always) {
            (_, false) => String::new(),
            (Some(prefix), true) => format!(" / [a]lways `{}`", printable(prefix)),
            (None, true) => format!(" / [a]lways {}", printable(&call.name)),
        };
        let question = Question {
            tool: printable(&call.name),
            call_id: printable(&call.id),
            preview: printable(&crate::report::call_preview(&call.name, &call.arguments)),
            details,
            always,
            elsewhere: format!(
                "tinyagent approve {} {} [--deny --reason TEXT]",
                wal.display(),
                printable(&call.id)
            ),
        };
        let owner =
            std::fs::metadata(&wal).map_or_else(|_| nix::unistd::geteuid().as_raw(), |m| m.uid());
        let path = answer_path(&wal, step, &call.id);
        let mut elsewhere = || match read_answer(&path, owner, step, &call.id) {
            Some(Ok(a)) => Some(a),
            Some(Err(why)) => {
                crate::report::err_line(&format!("warning: {why}"));
                None
            }
            None => None,
        };
        let (asker, stop) = (&mut self.asker, &self.stop);
        let reply = crate::runtime::blocking(|| asker.ask(&question, &mut elsewhere, stop));
        self.timing.waiting += asked.elapsed();
        let (decision, always, reason, by) = match reply {
            Reply::Stopped(sig) => return Ok(Approval::Stopped(sig)),
            Reply::Here(d, always, reason) => (d, always && offer_always, reason, "tty"),
            Reply::Elsewhere(a) => (a.decision, false, a.reason, "approve"),
        };
        let scope = scope.filter(|_| always);
        self.append(Event::ApprovalDecided(ApprovalDecided {
            step,
            call_id: call.id.clone(),
            tool: call.name.clone(),
            decision,
            by: by.into(),
            reason: reason.clone(),
            always,
            scope,
        }))?;
        let _ = std::fs::remove_file(answer_path(&wal, step, &call.id));
        Ok(match decision {
            Decision::Allow => Approval::Allowed,
            Decision::Deny => Approval::Denied {
                by: by.into(),
                reason,
            },
        })
    }

    /// What an earlier "always" that covers `call` allowed (the tool, or
    /// for bash the command's prefix), if one does.
    fn always_covers(&self, call: &ToolCall) -> Option<String> {
        let allowed = &self.state().always_allowed;
        if allowed.contains(&call.name) {
            return Some(call.name.clone());
        }
        if call.name != "bash" {
            return None;
        }
        let command = bash_command(call)?;
        allowed
            .iter()
            .filter_map(|a| a.strip_prefix("bash:"))
            .find(|prefix| super::approval_view::prefix_covers(prefix, &command))
            .map(|prefix| format!("`{prefix}`"))
    }

    /// The allow rule of the config that covers `call`, if one does.
    fn allow_rule(&self, call: &ToolCall) -> Option<String> {
        let command = (call.name == "bash").then(|| bash_command(call)).flatten();
        self.config
            .approvals
            .allow
            .iter()
            .find(|r| r.allows(&call.name, command.as_deref()))
            .map(|r| r.text.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_file_must_be_the_owners_0600_file_for_that_call() {
        let dir = tempfile::tempdir().unwrap();
        let wal = dir.path().join("run.wal");
        std::fs::write(&wal, b"").unwrap();
        let me = nix::unistd::geteuid().as_raw();
        let answer = Answer {
            step: 2,
            call_id: "../../etc/passwd".into(),
            decision: Decision::Deny,
            reason: Some("no".into()),
        };
        let path = write_answer(&wal, &answer).unwrap();
        assert!(path.starts_with(channel_dir(&wal)));
        let mode = std::fs::metadata(&path).unwrap().mode() & 0o777;
        assert_eq!(mode, 0o600);
        // A second answer while the first waits is refused.
        assert!(write_answer(&wal, &answer).is_err());
        // Another call's answer is not taken for this one (and is removed).
        std::fs::copy(&path, answer_path(&wal, 2, "other")).unwrap();
        std::fs::set_permissions(
            answer_path(&wal, 2, "other"),
            std::fs::Permissions::from_mode(0o600),
        )
        .unwrap();
        assert!(matches!(
            read_answer(&answer_path(&wal, 2, "other"), me, 2, "other"),
            Some(Err(_))
        ));
        assert!(!answer_path(&wal, 2, "other").exists());
        // A file others may write is no answer.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
        assert!(matches!(
            read_answer(&path, me, 2, &answer.call_id),
            Some(Err(_))
        ));
        assert!(!path.exists());
        let path = write_answer(&wal, &answer).unwrap();
        // Not the log owner's: refused.
        assert!(matches!(
            read_answer(&path, me + 1, 2, &answer.call_id),
            Some(Err(_))
        ));
        let path = write_answer(&wal, &answer).unwrap();
        assert_eq!(read_answer(&path, me, 2, &answer.call_id), Some(Ok(answer)));
        assert_eq!(read_answer(&answer_path(&wal, 3, "x"), me, 3, "x"), None);
    }

    #[test]
    fn previews_lose_their_control_characters() {
        assert_eq!(printable("a\u{1b}[2Jb\n"), "a�[2Jb�");
    }
}
