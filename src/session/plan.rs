//! Pure plan logic: the rules an `update_plan` call must follow, the compact
//! rendering the model sees (the `[Current plan]` block, the tool's return
//! text, the resume notice), the per-version diff kept in the plan history,
//! and the Markdown mirror written for `--plan-file`.
//!
//! Nothing here does I/O; every function is a plain transformation of values.

use super::Plan;
use crate::event::{PlanItem, PlanStatus};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

/// First line of the pinned plan message.
pub const BLOCK_HEADER: &str = "[Current plan]";
/// The tool that changes the plan.
pub const TOOL_NAME: &str = "update_plan";
/// Most items a plan may hold.
pub const MAX_ITEMS: usize = 50;
/// Most characters (Unicode scalar values) an item's text may hold.
pub const MAX_TEXT_CHARS: usize = 500;
/// What the rendering says when there is no plan yet.
pub const NO_PLAN: &str = "(no plan yet: call update_plan to make one)";

/// A broken plan rule. Each message starts with `plan rule:` and names the rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error("plan rule: at most {MAX_ITEMS} items (found {found})")]
    TooManyItems { found: usize },
    #[error(
        "plan rule: at most one item may be in_progress (found {}: {})",
        ids.len(),
        ids.join(", ")
    )]
    SeveralInProgress { ids: Vec<String> },
    #[error("plan rule: each text is at most {MAX_TEXT_CHARS} characters (item {id} has {chars})")]
    TextTooLong { id: String, chars: usize },
    #[error("plan rule: ids must be non-empty (item number {position} has an empty id)")]
    EmptyId { position: usize },
    #[error("plan rule: ids must be unique ({id} is used {count} times)")]
    DuplicateId { id: String, count: usize },
}

/// Checks every plan rule; the first broken one is returned.
///
/// Rules, in the order checked: at most [`MAX_ITEMS`] items; ids non-empty;
/// ids unique; each text at most [`MAX_TEXT_CHARS`] characters; at most one
/// item `in_progress`.
pub fn validate(items: &[PlanItem]) -> Result<(), PlanError> {
    if items.len() > MAX_ITEMS {
        return Err(PlanError::TooManyItems { found: items.len() });
    }
    if let Some(pos) = items.iter().position(|i| i.id.trim().is_empty()) {
        return Err(PlanError::EmptyId { position: pos + 1 });
    }
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for item in items {
        *counts.entry(item.id.as_str()).or_default() += 1;
    }
    // Report the first duplicate in list order, not in sort order.
    for item in items {
        let count = counts.get(item.id.as_str()).copied().unwrap_or(0);
        if count > 1 {
            return Err(PlanError::DuplicateId {
                id: item.id.clone(),
                count,
            });
        }
    }
    for item in items {
        let chars = item.text.chars().count();
        if chars > MAX_TEXT_CHARS {
            return Err(PlanError::TextTooLong {
                id: item.id.clone(),
                chars,
            });
        }
    }
    let in_progress: Vec<String> = items
        .iter()
        .filter(|i| i.status == PlanStatus::InProgress)
        .map(|i| i.id.clone())
        .collect();
    if in_progress.len() > 1 {
        return Err(PlanError::SeveralInProgress { ids: in_progress });
    }
    Ok(())
}

/// The marker shown before an item: `[ ]` pending, `[>]` in progress,
/// `[x]` done, `[!]` blocked.
pub fn marker(status: PlanStatus) -> &'static str {
    match status {
        PlanStatus::Pending => "[ ]",
        PlanStatus::InProgress => "[>]",
        PlanStatus::Done => "[x]",
        PlanStatus::Blocked => "[!]",
    }
}

/// The status as the tool schema spells it.
pub fn status_name(status: PlanStatus) -> &'static str {
    match status {
        PlanStatus::Pending => "pending",
        PlanStatus::InProgress => "in_progress",
        PlanStatus::Done => "done",
        PlanStatus::Blocked => "blocked",
    }
}

/// Compact rendering, one item a line (`[x] 1 done thing`), then the note
/// (`note: ...`) if any. Without a plan: [`NO_PLAN`]; with an empty list:
/// `(empty plan)`.
pub fn render(plan: Option<&Plan>) -> String {
    let Some(plan) = plan else {
        return NO_PLAN.to_string();
    };
    let mut out = String::new();
    if plan.items.is_empty() {
        out.push_str("(empty plan)");
    }
    for (n, item) in plan.items.iter().enumerate() {
        if n > 0 {
            out.push('\n');
        }
        let _ = write!(out, "{} {} {}", marker(item.status), item.id, item.text);
    }
    if let Some(note) = plan.note.as_deref().filter(|n| !n.trim().is_empty()) {
        let _ = write!(out, "\nnote: {note}");
    }
    out
}

