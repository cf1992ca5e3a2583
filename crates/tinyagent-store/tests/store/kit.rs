//! What several test modules share: a record that adds a number, the fold
//! that sums them (and counts them), and store options.

use serde::{Deserialize, Serialize};
use tinyagent_store::{Fold, Record, StoreOptions};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", content = "data")]
pub enum Op {
    #[serde(rename = "add")]
    Add { n: u64 },
}

impl Record for Op {
    fn kind(&self) -> &'static str {
        "add"
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sum {
    pub total: u64,
    pub applied: u64,
}

impl Fold<Op> for Sum {
    fn apply(&mut self, record: &Op) {
        let Op::Add { n } = record;
        self.total += n;
        self.applied += 1;
    }
}

/// Default options with a snapshot every `every` records (0: none).
pub fn opts(every: u64) -> StoreOptions {
    StoreOptions {
        snapshot_every: every,
        ..StoreOptions::default()
    }
}
