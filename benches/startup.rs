//! Startup to an input prompt: `tinyagent chat` on a real pseudo-terminal,
//! from spawning the binary to the prompt's status line on the screen (the
//! pty's output read through a terminal emulator, which answers the
//! cursor-position query as a terminal does). The chat is then ended with
//! Ctrl-D. No model request is made (none is before the first message).
//!
//! `cargo bench --bench startup` (the binary under test: $TINYAGENT_BENCH_BIN,
//! else this build's). The goal is a median under 100 ms.

use criterion::{Criterion, criterion_group, criterion_main};
use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn binary() -> PathBuf {
    std::env::var_os("TINYAGENT_BENCH_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_tinyagent")))
}

/// One start: the time until the status line shows.
fn start_once(dir: &std::path::Path, n: u64) -> Duration {
    let size = nix::pty::Winsize {
        ws_row: 40,
        ws_col: 120,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    let pty = nix::pty::openpty(Some(&size), None).expect("openpty");
    let slave = std::fs::File::from(pty.slave);
    let mut master = std::fs::File::from(pty.master);
    let wal = dir.join(format!("r{n}.wal"));
    let began = Instant::now();
    let mut child = Command::new("setsid")
        .arg("--ctty")
        .arg(binary())
        .args([
            "chat",
            "--base-url",
            "http://127.0.0.1:9/v1",
            "--model",
            "bench",
        ])
        .arg("--wal")
        .arg(&wal)
        .current_dir(dir.join("ws"))
        .env("TINYAGENT_HOME", dir.join("home"))
        .env("TERM", "xterm-256color")
        .env_remove("OPENAI_API_KEY")
        .stdin(Stdio::from(slave.try_clone().unwrap()))
        .stdout(Stdio::from(slave.try_clone().unwrap()))
        .stderr(Stdio::from(slave))
        .spawn()
        .expect("spawn");
    let mut parser = vt100::Parser::new(40, 120, 0);
    let mut buf = [0u8; 8192];
    let elapsed = loop {
        let n = master.read(&mut buf).expect("read the pty");
        let chunk = &buf[..n];
        // Answer the cursor-position query where it comes.
        let mut rest = chunk;
        while let Some(at) = rest.windows(4).position(|w| w == b"\x1b[6n") {
            parser.process(&rest[..at]);
            let (r, c) = parser.screen().cursor_position();
            master
                .write_all(format!("\x1b[{};{}R", r + 1, c + 1).as_bytes())
                .unwrap();
            rest = &rest[at + 4..];
        }
        parser.process(rest);
        // The prompt's status line (it starts with the model's name), not
        // the run's first line, which names the approvals and environment
        // too.
        if parser
            .screen()
            .rows(0, 120)
            .any(|row| row.starts_with("bench · ") && row.contains(" · context "))
        {
            break began.elapsed();
        }
    };
    // Ctrl-D once the prompt reads keys; then drain until it exits.
    std::thread::sleep(Duration::from_millis(50));
    master.write_all(b"\x04").unwrap();
    let deadline = Instant::now() + Duration::from_secs(3);
    while child.try_wait().ok().flatten().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    elapsed
}

fn startup(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    // An empty workspace of its own: the logs and their stores are beside it.
    std::fs::create_dir(dir.path().join("ws")).unwrap();
    let mut n = 0;
    let mut group = c.benchmark_group("startup");
    group.sample_size(10);
    group.bench_function("chat_to_prompt", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                n += 1;
                total += start_once(dir.path(), n);
            }
            total
        });
    });
    group.finish();
}

criterion_group!(benches, startup);
criterion_main!(benches);
