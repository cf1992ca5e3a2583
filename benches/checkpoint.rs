//! Criterion benchmarks of workspace checkpoints (`cargo bench --bench
//! checkpoint`):
//!
//! - `checkpoint/one_changed_of_<n>`: a checkpoint of a workspace of 10,000
//!   files (100 directories of 100) after one file changed, against
//!   `checkpoint/fdatasync_4k`: one 4 KiB append and fdatasync on the same
//!   file system, measured in the same run. The ratio of their medians is
//!   printed after the group (goal: at most 5).
//! - `checkpoint/one_changed_watched_of_<n>`: the same with `[checkpoints]
//!   watch = true` (inotify names the changed file; nothing else is looked
//!   at), with its ratio to the fdatasync printed too.
//! - `store growth` (printed, not criterion): a 5 MB file left unchanged
//!   while a small file changes, over 100 checkpoints: how much the store
//!   grows (goal: the big file stored once).
//! - `fork/<records>`: `tinyagent fork` of a 100,000-record log (the fork's
//!   log written and synced, its store copied from a store of 100 files).
//! - `restore/three_way_one_changed_of_<n>` and `restore/full_one_changed_of_<n>`:
//!   putting back one file the run changed in a 10,000-file workspace, the
//!   three-way restore (plan from the two trees, the workspace stored as it
//!   is, the one path written) against the earlier full restore (the
//!   workspace stored, then `read-tree`, `update-index --refresh` and
//!   `read-tree -u` over every file). Medians are printed after the group.
//!
//! A filter argument runs only the parts whose name holds it.
//!
//! Under `cargo test --benches` (no `--bench` argument) every size shrinks so
//! the check takes seconds. Scratch files go to cargo's target tmp dir, on the
//! project's file system (fsync must be real).

use criterion::{BenchmarkId, Criterion, SamplingMode};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tinyagent::bench::run::SyntheticRun;
use tinyagent::bench::summarize;
use tinyagent::checkpoint::Checkpointer;
use tinyagent::exec::protected::Protected;

struct Sizes {
    dirs: usize,
    files_per_dir: usize,
    growth_steps: usize,
    big_file: usize,
    fork_records: u64,
    ratio_samples: usize,
}

impl Sizes {
    fn new(quick: bool) -> Sizes {
        if quick {
            Sizes {
                dirs: 10,
                files_per_dir: 10,
                growth_steps: 5,
                big_file: 100_000,
                fork_records: 1_000,
                ratio_samples: 5,
            }
        } else {
            Sizes {
                dirs: 100,
                files_per_dir: 100,
                growth_steps: 100,
                big_file: 5_000_000,
                fork_records: 100_000,
                ratio_samples: 41,
            }
        }
    }
}

fn scratch() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("checkpoint-bench-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .expect("scratch dir")
}

/// A workspace of `dirs` x `per_dir` small files.
fn workspace(root: &Path, dirs: usize, per_dir: usize) -> PathBuf {
    let ws = root.join("ws");
    for d in 0..dirs {
        let dir = ws.join(format!("d{d:03}"));
        std::fs::create_dir_all(&dir).expect("mkdir");
        for f in 0..per_dir {
            std::fs::write(
                dir.join(format!("f{f:03}.rs")),
                format!("// file {d} {f}\nfn f{f}() -> u32 {{ {d} }}\n"),
            )
            .expect("write");
        }
    }
    ws
}

/// Dirs of a store: its size in bytes (file lengths).
fn size_of(dir: &Path) -> u64 {
    let mut total = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let m = e.metadata().expect("stat");
            if m.is_dir() {
                stack.push(e.path());
            } else {
                total += m.len();
            }
        }
    }
    total
}

