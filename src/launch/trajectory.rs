//! A whole-file trajectory as an origin of a run: recognised, read and
//! checked without writing anything, then imported into `<path>.wal` when
//! the resume's checks have passed.

use super::LaunchError;
use crate::event::RunStarted;
use crate::store::{Store, StoreOptions};
use crate::tools::{ToolSet, ToolSetOptions};
use std::path::{Path, PathBuf};

/// A whole-file trajectory rather than a log?
pub(super) fn is_trajectory(path: &Path) -> bool {
    if path.extension().is_some_and(|e| e == "json") {
        return true;
    }
    // Sniff: a log's first line ends with its crc member.
    let Ok(f) = std::fs::File::open(path) else {
        return false;
    };
    let mut first = Vec::new();
    let mut r = std::io::BufReader::new(f);
    use std::io::BufRead;
    if r.read_until(b'\n', &mut first).is_err() {
        return false;
    }
    let line = first.strip_suffix(b"\n").unwrap_or(&first);
    // A log's first line starts with its seq, even when it is torn.
    first.first() == Some(&b'{')
        && !first.starts_with(b"{\"seq\":")
        && tinyagent_store::wal::frame::check_crc(line).is_err()
}

/// A trajectory read into memory, not yet written as a log.
pub struct Trajectory {
    pub json: PathBuf,
    pub wal: PathBuf,
    pub imported: crate::trajectory::Imported,
}

/// Reads a trajectory JSON for import into `<path>.wal` (refused if that
/// exists). Nothing is written.
pub fn read_trajectory(json: &Path, wal: &Path) -> Result<Trajectory, LaunchError> {
    if wal.exists() {
        return Err(LaunchError::refused(format!(
            "{} exists: refusing to overwrite it (resume that log instead)",
            wal.display()
        )));
    }
    let text = std::fs::read_to_string(json)
        .map_err(|e| LaunchError::refused(format!("cannot read {}: {e}", json.display())))?;
    let mut imported = crate::trajectory::import(&text)
        .map_err(|e| LaunchError::refused(format!("{}: {e}", json.display())))?;
    // A file without a tool signature was written for the tool set of its
    // settings: record the one this tinyagent offers for them.
    for ev in &mut imported.events {
        if let crate::event::Event::RunStarted(r) = ev
            && r.tool_signature.is_empty()
        {
            let tools = ToolSet::new(ToolSetOptions {
                read_only: r.read_only,
                plan: r.plan_enabled,
            });
            r.tool_signature = tools.signature();
            r.tools = tools.names();
        }
    }
    Ok(Trajectory {
        json: json.to_path_buf(),
        wal: wal.to_path_buf(),
        imported,
    })
}

impl Trajectory {
    /// The run's first record.
    pub(super) fn run_started(&self) -> Option<&RunStarted> {
        match self.imported.events.first() {
            Some(crate::event::Event::RunStarted(r)) => Some(r),
            _ => None,
        }
    }

    /// Writes the log. Returns the v1 free-text process summary. A
    /// half-written log is removed when the import fails, so a retry is not
    /// refused.
    pub fn write(self) -> Result<Option<String>, LaunchError> {
        let wal = self.wal;
        let mut store = Store::create(&wal, StoreOptions::default())?;
        let written = self
            .imported
            .events
            .into_iter()
            .try_for_each(|ev| store.append(ev).map(drop))
            .and_then(|()| store.close());
        if let Err(e) = written {
            // Nothing depends on a half-imported log: remove it so a retry works.
            let _ = std::fs::remove_file(&wal);
            return Err(e.into());
        }
        Ok(self.imported.background)
    }
}

/// Imports a trajectory JSON into `<path>.wal` (refused if that exists).
/// Returns the v1 free-text process summary.
pub fn import_trajectory(json: &Path, wal: &Path) -> Result<Option<String>, LaunchError> {
    read_trajectory(json, wal)?.write()
}

pub(super) fn wal_for_json(json: &Path) -> PathBuf {
    let mut s = json.as_os_str().to_owned();
    s.push(".wal");
    PathBuf::from(s)
}