/// What changed between two versions, one change a line, in the new list's
/// order and then the removed items in the old list's order:
///
/// - `+ [ ] 3 text` added
/// - `- [x] 2 text` removed
/// - `~ 1 status: pending -> done`
/// - `~ 1 text: "old" -> "new"`
///
/// `old` is `None` for the first version (every item is added). When nothing
/// changed the answer is `(no changes)`.
pub fn diff(old: Option<&[PlanItem]>, new: &[PlanItem]) -> String {
    let old = old.unwrap_or(&[]);
    let old_by_id: BTreeMap<&str, &PlanItem> = old.iter().map(|i| (i.id.as_str(), i)).collect();
    let new_ids: BTreeSet<&str> = new.iter().map(|i| i.id.as_str()).collect();
    let mut lines: Vec<String> = Vec::new();
    for item in new {
        match old_by_id.get(item.id.as_str()) {
            None => lines.push(format!(
                "+ {} {} {}",
                marker(item.status),
                item.id,
                item.text
            )),
            Some(before) => {
                if before.status != item.status {
                    lines.push(format!(
                        "~ {} status: {} -> {}",
                        item.id,
                        status_name(before.status),
                        status_name(item.status)
                    ));
                }
                if before.text != item.text {
                    lines.push(format!(
                        "~ {} text: {:?} -> {:?}",
                        item.id, before.text, item.text
                    ));
                }
            }
        }
    }
    for item in old {
        if !new_ids.contains(item.id.as_str()) {
            lines.push(format!(
                "- {} {} {}",
                marker(item.status),
                item.id,
                item.text
            ));
        }
    }
    if lines.is_empty() {
        "(no changes)".to_string()
    } else {
        lines.join("\n")
    }
}

