//! `tinyagent sessions s3://…`: the runs a bucket holds, from their
//! manifests.

use super::CliError;
use crate::config::Config;
use crate::launch::bucket::credentials;
use crate::replicate::Settings;
use crate::replicate::fetch;
use std::io::Write;

/// One run in a bucket, for `sessions s3://…`.
#[derive(Debug, serde::Serialize)]
struct Row {
    run_id: String,
    started_at: Option<String>,
    task: Option<String>,
    status: String,
    steps: u64,
    cost_usd: f64,
    writer: Option<String>,
    epoch: u64,
    log_bytes: u64,
    updated: Option<String>,
    /// `live` (its writer's lease runs until `lease_until`), `lapsed` (it
    /// ran out then: the writer stopped), `released` (the run ended) or
    /// `none` (no lease stored).
    lease: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    lease_until: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    holder: Option<String>,
    url: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

/// `tinyagent sessions s3://bucket/prefix [--json]`: each run's manifest,
/// newest first. A manifest that cannot be read is listed as `unreadable`.
///
/// # Errors
/// A bad URL (exit 2), a bucket that cannot be listed, or stdout closed.
pub fn sessions(url: &str, json: bool, out: &mut dyn Write) -> Result<i32, CliError> {
    let local = Config::load(None)?;
    let settings = Settings::resolve(Some(url), None, &local.replicate)
        .map_err(CliError::refused)?
        .expect("a URL was given");
    let bucket = crate::replicate::connect(&settings, &credentials())
        .map_err(|e| CliError::refused(e.to_string()))?;
    let dirs = bucket
        .list_dirs(&settings.url.prefix)
        .map_err(|e| CliError::new(1, format!("{}: {e}", settings.url)))?;
    let mut rows = Vec::new();
    for d in dirs {
        let run_id = d.rsplit('/').next().unwrap_or(&d).to_string();
        let row = match fetch::manifest(&bucket, &run_id) {
            Ok((m, _)) => Row {
                url: format!("{}/{run_id}", settings.url),
                run_id,
                started_at: m.started_at,
                task: m.task,
                status: m.status,
                steps: m.steps,
                cost_usd: m.cost_usd,
                writer: Some(m.writer),
                epoch: m.epoch,
                log_bytes: m.log_len,
                updated: Some(m.updated),
                error: None,
                lease: String::new(),
                lease_until: None,
                holder: None,
            },
            Err(fetch::FetchError::NotStored(_)) => continue,
            Err(e) => Row {
                url: format!("{}/{run_id}", settings.url),
                run_id,
                started_at: None,
                task: None,
                status: "unreadable".into(),
                steps: 0,
                cost_usd: 0.0,
                writer: None,
                epoch: 0,
                log_bytes: 0,
                updated: None,
                error: Some(e.to_string()),
                lease: String::new(),
                lease_until: None,
                holder: None,
            },
        };
        rows.push(with_lease(&bucket, row));
    }
    rows.sort_by(|a, b| {
        (b.started_at.as_deref(), b.run_id.as_str())
            .cmp(&(a.started_at.as_deref(), a.run_id.as_str()))
    });
    let io = |e: std::io::Error| CliError::new(1, format!("cannot write the list: {e}"));

    if json {
        serde_json::to_writer(&mut *out, &rows).map_err(|e| CliError::new(1, e.to_string()))?;
        writeln!(out).map_err(io)?;
        return Ok(0);
    }
    if rows.is_empty() {
        writeln!(out, "no runs stored in {}", settings.url).map_err(io)?;
        return Ok(0);
    }
    for r in &rows {
        let when = crate::text::shown_time(r.started_at.as_deref());
        let task = crate::text::shown_task(r.task.as_deref());
        writeln!(
            out,
            "{:<22} {when}  {:<11} {:>4} steps  ${:.4}  {task}",
            r.run_id, r.status, r.steps, r.cost_usd
        )
        .map_err(io)?;
        let detail = match (&r.error, &r.writer) {
            (Some(e), _) => format!("unreadable: {e}"),
            (None, Some(w)) => format!(
                "writer {w} (epoch {}), {} bytes of log",
                r.epoch, r.log_bytes
            ),
            (None, None) => String::new(),
        };
        writeln!(out, "    {}  {detail}", r.url).map_err(io)?;
        let lease = match (r.lease.as_str(), &r.lease_until, &r.holder) {
            ("live", Some(t), Some(h)) => format!("live: {h}, lease until {t}"),
            ("lapsed", Some(t), Some(h)) => format!("lapsed: {h} stopped renewing, at {t}"),
            (other, _, _) => other.to_string(),
        };
        writeln!(out, "    lease {lease}").map_err(io)?;
    }
    Ok(0)
}

/// `row` with what its run's lease says now.
fn with_lease(bucket: &crate::replicate::bucket::Bucket, mut row: Row) -> Row {
    use crate::replicate::lease::{self, Held};
    match lease::read(bucket, &row.run_id) {
        Ok(Some((l, _))) => {
            let (state, until) = match l.held(std::time::SystemTime::now()) {
                Held::Live(t) => ("live", Some(lease::stamp(t))),
                Held::Lapsed(t) => ("lapsed", Some(lease::stamp(t))),
                Held::Released => ("released", None),
            };
            row.lease = state.into();
            row.lease_until = until;
            row.holder = Some(l.holder());
        }
        Ok(None) => row.lease = "none".into(),
        Err(e) => row.lease = format!("unreadable ({e})"),
    }
    row
}
