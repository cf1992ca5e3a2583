//! A run's replication as a launch sees it: the settings a new run ships
//! with, the sidecar a replicated log keeps beside it, a local resume that
//! goes on replicating, and a run fetched from a bucket for `resume s3://…`
//! (staged and checked, then taken over).

use super::LaunchError;
use super::request::ResumeArgs;
use crate::config::Config;
use crate::replicate::bucket::Credentials;
use crate::replicate::fetch::{self, FetchError, TakenOver};
use crate::replicate::{Manifest, Replicator, Settings, Summary};
use std::path::{Path, PathBuf};

/// The AWS credentials as the agent holds them (taken out of the
/// environment at start, see [`super::secrets`]).
pub fn credentials() -> Credentials {
    Credentials {
        key_id: super::secrets::key("AWS_ACCESS_KEY_ID"),
        secret: super::secrets::key("AWS_SECRET_ACCESS_KEY"),
        token: super::secrets::key("AWS_SESSION_TOKEN"),
    }
}

/// What a log's own directory says about its replication
/// (`<wal>.d/replicate.json`), so that a local `resume <wal>` goes on
/// replicating, in the workspace a resume from the bucket restored.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Sidecar {
    pub url: String,
    pub mode: String,
    /// Where the run works on this machine, when not where the log says
    /// (a run fetched from a bucket).
    #[serde(default)]
    pub workspace: Option<String>,
}

fn sidecar_path(wal: &Path) -> PathBuf {
    crate::rundir::RunDir::of(wal).replication()
}

/// The line `$TINYAGENT_HOME/endpoints` holds for a sidecar this machine
/// wrote for run `run_id`: the sidecar lies beside the log, where anyone who
/// hands over a log (or, in the local environment, a tool) can write it, so
/// its bucket and workspace are followed only when the person's own home
/// says this machine chose them for this run. (Without the run id, the
/// settings of a run resumed from a bucket into some directory, copied
/// beside another run's log, would move that run into the directory.)
fn sidecar_mark(run_id: &str, sc: &Sidecar) -> String {
    format!(
        "replicate {} mode {} workspace {} run {run_id}",
        sc.url,
        sc.mode,
        sc.workspace.as_deref().unwrap_or("-")
    )
}

fn write_sidecar(wal: &Path, run_id: &str, sc: &Sidecar) -> Result<(), LaunchError> {
    super::endpoints::remember(&super::parts::home()?, &sidecar_mark(run_id, sc))?;
    let p = sidecar_path(wal);
    let fail = |e: std::io::Error| LaunchError::failed(format!("{}: {e}", p.display()));
    tinyagent_store::fsutil::create_dir_all_durable(p.parent().expect("a parent")).map_err(fail)?;
    let text = serde_json::to_vec_pretty(sc).expect("serialises");
    tinyagent_store::fsutil::atomic_write(&p, &text).map_err(fail)
}

/// The replication settings of run `run_id`'s log, if it is replicated.
///
/// # Errors
/// A file there that does not parse, or that this machine did not write for
/// this run (exit 2).
pub fn read_sidecar(wal: &Path, run_id: &str) -> Result<Option<Sidecar>, LaunchError> {
    let p = sidecar_path(wal);
    match std::fs::read(&p) {
        Ok(b) => {
            let sc: Sidecar = serde_json::from_slice(&b)
                .map_err(|e| LaunchError::refused(format!("{}: {e}", p.display())))?;
            if !super::endpoints::known(&super::parts::home()?, &sidecar_mark(run_id, &sc)) {
                return Err(LaunchError::refused(format!(
                    "{}: replication settings this machine did not write for run {run_id} \
                     (bucket {}, workspace {}); they are not followed. Remove the file to \
                     resume without replication, or resume from the bucket",
                    p.display(),
                    sc.url,
                    sc.workspace.as_deref().unwrap_or("as the log says")
                )));
            }
            Ok(Some(sc))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(LaunchError::refused(format!("{}: {e}", p.display()))),
    }
}

fn mode_name(m: crate::replicate::Mode) -> &'static str {
    match m {
        crate::replicate::Mode::Sync => "sync",
        crate::replicate::Mode::Async => "async",
    }
}

