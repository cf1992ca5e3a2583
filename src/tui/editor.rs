//! The chat's input as text and a cursor: editing, lines, history and the
//! completion of slash commands. Pure: the keys come in, the text goes out;
//! [`super::prompt`] draws it.

/// The text being typed (several lines allowed) and where the cursor is.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Input {
    text: String,
    /// The cursor, as a byte offset into `text` on a char boundary.
    cursor: usize,
    /// Earlier entries, oldest first.
    history: Vec<String>,
    /// The entry shown (`None`: the text being typed, kept in `draft`).
    browsing: Option<usize>,
    draft: String,
}

impl Input {
    pub fn new(history: Vec<String>) -> Input {
        Input {
            history,
            ..Input::default()
        }
    }

    pub fn text(&self) -> &str {
        &self.text
    }

    pub fn is_empty(&self) -> bool {
        self.text.is_empty()
    }

    /// The cursor's line and column (in chars).
    pub fn cursor_at(&self) -> (usize, usize) {
        let before = &self.text[..self.cursor];
        let line = before.matches('\n').count();
        let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count());
        (line, col)
    }

    pub fn line_count(&self) -> usize {
        self.text.split('\n').count()
    }

    pub fn insert(&mut self, c: char) {
        self.text.insert(self.cursor, c);
        self.cursor += c.len_utf8();
    }

    pub fn insert_str(&mut self, s: &str) {
        self.text.insert_str(self.cursor, s);
        self.cursor += s.len();
    }

    pub fn backspace(&mut self) {
        if let Some(c) = self.text[..self.cursor].chars().next_back() {
            self.cursor -= c.len_utf8();
            self.text.remove(self.cursor);
        }
    }

    pub fn delete(&mut self) {
        if self.cursor < self.text.len() {
            self.text.remove(self.cursor);
        }
    }

    pub fn left(&mut self) {
        if let Some(c) = self.text[..self.cursor].chars().next_back() {
            self.cursor -= c.len_utf8();
        }
    }

    pub fn right(&mut self) {
        if let Some(c) = self.text[self.cursor..].chars().next() {
            self.cursor += c.len_utf8();
        }
    }

    /// To the start of the cursor's line.
    pub fn home(&mut self) {
        self.cursor = self.text[..self.cursor].rfind('\n').map_or(0, |i| i + 1);
    }

    /// To the end of the cursor's line.
    pub fn end(&mut self) {
        self.cursor += self.text[self.cursor..]
            .find('\n')
            .unwrap_or(self.text.len() - self.cursor);
    }

    /// Empties the input (Ctrl-U, Ctrl-C).
    pub fn clear(&mut self) {
        self.text.clear();
        self.cursor = 0;
        self.browsing = None;
    }

    /// Up: the line above, or from the first line the previous entry.
    pub fn up(&mut self) {
        let (line, col) = self.cursor_at();
        if line > 0 {
            self.go_to_line(line - 1, col);
            return;
        }
        let next = match self.browsing {
            None if self.history.is_empty() => return,
            None => {
                self.draft = self.text.clone();
                self.history.len() - 1
            }
            Some(0) => return,
            Some(i) => i - 1,
        };
        self.browsing = Some(next);
        self.show(self.history[next].clone());
    }

    /// Down: the line below, or from the last line the next entry (after
    /// the newest, what was being typed).
    pub fn down(&mut self) {
        let (line, col) = self.cursor_at();
        if line + 1 < self.line_count() {
            self.go_to_line(line + 1, col);
            return;
        }
        match self.browsing {
            None => {}
            Some(i) if i + 1 < self.history.len() => {
                self.browsing = Some(i + 1);
                self.show(self.history[i + 1].clone());
            }
            Some(_) => {
                self.browsing = None;
                let draft = std::mem::take(&mut self.draft);
                self.show(draft);
            }
        }
    }

    fn show(&mut self, text: String) {
        self.text = text;
        self.cursor = self.text.len();
    }

    fn go_to_line(&mut self, line: usize, col: usize) {
        let start: usize = self.text.split('\n').take(line).map(|l| l.len() + 1).sum();
        let here = self.text[start..].split('\n').next().unwrap_or("");
        let offset: usize = here.chars().take(col).map(char::len_utf8).sum();
        self.cursor = start + offset;
    }

    /// Takes the text (Enter): it goes into the history (when not blank
    /// and not the last entry again) and the input is empty again.
    pub fn submit(&mut self) -> String {
        let text = std::mem::take(&mut self.text);
        self.cursor = 0;
        self.browsing = None;
        self.draft.clear();
        if !text.trim().is_empty() && self.history.last() != Some(&text) {
            self.history.push(text.clone());
        }
        text
    }

    /// Tab: completes a slash command's name. Gives the names that match
    /// when more than one does (nothing is changed then beyond their
    /// common start).
    pub fn complete(&mut self) -> Vec<&'static str> {
        let word_end = self.text.find([' ', '\n']).unwrap_or(self.text.len());
        if !self.text.starts_with('/') || self.cursor > word_end {
            return Vec::new();
        }
        let typed = &self.text[1..word_end];
        let matches = super::commands::complete(typed);
        let common = common_start(&matches);
        if matches.len() == 1 {
            let rest = self.text[word_end..].to_string();
            let sep = if rest.is_empty() { " " } else { "" };
            self.text = format!("/{}{sep}{rest}", matches[0]);
            self.cursor = 1 + matches[0].len() + sep.len();
            return Vec::new();
        }
        if common.len() > typed.len() {
            let rest = self.text[word_end..].to_string();
            self.text = format!("/{common}{rest}");
            self.cursor = 1 + common.len();
        }
        matches
    }
}

