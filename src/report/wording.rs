//! The short texts the human view is made of: a step's token counts, a
//! call as one line, a path under the home directory from `~`, an indented
//! block.

/// ` · 12.3k in (96% cached) / 210 out`: a step's tokens, when the server
/// reported them; the cached share when it served some from its cache.
pub(super) fn usage_text(u: &crate::event::Usage) -> String {
    let all = u.all_input();
    if all == 0 && u.output_tokens == 0 {
        return String::new();
    }
    let cached = if u.cached_input_tokens > 0 {
        format!(" ({}% cached)", u.cached_input_tokens * 100 / all.max(1))
    } else {
        String::new()
    };
    format!(
        " · {} in{cached} / {} out",
        crate::text::tokens(all),
        crate::text::tokens(u.output_tokens)
    )
}

/// A call as a person scans it: what it acts on first (`edit src/a.rs`,
/// `bash: cargo test`), then the rest of its arguments.
pub(crate) fn call_preview(name: &str, arguments: &str) -> String {
    let Ok(serde_json::Value::Object(mut args)) = serde_json::from_str(arguments) else {
        return format!("{name} {}", preview(arguments, 100));
    };
    let head = ["command", "path", "pattern"]
        .iter()
        .find_map(|k| args.remove(*k).map(|v| (*k, v)));
    // An edit or a write in words, not its JSON (the approval question and
    // the result show the diff).
    let count = |k: &str| {
        args.get(k)
            .and_then(|v| v.as_str())
            .map_or(0, |t| t.lines().count())
    };
    let plural = |n: usize| if n == 1 { "" } else { "s" };
    if let (Some(("path", serde_json::Value::String(path))), "edit" | "write") = (&head, name) {
        let what = if name == "edit" {
            let (old, new) = (count("old_string"), count("new_string"));
            format!("replace {old} line{} with {new}", plural(old))
        } else {
            let n = count("content");
            format!("{n} line{}", plural(n))
        };
        return format!("{name} {} ({what})", preview(path, 120));
    }
    let rest = if args.is_empty() {
        String::new()
    } else {
        format!(
            " {}",
            preview(&serde_json::Value::Object(args).to_string(), 80)
        )
    };
    match head {
        Some(("command", serde_json::Value::String(cmd))) => {
            format!("{name}: {}{rest}", preview(&cmd, 120))
        }
        Some((_, serde_json::Value::String(target))) => {
            format!("{name} {}{rest}", preview(&target, 120))
        }
        _ => format!("{name} {}", preview(arguments, 100)),
    }
}

/// `s` on one line (newlines shown as `⏎`), cut to `max` characters.
pub(super) fn preview(s: &str, max: usize) -> String {
    crate::text::cut_chars(&s.replace('\n', "⏎"), max, "…")
}

/// A path under the home directory written from `~`.
pub(super) fn home_as_tilde(path: &str) -> String {
    match std::env::var("HOME") {
        Ok(home) if home.len() > 1 && path.starts_with(&format!("{home}/")) => {
            format!("~{}", &path[home.len()..])
        }
        _ => path.to_string(),
    }
}

/// Each line of `s` indented by four spaces.
pub(super) fn indent(s: &str) -> String {
    s.lines()
        .map(|l| format!("    {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}