fn checkpoint_cost(c: &mut Criterion, sizes: &Sizes, root: &Path) {
    let ws = workspace(root, sizes.dirs, sizes.files_per_dir);
    let files = sizes.dirs * sizes.files_per_dir;
    let wal = root.join("cost.wal");
    let mut cp = Checkpointer::new(&wal, &ws, Protected::none());
    let mut prev = cp.take(None).expect("first checkpoint").tree;
    let target = ws.join("d000/f000.rs");
    // The same workspace checkpointed with the watch on, into its own store.
    let mut watched = Checkpointer::new(&root.join("watched.wal"), &ws, Protected::none());
    watched.set_watch(true);
    let mut wprev = watched.take(None).expect("first watched checkpoint").tree;
    assert!(watched.watching(), "{:?}", watched.take_warning());
    // Both change the same file, so each sees one change since its last.
    let n = std::cell::Cell::new(0u64);
    let one = |cp: &mut Checkpointer, prev: &mut String| {
        n.set(n.get() + 1);
        std::fs::write(&target, format!("// changed {}\n", n.get())).expect("change");
        let t = cp.take(Some(prev)).expect("checkpoint");
        assert_eq!(t.changed_count, 1, "{:?}", t.changed);
        assert_ne!(
            t.walk.as_deref().map(|w| w.starts_with("full")),
            Some(true),
            "{:?}",
            t.walk
        );
        *prev = t.tree;
    };
    let log = root.join("sync.bin");
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log)
        .expect("sync file");
    let block = vec![b'x'; 4096];
    let sync = |f: &mut std::fs::File| {
        f.write_all(&block).expect("append");
        f.sync_data().expect("fdatasync");
    };
    // The part of a checkpoint no store can avoid: the walk (directories
    // read, ignore files looked for) and one lstat of each file.
    let walk_only = || {
        let n = tinyagent::checkpoint::walk_with_stat(&ws, &Protected::none()).len();
        assert_eq!(n, files);
    };
    let mut group = c.benchmark_group("checkpoint");
    group.sampling_mode(SamplingMode::Flat);
    group.bench_function(BenchmarkId::new("one_changed_of", files), |b| {
        b.iter(|| one(&mut cp, &mut prev));
    });
    group.bench_function(BenchmarkId::new("one_changed_watched_of", files), |b| {
        b.iter(|| one(&mut watched, &mut wprev));
    });
    group.bench_function("fdatasync_4k", |b| b.iter(|| sync(&mut f)));
    group.bench_function(BenchmarkId::new("walk_and_lstat_of", files), |b| {
        b.iter(walk_only);
    });
    group.finish();
    // The ratio from interleaved samples of both (the same noise for each).
    let (mut cps, mut syncs, mut walks) = (Vec::new(), Vec::new(), Vec::new());
    let mut wcps = Vec::new();
    for _ in 0..sizes.ratio_samples {
        let t = Instant::now();
        one(&mut cp, &mut prev);
        cps.push(t.elapsed().as_secs_f64() * 1e6);
        let t = Instant::now();
        one(&mut watched, &mut wprev);
        wcps.push(t.elapsed().as_secs_f64() * 1e6);
        let t = Instant::now();
        sync(&mut f);
        syncs.push(t.elapsed().as_secs_f64() * 1e6);
        let t = Instant::now();
        walk_only();
        walks.push(t.elapsed().as_secs_f64() * 1e6);
    }
    let rest: Vec<f64> = cps.iter().zip(&walks).map(|(c, w)| c - w).collect();
    let (a, b, w) = (summarize(&cps), summarize(&syncs), summarize(&walks));
    let r = summarize(&rest);
    let wa = summarize(&wcps);
    assert!(
        watched.watching(),
        "the watch was lost: {:?}",
        watched.take_warning()
    );
    println!(
        "checkpoint of {files} files, one changed: median {:.0} us (p90 {:.0}); one 4 KiB fdatasync: median {:.0} us (p90 {:.0}); ratio of medians {:.2} (goal <= 5); the walk and lstat alone: median {:.0} us (p90 {:.0}), {:.2} fdatasyncs",
        a.median_us,
        a.p90_us,
        b.median_us,
        b.p90_us,
        a.median_us / b.median_us.max(1e-9),
        w.median_us,
        w.p90_us,
        w.median_us / b.median_us.max(1e-9)
    );
    println!(
        "with the watch on ([checkpoints] watch = true): checkpoint of {files} files, one changed: median {:.0} us (p90 {:.0}); ratio to the fdatasync's median {:.2} (goal <= 5); {:.1}x faster than the walk's checkpoint",
        wa.median_us,
        wa.p90_us,
        wa.median_us / b.median_us.max(1e-9),
        a.median_us / wa.median_us.max(1e-9)
    );
    println!(
        "the rest (each checkpoint less the walk sampled next to it): median {:.0} us, {:.2} fdatasyncs",
        r.median_us,
        r.median_us / b.median_us.max(1e-9)
    );
    println!(
        "load average: {}",
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim()
    );
}

