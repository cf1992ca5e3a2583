//! Model servers the person chose on this machine, so that a log can never
//! make tinyagent send an API key somewhere new.
//!
//! A log (or trajectory) from elsewhere is not trusted, yet `resume` takes
//! the provider settings from its `run.started`: a forged `base_url` would
//! receive the key in the person's environment. So every base URL a `run`
//! (or a `resume --base-url`) was given is remembered in
//! `$TINYAGENT_HOME/endpoints` (0600, one URL a line), and `resume` sends a
//! key only to a provider's public endpoint, to a remembered URL, to the
//! local config's or the environment's (`OPENAI_BASE_URL`,
//! `ANTHROPIC_BASE_URL`), or to one given with `--base-url` now. Without a key
//! nothing is at stake and nothing is refused.

use super::LaunchError;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// The file under `home`.
pub fn file(home: &Path) -> PathBuf {
    home.join("endpoints")
}

/// The URL as it is compared: what the provider uses (no trailing slash).
fn normal(url: &str) -> &str {
    url.trim().trim_end_matches('/')
}

/// Whether `url` is one the person chose here before.
pub fn known(home: &Path, url: &str) -> bool {
    std::fs::read_to_string(file(home))
        .is_ok_and(|text| text.lines().any(|l| normal(l) == normal(url)))
}

/// Remembers `url` (once). The file and its directory are the person's
/// only (0600 and 0700).
///
/// # Errors
/// The I/O error, naming the file.
pub fn remember(home: &Path, url: &str) -> Result<(), LaunchError> {
    if known(home, url) {
        return Ok(());
    }
    let path = file(home);
    let fail = |e: std::io::Error| {
        LaunchError::failed(format!(
            "could not record the model server in {}: {e}",
            path.display()
        ))
    };
    tinyagent_store::fsutil::create_dir_all_durable(home).map_err(fail)?;
    let new = !path.exists();
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(&path)
        .map_err(fail)?;
    // One write of a whole line: concurrent runs never interleave.
    f.write_all(format!("{}\n", normal(url)).as_bytes())
        .and_then(|()| f.sync_data())
        .map_err(fail)?;
    // A new file's name must survive a crash too.
    if new {
        tinyagent_store::fsutil::sync_parent_dir(&path).map_err(fail)?;
    }
    Ok(())
}

/// Refuses to send a key to `url` when it came from the log alone and the
/// person never chose it here.
///
/// # Errors
/// Exit 2, naming the URL, the key variable and the flag that trusts it.
pub fn check_recorded(home: &Path, url: &str, key_var: &str) -> Result<(), LaunchError> {
    if known(home, url) {
        return Ok(());
    }
    Err(LaunchError::refused(format!(
        "the log names the model server {url}, which no run on this machine was given: the key \
         in ${key_var} would be sent there. If you trust it, resume with --base-url {url}"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn remembered_urls_are_known_once_and_private() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        assert!(!known(&home, "http://127.0.0.1:8000/v1"));
        remember(&home, "http://127.0.0.1:8000/v1/").unwrap();
        remember(&home, "http://127.0.0.1:8000/v1").unwrap();
        assert!(known(&home, "http://127.0.0.1:8000/v1"));
        assert!(known(&home, "http://127.0.0.1:8000/v1/"));
        assert!(!known(&home, "http://127.0.0.1:8001/v1"));
        let text = std::fs::read_to_string(file(&home)).unwrap();
        assert_eq!(text, "http://127.0.0.1:8000/v1\n");
        let mode = std::fs::metadata(file(&home)).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let err = check_recorded(&home, "https://evil.example/v1", "OPENAI_API_KEY").unwrap_err();
        assert!(err.is_refusal());
        assert!(
            err.to_string()
                .contains("--base-url https://evil.example/v1")
        );
    }
}