/// The Markdown mirror for `--plan-file`: a heading with version and step,
/// a GitHub task list (done items checked; in-progress and blocked ones
/// labelled), then the note as a quote.
pub fn to_markdown(plan: &Plan) -> String {
    let mut out = format!(
        "# Plan\n\n_Version {}, updated at step {}. This file is a read-only mirror; \
         the agent never reads it back._\n\n",
        plan.version, plan.updated_step
    );
    if plan.items.is_empty() {
        out.push_str("(empty plan)\n");
    }
    for item in &plan.items {
        let (check, label) = match item.status {
            PlanStatus::Pending => (" ", ""),
            PlanStatus::InProgress => (" ", " _(in progress)_"),
            PlanStatus::Done => ("x", ""),
            PlanStatus::Blocked => (" ", " _(blocked)_"),
        };
        // Keep each item on one line so the list stays a list.
        let text = item.text.replace(['\r', '\n'], " ");
        let _ = writeln!(out, "- [{check}] **{}** {text}{label}", item.id);
    }
    if let Some(note) = plan.note.as_deref().filter(|n| !n.trim().is_empty()) {
        out.push('\n');
        for line in note.lines() {
            let _ = writeln!(out, "> {line}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(id: &str, text: &str, status: PlanStatus) -> PlanItem {
        PlanItem {
            id: id.into(),
            text: text.into(),
            status,
        }
    }

    fn plan(items: Vec<PlanItem>, note: Option<&str>) -> Plan {
        Plan {
            version: 3,
            items,
            note: note.map(str::to_string),
            updated_step: 7,
        }
    }

    #[test]
    fn a_good_plan_passes() {
        let items = vec![
            item("1", "read the code", PlanStatus::Done),
            item("2", "fix the bug", PlanStatus::InProgress),
            item("3", "run the tests", PlanStatus::Pending),
            item("4", "ask for access", PlanStatus::Blocked),
        ];
        assert_eq!(validate(&items), Ok(()));
        assert_eq!(validate(&[]), Ok(()));
    }

    #[test]
    fn two_in_progress_is_refused_naming_both() {
        let items = vec![
            item("a", "x", PlanStatus::InProgress),
            item("m", "y", PlanStatus::Pending),
            item("b", "z", PlanStatus::InProgress),
        ];
        let err = validate(&items).unwrap_err();
        assert_eq!(
            err.to_string(),
            "plan rule: at most one item may be in_progress (found 2: a, b)"
        );
    }

    #[test]
    fn fifty_items_pass_and_fifty_one_do_not() {
        let mut items: Vec<PlanItem> = (0..50)
            .map(|n| item(&n.to_string(), "t", PlanStatus::Pending))
            .collect();
        assert_eq!(validate(&items), Ok(()));
        items.push(item("50", "t", PlanStatus::Pending));
        let err = validate(&items).unwrap_err();
        assert_eq!(err, PlanError::TooManyItems { found: 51 });
        assert_eq!(err.to_string(), "plan rule: at most 50 items (found 51)");
    }

    #[test]
    fn text_length_counts_characters_not_bytes() {
        let ok = "é".repeat(500); // 1000 bytes, 500 characters
        assert_eq!(validate(&[item("1", &ok, PlanStatus::Pending)]), Ok(()));
        let long = "x".repeat(501);
        let err = validate(&[item("1", &long, PlanStatus::Pending)]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "plan rule: each text is at most 500 characters (item 1 has 501)"
        );
    }

    #[test]
    fn empty_and_duplicate_ids_are_refused() {
        let err = validate(&[
            item("1", "a", PlanStatus::Pending),
            item(" ", "b", PlanStatus::Pending),
        ])
        .unwrap_err();
        assert_eq!(err, PlanError::EmptyId { position: 2 });
        assert!(
            err.to_string()
                .starts_with("plan rule: ids must be non-empty")
        );

        let err = validate(&[
            item("z", "a", PlanStatus::Pending),
            item("k", "b", PlanStatus::Pending),
            item("k", "c", PlanStatus::Pending),
            item("z", "d", PlanStatus::Pending),
        ])
        .unwrap_err();
        // The first duplicate in list order is named.
        assert_eq!(
            err.to_string(),
            "plan rule: ids must be unique (z is used 2 times)"
        );
    }

    #[test]
    fn render_shows_markers_ids_and_note() {
        let p = plan(
            vec![
                item("1", "done thing", PlanStatus::Done),
                item("2", "current", PlanStatus::InProgress),
                item("3", "todo", PlanStatus::Pending),
                item("4", "blocked", PlanStatus::Blocked),
            ],
            Some("waiting on review"),
        );
        assert_eq!(
            render(Some(&p)),
            "[x] 1 done thing\n[>] 2 current\n[ ] 3 todo\n[!] 4 blocked\nnote: waiting on review"
        );
        assert_eq!(render(None), NO_PLAN);
        assert_eq!(render(Some(&plan(vec![], None))), "(empty plan)");
    }

    #[test]
    fn diff_lists_each_kind_of_change() {
        let old = vec![
            item("1", "read", PlanStatus::InProgress),
            item("2", "write", PlanStatus::Pending),
            item("3", "gone", PlanStatus::Pending),
        ];
        let new = vec![
            item("1", "read", PlanStatus::Done),
            item("2", "write tests", PlanStatus::InProgress),
            item("4", "ship", PlanStatus::Pending),
        ];
        assert_eq!(
            diff(Some(&old), &new),
            "~ 1 status: in_progress -> done\n\
             ~ 2 status: pending -> in_progress\n\
             ~ 2 text: \"write\" -> \"write tests\"\n\
             + [ ] 4 ship\n\
             - [ ] 3 gone"
        );
    }

    #[test]
    fn diff_of_first_version_adds_everything_and_same_list_has_no_changes() {
        let items = vec![
            item("1", "a", PlanStatus::Done),
            item("2", "b", PlanStatus::Pending),
        ];
        assert_eq!(diff(None, &items), "+ [x] 1 a\n+ [ ] 2 b");
        assert_eq!(diff(Some(&items), &items), "(no changes)");
        assert_eq!(diff(Some(&items), &[]), "- [x] 1 a\n- [ ] 2 b");
    }

    #[test]
    fn markdown_mirror_is_a_task_list() {
        let p = plan(
            vec![
                item("1", "done thing", PlanStatus::Done),
                item("2", "current\nwork", PlanStatus::InProgress),
                item("3", "stuck", PlanStatus::Blocked),
            ],
            Some("a note"),
        );
        let md = to_markdown(&p);
        assert!(md.starts_with("# Plan\n\n_Version 3, updated at step 7."));
        assert!(md.contains("- [x] **1** done thing\n"));
        assert!(md.contains("- [ ] **2** current work _(in progress)_\n"));
        assert!(md.contains("- [ ] **3** stuck _(blocked)_\n"));
        assert!(md.ends_with("\n> a note\n"));
    }
}
