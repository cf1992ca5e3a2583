//! What a local server says of its model: llama.cpp's `GET /props` gives the
//! context size it was started with (`default_generation_settings.n_ctx`).
//! Asked only of plain-HTTP servers (a server on this machine or the LAN),
//! with a short timeout; any failure is "not said".

use std::io::{Read, Write};
use std::time::Duration;

/// How long the question may take in all.
const PROPS_TIMEOUT: Duration = Duration::from_secs(2);
/// The most of an answer read.
const MAX_PROPS_BYTES: u64 = 1 << 20;

/// The context window the server at `base_url` reports, if it is a
/// plain-HTTP llama.cpp server (or anything answering `/props` alike).
/// `base_url` may end in `/v1` (the OpenAI base URL); `/props` is asked
/// of the server's root.
pub fn server_context_window(base_url: &str) -> Option<u64> {
    let url = reqwest::Url::parse(base_url).ok()?;
    if url.scheme() != "http" {
        return None;
    }
    let host = url.host_str()?;
    let port = url.port_or_known_default()?;
    let root = url.path().trim_end_matches('/').trim_end_matches("/v1");
    let addr = std::net::ToSocketAddrs::to_socket_addrs(&(host, port))
        .ok()?
        .next()?;
    let mut s = std::net::TcpStream::connect_timeout(&addr, PROPS_TIMEOUT).ok()?;
    s.set_read_timeout(Some(PROPS_TIMEOUT)).ok()?;
    s.set_write_timeout(Some(PROPS_TIMEOUT)).ok()?;
    write!(
        s,
        "GET {root}/props HTTP/1.1\r\nHost: {host}\r\nAccept: application/json\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut response = Vec::new();
    s.take(MAX_PROPS_BYTES).read_to_end(&mut response).ok()?;
    n_ctx_of(&response)
}

/// `n_ctx` from a `/props` response (status line, headers, JSON body; a
/// chunked body is not read).
fn n_ctx_of(response: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(response).ok()?;
    if !text.starts_with("HTTP/1.1 200") && !text.starts_with("HTTP/1.0 200") {
        return None;
    }
    let body = &text[text.find("\r\n\r\n")? + 4..];
    let v: serde_json::Value = serde_json::from_str(body.trim()).ok()?;
    v["default_generation_settings"]["n_ctx"]
        .as_u64()
        .or_else(|| v["n_ctx"].as_u64())
        .filter(|n| *n > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn n_ctx_is_read_from_a_props_answer_and_nothing_else() {
        let ok = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n\
            {\"default_generation_settings\":{\"n_ctx\":8192,\"params\":{}},\"total_slots\":1}";
        assert_eq!(n_ctx_of(ok), Some(8192));
        assert_eq!(
            n_ctx_of(b"HTTP/1.1 404 Not Found\r\n\r\n{\"n_ctx\":5}"),
            None
        );
        assert_eq!(n_ctx_of(b"HTTP/1.1 200 OK\r\n\r\nnot json"), None);
        assert_eq!(server_context_window("https://api.openai.com/v1"), None);
    }
}
