//! A small server-sent-events decoder: bytes in (split anywhere, even inside
//! a UTF-8 character), the `data` of each complete event out.
//!
//! Lines end with `\n` (a preceding `\r` is dropped); `data:` lines of one
//! event are joined with `\n`; a blank line ends the event; comments (`:`)
//! and other fields (`event:`, `id:`, `retry:`) are ignored.

#[derive(Debug, Default)]
pub(crate) struct SseDecoder {
    line: Vec<u8>,
    data: String,
    has_data: bool,
}

impl SseDecoder {
    /// Feeds bytes; returns the data of every event completed by them.
    pub(crate) fn push(&mut self, bytes: &[u8]) -> Vec<String> {
        let mut events = Vec::new();
        for &b in bytes {
            if b == b'\n' {
                let line = std::mem::take(&mut self.line);
                if let Some(ev) = self.line_done(&line) {
                    events.push(ev);
                }
            } else {
                self.line.push(b);
            }
        }
        events
    }

    /// The end of the stream: the data of an event left without its blank line.
    pub(crate) fn finish(&mut self) -> Option<String> {
        let line = std::mem::take(&mut self.line);
        let mut out = None;
        if !line.is_empty() {
            out = self.line_done(&line);
        }
        out.or_else(|| self.line_done(b""))
    }

    fn line_done(&mut self, raw: &[u8]) -> Option<String> {
        let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
        if raw.is_empty() {
            if !self.has_data {
                return None;
            }
            self.has_data = false;
            return Some(std::mem::take(&mut self.data));
        }
        let line = String::from_utf8_lossy(raw);
        if let Some(rest) = line.strip_prefix("data:") {
            let rest = rest.strip_prefix(' ').unwrap_or(rest);
            if self.has_data {
                self.data.push('\n');
            }
            self.data.push_str(rest);
            self.has_data = true;
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STREAM: &str = ": keep-alive\r\ndata: {\"a\":\"é\"}\r\n\r\nevent: x\ndata: one\ndata: two\n\ndata: [DONE]\n\n";

    fn all_at_once() -> Vec<String> {
        let mut d = SseDecoder::default();
        let mut out = d.push(STREAM.as_bytes());
        out.extend(d.finish());
        out
    }

    #[test]
    fn decodes_events() {
        assert_eq!(all_at_once(), vec!["{\"a\":\"é\"}", "one\ntwo", "[DONE]"]);
    }

    #[test]
    fn any_split_gives_the_same_events() {
        let bytes = STREAM.as_bytes();
        for size in 1..bytes.len() {
            let mut d = SseDecoder::default();
            let mut out = Vec::new();
            for chunk in bytes.chunks(size) {
                out.extend(d.push(chunk));
            }
            out.extend(d.finish());
            assert_eq!(out, all_at_once(), "chunk size {size}");
        }
    }

    #[test]
    fn unterminated_last_event_is_kept() {
        let mut d = SseDecoder::default();
        assert!(d.push(b"data: last").is_empty());
        assert_eq!(d.finish(), Some("last".to_string()));
        assert_eq!(d.finish(), None);
    }
}
