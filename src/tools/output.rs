//! Bounded output: a buffer that keeps the head and the tail of a stream and
//! counts what it dropped, so that a command printing gigabytes costs a fixed
//! amount of memory and the model still sees how it started and how it ended.

use std::collections::VecDeque;

/// Default cap of a command's output shown to the model, in bytes.
pub const OUTPUT_CAP: usize = 30_000;

/// Keeps the first `head_cap` and the last `tail_cap` bytes written to it.
#[derive(Debug, Clone)]
pub struct HeadTail {
    head: Vec<u8>,
    tail: VecDeque<u8>,
    head_cap: usize,
    tail_cap: usize,
    total: u64,
}

impl HeadTail {
    /// A buffer that shows at most `cap` bytes: half head, half tail.
    pub fn new(cap: usize) -> Self {
        let head_cap = cap / 2;
        HeadTail {
            head: Vec::new(),
            tail: VecDeque::new(),
            head_cap,
            tail_cap: cap - head_cap,
            total: 0,
        }
    }

    pub fn push(&mut self, mut bytes: &[u8]) {
        self.total += bytes.len() as u64;
        let room = self.head_cap.saturating_sub(self.head.len());
        let take = room.min(bytes.len());
        self.head.extend_from_slice(&bytes[..take]);
        bytes = &bytes[take..];
        if bytes.len() >= self.tail_cap {
            self.tail.clear();
            self.tail.extend(&bytes[bytes.len() - self.tail_cap..]);
            return;
        }
        let overflow = (self.tail.len() + bytes.len()).saturating_sub(self.tail_cap);
        self.tail.drain(..overflow);
        self.tail.extend(bytes);
    }

    /// The last line with text in it so far (for live progress), cut to
    /// `max` characters.
    pub fn last_line(&self, max: usize) -> String {
        let bytes: Vec<u8> = if self.tail.is_empty() {
            let from = self.head.len().saturating_sub(512);
            self.head[from..].to_vec()
        } else {
            let from = self.tail.len().saturating_sub(512);
            self.tail.iter().skip(from).copied().collect()
        };
        let text = String::from_utf8_lossy(&bytes);
        let line = text
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("");
        crate::text::cut_chars(line.trim(), max, "…")
    }

    /// Bytes that were dropped between head and tail.
    pub fn cut(&self) -> u64 {
        self.total - self.head.len() as u64 - self.tail.len() as u64
    }

    /// The kept text (lossy UTF-8), with a marker where bytes were cut.
    pub fn render(&self) -> String {
        let mut out = String::from_utf8_lossy(&self.head).into_owned();
        let cut = self.cut();
        if cut > 0 {
            out.push_str(&format!(
                "\n[... {cut} bytes of output cut; {} bytes in total ...]\n",
                self.total
            ));
        }
        let tail: Vec<u8> = self.tail.iter().copied().collect();
        out.push_str(&String::from_utf8_lossy(&tail));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_output_is_kept_whole() {
        let mut b = HeadTail::new(10);
        b.push(b"abc");
        b.push(b"de");
        assert_eq!(b.render(), "abcde");
        assert_eq!(b.cut(), 0);
    }

    #[test]
    fn exactly_cap_is_not_cut() {
        let mut b = HeadTail::new(10);
        b.push(b"0123456789");
        assert_eq!(b.render(), "0123456789");
    }

    #[test]
    fn keeps_head_and_tail_across_many_pushes() {
        let mut b = HeadTail::new(10);
        for i in 0..100u8 {
            b.push(&[b'a' + (i % 26)]);
        }
        assert_eq!(b.cut(), 90);
        let r = b.render();
        assert!(r.starts_with("abcde\n[... 90 bytes of output cut; 100 bytes in total ...]\n"));
        // bytes 95..100 are i = 95..99 -> letters (95%26=17 -> 'r') .. 'v'
        assert!(r.ends_with("rstuv"), "{r}");
    }

    #[test]
    fn one_big_push_keeps_its_end() {
        let mut b = HeadTail::new(4);
        b.push(b"0123456789");
        assert_eq!(
            b.render(),
            "01\n[... 6 bytes of output cut; 10 bytes in total ...]\n89"
        );
    }
}