/// A local `resume <wal>` of a replicated run: the bucket must hold a
/// prefix of this log (else the run went on elsewhere: refused, exit 2);
/// the run is taken over, and what the bucket lacks is shipped once the
/// log is open ([`Replicator::catch_up`]).
///
/// # Errors
/// As described; a bucket that cannot be reached (exit 1).
pub fn reattach(
    wal: &Path,
    sc: &Sidecar,
    run_id: &str,
    args: &ResumeArgs,
    local: &Config,
) -> Result<Replicator, LaunchError> {
    let mode = args.replicate_mode.as_deref().unwrap_or(&sc.mode);
    let settings = Settings::resolve(Some(&sc.url), Some(mode), &local.replicate)
        .map_err(LaunchError::refused)?
        .expect("a URL was given");
    let bucket = crate::replicate::connect(&settings, &credentials())
        .map_err(|e| LaunchError::refused(e.to_string()))?;
    let (m, version) = fetch::manifest(&bucket, run_id).map_err(from_fetch)?;
    // This machine's own writer of this log, killed (its pid is gone), need
    // not be waited for.
    let gone = crate::replicate::lease::read(&bucket, run_id)
        .ok()
        .flatten()
        .filter(|(l, _)| l.host == crate::replicate::lease::host() && !pid_alive(l.pid))
        .map(|(l, _)| l.writer);
    fetch::check_lease(&bucket, run_id, args.take_over, gone.as_deref()).map_err(from_fetch)?;
    fetch::local_holds(wal, &m).map_err(|why| {
        LaunchError::refused(format!(
            "{}: {why}; resume it from the bucket instead: tinyagent resume {}/{run_id} (with \
             another $TINYAGENT_HOME)",
            wal.display(),
            settings.url
        ))
    })?;
    let files = fetch::stored_files(&bucket, run_id).map_err(from_fetch)?;
    let taken = fetch::take_over_from(
        bucket,
        settings,
        &m,
        &version,
        files,
        &crate::replicate::writer_id(),
    )
    .map_err(from_fetch)?;
    crate::report::err_line(&format!(
        "replicating to {}/{run_id} (taken over at epoch {})",
        taken.settings.url, taken.manifest.epoch
    ));
    Ok(Replicator::resume(taken, wal))
}

/// Is process `pid` running on this machine?
fn pid_alive(pid: u32) -> bool {
    let Ok(pid) = i32::try_from(pid) else {
        return false;
    };
    !matches!(
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None),
        Err(nix::errno::Errno::ESRCH)
    )
}

/// Does `resume` name a run in a bucket?
pub fn is_bucket(path: &Path) -> bool {
    path.to_str().is_some_and(|s| s.starts_with("s3://"))
}

fn from_fetch(e: FetchError) -> LaunchError {
    if e.is_refusal() {
        LaunchError::Refused(e.to_string())
    } else {
        LaunchError::Failed(e.to_string())
    }
}

/// A new run's replication: its manifest created in the bucket.
///
/// # Errors
/// Bad settings (exit 2), a bucket that cannot be reached or holds the
/// run id already (exit 1).
pub fn start_for_run(
    url: Option<&str>,
    mode: Option<&str>,
    file: &Config,
    wal: &Path,
    started: &crate::event::RunStarted,
) -> Result<Option<Replicator>, LaunchError> {
    let Some(settings) =
        Settings::resolve(url, mode, &file.replicate).map_err(LaunchError::refused)?
    else {
        return Ok(None);
    };
    let manifest = Manifest::new(
        &started.run_id,
        &crate::replicate::writer_id(),
        Some(humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()),
        &started.task,
    );
    let sc = Sidecar {
        url: settings.url.to_string(),
        mode: mode_name(settings.mode).into(),
        workspace: None,
    };
    let rep = Replicator::create(settings, &credentials(), wal, manifest)
        .map_err(|e| LaunchError::failed(format!("{e} (the run did not start)")))?;
    write_sidecar(wal, &started.run_id, &sc)?;
    crate::report::err_line(&format!("replicating to {}/{}", rep.url(), started.run_id));
    Ok(Some(rep))
}

/// How a run ended, for the manifest.
pub fn summary(state: &crate::session::State) -> Summary {
    Summary {
        status: match state.status {
            crate::session::Status::Finished(s) => s.as_str().to_string(),
            crate::session::Status::Running => "stopped".to_string(),
        },
        steps: state.step,
        cost_usd: state.cost_usd,
    }
}

/// Ends replication, saying what the person should know.
pub fn finish(rep: Option<Replicator>, state: &crate::session::State) {
    if let Some(rep) = rep {
        for w in rep.finish(&summary(state)) {
            crate::report::err_line(&w);
        }
    }
}

/// A run fetched from a bucket, in place locally and taken over.
pub struct Fetched {
    pub wal: PathBuf,
    pub workspace: PathBuf,
    pub taken: TakenOver,
}

