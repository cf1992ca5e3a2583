//! Shortening text for output, log records and model-facing notes. Lengths
//! are in characters (Unicode scalar values) unless the name says bytes.

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
