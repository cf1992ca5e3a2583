//! Model text (Markdown) as a terminal shows it: headings and strong text
//! bold, emphasis italic, code in colour, lists with bullets or numbers,
//! code blocks indented, links followed by their address. Without colour
//! the structure stays (bullets, indents) and the markup goes.

use pulldown_cmark::{CodeBlockKind, Event, HeadingLevel, Options, Parser, Tag, TagEnd};

struct Writer {
    out: String,
    color: bool,
    /// Open SGR codes, innermost last (re-applied after a reset).
    styles: Vec<&'static str>,
    /// One entry per open list: the next number (`None`: bullets).
    lists: Vec<Option<u64>>,
    quote: usize,
    in_code_block: bool,
    link: Option<String>,
}

impl Writer {
    fn push_style(&mut self, code: &'static str) {
        self.styles.push(code);
        if self.color {
            self.out.push_str(&format!("\x1b[{code}m"));
        }
    }

    fn pop_style(&mut self) {
        self.styles.pop();
        if self.color {
            self.out.push_str("\x1b[0m");
            for s in &self.styles {
                self.out.push_str(&format!("\x1b[{s}m"));
            }
        }
    }

    /// Ends the current line if something is on it.
    fn line_break(&mut self) {
        if !self.out.is_empty() && !self.out.ends_with('\n') {
            self.out.push('\n');
        }
    }

    /// A blank line between blocks (none at the top).
    fn block_gap(&mut self) {
        self.line_break();
        if !self.out.is_empty() && !self.out.ends_with("\n\n") && self.lists.is_empty() {
            self.out.push('\n');
        }
    }

    /// What starts every line: quote bars and list indents.
    fn lead(&self) -> String {
        let mut lead = "│ ".repeat(self.quote);
        lead.push_str(&"  ".repeat(self.lists.len().saturating_sub(1)));
        lead
    }

    fn text(&mut self, text: &str) {
        for (i, part) in text.split('\n').enumerate() {
            if i > 0 {
                self.out.push('\n');
            }
            if self.out.is_empty() || self.out.ends_with('\n') {
                if part.is_empty() {
                    continue;
                }
                let lead = self.lead();
                self.out.push_str(&lead);
                if self.in_code_block {
                    self.out.push_str("    ");
                }
            }
            self.out.push_str(part);
        }
    }
}

/// `markdown` rendered for a terminal (`color`: with ANSI styles).
pub fn render(markdown: &str, color: bool) -> String {
    let mut w = Writer {
        out: String::new(),
        color,
        styles: Vec::new(),
        lists: Vec::new(),
        quote: 0,
        in_code_block: false,
        link: None,
    };
    let options = Options::ENABLE_STRIKETHROUGH | Options::ENABLE_TABLES;
    for event in Parser::new_ext(markdown, options) {
        match event {
            Event::Start(tag) => start(&mut w, tag),
            Event::End(tag) => end(&mut w, tag),
            Event::Text(t) => w.text(&t),
            Event::Code(c) => {
                w.push_style("36");
                w.text(&c);
                w.pop_style();
            }
            Event::SoftBreak => w.text(" "),
            Event::HardBreak => w.text("\n"),
            Event::Rule => {
                w.block_gap();
                w.text("────────");
            }
            Event::TaskListMarker(done) => w.text(if done { "[x] " } else { "[ ] " }),
            Event::Html(h) | Event::InlineHtml(h) => w.text(&h),
            Event::FootnoteReference(f) => w.text(&format!("[{f}]")),
            Event::InlineMath(m) | Event::DisplayMath(m) => w.text(&m),
        }
    }
    w.out.trim_end().to_string()
}

