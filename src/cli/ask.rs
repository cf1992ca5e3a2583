//! The approval question on the terminal: the [`Asker`] every run and chat
//! started from the command line is given.
//!
//! With a terminal on stdin the question is shown there (after anything
//! typed ahead is thrown away) and a line typed after it answers: `y`,
//! `n`, `a` (or `yes`, `no`, `always`), then an optional reason. Without
//! one (or once it closes), only `tinyagent approve` from another process
//! can answer, and the person is told how.

use crate::agent::approval::{Answer, Asker, POLL, Question, Reply};
use crate::event::Decision;
use crate::signals::StopToken;
use std::time::Duration;

/// The person at the terminal on stdin.
pub struct Terminal;

impl Asker for Terminal {
    fn ask(
        &mut self,
        question: &Question,
        elsewhere: &mut dyn FnMut() -> Option<Answer>,
        stop: &StopToken,
    ) -> Reply {
        use std::io::IsTerminal;
        let mut tty = std::io::stdin().is_terminal();
        let (always, answer_with) = (&question.always, &question.elsewhere);
        let asked = if question.details.is_empty() {
            format!(
                "approve {} ? [y]es / [n]o [reason]{always} : ",
                question.preview
            )
        } else {
            format!(
                "approve this {} ({}) ? [y]es / [n]o [reason]{always} : ",
                question.tool, question.call_id
            )
        };
        if tty {
            // Only what is typed after the question answers it: a line
            // typed ahead (or pushed into the terminal by anything) is
            // thrown away.
            discard_typed_ahead();
            crate::report::err_text(&format!(
                "{}(or answer from elsewhere: {answer_with})\n{asked}",
                question.details
            ));
        } else {
            crate::report::err_line(&format!(
                "waiting for approval of {}; answer with: {answer_with}",
                question.preview
            ));
        }
        loop {
            if let Some(sig) = stop.signal() {
                if tty {
                    crate::report::err_text("\n");
                }
                return Reply::Stopped(sig);
            }
            if let Some(a) = elsewhere() {
                if tty {
                    crate::report::err_text(&format!(
                        "\n(answered by tinyagent approve: {})\n",
                        a.decision.as_str()
                    ));
                }
                return Reply::Elsewhere(a);
            }
            if !tty {
                std::thread::sleep(POLL);
                continue;
            }
            match poll_line(POLL) {
                Ok(None) => {}
                Ok(Some(line)) => match parse_reply(&line) {
                    Some((d, always, reason)) => return Reply::Here(d, always, reason),
                    None => crate::report::err_text(&asked),
                },
                Err(()) => {
                    // The terminal closed: only `tinyagent approve` can
                    // answer now.
                    tty = false;
                    crate::report::err_line(&format!(
                        "\nno terminal to answer on; answer with: {answer_with}"
                    ));
                }
            }
        }
    }
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
}
