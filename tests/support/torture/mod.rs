//! Shared pieces of the torture suite (the `torture_*` modules of
//! `tests/torture/`): the scripted long task ([`script`]), the
//! kill-and-resume driver ([`driver`]), the end checks ([`checks`]), the
//! fault-injection helpers ([`faults`]) and small helpers (seeds, numbers
//! from the environment). Skips go through `support::require`.

pub mod checks;
pub mod driver;
pub mod faults;
pub mod host;
pub mod script;

/// The seed of a randomized test: `TINYAGENT_TORTURE_SEED` or the clock.
/// Always printed, so a failure can be replayed.
pub fn seed(test: &str) -> u64 {
    let seed = std::env::var("TINYAGENT_TORTURE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(7)
        });
    eprintln!("{test}: seed {seed} (replay with TINYAGENT_TORTURE_SEED={seed})");
    seed
}

/// A number from the environment, or `default`.
pub fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// True when stderr shows a Rust panic.
pub fn panicked(stderr: &str) -> bool {
    stderr.contains("panicked")
}