fn start(w: &mut Writer, tag: Tag) {
    match tag {
        Tag::Paragraph if w.lists.is_empty() || !w.out.ends_with(' ') => w.block_gap(),
        Tag::Heading { level, .. } => {
            w.block_gap();
            let marks = match level {
                HeadingLevel::H1 => "# ",
                HeadingLevel::H2 => "## ",
                _ => "### ",
            };
            w.push_style("1");
            w.text(marks);
        }
        Tag::BlockQuote(_) => {
            w.block_gap();
            w.quote += 1;
        }
        Tag::CodeBlock(kind) => {
            w.block_gap();
            if let CodeBlockKind::Fenced(lang) = kind
                && !lang.is_empty()
            {
                w.push_style("2");
                w.text(&format!("    {lang}\n"));
                w.pop_style();
            }
            w.in_code_block = true;
            w.push_style("36");
        }
        Tag::List(first) => {
            if w.lists.is_empty() {
                w.block_gap();
            } else {
                w.line_break();
            }
            w.lists.push(first);
        }
        Tag::Item => {
            w.line_break();
            let mark = match w.lists.last_mut() {
                Some(Some(n)) => {
                    *n += 1;
                    format!("{}. ", *n - 1)
                }
                _ => "• ".to_string(),
            };
            w.text(&mark);
        }
        Tag::Emphasis => w.push_style("3"),
        Tag::Strong => w.push_style("1"),
        Tag::Strikethrough => w.push_style("9"),
        Tag::Link { dest_url, .. } => {
            w.link = Some(dest_url.to_string());
            w.push_style("4");
        }
        Tag::Image { dest_url, .. } => w.text(&format!("[image {dest_url}] ")),
        Tag::TableRow | Tag::TableHead => w.line_break(),
        Tag::TableCell => w.text("│ "),
        _ => {}
    }
}

fn end(w: &mut Writer, tag: TagEnd) {
    match tag {
        TagEnd::Heading(_) | TagEnd::Emphasis | TagEnd::Strong | TagEnd::Strikethrough => {
            w.pop_style();
        }
        TagEnd::CodeBlock => {
            w.pop_style();
            w.in_code_block = false;
            w.line_break();
        }
        TagEnd::BlockQuote(_) => w.quote = w.quote.saturating_sub(1),
        TagEnd::List(_) => {
            w.lists.pop();
            w.line_break();
        }
        TagEnd::Link => {
            w.pop_style();
            if let Some(url) = w.link.take() {
                w.text(&format!(" ({url})"));
            }
        }
        TagEnd::TableCell => w.text(" "),
        _ => {}
    }
}

/// Streamed model text rendered a line at a time: a line is shown once it
/// is complete (code fences are followed across lines).
pub struct Stream {
    color: bool,
    partial: String,
    in_fence: bool,
}

impl Stream {
    pub fn new(color: bool) -> Stream {
        Stream {
            color,
            partial: String::new(),
            in_fence: false,
        }
    }

    fn line(&mut self, line: &str) -> String {
        let trimmed = line.trim_start();
        if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
            self.in_fence = !self.in_fence;
            let lang = trimmed.trim_start_matches(['`', '~']).trim();
            return if lang.is_empty() {
                String::new()
            } else if self.color {
                format!("    \x1b[2m{lang}\x1b[0m")
            } else {
                format!("    {lang}")
            };
        }
        if self.in_fence {
            return if self.color {
                format!("    \x1b[36m{line}\x1b[0m")
            } else {
                format!("    {line}")
            };
        }
        if line.trim().is_empty() {
            return String::new();
        }
        let indent = &line[..line.len() - trimmed.len()];
        format!("{indent}{}", render(trimmed, self.color))
    }
}

impl crate::report::TextView for Stream {
    fn chunk(&mut self, text: &str) -> String {
        self.partial.push_str(text);
        let mut out = String::new();
        while let Some(at) = self.partial.find('\n') {
            let line: String = self.partial.drain(..=at).collect();
            out.push_str(&self.line(line.trim_end_matches('\n')));
            out.push('\n');
        }
        out
    }

    fn finish(&mut self) -> String {
        let rest = std::mem::take(&mut self.partial);
        let out = if rest.is_empty() {
            String::new()
        } else {
            self.line(&rest)
        };
        self.in_fence = false;
        out
    }
}

#[cfg(test)]
mod tests {
    use super::render;

    #[test]
    fn streamed_text_is_rendered_line_by_line() {
        use crate::report::TextView;
        let mut s = super::Stream::new(false);
        let mut out = s.chunk("Some **bo");
        out.push_str(&s.chunk("ld** text\n- a\n```sh\nls *\n```\nend `x`"));
        out.push_str(&s.finish());
        assert_eq!(out, "Some bold text\n• a\n    sh\n    ls *\n\nend x");
    }

    #[test]
    fn markup_becomes_layout() {
        let md = "# Title\n\nSome **bold** and `code`.\n\n- one\n- two\n  1. a\n\n```rust\nfn x() {}\n```\n\nSee [docs](http://d).";
        assert_eq!(
            render(md, false),
            "# Title\n\nSome bold and code.\n\n• one\n• two\n  1. a\n\n    rust\n    fn x() {}\n\nSee docs (http://d)."
        );
        let colored = render("**b**", true);
        assert_eq!(colored, "\x1b[1mb\x1b[0m");
    }
}
