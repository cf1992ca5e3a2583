//! [`LineLimit`]: a server's stdout, refused once one line grows past the
//! largest message a server may send.
//!
//! The client reads the server's messages one line at a time. A line longer
//! than [`super::MAX_MESSAGE`] (its newline counted) is never handed on:
//! the read that would cross the limit fails instead, the flag shared with
//! the server's connection is set, and the session ends, so the call that
//! waited for that line learns why at once. At most the limit of one line
//! is ever held in memory, whatever the server writes.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, ReadBuf};

/// Reads `inner`, failing once a line exceeds `max` bytes.
pub struct LineLimit<R> {
    inner: R,
    max: usize,
    /// Bytes of the current line read so far.
    line: usize,
    /// Set when a line was too long; shared with the connection.
    tripped: Arc<AtomicBool>,
}

impl<R> LineLimit<R> {
    pub fn new(inner: R, max: usize, tripped: Arc<AtomicBool>) -> LineLimit<R> {
        LineLimit {
            inner,
            max,
            line: 0,
            tripped,
        }
    }

    fn refusal(&self) -> io::Error {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("a message from the server exceeded {} bytes", self.max),
        )
    }
}

/// The length of the current line after `chunk`, or `None` when some line
/// grows past `max` within it.
fn advance(mut line: usize, chunk: &[u8], max: usize) -> Option<usize> {
    let mut rest = chunk;
    loop {
        match rest.iter().position(|b| *b == b'\n') {
            Some(i) => {
                if line + i + 1 > max {
                    return None;
                }
                line = 0;
                rest = &rest[i + 1..];
            }
            None => {
                line += rest.len();
                return (line <= max).then_some(line);
            }
        }
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for LineLimit<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.tripped.load(Ordering::SeqCst) {
            return Poll::Ready(Err(self.refusal()));
        }
        let before = buf.filled().len();
        match Pin::new(&mut self.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {}
            other => return other,
        }
        match advance(self.line, &buf.filled()[before..], self.max) {
            Some(line) => {
                self.line = line;
                Poll::Ready(Ok(()))
            }
            None => {
                // Nothing of the chunk that crosses the limit is handed on.
                buf.set_filled(before);
                self.tripped.store(true, Ordering::SeqCst);
                Poll::Ready(Err(self.refusal()))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    #[test]
    fn lines_are_counted_across_chunks_with_their_newline() {
        assert_eq!(advance(0, b"abc", 4), Some(3));
        assert_eq!(advance(3, b"\n", 4), Some(0));
        assert_eq!(advance(3, b"d", 4), Some(4));
        assert_eq!(advance(4, b"\n", 4), None);
        assert_eq!(advance(0, b"abc\nabc\nab", 4), Some(2));
        assert_eq!(advance(0, b"abc\nabcd\n", 4), None);
        assert_eq!(advance(0, b"", 4), Some(0));
    }

    fn read_all(input: Vec<u8>, max: usize) -> (io::Result<Vec<u8>>, bool) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let tripped = Arc::new(AtomicBool::new(false));
        let mut reader = LineLimit::new(&input[..], max, tripped.clone());
        let mut out = Vec::new();
        let r = rt.block_on(reader.read_to_end(&mut out)).map(|_| out);
        (r, tripped.load(Ordering::SeqCst))
    }

    #[test]
    fn short_lines_pass_and_a_long_one_is_refused() {
        let ok = b"{\"a\":1}\n{\"b\":2}\n".to_vec();
        let (r, tripped) = read_all(ok.clone(), 8);
        assert_eq!(r.unwrap(), ok);
        assert!(!tripped);
        let mut long = b"{\"a\":1}\n".to_vec();
        long.extend(std::iter::repeat_n(b'x', 1 << 20));
        long.push(b'\n');
        let (r, tripped) = read_all(long, 64 * 1024);
        assert_eq!(r.unwrap_err().kind(), io::ErrorKind::InvalidData);
        assert!(tripped);
    }
}
