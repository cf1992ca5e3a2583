//! Shortening text for output, log records and model-facing notes. Lengths
//! are in characters (Unicode scalar values) unless the name says bytes.

/// A token count as a person reads it: 950, 12.3k, 1.2M.
pub fn tokens(n: u64) -> String {
    match n {
        0..1_000 => n.to_string(),
        1_000..1_000_000 => format!("{:.1}k", n as f64 / 1e3),
        _ => format!("{:.1}M", n as f64 / 1e6),
    }
}

/// `s` cut to its first `max` characters with `marker` appended, or `s`
/// whole when it has at most `max`.
pub fn cut_chars(s: &str, max: usize, marker: &str) -> String {
    match s.char_indices().nth(max) {
        Some((end, _)) => format!("{}{marker}", &s[..end]),
        None => s.to_string(),
    }
}

/// The first line of `text` for a one-line cell: at most `max` characters,
/// ending in `…` when anything was left out (more characters or more lines).
pub fn first_line(text: &str, max: usize) -> String {
    let line = text.lines().next().unwrap_or("");
    if line.chars().count() <= max && !text.contains('\n') {
        return line.to_string();
    }
    let cut: String = line.chars().take(max.saturating_sub(1)).collect();
    format!("{cut}…")
}

/// `s` cut to at most `max` bytes on a char boundary; says so when cut.
pub fn cut_bytes(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}... [{} more bytes]", &s[..end], s.len() - end)
}

/// A start time as a row shows it: `2026-12-01 18:45:56`, or `-`.
pub fn shown_time(started_at: Option<&str>) -> String {
    started_at
        .map_or("-", |t| t.get(..19).unwrap_or(t))
        .replace('T', " ")
}

/// A task as a row shows it: its first line, cut; `(chat)` for a chat.
pub fn shown_task(task: Option<&str>) -> String {
    match task {
        Some("") => "(chat)".to_string(),
        t => first_line(t.unwrap_or("-"), 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cut_chars_counts_characters_not_bytes() {
        assert_eq!(cut_chars("abc", 3, "…"), "abc");
        assert_eq!(cut_chars("abcd", 3, "…"), "abc…");
        assert_eq!(cut_chars("ééé", 2, ""), "éé");
        assert_eq!(cut_chars("", 0, "…"), "");
        assert_eq!(cut_chars("a", 0, "…"), "…");
    }

    #[test]
    fn shortens_to_the_first_line() {
        assert_eq!(first_line("abc", 10), "abc");
        assert_eq!(first_line("abc\ndef", 10), "abc…");
        assert_eq!(first_line("abcdefghijkl", 5), "abcd…");
    }

    #[test]
    fn cut_bytes_respects_char_boundaries() {
        assert_eq!(cut_bytes("héllo", 2), "h... [5 more bytes]");
        assert_eq!(cut_bytes("abc", 3), "abc");
    }
}

/// A tool result folded for a person: the exit code a command reported
/// (its `[exit code: N]` line, taken out of the lines), and the first and
/// last lines with the count of those left out between them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Folded<'a> {
    pub exit_code: Option<&'a str>,
    pub head: Vec<&'a str>,
    /// Lines left out between `head` and `tail`.
    pub hidden: usize,
    pub tail: Vec<&'a str>,
    /// All the lines but the exit code's.
    pub lines: usize,
}

/// Folds `content` to its first `head` and last `tail` lines.
pub fn fold(content: &str, head: usize, tail: usize) -> Folded<'_> {
    let mut lines: Vec<&str> = content.trim_end().lines().collect();
    let exit_code = lines
        .last()
        .and_then(|l| l.trim().strip_prefix("[exit code: "))
        .and_then(|l| l.strip_suffix(']'));
    if exit_code.is_some() {
        lines.pop();
    }
    let total = lines.len();
    if total <= head + tail + 1 {
        return Folded {
            exit_code,
            head: lines,
            hidden: 0,
            tail: Vec::new(),
            lines: total,
        };
    }
    Folded {
        exit_code,
        head: lines[..head].to_vec(),
        hidden: total - head - tail,
        tail: lines[total - tail..].to_vec(),
        lines: total,
    }
}

#[cfg(test)]
mod fold_tests {
    use super::fold;

    #[test]
    fn a_failing_test_run_shows_its_end_and_exit_code() {
        let mut out: String = (1..=20).map(|i| format!("PASS {i}\n")).collect();
        out.push_str("FAIL parse\n[exit code: 101]\n");
        let f = fold(&out, 3, 2);
        assert_eq!(f.exit_code, Some("101"));
        assert_eq!(f.head, ["PASS 1", "PASS 2", "PASS 3"]);
        assert_eq!(f.tail, ["PASS 20", "FAIL parse"]);
        assert_eq!((f.hidden, f.lines), (16, 21));
        let short = fold("a\nb\n[exit code: 0]", 3, 2);
        assert_eq!(
            (short.head, short.hidden, short.exit_code),
            (vec!["a", "b"], 0, Some("0"))
        );
    }
}