/// The time of the last record of the log at `path`.
fn last_ts(path: &Path) -> Option<std::time::SystemTime> {
    let mut ts = None;
    tinyagent_store::wal::reader::scan::<crate::event::Event>(path, None, |f, _| {
        ts = Some(f.ts.clone());
    })
    .ok()?;
    humantime::parse_rfc3339_weak(&ts?).ok()
}

fn is_empty_dir(dir: &Path) -> Result<bool, LaunchError> {
    let mut it = std::fs::read_dir(dir)
        .map_err(|e| LaunchError::refused(format!("--cwd {}: {e}", dir.display())))?;
    Ok(it.next().is_none())
}

/// The staging directory of a resume from a bucket,
/// `$TINYAGENT_HOME/runs/.incoming-<run_id>`: removed when dropped. Its
/// name is the run's, so that a resume cut short after taking the run over
/// is found again by the next one (its `writer` file names the writer it
/// took the run over as, and its log is moved into place if the kill came
/// between the two renames).
struct Staging(PathBuf);

impl Drop for Staging {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn staging_path(runs: &Path, run_id: &str) -> PathBuf {
    runs.join(format!(".incoming-{run_id}"))
}

/// What `resume s3://…` found.
pub enum Stage {
    /// The run, fetched and checked, not yet taken over.
    Fetched(Box<Staged>),
    /// This machine has the run already, from this bucket: an earlier
    /// `resume s3://…` of it (finished, or cut short at any point after it
    /// took the run over) is carried on as `resume <wal>`, which finishes a
    /// restore it left pending before anything else.
    Here(PathBuf),
}

/// A run fetched from a bucket into a staging directory beside where `run`
/// keeps logs, checked, not yet taken over: nothing of it is in place and
/// the bucket is as it was. Dropped, it leaves nothing behind.
pub struct Staged {
    staging: Staging,
    /// The fetched log, in the staging directory.
    log: PathBuf,
    run_id: String,
    /// Where the log goes once the run is taken over.
    pub wal: PathBuf,
    pub workspace: PathBuf,
    /// The run's first record, as the fetched log holds it.
    pub run: crate::event::RunStarted,
    tree: Option<crate::session::CheckpointMark>,
    settings: Settings,
    bucket: crate::replicate::bucket::Bucket,
    fetched: fetch::Fetched,
}

/// `resume s3://bucket/prefix/<run_id>`, its first part: the run's log and
/// checkpoint files fetched into a staging directory and checked, the
/// workspace (`--cwd`, else the current directory) found empty or equal to
/// the last checkpoint. Nothing is taken over and nothing put in place:
/// the resume checks its config and tool set against the staged run before
/// [`Staged::take_over`]. A refusal (exit 2) leaves nothing behind.
///
/// # Errors
/// As described.
pub fn stage_for_resume(
    args: &ResumeArgs,
    spec: &str,
    local: &Config,
) -> Result<Stage, LaunchError> {
    let (url, run_id) = fetch::parse_run_url(spec).map_err(LaunchError::refused)?;
    let settings = Settings::resolve(
        Some(&url.to_string()),
        args.replicate_mode.as_deref(),
        &local.replicate,
    )
    .map_err(LaunchError::refused)?
    .expect("a URL was given");
    // The run works where the person is or says, by the one rule.
    let workspace = super::workspace::resolve(super::workspace::Named::Here, args.cwd.as_deref())?;
    let runs = super::parts::home()?.join("runs");
    let wal = runs.join(format!("{run_id}.wal"));
    let wal_d = super::parts::process_dir(&wal);
    let incoming = staging_path(&runs, &run_id);
    if let Some(wal) = here_already(&wal, &incoming, &run_id, &settings, &workspace)? {
        return Ok(Stage::Here(wal));
    }
    if wal.exists() || wal_d.exists() {
        return Err(LaunchError::refused(format!(
            "{} exists: this machine has the run already; resume it with `tinyagent resume {}`",
            wal.display(),
            wal.display()
        )));
    }
    let bucket = crate::replicate::connect(&settings, &credentials())
        .map_err(|e| LaunchError::refused(e.to_string()))?;
    // A resume of this run killed here after it took the run over left its
    // writer's id: that writer, its pid gone, is not waited for.
    let gone = std::fs::read_to_string(incoming.join("writer"))
        .ok()
        .and_then(|w| killed_here(&bucket, &run_id, w.trim()));
    fetch::check_lease(&bucket, &run_id, args.take_over, gone.as_deref()).map_err(from_fetch)?;
    tinyagent_store::fsutil::create_dir_all_durable(&runs)
        .map_err(|e| LaunchError::failed(format!("{}: {e}", runs.display())))?;
    // What a resume cut short before its take-over left is its own staging.
    let _ = std::fs::remove_dir_all(&incoming);
    std::os::unix::fs::DirBuilderExt::mode(&mut std::fs::DirBuilder::new(), 0o700)
        .create(&incoming)
        .map_err(|e| LaunchError::failed(format!("{}: {e}", incoming.display())))?;
    let staging = Staging(incoming);
    let fetched = fetch::fetch(&bucket, &run_id, &staging.0).map_err(from_fetch)?;
    let staged = staging.0.join(format!("{run_id}.wal"));
    tinyagent_store::fsutil::atomic_write(&staged, &fetched.log)
        .map_err(|e| LaunchError::failed(format!("{}: {e}", staged.display())))?;
    let git_dir = crate::checkpoint::store_dir(&staged);
    fetch::write_store(&git_dir, &fetched.files)
        .map_err(|e| LaunchError::refused(format!("{}/{run_id}: {e}", settings.url)))?;
    let loaded = crate::store::load(&staged)?;
    let tree = loaded.state.last_checkpoint.clone();
    if !is_empty_dir(&workspace)? {
        let here = match &tree {
            Some(_) => crate::checkpoint::Checkpointer::for_store(
                &git_dir,
                &workspace,
                crate::exec::protected::Protected::none(),
            )
            .take(None)
            .ok()
            .map(|t| t.tree),
            None => None,
        };
        if here.is_none() || here.as_ref() != tree.as_ref().map(|c| &c.tree) {
            return Err(LaunchError::refused(format!(
                "--cwd {} is not empty and does not hold the run's last checkpoint; resume \
                 from a bucket into an empty directory",
                workspace.display()
            )));
        }
    }
    let run = loaded.state.run.clone().ok_or_else(|| {
        LaunchError::refused(format!(
            "{}/{run_id}: the fetched log holds no run.started record",
            settings.url
        ))
    })?;
    Ok(Stage::Fetched(Box::new(Staged {
        staging,
        log: staged,
        run_id,
        wal,
        workspace,
        run,
        tree,
        settings,
        bucket,
        fetched,
    })))
}

/// The writer `writer`, if the lease of `run_id` names it on this machine
/// with a pid that is gone.
fn killed_here(
    bucket: &crate::replicate::bucket::Bucket,
    run_id: &str,
    writer: &str,
) -> Option<String> {
    let (l, _) = crate::replicate::lease::read(bucket, run_id).ok()??;
    (l.writer == writer && l.host == crate::replicate::lease::host() && !pid_alive(l.pid))
        .then_some(l.writer)
}

/// The run's log on this machine, when an earlier `resume s3://…` of it
/// from this same bucket into this same workspace put it here (the sidecar
/// beside it, which this machine vouches for, says so). A kill between the
/// two renames that put it in place left the log in the staging directory:
/// it is moved in now.
///
/// # Errors
/// A sidecar this machine did not write, or of another bucket or
/// workspace; a log that cannot be moved into place.
fn here_already(
    wal: &Path,
    incoming: &Path,
    run_id: &str,
    settings: &Settings,
    workspace: &Path,
) -> Result<Option<PathBuf>, LaunchError> {
    let Some(sc) = read_sidecar(wal, run_id)? else {
        return Ok(None);
    };
    let same_ws = sc
        .workspace
        .as_deref()
        .and_then(|w| std::fs::canonicalize(w).ok())
        .is_some_and(|w| w == workspace);
    if sc.url != settings.url.to_string() || !same_ws {
        return Err(LaunchError::refused(format!(
            "{} exists, replicating to {} in {}: this machine has the run already; resume it \
             with `tinyagent resume {}`",
            wal.display(),
            sc.url,
            sc.workspace.as_deref().unwrap_or("its own workspace"),
            wal.display()
        )));
    }
    if !wal.exists() {
        let staged = incoming.join(format!("{run_id}.wal"));
        if !staged.is_file() {
            return Ok(None);
        }
        std::fs::rename(&staged, wal)
            .and_then(|()| tinyagent_store::fsutil::sync_parent_dir(wal))
            .map_err(|e| LaunchError::failed(format!("moving the fetched run into place: {e}")))?;
    }
    let _ = std::fs::remove_dir_all(incoming);
    crate::report::err_line(&format!(
        "this machine has run {run_id} from {} already: resuming {}",
        settings.url,
        wal.display()
    ));
    Ok(Some(wal.to_path_buf()))
}

impl Staged {
    /// The second part, once every check has passed: the run taken over in
    /// the bucket, then the log put where `run` keeps logs
    /// (`$TINYAGENT_HOME/runs/<run_id>.wal`) and the workspace restored. A
    /// writer that took the run first (exit 1) leaves nothing behind.
    ///
    /// # Errors
    /// As described.
    pub fn take_over(self) -> Result<Fetched, LaunchError> {
        let Staged {
            staging,
            log: staged,
            run_id,
            wal,
            workspace,
            run: _,
            tree,
            settings,
            bucket,
            fetched,
        } = self;
        let wal_d = super::parts::process_dir(&wal);
        let sc = Sidecar {
            url: settings.url.to_string(),
            mode: mode_name(settings.mode).into(),
            workspace: Some(workspace.display().to_string()),
        };
        write_sidecar(&staged, &run_id, &sc)?;
        // The writer this takes the run over as, recorded first: a rerun
        // after a kill knows the lease it finds as its own.
        let writer = crate::replicate::writer_id();
        let fail = |e: std::io::Error| LaunchError::failed(format!("{}: {e}", staging.0.display()));
        tinyagent_store::fsutil::atomic_write(&staging.0.join("writer"), writer.as_bytes())
            .map_err(fail)?;
        let taken = fetch::take_over(bucket, settings, &fetched, &writer).map_err(from_fetch)?;
        // The log's time is its last record's (what a resume says about when
        // the run stopped).
        if let Some(t) = last_ts(&staged)
            && let Ok(f) = std::fs::File::options().write(true).open(&staged)
        {
            let _ = f.set_modified(t);
            let _ = f.sync_all();
        }
        // The restore intent goes before the log: once the log is in
        // place, the workspace is restored before anything else is done
        // with it, whoever resumes it (this process, or after a kill the
        // same `resume s3://…` or `resume <wal>`), so no checkpoint is ever
        // taken of a half-restored workspace.
        let intent = tree
            .as_ref()
            .map(|c| crate::checkpoint::restore::RestoreIntent {
                run_id: run_id.clone(),
                tree: c.tree.clone(),
                step: c.step,
                workspace: workspace.display().to_string(),
                last: c.tree.clone(),
                before: String::new(),
                fetched: true,
            });
        if let Some(intent) = &intent {
            crate::checkpoint::restore::write_intent(&staged, intent)
                .map_err(|e| LaunchError::failed(e.to_string()))?;
        }
        let io = |e: std::io::Error| {
            LaunchError::failed(format!("moving the fetched run into place: {e}"))
        };
        // The directory first: a kill between the two leaves the log in
        // the staging directory, which the rerun moves in.
        std::fs::rename(super::parts::process_dir(&staged), &wal_d).map_err(io)?;
        tinyagent_store::fsutil::sync_parent_dir(&wal_d).map_err(io)?;
        std::fs::rename(&staged, &wal).map_err(io)?;
        tinyagent_store::fsutil::sync_parent_dir(&wal).map_err(io)?;
        drop(staging);
        if let Some(intent) = &intent {
            finish_fetched(&wal, intent)?;
        }
        crate::report::err_line(&format!(
            "fetched run {run_id} from {} ({} bytes of log, {} checkpoint files) into {}; the \
             workspace is {}",
            taken.settings.url,
            taken.manifest.log_len,
            fetched.files.len(),
            wal.display(),
            workspace.display()
        ));
        Ok(Fetched {
            wal,
            workspace,
            taken,
        })
    }
}

/// Makes the workspace of a run fetched from a bucket equal to its last
/// checkpoint, as the intent beside its log says (checked first by
/// [`super::rewind::pending`] when a kill cut this short), then removes the
/// intent.
pub fn finish_fetched(
    wal: &Path,
    intent: &crate::checkpoint::restore::RestoreIntent,
) -> Result<(), LaunchError> {
    let workspace = PathBuf::from(&intent.workspace);
    let mut protected = crate::exec::protected::Protected::none();
    protected.add_log(wal);
    let done = crate::checkpoint::restore::restore(
        &crate::checkpoint::store_dir(wal),
        &workspace,
        &intent.tree,
        &protected,
    )
    .map_err(|e| super::parts::checkpoint_error("restoring the workspace", &e))?;
    crate::checkpoint::restore::clear_intent(wal)
        .map_err(|e| LaunchError::failed(e.to_string()))?;
    crate::report::err_line(&format!(
        "restored {} to the run's last checkpoint (step {}, {} paths)",
        workspace.display(),
        intent.step,
        done.changed
    ));
    Ok(())
}
