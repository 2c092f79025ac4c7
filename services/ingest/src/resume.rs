//! The operator's way out of a stopped partition: resume it from a chosen
//! offset, recorded in the manifest (who, why, when, from which offset).
//! The `eddy partition resume` admin command calls [`resume_partition`].

use eddy_manifest::{Manifest, PartitionResume, Store};
use tracing::warn;

use crate::error::{Error, Result};
use crate::state::now_ms;

/// Resumes `partition` of `collection` from `offset`: publishes a manifest
/// version whose `next_offset` for the partition is `offset`, with a
/// [`PartitionResume`] record naming `by`, `reason` and the time. It also
/// bumps the partition's owner epoch, so the worker that stopped it cannot
/// publish its old offset over the operator's; that worker sees the record
/// within seconds and reads on from `offset` (a worker started later reads
/// it from the manifest). Events between the old offset and `offset` are
/// not indexed: choosing `offset` is the operator's decision.
pub fn resume_partition(
    store: &Store,
    collection: &str,
    partition: u32,
    offset: i64,
    by: &str,
    reason: &str,
) -> Result<Manifest> {
    if offset < 0 {
        return Err(Error::InvalidResume(format!("offset {offset} is negative")));
    }
    let Some(def) = store.collection(collection)? else {
        return Err(Error::InvalidResume(format!(
            "no collection {collection:?}"
        )));
    };
    // The partition's shard's chain holds its offset.
    let chain = def.chain(def.shard_of(partition));
    let at_ms = now_ms();
    let updated = store.update::<Error>(&chain, |latest| {
        let mut next = latest.successor();
        let state = next.partitions.entry(partition).or_default();
        let previous_offset = state.next_offset;
        state.next_offset = offset;
        state.owner_epoch += 1;
        next.resumes.insert(
            partition,
            PartitionResume {
                offset,
                previous_offset,
                by: by.to_owned(),
                reason: reason.to_owned(),
                at_ms,
            },
        );
        Ok(Some(next))
    })?;
    let next = updated
        .published
        .ok_or_else(|| Error::InvalidResume("the resume was not published".into()))?;
    let previous_offset = next
        .resumes
        .get(&partition)
        .map_or(0, |r| r.previous_offset);
    warn!(
        collection,
        partition,
        offset,
        previous_offset,
        by,
        reason,
        version = next.version,
        "partition resumed by an operator"
    );
    Ok(next)
}

#[cfg(test)]
mod tests {
    use eddy_model::CollectionDef;

    use super::*;

    #[test]
    fn a_resume_is_recorded_in_the_manifest_and_fences_the_owner() {
        let dir = tempfile::tempdir().expect("tmp");
        let store = Store::open(dir.path()).expect("store");
        store
            .create_collection(&CollectionDef::new("c", 2))
            .expect("create");
        let mut first = store.latest_manifest("c").expect("v0").successor();
        first.partitions.insert(
            1,
            eddy_manifest::PartitionState {
                next_offset: 500,
                owner_epoch: 3,
            },
        );
        store.publish(&first).expect("v1");
        let resumed =
            resume_partition(&store, "c", 1, 7, "ops@example", "topic re-created").expect("resume");
        let latest = store.latest_manifest("c").expect("latest");
        assert_eq!(latest, resumed);
        assert_eq!(latest.next_offset(1), 7);
        assert_eq!(
            latest.partitions[&1].owner_epoch, 4,
            "the old owner is fenced"
        );
        let record = &latest.resumes[&1];
        assert_eq!((record.offset, record.previous_offset), (7, 500));
        assert_eq!(record.by, "ops@example");
        assert_eq!(record.reason, "topic re-created");
        assert!(record.at_ms > 0);
        assert!(resume_partition(&store, "c", 1, -1, "x", "y").is_err());
        assert!(resume_partition(&store, "nope", 1, 0, "x", "y").is_err());
    }
}
