//! The bounded fold `inspect` reads with reports exactly what the full fold
//! (the whole history kept) would: the same [`Report`], on plausible runs and
//! on records in any order.

use super::{Report, Summary};
use crate::event::Event;
use crate::session::State;
use crate::session::proptests::run;
use proptest::prelude::*;
use std::path::Path;
use tinyagent_store::Fold;
use tinyagent_store::wal::reader::ScanReport;

fn scan(records: u64) -> ScanReport {
    ScanReport {
        records,
        valid_bytes: 10,
        file_len: 10,
        last: None,
        torn_tail: None,
        corruption: None,
    }
}

/// Both folds over `events`: the report must be the same.
fn check(events: &[&Event]) -> Result<(), TestCaseError> {
    let mut full = State::default();
    let mut summary = Summary::default();
    for e in events {
        full.apply(e);
        Fold::apply(&mut summary, *e);
        prop_assert!(summary.state.view.len() <= 1);
        prop_assert!(summary.state.messages.is_empty());
        prop_assert!(summary.state.plan_history.is_empty());
    }
    let scan = scan(events.len() as u64);
    let path = Path::new("x.wal");
    prop_assert_eq!(
        Report::new(path, &summary, &scan, None),
        Report::new(path, &Summary::of_full(&full), &scan, None)
    );
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn bounded_fold_reports_what_the_full_fold_does(events in run()) {
        check(&events.iter().collect::<Vec<_>>())?;
    }

    #[test]
    fn bounded_fold_reports_what_the_full_fold_does_out_of_order(
        events in run(),
        order in prop::collection::vec(any::<prop::sample::Index>(), 0..60),
    ) {
        if events.is_empty() { return Ok(()); }
        let picked: Vec<&Event> = order.iter().map(|i| &events[i.index(events.len())]).collect();
        check(&picked)?;
    }
}
