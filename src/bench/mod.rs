//! `tinyagent bench save`: what it costs to save one more event into a run of
//! N messages, with the log and with whole-file checkpoints, side by side.
//!
//! For each run length the four methods of [`save::Method`] are timed in
//! turn, sample by sample (log, checkpoint+fsync, checkpoint, raw, log, ...),
//! so drift of the machine (other processes, the disk's mood) hits all four
//! alike. Two unrecorded rounds warm the caches first. Results are medians and
//! 90th percentiles in microseconds, and two ratios of medians measured in the
//! same run: `log_over_raw` (the log's overhead over the physical floor of one
//! appending write plus fdatasync) and `checkpoint_over_log` (how much more a
//! durable whole-file checkpoint costs than the log append).
//!
//! After each timed save, whatever that method left unsynced (the no-fsync
//! checkpoint's dirty pages) is synced outside the timing, so that its
//! writeback does not land in the next method's fdatasync.
//!
//! Scratch files go to a fresh directory (inside `--dir`, else inside the
//! current directory, so they land on the same file system a run's log would;
//! a tmpfs `/tmp` would make every fsync free) and are removed afterwards.

pub mod run;
pub mod save;

use clap::Args;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use save::{Method, SaveRig};
use serde::Serialize;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The options of `tinyagent bench save` (the command line parses them
/// straight into this).
#[derive(Debug, Args, Clone)]
pub struct BenchSaveArgs {
    /// One JSON object per run length measured.
    #[arg(long)]
    pub json: bool,
    /// Run lengths (messages) to measure: `10,100` or `10 100`.
    #[arg(long, value_delimiter = ',', num_args = 1.., default_values_t = vec![10u64, 100, 1000, 10000])]
    pub lengths: Vec<u64>,
    /// Saves timed per length and method.
    #[arg(long, default_value_t = 50)]
    pub samples: u32,
    /// Size of a tool output in bytes.
    #[arg(long, default_value_t = 3000)]
    pub output_bytes: usize,
    /// Directory for the scratch files (default: a temporary one in the
    /// current directory).
    #[arg(long)]
    pub dir: Option<PathBuf>,
}

/// Median and 90th percentile of a set of timings, in microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Summary {
    pub median_us: f64,
    pub p90_us: f64,
}

/// Summarises timings (microseconds). Empty input gives zeros.
pub fn summarize(samples: &[f64]) -> Summary {
    if samples.is_empty() {
        return Summary {
            median_us: 0.0,
            p90_us: 0.0,
        };
    }
    let mut v = samples.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let median = if n % 2 == 1 {
        v[n / 2]
    } else {
        f64::midpoint(v[n / 2 - 1], v[n / 2])
    };
    // Nearest-rank percentile.
    let rank = ((0.9 * n as f64).ceil() as usize).clamp(1, n);
    Summary {
        median_us: median,
        p90_us: v[rank - 1],
    }
}

/// One run length's results; one `--json` line.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LengthResult {
    pub messages: u64,
    pub samples: u32,
    pub event_bytes: usize,
    pub checkpoint_bytes: usize,
    pub log_append_us: f64,
    pub log_append_p90_us: f64,
    pub raw_fdatasync_us: f64,
    pub raw_fdatasync_p90_us: f64,
    pub checkpoint_fsync_us: f64,
    pub checkpoint_fsync_p90_us: f64,
    pub checkpoint_nofsync_us: f64,
    pub checkpoint_nofsync_p90_us: f64,
    pub log_over_raw: f64,
    pub checkpoint_over_log: f64,
}

fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 { a / b } else { 0.0 }
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

/// Times `samples` interleaved saves of each method on a run of `messages`.
pub fn measure_length(
    dir: &Path,
    messages: u64,
    samples: u32,
    output_bytes: usize,
    progress: &ProgressBar,
) -> anyhow::Result<LengthResult> {
    progress.set_message(format!("building a {messages}-message run"));
    let mut rig = SaveRig::new(dir, messages, output_bytes)?;
    progress.set_message(format!("{messages} messages"));
    for _ in 0..2 {
        for m in Method::ALL {
            rig.save(m)?;
            rig.settle(m)?;
        }
    }
    let mut times: [Vec<f64>; 4] = Default::default();
    for _ in 0..samples {
        for (i, m) in Method::ALL.into_iter().enumerate() {
            let t = Instant::now();
            rig.save(m)?;
            times[i].push(t.elapsed().as_secs_f64() * 1e6);
            rig.settle(m)?;
        }
        progress.inc(1);
    }
    let [log, ckpt, nofsync, raw] = times.map(|t| summarize(&t));
    let result = LengthResult {
        messages,
        samples,
        event_bytes: rig.event_bytes(),
        checkpoint_bytes: rig.checkpoint_bytes(),
        log_append_us: round2(log.median_us),
        log_append_p90_us: round2(log.p90_us),
        raw_fdatasync_us: round2(raw.median_us),
        raw_fdatasync_p90_us: round2(raw.p90_us),
        checkpoint_fsync_us: round2(ckpt.median_us),
        checkpoint_fsync_p90_us: round2(ckpt.p90_us),
        checkpoint_nofsync_us: round2(nofsync.median_us),
        checkpoint_nofsync_p90_us: round2(nofsync.p90_us),
        log_over_raw: round2(ratio(log.median_us, raw.median_us)),
        checkpoint_over_log: round2(ratio(ckpt.median_us, log.median_us)),
    };
    rig.remove()?;
    Ok(result)
}