fn store_growth(sizes: &Sizes, root: &Path) {
    let ws = root.join("growth-ws");
    std::fs::create_dir_all(&ws).expect("mkdir");
    let mut rng = fastrand::Rng::with_seed(7);
    let big: Vec<u8> = (0..sizes.big_file).map(|_| rng.u8(..)).collect();
    std::fs::write(ws.join("big.bin"), &big).expect("big file");
    let wal = root.join("growth.wal");
    let mut cp = Checkpointer::new(&wal, &ws, Protected::none());
    let mut prev = cp.take(None).expect("first").tree;
    let store = tinyagent::checkpoint::store_dir(&wal);
    let after_first = size_of(&store);
    for step in 0..sizes.growth_steps {
        std::fs::write(ws.join("notes.txt"), format!("step {step}\n")).expect("notes");
        prev = cp.take(Some(&prev)).expect("checkpoint").tree;
    }
    let after = size_of(&store);
    println!(
        "store growth: a {} byte incompressible file unchanged over {} checkpoints (a small file changing each time): store {} bytes after the first, {} after the last (+{} bytes, {:.1} bytes per checkpoint); the big file is stored once",
        sizes.big_file,
        sizes.growth_steps,
        after_first,
        after,
        after - after_first,
        (after - after_first) as f64 / sizes.growth_steps as f64
    );
    assert!(
        after - after_first < sizes.big_file as u64 / 2,
        "the unchanged file was stored again"
    );
}

fn fork_time(c: &mut Criterion, sizes: &Sizes, root: &Path) {
    let wal = root.join("fork-src.wal");
    let run = SyntheticRun::compacting(2 + sizes.fork_records.saturating_sub(1) / 2, 200, 50);
    std::fs::write(&wal, run.log_bytes().expect("framing")).expect("log");
    let loaded = tinyagent::store::load(&wal).expect("load");
    let at = loaded.state.saved_step;
    let records = loaded.state.records;
    // A store for the fork to copy: a checkpoint of 100 files.
    let ws = workspace(&root.join("fork-ws"), 10, 10);
    Checkpointer::new(&wal, &ws, Protected::none())
        .take(None)
        .expect("checkpoint");
    let mut group = c.benchmark_group("fork");
    group.sampling_mode(SamplingMode::Flat);
    let mut n = 0u64;
    group.bench_function(BenchmarkId::new("records", records), |b| {
        b.iter(|| {
            n += 1;
            let out = root.join(format!("fork-{n}.wal"));
            let args = tinyagent::cli::args::ForkArgs {
                wal: wal.clone(),
                at,
                output: Some(out.clone()),
                restore: false,
                force: false,
                dry_run: false,
                cwd: None,
            };
            tinyagent::launch::fork::make_fork(&args).expect("fork");
            let _ = std::fs::remove_file(&out);
            let mut d = out.into_os_string();
            d.push(".d");
            let _ = std::fs::remove_dir_all(PathBuf::from(d));
        });
    });
    group.finish();
}

