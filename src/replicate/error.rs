//! Why replication failed: one enum for the replicator's errors, so the
//! command line tells "another writer holds the run now" from "the bucket
//! is away" by its variant, not by its message. Exit codes are decided in
//! `cli` ([`ReplicateError::is_fenced`] is all it asks).

use super::bucket::BucketError;

/// The writer that holds a run now, as the bucket names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    pub writer: String,
    /// Where the lease says the writer runs ("machine M, pid P"); a
    /// manifest does not say.
    pub at: Option<String>,
    pub epoch: u64,
}

/// Which of the run's objects showed that another writer took it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fence {
    Manifest,
    Lease,
}

impl Fence {
    fn name(self) -> &'static str {
        match self {
            Fence::Manifest => "manifest",
            Fence::Lease => "lease",
        }
    }
}

/// A replication failure. [`ReplicateError::Exists`] and
/// [`ReplicateError::Connect`] refuse a run before it starts. Afterwards,
/// in sync mode any failure ends the writer: its sync point and every later
/// one fail unacknowledged. In async mode only [`ReplicateError::Fenced`]
/// does; the other failures are an outage the shipper retries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplicateError {
    /// Another writer took the run over (a conditional put of the manifest
    /// or the lease found a version this writer did not store): there is
    /// nothing to fix or resume here.
    Fenced {
        run_id: String,
        by: Fence,
        /// `None` when the object there could not be read.
        holder: Option<Holder>,
    },
    /// Sync mode: the lease ran out and the bucket did not renew it within
    /// the timeout.
    LeaseLapsed { run_id: String, reason: String },
    /// A new run's manifest found one there (`If-None-Match: *`).
    Exists { url: String, run_id: String },
    /// A bucket client could not be made for the URL.
    Connect(String),
    /// A bucket call failed (after its retries); `url` names the bucket
    /// when the run was being created.
    Bucket {
        url: Option<String>,
        source: BucketError,
    },
    /// A local file the replicator ships could not be read (`what`: "the
    /// log", or a checkpoint store file's name).
    Read { what: String, reason: String },
    /// The log's new bytes do not follow the stored ones.
    Gap { start: u64, stored: u64 },
}

impl ReplicateError {
    /// Whether another writer holds the run now.
    #[must_use]
    pub fn is_fenced(&self) -> bool {
        matches!(self, ReplicateError::Fenced { .. })
    }

    pub(super) fn bucket(source: BucketError) -> ReplicateError {
        ReplicateError::Bucket { url: None, source }
    }

    pub(super) fn read(what: impl Into<String>, e: &std::io::Error) -> ReplicateError {
        ReplicateError::Read {
            what: what.into(),
            reason: e.to_string(),
        }
    }
}

impl std::fmt::Display for ReplicateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        const STOPS: &str = "this writer stops without acknowledging anything more";
        match self {
            ReplicateError::Fenced {
                run_id,
                holder: Some(h),
                ..
            } => {
                write!(
                    f,
                    "replication: run {run_id} is now held by writer {} (",
                    h.writer
                )?;
                if let Some(at) = &h.at {
                    write!(f, "{at}, ")?;
                }
                write!(f, "epoch {}); {STOPS}", h.epoch)
            }
            ReplicateError::Fenced {
                run_id,
                by,
                holder: None,
            } => write!(
                f,
                "replication: run {run_id}'s {} was changed by another writer; {STOPS}",
                by.name()
            ),
            ReplicateError::LeaseLapsed { run_id, reason } => write!(
                f,
                "replication: the lease on run {run_id} ran out and could not be renewed \
                 ({reason}); {STOPS}"
            ),
            ReplicateError::Exists { url, run_id } => {
                write!(
                    f,
                    "{url}/{run_id}: a run of that id is stored there already"
                )
            }
            ReplicateError::Connect(reason) => f.write_str(reason),
            ReplicateError::Bucket {
                url: Some(url),
                source,
            } => write!(f, "replication to {url}: {source}"),
            ReplicateError::Bucket { url: None, source } => write!(f, "replication: {source}"),
            ReplicateError::Read { what, reason } => {
                write!(f, "replication: reading {what}: {reason}")
            }
            ReplicateError::Gap { start, stored } => write!(
                f,
                "replication: the log's new bytes start at {start}, but {stored} are stored"
            ),
        }
    }
}

impl std::error::Error for ReplicateError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fenced_writer_names_the_holder_and_says_it_stops() {
        let by_lease = ReplicateError::Fenced {
            run_id: "r1".into(),
            by: Fence::Lease,
            holder: Some(Holder {
                writer: "h/pid 7/ab".into(),
                at: Some("machine h, pid 7".into()),
                epoch: 3,
            }),
        };
        assert_eq!(
            by_lease.to_string(),
            "replication: run r1 is now held by writer h/pid 7/ab (machine h, pid 7, epoch 3); this \
             writer stops without acknowledging anything more"
        );
        let by_manifest = ReplicateError::Fenced {
            run_id: "r1".into(),
            by: Fence::Manifest,
            holder: None,
        };
        assert_eq!(
            by_manifest.to_string(),
            "replication: run r1's manifest was changed by another writer; this writer stops \
             without acknowledging anything more"
        );
        assert!(by_lease.is_fenced() && by_manifest.is_fenced());
        let lapsed = ReplicateError::LeaseLapsed {
            run_id: "r1".into(),
            reason: "timed out".into(),
        };
        assert!(!lapsed.is_fenced());
        assert!(!lapsed.to_string().contains("  "), "{lapsed}");
    }
}
