//! The chat's input history on disk, one entry per line (the file starts
//! with `#V2`; a backslash and a newline inside an entry are written `\\`
//! and `\n`), private to the person (0600, under `$TINYAGENT_HOME`).

use std::path::Path;

const HEADER: &str = "#V2";

/// The entries of `path`, oldest first (none when it cannot be read).
pub fn load(path: &Path) -> Vec<String> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Vec::new();
    };
    text.lines()
        .filter(|l| *l != HEADER && !l.is_empty())
        .map(unescape)
        .collect()
}

/// Adds `entry` to `path`, best effort.
pub fn append(path: &Path, entry: &str) {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    if let Some(dir) = path.parent() {
        let _ = tinyagent_store::fsutil::create_dir_all_durable(dir);
    }
    let fresh = !path.exists();
    let Ok(mut file) = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .open(path)
    else {
        return;
    };
    let mut line = String::new();
    if fresh {
        line.push_str(HEADER);
        line.push('\n');
    }
    line.push_str(&entry.replace('\\', "\\\\").replace('\n', "\\n"));
    line.push('\n');
    let _ = file.write_all(line.as_bytes());
}

fn unescape(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some(other) => out.push(other),
            None => out.push('\\'),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn entries_with_newlines_and_backslashes_come_back_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("h").join("x.txt");
        super::append(&path, "one");
        super::append(&path, "two\nlines \\n");
        assert_eq!(super::load(&path), ["one", "two\nlines \\n"]);
        assert!(std::fs::read_to_string(&path).unwrap().starts_with("#V2\n"));
    }
}
