//! The signals that stop a run: SIGINT, SIGTERM and SIGHUP, and the
//! [`StopToken`] they set.
//!
//! A command makes one token when it starts and [`install`]s the listener
//! with it (once, from `run`, `resume` or `chat`); the token is handed down
//! to every part of the run that stops early: the loop, a tool's process,
//! a hook, an approval question, an MCP server's start and calls, the
//! chat's prompt. None of them reads a process-wide flag. The loop abandons
//! a model request with [`StopToken::wait`]; a running tool polls
//! [`StopToken::signal`] and passes the same signal to its process group,
//! then SIGKILL after [`GRACE`] (or at once when a second signal comes, see
//! [`StopToken::count`]). Nothing here acts on its own: the parts of the run
//! decide how they stop, so every stop is recorded in the log.

use nix::sys::signal::Signal;
use std::sync::Arc;
use std::sync::atomic::{AtomicI32, AtomicU32, Ordering};
use std::time::Duration;
use tokio::sync::watch;

/// How long a stopped tool's process group gets between the signal and SIGKILL.
pub const GRACE: Duration = Duration::from_secs(2);

struct Interrupt {
    /// The first signal received (0: none yet).
    first: AtomicI32,
    /// Signals received so far.
    count: AtomicU32,
    /// The count, for async waiters.
    tx: watch::Sender<u32>,
}

/// Whether the run is to stop, and by which signal: a cheap handle (clones
/// share one state) that the signal listener sets and the parts of a run
/// read.
#[derive(Clone)]
pub struct StopToken(Arc<Interrupt>);

impl Default for StopToken {
    fn default() -> StopToken {
        StopToken::new()
    }
}

impl std::fmt::Debug for StopToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StopToken")
            .field("signal", &self.signal())
            .field("count", &self.count())
            .finish()
    }
}

impl StopToken {
    /// A token no signal has set.
    pub fn new() -> StopToken {
        StopToken(Arc::new(Interrupt {
            first: AtomicI32::new(0),
            count: AtomicU32::new(0),
            tx: watch::channel(0).0,
        }))
    }

    /// Records that `sig` arrived (the listener calls it; tests may too).
    pub fn stop(&self, sig: Signal) {
        let s = &self.0;
        let _ = s
            .first
            .compare_exchange(0, sig as i32, Ordering::SeqCst, Ordering::SeqCst);
        let n = s.count.fetch_add(1, Ordering::SeqCst) + 1;
        s.tx.send_replace(n);
    }

    /// Forgets the signals received so far: a chat's Ctrl-C stopped one
    /// turn, and the next turn starts with none.
    pub fn clear(&self) {
        let s = &self.0;
        s.first.store(0, Ordering::SeqCst);
        s.count.store(0, Ordering::SeqCst);
        s.tx.send_replace(0);
    }

    /// The first stopping signal received, if any.
    pub fn signal(&self) -> Option<Signal> {
        match self.0.first.load(Ordering::SeqCst) {
            0 => None,
            n => Signal::try_from(n).ok(),
        }
    }

    /// Whether a stopping signal has arrived.
    pub fn is_stopped(&self) -> bool {
        self.signal().is_some()
    }

    /// How many stopping signals have arrived.
    pub fn count(&self) -> u32 {
        self.0.count.load(Ordering::SeqCst)
    }

    /// Resolves once a stopping signal has arrived.
    pub async fn wait(&self) {
        let mut rx = self.0.tx.subscribe();
        let _ = rx.wait_for(|n| *n > 0).await;
    }
}

/// Starts handling SIGINT, SIGTERM and SIGHUP, on a thread of their own
/// (the command's runtime has a single thread, which a running tool
/// blocks): each one sets `token`. From then on these signals no longer end
/// the process by themselves; the handlers are in place when this returns.
pub fn install(token: &StopToken) -> std::io::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()?;
    let streams = {
        let _in_rt = rt.enter();
        [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP]
            .into_iter()
            .map(|sig| Ok((sig, signal(SignalKind::from_raw(sig as i32))?)))
            .collect::<std::io::Result<Vec<_>>>()?
    };
    let token = token.clone();
    std::thread::Builder::new()
        .name("tinyagent-signals".to_string())
        .spawn(move || {
            rt.block_on(async move {
                for (sig, mut stream) in streams {
                    let token = token.clone();
                    tokio::spawn(async move {
                        while stream.recv().await.is_some() {
                            token.stop(sig);
                        }
                    });
                }
                std::future::pending::<()>().await;
            });
        })?;
    Ok(())
}

/// The signal's name as the log and messages spell it (`SIGINT`).
pub fn name(sig: Signal) -> &'static str {
    sig.as_str()
}

/// The exit code of a run stopped by `sig`: 128 + its number (130 for
/// SIGINT, 143 for SIGTERM, 129 for SIGHUP).
pub fn exit_code(sig: Signal) -> i32 {
    128 + sig as i32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clones_share_one_token_and_the_first_signal_is_kept() {
        let token = StopToken::new();
        let seen_by_a_part = token.clone();
        assert!(!seen_by_a_part.is_stopped());
        token.stop(Signal::SIGTERM);
        token.stop(Signal::SIGINT);
        assert_eq!(seen_by_a_part.signal(), Some(Signal::SIGTERM));
        assert_eq!(seen_by_a_part.count(), 2);
        // Another run's token is not touched.
        assert!(!StopToken::new().is_stopped());
        seen_by_a_part.clear();
        assert_eq!((token.signal(), token.count()), (None, 0));
    }
}
