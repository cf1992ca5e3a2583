//! The real binary on a real pseudo-terminal, read as a person sees it: the
//! pty's output goes through a terminal emulator (`vt100`), and tests assert
//! on the screen's rows, not on the byte stream. The emulator answers the
//! cursor-position query (`ESC [ 6 n`) as a terminal does, which an inline
//! viewport needs.
//!
//! The pty is 40 rows by 120 columns; the child runs in a session of its
//! own with the pty as its controlling terminal (`setsid --ctty`), so
//! Ctrl-C typed there is a SIGINT when the terminal is not in raw mode.

use std::io::{Read, Write};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub const ROWS: u16 = 40;
pub const COLS: u16 = 120;
/// How long one wait lasts before the test fails, showing the screen.
pub const TIMEOUT: Duration = Duration::from_secs(30);

const QUERY: &[u8] = b"\x1b[6n";

pub struct Screen {
    parser: Arc<Mutex<vt100::Parser>>,
    /// Every byte the program wrote, for failure messages.
    raw: Arc<Mutex<Vec<u8>>>,
    master: Arc<Mutex<std::fs::File>>,
    child: Child,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Screen {
    /// Starts `cmd` (its program, arguments, environment and directory) on
    /// a new pty.
    pub fn spawn(cmd: &Command) -> Screen {
        let size = nix::pty::Winsize {
            ws_row: ROWS,
            ws_col: COLS,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        let pty = nix::pty::openpty(Some(&size), None).expect("openpty");
        let mut real = Command::new("setsid");
        real.arg("--ctty")
            .arg(cmd.get_program())
            .args(cmd.get_args());
        for (k, v) in cmd.get_envs() {
            match v {
                Some(v) => real.env(k, v),
                None => real.env_remove(k),
            };
        }
        if let Some(dir) = cmd.get_current_dir() {
            real.current_dir(dir);
        }
        real.env("TERM", "xterm-256color");
        let slave = std::fs::File::from(pty.slave);
        real.stdin(Stdio::from(slave.try_clone().unwrap()))
            .stdout(Stdio::from(slave.try_clone().unwrap()))
            .stderr(Stdio::from(slave));
        let child = real.spawn().expect("spawn on the pty");
        drop(real);
        let master = std::fs::File::from(pty.master);
        let parser = Arc::new(Mutex::new(vt100::Parser::new(ROWS, COLS, 2000)));
        let raw = Arc::new(Mutex::new(Vec::new()));
        let writer = Arc::new(Mutex::new(master.try_clone().unwrap()));
        let reader = {
            let (parser, raw, writer) = (parser.clone(), raw.clone(), writer.clone());
            let mut master = master;
            std::thread::spawn(move || {
                let mut buf = [0u8; 8192];
                let mut carry: Vec<u8> = Vec::new();
                loop {
                    let n = match master.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => n,
                    };
                    raw.lock().unwrap().extend_from_slice(&buf[..n]);
                    carry.extend_from_slice(&buf[..n]);
                    feed(&parser, &writer, &mut carry);
                }
            })
        };
        Screen {
            parser,
            raw,
            master: writer,
            child,
            reader: Some(reader),
        }
    }

    /// The visible screen, one string per row (trailing blanks cut).
    pub fn rows(&self) -> Vec<String> {
        let p = self.parser.lock().unwrap();
        p.screen()
            .rows(0, COLS)
            .map(|r| r.trim_end().to_string())
            .collect()
    }

    /// The visible screen as text.
    pub fn contents(&self) -> String {
        self.parser.lock().unwrap().screen().contents()
    }

    /// The scrollback and the screen, top to bottom: the whole session as
    /// the terminal kept it.
    pub fn history(&self) -> String {
        let mut p = self.parser.lock().unwrap();
        p.screen_mut().set_scrollback(usize::MAX);
        let above = p.screen().scrollback();
        let mut lines: Vec<String> = Vec::new();
        // Page from the oldest line down, a screen at a time.
        let mut offset = above;
        loop {
            p.screen_mut().set_scrollback(offset);
            let rows: Vec<String> = p.screen().rows(0, COLS).collect();
            let take = if offset >= ROWS as usize {
                ROWS as usize
            } else {
                offset
            };
            if offset == 0 {
                lines.extend(rows);
                break;
            }
            lines.extend(rows.into_iter().take(take));
            offset -= take;
        }
        p.screen_mut().set_scrollback(0);
        lines
            .iter()
            .map(|l| l.trim_end())
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The row the cursor is on.
    pub fn cursor_row(&self) -> String {
        let row = self.parser.lock().unwrap().screen().cursor_position().0;
        self.rows()[row as usize].clone()
    }

    /// Waits until `check` holds of the whole session's text; gives that
    /// text. Fails showing the screen.
    pub fn wait_until(&self, what: &str, check: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + TIMEOUT;
        loop {
            let text = self.history();
            if check(&text) {
                return text;
            }
            assert!(
                Instant::now() <= deadline,
                "timed out waiting for {what}; the terminal shows:\n{text}\n--- raw tail: {:?}",
                String::from_utf8_lossy(&self.raw_tail())
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits until `text` is on the screen or in the scrollback.
    pub fn wait_for(&self, text: &str) -> String {
        self.wait_until(text, |t| t.contains(text))
    }

    /// Waits until the cursor sits in a prompt's input (a row that starts
    /// with `prompt`): keys typed now go to it. (A Ctrl-D typed before the
    /// terminal leaves its line mode is an end of file nobody reads.)
    pub fn wait_prompt(&self, prompt: &str) {
        let deadline = Instant::now() + TIMEOUT;
        while !self.cursor_row().starts_with(prompt) {
            assert!(
                Instant::now() <= deadline,
                "timed out waiting for the prompt; the terminal shows:\n{}",
                self.history()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        // Raw mode is on before the prompt is drawn.
        std::thread::sleep(Duration::from_millis(50));
    }

    /// Waits until `text` shows `n` times.
    pub fn wait_count(&self, text: &str, n: usize) -> String {
        self.wait_until(&format!("{text:?} {n} times"), |t| {
            t.matches(text).count() >= n
        })
    }

    /// Waits until the screen stops changing for `quiet`.
    pub fn settle(&self, quiet: Duration) {
        let mut last = self.raw.lock().unwrap().len();
        let mut since = Instant::now();
        let deadline = Instant::now() + TIMEOUT;
        while since.elapsed() < quiet && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
            let now = self.raw.lock().unwrap().len();
            if now != last {
                last = now;
                since = Instant::now();
            }
        }
    }

    fn raw_tail(&self) -> Vec<u8> {
        let raw = self.raw.lock().unwrap();
        raw[raw.len().saturating_sub(600)..].to_vec()
    }

    /// Types `text` (keys as bytes: `\r` is Enter, `\t` Tab, `\x04` Ctrl-D).
    pub fn send(&self, text: &str) {
        let mut m = self.master.lock().unwrap();
        m.write_all(text.as_bytes()).unwrap();
        m.flush().unwrap();
    }

    /// Types `text` and Enter.
    pub fn line(&self, text: &str) {
        self.send(text);
        std::thread::sleep(Duration::from_millis(30));
        self.send("\r");
    }

    /// Waits for the program to end; its exit code (`None`: a signal).
    pub fn exit_code(&mut self) -> Option<i32> {
        let deadline = Instant::now() + TIMEOUT;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                if let Some(r) = self.reader.take() {
                    let _ = r.join();
                }
                return status.code();
            }
            assert!(
                Instant::now() < deadline,
                "the program did not end:\n{}",
                self.history()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Screen {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Feeds what is in `carry` to the emulator, answering each cursor-position
/// query with where the cursor is at that point; keeps in `carry` a tail
/// that may be the start of a query.
fn feed(parser: &Mutex<vt100::Parser>, writer: &Mutex<std::fs::File>, carry: &mut Vec<u8>) {
    loop {
        match find(carry, QUERY) {
            Some(at) => {
                let mut p = parser.lock().unwrap();
                p.process(&carry[..at]);
                let (row, col) = p.screen().cursor_position();
                drop(p);
                let answer = format!("\x1b[{};{}R", row + 1, col + 1);
                let _ = writer.lock().unwrap().write_all(answer.as_bytes());
                carry.drain(..at + QUERY.len());
            }
            None => {
                // A query's first bytes may end the chunk: keep them.
                let keep = (1..QUERY.len())
                    .rev()
                    .find(|&k| carry.len() >= k && carry.ends_with(&QUERY[..k]))
                    .unwrap_or(0);
                let upto = carry.len() - keep;
                parser.lock().unwrap().process(&carry[..upto]);
                carry.drain(..upto);
                return;
            }
        }
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}
