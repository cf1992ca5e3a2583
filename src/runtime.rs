//! The async runtime a command runs on, and how synchronous work runs on it.
//!
//! One current-thread tokio runtime: the agent's loop, the HTTP client's
//! connection task and the model request's timers all run on the main
//! thread, so a request and its reply cross no thread (a multi-thread
//! runtime put the connection on a worker and woke the loop's thread twice
//! a step). The signal listener has its own thread ([`crate::signals`]),
//! because a tool blocks the main thread for as long as it runs.
//!
//! Tools, hooks and the log are synchronous: [`blocking`] runs them. On the
//! current-thread runtime that is a plain call (nothing else needs the
//! thread meanwhile: the connection is idle between requests); on a
//! multi-thread runtime (an embedder's, or tests') it hands the worker's
//! other tasks to another thread first, as `block_in_place` does.

/// The runtime every command runs on.
pub fn build() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
}

/// Runs synchronous `f` from async code (see the module docs).
///
/// On the current-thread runtime `f` still runs inside the runtime's
/// context: it must not start or drop a runtime of its own except through
/// `shutdown_background`, nor use tokio's `blocking_*` calls.
pub fn blocking<R>(f: impl FnOnce() -> R) -> R {
    match tokio::runtime::Handle::try_current() {
        Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(f)
        }
        _ => f(),
    }
}