/// The longest start every name shares.
fn common_start(names: &[&str]) -> String {
    let Some(first) = names.first() else {
        return String::new();
    };
    let mut len = first.len();
    for n in &names[1..] {
        len = first
            .bytes()
            .zip(n.bytes())
            .take(len)
            .take_while(|(a, b)| a == b)
            .count();
    }
    first[..len].to_string()
}

#[cfg(test)]
mod tests {
    use super::Input;

    fn typed(s: &str) -> Input {
        let mut i = Input::new(vec!["one".into(), "two\nlines".into()]);
        i.insert_str(s);
        i
    }

    #[test]
    fn editing_moves_by_chars_and_lines() {
        let mut i = typed("héllo");
        i.left();
        i.left();
        i.backspace();
        assert_eq!(i.text(), "hélo");
        i.home();
        i.delete();
        assert_eq!((i.text(), i.cursor_at()), ("élo", (0, 0)));
        i.end();
        i.insert('\n');
        i.insert_str("ab");
        assert_eq!(i.cursor_at(), (1, 2));
        i.up();
        assert_eq!(i.cursor_at(), (0, 2));
        i.down();
        assert_eq!(i.cursor_at(), (1, 2));
        assert_eq!(i.line_count(), 2);
    }

    #[test]
    fn history_goes_back_and_returns_to_the_draft() {
        let mut i = typed("dra");
        i.up();
        assert_eq!(i.text(), "two\nlines");
        i.up();
        assert_eq!(
            i.text(),
            "two\nlines",
            "inside a multi-line entry up moves a line"
        );
        i.up();
        assert_eq!(i.text(), "one");
        i.up();
        assert_eq!(i.text(), "one");
        i.down();
        assert_eq!(i.text(), "two\nlines");
        i.down();
        assert_eq!(i.text(), "dra");
        assert_eq!(i.submit(), "dra");
        i.up();
        assert_eq!(i.text(), "dra");
    }

    #[test]
    fn tab_completes_a_command_name_or_lists_the_candidates() {
        let mut i = typed("/he");
        assert!(i.complete().is_empty());
        assert_eq!(i.text(), "/help ");
        let mut i = typed("/c");
        assert_eq!(i.complete(), ["compact", "cost"]);
        assert_eq!(i.text(), "/co");
        let mut i = typed("hello /he");
        assert!(i.complete().is_empty());
        assert_eq!(i.text(), "hello /he");
    }
}
