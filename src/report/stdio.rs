//! Best-effort lines on stdout and stderr: a closed stream (EPIPE,
//! `tinyagent run … | head -1`) never takes a run down.

use std::io::Write;

/// One line on stderr, best effort: a closed stderr (EPIPE, `2>&1 | head`)
/// never takes the run down; output simply stops.
pub fn err_line(line: &str) {
    let mut e = std::io::stderr().lock();
    let _ = writeln!(e, "{line}");
}

/// Text on stderr as it is, best effort.
pub fn err_text(text: &str) {
    let mut e = std::io::stderr().lock();
    let _ = e.write_all(text.as_bytes());
    let _ = e.flush();
}

/// One line on stdout, best effort (see [`err_line`]).
pub fn out_line(line: &str) {
    let mut o = std::io::stdout().lock();
    let _ = writeln!(o, "{line}");
    let _ = o.flush();
}
