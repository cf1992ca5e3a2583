//! The plan a run keeps: its items and each new version ([`PlanUpdated`]).

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PlanStatus {
    Pending,
    InProgress,
    Done,
    Blocked,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanItem {
    pub id: String,
    pub text: String,
    pub status: PlanStatus,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanUpdated {
    pub step: u64,
    pub version: u64,
    pub items: Vec<PlanItem>,
    #[serde(default)]
    pub note: Option<String>,
    /// Human-readable diff against the previous version, one change a line.
    pub diff: String,
}
