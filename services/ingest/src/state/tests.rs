//! Buffer policy tests: quiet seals and the limits a buffer waits for.

use std::collections::BTreeMap;
use std::time::Duration;

use super::{test_policy, test_record, test_state, Applied, CollectionState};
use crate::config::{QuietSeal, SealPolicy};

/// A state owning partition 0 of a new collection in `dir`, whose
/// buffer reaches no row, byte or age limit in a test.
fn owning_partition_0(dir: &std::path::Path, quiet: Option<QuietSeal>) -> CollectionState {
    let policy = SealPolicy {
        max_age: Duration::from_secs(3600),
        quiet,
        ..test_policy()
    };
    let (mut state, _) = test_state(dir, policy);
    state
        .assign(&[0], &BTreeMap::from([(0, 0)]))
        .expect("assign");
    state
}

fn apply_ids(state: &mut CollectionState, ids: std::ops::Range<i64>) {
    for id in ids {
        let event = format!(r#"{{"id": {id}, "vector": [1, {id}]}}"#);
        assert_eq!(
            state.apply(test_record(event.as_bytes(), 0, id)),
            Applied::Done
        );
    }
}

/// A buffer whose events stopped arriving is sealed once it holds enough
/// rows for a graph, long before its age limit; a smaller one waits.
#[test]
fn a_quiet_buffer_with_rows_for_a_graph_seals_early() {
    let dir = tempfile::tempdir().expect("tmp");
    let quiet = QuietSeal {
        after: Duration::ZERO,
        min_rows: 3,
    };
    let mut state = owning_partition_0(dir.path(), Some(quiet));
    assert!(!state.should_seal(), "an empty buffer never seals");
    apply_ids(&mut state, 0..2);
    assert!(!state.should_seal(), "too few rows to seal early");
    apply_ids(&mut state, 2..3);
    assert!(state.should_seal(), "quiet, with rows for a graph");
    let sealed = state.seal().expect("seal").expect("progress");
    assert_eq!(sealed.committed, BTreeMap::from([(0, 3)]));
    assert!(!state.should_seal(), "the new buffer is empty");
}

/// Events still arriving, or the early seal turned off, leave the buffer
/// to its limits.
#[test]
fn a_buffer_still_receiving_or_without_quiet_seals_waits_for_its_limits() {
    let dir = tempfile::tempdir().expect("tmp");
    let quiet = QuietSeal {
        after: Duration::from_secs(3600),
        min_rows: 1,
    };
    let mut state = owning_partition_0(dir.path(), Some(quiet));
    apply_ids(&mut state, 0..5);
    assert!(!state.should_seal(), "an event arrived within the hour");

    let dir = tempfile::tempdir().expect("tmp");
    let mut state = owning_partition_0(dir.path(), None);
    apply_ids(&mut state, 0..5);
    assert!(!state.should_seal(), "no quiet seals");
}
