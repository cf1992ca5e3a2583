//! The signals that stop a run: SIGINT, SIGTERM and SIGHUP.
//!
//! Signals belong to the whole process, so the interrupt is process-wide:
//! [`install`] starts listening (once, from `run`, `resume` or `chat`), and
//! any part of the run asks [`received`] whether it should stop. The loop
//! abandons a model request with [`wait`]; a running tool polls
//! [`received`] and passes the same signal to its process group, then
//! SIGKILL after [`GRACE`] (or at once when a second signal comes, see
//! [`count`]). Nothing here acts on its own: the parts of the run decide
//! how they stop, so every stop is recorded in the log.

use nix::sys::signal::Signal;
use std::sync::OnceLock;
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

static INTERRUPT: OnceLock<Interrupt> = OnceLock::new();

fn state() -> &'static Interrupt {
    INTERRUPT.get_or_init(|| Interrupt {
        first: AtomicI32::new(0),
        count: AtomicU32::new(0),
        tx: watch::channel(0).0,
    })
}

/// Starts handling SIGINT, SIGTERM and SIGHUP, on a thread of their own
/// (the command's runtime has a single thread, which a running tool
/// blocks). From then on these signals no longer end the process by
/// themselves; the handlers are in place when this returns.
pub fn install() -> std::io::Result<()> {
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
    std::thread::Builder::new()
        .name("tinyagent-signals".to_string())
        .spawn(move || {
            rt.block_on(async move {
                for (sig, mut stream) in streams {
                    tokio::spawn(async move {
                        while stream.recv().await.is_some() {
                            note(sig);
                        }
                    });
                }
                std::future::pending::<()>().await;
            });
        })?;
    Ok(())
}

/// Records that `sig` arrived (the listener calls it; tests may too).
pub fn note(sig: Signal) {
    let s = state();
    let _ = s
        .first
        .compare_exchange(0, sig as i32, Ordering::SeqCst, Ordering::SeqCst);
    let n = s.count.fetch_add(1, Ordering::SeqCst) + 1;
    s.tx.send_replace(n);
}

/// Forgets the signals received so far: a chat's Ctrl-C stopped one turn,
/// and the next turn starts with none.
pub fn clear() {
    let s = state();
    s.first.store(0, Ordering::SeqCst);
    s.count.store(0, Ordering::SeqCst);
    s.tx.send_replace(0);
}

/// The first stopping signal received, if any.
pub fn received() -> Option<Signal> {
    match state().first.load(Ordering::SeqCst) {
        0 => None,
        n => Signal::try_from(n).ok(),
    }
}

/// How many stopping signals have arrived.
pub fn count() -> u32 {
    state().count.load(Ordering::SeqCst)
}

/// Resolves once a stopping signal has arrived.
pub async fn wait() {
    let mut rx = state().tx.subscribe();
    let _ = rx.wait_for(|n| *n > 0).await;
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
