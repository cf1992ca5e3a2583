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

use super::{Agent, AgentError};
use crate::config::ApproveMode;
use crate::event::{ApprovalDecided, ApprovalRequested, Decision, Event, ToolCall};
use crate::session::ApprovalMark;
use crate::tools::Effect;
use nix::sys::signal::Signal;
use serde::{Deserialize, Serialize};
use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The largest answer file read (a decision and a reason).
const MAX_ANSWER_BYTES: u64 = 64 * 1024;
/// How often the wait looks for an answer (file, terminal, signal).
const POLL: Duration = Duration::from_millis(50);

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

/// What a line typed at the question means.
fn parse_reply(line: &str) -> Option<(Decision, bool, Option<String>)> {
    let line = line.trim();
    let (word, rest) = line.split_once(char::is_whitespace).unwrap_or((line, ""));
    let reason = Some(rest.trim().to_string()).filter(|r| !r.is_empty());
    match word.to_ascii_lowercase().as_str() {
        "y" | "yes" => Some((Decision::Allow, false, reason)),
        "a" | "always" => Some((Decision::Allow, true, reason)),
        "n" | "no" => Some((Decision::Deny, false, reason)),
        _ => None,
    }
}

/// Where an answer came from.
enum Reply {
    Terminal(Decision, bool, Option<String>),
    File(Answer),
    Stopped(Signal),
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
        let reply = wait_for_answer(&wal, step, call, &details, &always, &self.stop);
        self.timing.waiting += asked.elapsed();
        let (decision, always, reason, by) = match reply {
            Reply::Stopped(sig) => return Ok(Approval::Stopped(sig)),
            Reply::Terminal(d, always, reason) => (d, always && offer_always, reason, "tty"),
            Reply::File(a) => (a.decision, false, a.reason, "approve"),
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

/// Waits for the answer to `call`: a line on the terminal (when stdin is
/// one), an answer file from `tinyagent approve`, or a stopping signal,
/// whichever comes first.
///
/// `details` (the command, the diff) is shown before the question;
/// `always` is the question's "always" choice (empty: not offered).
fn wait_for_answer(
    wal: &Path,
    step: u64,
    call: &ToolCall,
    details: &str,
    always: &str,
    stop: &crate::signals::StopToken,
) -> Reply {
    use std::io::IsTerminal;
    let owner =
        std::fs::metadata(wal).map_or_else(|_| nix::unistd::geteuid().as_raw(), |m| m.uid());
    let path = answer_path(wal, step, &call.id);
    let mut tty = std::io::stdin().is_terminal();
    let preview = printable(&crate::report::call_preview(&call.name, &call.arguments));
    let elsewhere = format!(
        "tinyagent approve {} {} [--deny --reason TEXT]",
        wal.display(),
        printable(&call.id)
    );
    let always_text = always;
    let question = if details.is_empty() {
        format!("approve {preview} ? [y]es / [n]o [reason]{always_text} : ")
    } else {
        format!(
            "approve this {} ({}) ? [y]es / [n]o [reason]{always_text} : ",
            printable(&call.name),
            printable(&call.id)
        )
    };
    if tty {
        // Only what is typed after the question answers it: a line typed
        // ahead (or pushed into the terminal by anything) is thrown away.
        discard_typed_ahead();
        crate::report::err_text(&format!(
            "{details}(or answer from elsewhere: {elsewhere})\n{question}"
        ));
    } else {
        crate::report::err_line(&format!(
            "waiting for approval of {preview}; answer with: {elsewhere}"
        ));
    }
    crate::runtime::blocking(|| {
        loop {
            if let Some(sig) = stop.signal() {
                if tty {
                    crate::report::err_text("\n");
                }
                return Reply::Stopped(sig);
            }
            match read_answer(&path, owner, step, &call.id) {
                Some(Ok(a)) => {
                    if tty {
                        crate::report::err_text(&format!(
                            "\n(answered by tinyagent approve: {})\n",
                            a.decision.as_str()
                        ));
                    }
                    return Reply::File(a);
                }
                Some(Err(why)) => crate::report::err_line(&format!("warning: {why}")),
                None => {}
            }
            if !tty {
                std::thread::sleep(POLL);
                continue;
            }
            match poll_line(POLL) {
                Ok(None) => {}
                Ok(Some(line)) => match parse_reply(&line) {
                    Some((d, always, reason)) => return Reply::Terminal(d, always, reason),
                    None => crate::report::err_text(&question),
                },
                Err(()) => {
                    // The terminal closed: only `tinyagent approve` can
                    // answer now.
                    tty = false;
                    crate::report::err_line(&format!(
                        "\nno terminal to answer on; answer with: {elsewhere}"
                    ));
                }
            }
        }
    })
}

/// Throws away the input the terminal on stdin holds that nobody has read
/// yet (`tcflush` with `TCIFLUSH`).
fn discard_typed_ahead() {
    use std::os::fd::AsFd;
    let stdin = std::io::stdin();
    let _ = nix::sys::termios::tcflush(stdin.as_fd(), nix::sys::termios::FlushArg::TCIFLUSH);
}

/// A line from the terminal on stdin, waiting at most `timeout`: `Ok(None)`
/// when none came, `Err` when stdin is closed. Read from the descriptor,
/// not through a buffer: the terminal hands over one line per read, and no
/// input is kept back here for a later question.
fn poll_line(timeout: Duration) -> Result<Option<String>, ()> {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    use std::os::fd::AsFd;
    let stdin = std::io::stdin();
    let ready = {
        let mut fds = [PollFd::new(stdin.as_fd(), PollFlags::POLLIN)];
        let ms = PollTimeout::try_from(timeout).unwrap_or(PollTimeout::MAX);
        match poll(&mut fds, ms) {
            Ok(0) | Err(nix::errno::Errno::EINTR) => return Ok(None),
            Ok(_) => fds[0].revents().unwrap_or(PollFlags::empty()),
            Err(_) => return Err(()),
        }
    };
    if !ready.intersects(PollFlags::POLLIN | PollFlags::POLLHUP) {
        return Ok(None);
    }
    let mut buf = [0u8; 4096];
    loop {
        match nix::unistd::read(stdin.as_fd(), &mut buf) {
            Ok(0) => return Err(()),
            Ok(n) => return Ok(Some(String::from_utf8_lossy(&buf[..n]).into_owned())),
            Err(nix::errno::Errno::EINTR) => {}
            Err(nix::errno::Errno::EAGAIN) => return Ok(None),
            Err(_) => return Err(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_are_read_with_their_reason() {
        assert_eq!(parse_reply("y\n"), Some((Decision::Allow, false, None)));
        assert_eq!(parse_reply(" A "), Some((Decision::Allow, true, None)));
        assert_eq!(
            parse_reply("n too risky\n"),
            Some((Decision::Deny, false, Some("too risky".into())))
        );
        assert_eq!(parse_reply("maybe"), None);
        assert_eq!(parse_reply(""), None);
    }

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