fn cell(median: f64, p90: f64) -> String {
    format!("{median:.0} ({p90:.0})")
}

/// Writes the human table.
pub fn write_table(results: &[LengthResult], out: &mut dyn Write) -> std::io::Result<()> {
    writeln!(
        out,
        "save cost of one more event, microseconds: median (p90)"
    )?;
    writeln!(
        out,
        "{:>8}  {:>14}  {:>14}  {:>16}  {:>14}  {:>7}  {:>9}",
        "messages",
        "log append",
        "raw fdatasync",
        "checkpoint+fsync",
        "checkpoint",
        "log/raw",
        "ckpt/log"
    )?;
    for r in results {
        writeln!(
            out,
            "{:>8}  {:>14}  {:>14}  {:>16}  {:>14}  {:>6.2}x  {:>8.1}x",
            r.messages,
            cell(r.log_append_us, r.log_append_p90_us),
            cell(r.raw_fdatasync_us, r.raw_fdatasync_p90_us),
            cell(r.checkpoint_fsync_us, r.checkpoint_fsync_p90_us),
            cell(r.checkpoint_nofsync_us, r.checkpoint_nofsync_p90_us),
            r.log_over_raw,
            r.checkpoint_over_log
        )?;
    }
    if let Some(r) = results.first() {
        writeln!(
            out,
            "{} samples per method and length, interleaved; one event = {} bytes; ckpt/log = checkpoint+fsync / log append",
            r.samples, r.event_bytes
        )?;
    }
    Ok(())
}

/// `tinyagent bench save`: measures every length in `args.lengths` and prints
/// a table (or one JSON object per length with `--json`) on `out`; notes and
/// the progress bar go to stderr (`err`, and the terminal when it is one).
pub fn bench_save(
    args: &BenchSaveArgs,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> anyhow::Result<i32> {
    if args.lengths.is_empty() || args.samples == 0 {
        writeln!(
            err,
            "bench save: nothing to measure (no lengths or 0 samples)"
        )?;
        return Ok(2);
    }
    let parent = match &args.dir {
        Some(d) => d.clone(),
        None => std::env::current_dir()?,
    };
    let scratch = tempfile::Builder::new()
        .prefix(".tinyagent-bench-")
        .tempdir_in(&parent)
        .map_err(|e| {
            anyhow::anyhow!(
                "cannot make a scratch directory in {}: {e}",
                parent.display()
            )
        })?;
    let total = args.lengths.len() as u64 * u64::from(args.samples);
    let progress = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
    if let Ok(style) = ProgressStyle::with_template("{msg:>24} [{bar:30}] {pos}/{len} {elapsed}") {
        progress.set_style(style.progress_chars("=> "));
    }
    let mut results = Vec::with_capacity(args.lengths.len());
    for &messages in &args.lengths {
        let r = measure_length(
            scratch.path(),
            messages,
            args.samples,
            args.output_bytes,
            &progress,
        )?;
        if args.json {
            serde_json::to_writer(&mut *out, &r)?;
            writeln!(out)?;
            out.flush()?;
        }
        results.push(r);
    }
    progress.finish_and_clear();
    if !args.json {
        write_table(&results, out)?;
    }
    writeln!(
        err,
        "bench save: measured in {} (removed)",
        scratch.path().display()
    )?;
    scratch.close()?;
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summarizes_medians_and_p90() {
        let s = summarize(&[5.0, 1.0, 3.0]);
        assert_eq!(s.median_us, 3.0);
        assert_eq!(s.p90_us, 5.0);
        let v: Vec<f64> = (1..=10).map(f64::from).collect();
        let s = summarize(&v);
        assert_eq!(s.median_us, 5.5);
        assert_eq!(s.p90_us, 9.0);
        assert_eq!(summarize(&[]).median_us, 0.0);
    }
}
