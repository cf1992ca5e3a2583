//! The mock server's own time, measured at its sockets.
//!
//! [`TimedListener`] hands the server connections whose reads and writes
//! are timed. The server's time for a request runs from the start of the
//! last read that returned some of it to the last write of the answer:
//! that read, parsing, handling, writing. The earlier reads of a large
//! request are not counted: they may run while the client is still
//! sending, on the other core, and the client's time is never to be
//! taken for the server's. Nor is the wait for the next request.
//!
//! A handler's timer alone would miss the server's reading of the body
//! before the handler runs and its writing of the answer after: for a
//! 100 KB request that is tens of microseconds of the server's work that a
//! benchmark would count as the client's.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Instant;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};

/// Accepts connections that add their busy time to one counter.
pub struct TimedListener {
    inner: TcpListener,
    busy: Arc<AtomicU64>,
}

impl TimedListener {
    pub fn new(inner: TcpListener, busy: Arc<AtomicU64>) -> Self {
        TimedListener { inner, busy }
    }
}

impl axum::serve::Listener for TimedListener {
    type Io = TimedStream;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        let (io, addr) = axum::serve::Listener::accept(&mut self.inner).await;
        let stream = TimedStream {
            inner: io,
            busy: Arc::clone(&self.busy),
            phase: Phase::Idle,
        };
        (stream, addr)
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.inner.local_addr()
    }
}

/// A connection whose server-side time is added to `busy` (nanoseconds)
/// as it goes, so the total is current whenever the client has its answer.
pub struct TimedStream {
    inner: TcpStream,
    busy: Arc<AtomicU64>,
    /// Where the current request or answer stands.
    phase: Phase,
}

/// What the connection's server is doing.
#[derive(Clone, Copy)]
enum Phase {
    /// Waiting for a request.
    Idle,
    /// Reading one: when the read that got its latest bytes began.
    Reading(Instant),
    /// Answering: when its latest bytes were written.
    Writing(Instant),
}

impl TimedStream {
    fn add(&self, from: Instant, to: Instant) {
        let nanos = u64::try_from(to.duration_since(from).as_nanos()).unwrap_or(u64::MAX);
        self.busy.fetch_add(nanos, Ordering::Relaxed);
    }

    /// Bytes were written: the time since the request was read (or since
    /// the last write) was the server's.
    fn wrote(&mut self) {
        let now = Instant::now();
        match self.phase {
            Phase::Reading(at) | Phase::Writing(at) => self.add(at, now),
            Phase::Idle => {}
        }
        self.phase = Phase::Writing(now);
    }
}

impl AsyncRead for TimedStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let asked = Instant::now();
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            // Only the last read of a request counts from its start: an
            // earlier one may have run while the client was still sending
            // (on the other core), and the gaps between them may be the
            // client's.
            self.phase = Phase::Reading(asked);
        }
        polled
    }
}

impl AsyncWrite for TimedStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, data);
        if polled.is_ready() {
            self.wrote();
        }
        polled
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if polled.is_ready() {
            self.wrote();
        }
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
