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

/// Runs `fut` to completion from synchronous code, wherever that code runs
/// (inside [`blocking`], under the command's runtime, or on a plain
/// thread): on a runtime of its own, started on first use with one worker
/// thread, while the calling thread waits. For async libraries called from
/// a synchronous path (a store's sync point, a tool): the command's runtime
/// cannot be entered again from inside it. Not for code that itself runs
/// on that side runtime (it would wait on its only worker).
pub fn wait_for<F>(fut: F) -> std::io::Result<F::Output>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    static SIDE: std::sync::OnceLock<tokio::runtime::Runtime> = std::sync::OnceLock::new();
    let rt = match SIDE.get() {
        Some(rt) => rt,
        None => {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .thread_name("tinyagent-side")
                .enable_all()
                .build()?;
            SIDE.get_or_init(|| rt)
        }
    };
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    rt.spawn(async move {
        let _ = tx.send(fut.await);
    });
    rx.recv()
        .map_err(|_| std::io::Error::other("the side runtime's task did not finish"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn synchronous_code_on_the_command_runtime_runs_blocking_work_and_waits_for_futures() {
        let rt = build().expect("runtime");
        let got = rt.block_on(async {
            // A tool's synchronous work, then an async library's call from
            // inside it (a timer needs a driver: the side runtime has one).
            blocking(|| {
                wait_for(async {
                    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
                    41 + 1
                })
            })
        });
        assert_eq!(got.expect("side runtime"), 42);
        // And from a plain thread, no runtime at all.
        let plain = std::thread::spawn(|| wait_for(async { "done" }))
            .join()
            .expect("thread");
        assert_eq!(plain.expect("side runtime"), "done");
    }
}