fn restore_cost(c: &mut Criterion, sizes: &Sizes, root: &Path) {
    use tinyagent::checkpoint::{Git, rewind};
    let root = root.join("restore");
    let ws = workspace(&root, sizes.dirs, sizes.files_per_dir);
    let n = sizes.dirs * sizes.files_per_dir;
    let store = root.join("store.git");
    let mut cp = Checkpointer::for_store(&store, &ws, Protected::none());
    let target = cp.take(None).expect("checkpoint").tree;
    let file = ws.join("d000/f000.rs");
    let original = std::fs::read(&file).expect("read");
    std::fs::write(&file, b"changed by the run\n").expect("write");
    let last = cp.take(Some(&target)).expect("checkpoint").tree;
    drop(cp);
    let git = Git {
        git_dir: store.clone(),
        work_tree: ws.clone(),
        index: None,
    };
    let change = || std::fs::write(&file, b"changed by the run\n").expect("write");
    let three_way = || {
        let changes = rewind::tree_changes(&git, &target, &last).expect("diff");
        let ignored = rewind::ignored_in(&git, &target).expect("ignore rules");
        let none = Protected::none();
        let mut plan = rewind::plan(&ws, &changes, &none, &[], &ignored, false);
        let mut cp = Checkpointer::for_store(&store, &ws, none);
        let before = cp.take(Some(&target)).expect("before").tree;
        let stored = rewind::tree_changes(&git, &target, &before).expect("diff");
        plan.keep_only_stored(&ws, &stored);
        rewind::apply(&git, &ws, &plan).expect("apply");
        assert_eq!(plan.restore.len(), 1);
    };
    let full = || {
        tinyagent::checkpoint::restore::restore(&store, &ws, &target, &Protected::none())
            .expect("restore");
    };
    let mut group = c.benchmark_group("restore");
    group.sampling_mode(SamplingMode::Flat);
    group.bench_function(format!("three_way_one_changed_of_{n}"), |b| {
        b.iter_batched(change, |()| three_way(), criterion::BatchSize::PerIteration);
    });
    group.bench_function(format!("full_one_changed_of_{n}"), |b| {
        b.iter_batched(change, |()| full(), criterion::BatchSize::PerIteration);
    });
    group.finish();
    // Medians from interleaved samples of both (the same noise for each).
    let (mut three, mut old) = (Vec::new(), Vec::new());
    for _ in 0..sizes.ratio_samples {
        change();
        let t = Instant::now();
        three_way();
        three.push(t.elapsed().as_secs_f64() * 1e6);
        change();
        let t = Instant::now();
        full();
        old.push(t.elapsed().as_secs_f64() * 1e6);
    }
    let (a, b) = (summarize(&three), summarize(&old));
    println!(
        "restore of one changed file of {n}: three-way median {:.0} us (p90 {:.0}); the full restore median {:.0} us (p90 {:.0}); ratio {:.2} (goal <= 1)",
        a.median_us,
        a.p90_us,
        b.median_us,
        b.p90_us,
        a.median_us / b.median_us.max(1e-9)
    );
    assert_eq!(std::fs::read(&file).expect("read"), original);
}

fn main() {
    let quick = !std::env::args().any(|a| a == "--bench");
    let sizes = Sizes::new(quick);
    let dir = scratch();
    let mut c = Criterion::default()
        .sample_size(10)
        .measurement_time(Duration::from_secs(3))
        .warm_up_time(Duration::from_millis(300))
        .configure_from_args();
    // A filter (`cargo bench --bench checkpoint -- restore`) also skips the
    // other parts' printed samples.
    let filter = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    let wanted = |part: &str| filter.as_deref().is_none_or(|f| part.contains(f));
    if wanted("checkpoint") {
        checkpoint_cost(&mut c, &sizes, dir.path());
    }
    if wanted("fork") {
        fork_time(&mut c, &sizes, dir.path());
    }
    if wanted("restore") {
        restore_cost(&mut c, &sizes, dir.path());
    }
    c.final_summary();
    if wanted("store growth") {
        store_growth(&sizes, dir.path());
    }
}
