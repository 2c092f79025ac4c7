//! A worker's state over every shard of its collection: one
//! [`CollectionState`] per manifest chain, each record and partition routed
//! to its shard's (partition `p` belongs to shard `p % shards`). An unsplit
//! collection has one shard, whose chain is the collection itself.

use std::collections::BTreeMap;

use eddy_kafka::{Gaps, Record};
use eddy_manifest::Store;
use eddy_model::CollectionDef;
use tracing::info;

use super::{Applied, CollectionState, SealOutcome, Stopped};
use crate::config::SealPolicy;
use crate::error::Result;
use crate::metrics::IngestMetrics;

/// The ingest state of one collection's shards on one worker.
#[derive(Debug)]
pub struct ShardStates {
    def: CollectionDef,
    /// Per shard, its chain's state.
    shards: Vec<CollectionState>,
}

impl ShardStates {
    /// State for every shard of `def`, each synced to its chain's newest
    /// manifest in `store`.
    pub fn new(
        def: CollectionDef,
        store: &Store,
        policy: SealPolicy,
        metrics: &IngestMetrics,
    ) -> Result<Self> {
        let shards = def
            .chain_defs()
            .into_iter()
            .map(|chain| CollectionState::new(chain, store.clone(), policy, metrics.clone()))
            .collect::<Result<_>>()?;
        Ok(Self { def, shards })
    }

    /// The collection definition (the collection's, not a chain's).
    pub fn def(&self) -> &CollectionDef {
        &self.def
    }

    /// Every shard's state, shard 0 first.
    pub fn shards(&self) -> &[CollectionState] {
        &self.shards
    }

    fn shard_mut(&mut self, partition: u32) -> &mut CollectionState {
        let s = self.def.shard_of(partition) as usize;
        &mut self.shards[s]
    }

    /// `partitions` grouped by shard.
    fn by_shard(&self, partitions: &[u32]) -> BTreeMap<usize, Vec<u32>> {
        let mut out: BTreeMap<usize, Vec<u32>> = BTreeMap::new();
        for p in partitions {
            out.entry(self.def.shard_of(*p) as usize)
                .or_default()
                .push(*p);
        }
        out
    }

    /// Sets how offset gaps are judged, for every shard.
    pub fn set_gaps(&mut self, gaps: Gaps) {
        for s in &mut self.shards {
            s.set_gaps(gaps);
        }
    }

    /// Takes an altered definition (see [`CollectionState::set_def`]).
    pub fn set_def(&mut self, def: CollectionDef) {
        if !self.def.same_but_payload_fields(&def) {
            // Each shard refuses it the same way; one warning is enough.
            self.shards[0].set_def(def);
            return;
        }
        for (state, chain) in self.shards.iter_mut().zip(def.chain_defs()) {
            state.set_def(chain);
        }
        self.def = def;
    }

    /// Takes partitions over, each in its shard's chain (see
    /// [`CollectionState::assign`]); the offset to start each at.
    pub fn assign(
        &mut self,
        partitions: &[u32],
        log_starts: &BTreeMap<u32, i64>,
    ) -> Result<BTreeMap<u32, i64>> {
        let mut starts = BTreeMap::new();
        for (s, ps) in self.by_shard(partitions) {
            starts.extend(self.shards[s].assign(&ps, log_starts)?);
        }
        if !starts.is_empty() {
            // One line per assignment, whatever the shards (tests and
            // operators read a worker's holding from it).
            info!(collection = %self.def.name, ?starts, "partitions assigned");
        }
        Ok(starts)
    }

    /// Forgets `partitions` (see [`CollectionState::revoke`]).
    pub fn revoke(&mut self, partitions: &[u32]) {
        for (s, ps) in self.by_shard(partitions) {
            self.shards[s].revoke(&ps);
        }
        info!(collection = %self.def.name, ?partitions, "partitions revoked");
    }

    /// Checks `partition`'s next offset against its log (see
    /// [`CollectionState::check_log_range`]).
    pub fn check_log_range(&mut self, partition: u32, low: i64, high: i64) -> bool {
        self.shard_mut(partition)
            .check_log_range(partition, low, high)
    }

    /// Applies one record to its partition's shard.
    pub fn apply(&mut self, record: Record<'_>) -> Applied {
        self.shard_mut(record.place.partition).apply(record)
    }

    /// Whether any shard's buffer reached a seal limit.
    pub fn should_seal(&self) -> bool {
        self.shards.iter().any(CollectionState::should_seal)
    }

    /// Seals every shard with progress, each into its own chain, and waits
    /// (see [`CollectionState::seal`]).
    pub fn seal(&mut self) -> Result<Option<SealOutcome>> {
        self.each_shard(CollectionState::seal)
    }

    /// Starts a seal on every shard with progress (see
    /// [`CollectionState::start_seal`]); the outcome of the seals it waited
    /// for.
    pub fn start_seal(&mut self) -> Result<Option<SealOutcome>> {
        self.each_shard(CollectionState::start_seal)
    }

    /// Publishes every shard's seal whose write is done (see
    /// [`CollectionState::poll_seal`]).
    pub fn poll_seal(&mut self) -> Result<Option<SealOutcome>> {
        self.each_shard(CollectionState::poll_seal)
    }

    /// Runs a seal step on every shard, combining what they published.
    /// Every shard is tried; the first failure is returned after the others
    /// ran (what they published stands, and a retry seals the rest).
    fn each_shard(
        &mut self,
        step: impl Fn(&mut CollectionState) -> Result<Option<SealOutcome>>,
    ) -> Result<Option<SealOutcome>> {
        let mut combined: Option<SealOutcome> = None;
        let mut failure = None;
        for state in &mut self.shards {
            match step(state) {
                Ok(outcome) => combined = SealOutcome::combine(combined, outcome),
                Err(e) => {
                    failure.get_or_insert(e);
                }
            }
        }
        match failure {
            Some(e) => Err(e),
            None => Ok(combined),
        }
    }

    /// Per owned partition, the next offset to accept.
    pub fn owned_offsets(&self) -> BTreeMap<u32, i64> {
        self.shards
            .iter()
            .flat_map(CollectionState::owned_offsets)
            .collect()
    }

    /// Per owned partition, the offset its chain's newest manifest covers.
    pub fn manifest_offsets(&self) -> BTreeMap<u32, i64> {
        self.shards
            .iter()
            .flat_map(CollectionState::manifest_offsets)
            .collect()
    }

    /// The stopped partitions, with why.
    pub(crate) fn stopped(&self) -> Vec<(u32, Stopped)> {
        self.shards
            .iter()
            .flat_map(CollectionState::stopped)
            .collect()
    }

    /// The partitions an operator resumed since this worker took them over
    /// (read from each chain's newest manifest).
    pub fn resumed(&self) -> Result<Vec<u32>> {
        let mut out = Vec::new();
        for state in &self.shards {
            let latest = state.latest_manifest()?;
            out.extend(state.resumed_since_taken(&latest));
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use prometheus::Registry;

    use super::*;
    use crate::state::{test_policy, test_record};

    /// Each partition's events are sealed into its shard's chain, which
    /// records its partitions' offsets and owners and no other's.
    #[test]
    fn partitions_seal_into_their_shards_chains() {
        let dir = tempfile::tempdir().expect("tmp");
        let store = Store::open(dir.path()).expect("store");
        let def = CollectionDef {
            shards: 2,
            ..CollectionDef::new("s", 2)
        };
        store.create_collection(&def).expect("collection");
        let metrics = IngestMetrics::new(&Registry::new()).expect("metrics");
        let policy = test_policy();
        let mut states = ShardStates::new(def, &store, policy, &metrics).expect("state");
        let starts = states
            .assign(
                &[0, 1, 2, 3],
                &BTreeMap::from([(0, 0), (1, 0), (2, 0), (3, 0)]),
            )
            .expect("assign");
        assert_eq!(starts.len(), 4);
        for (id, partition) in [(1, 0), (2, 1), (3, 2), (4, 3), (5, 3)] {
            let offset = states.owned_offsets()[&partition];
            let event = format!(r#"{{"id": {id}, "vector": [1, {id}]}}"#);
            assert_eq!(
                states.apply(test_record(event.as_bytes(), partition, offset)),
                Applied::Done
            );
        }
        let sealed = states.seal().expect("seal").expect("progress");
        assert_eq!(
            sealed.committed,
            BTreeMap::from([(0, 1), (1, 1), (2, 1), (3, 2)])
        );
        for (chain, partitions, rows) in [("s.0", [0, 2], 2), ("s.1", [1, 3], 3)] {
            let m = store.latest_manifest(chain).expect("manifest");
            assert_eq!(
                m.partitions.keys().copied().collect::<Vec<_>>(),
                partitions,
                "{chain}"
            );
            assert_eq!(
                m.segments.iter().map(|s| s.rows).sum::<u64>(),
                rows,
                "{chain}"
            );
        }
        assert_eq!(store.latest_manifest("s").expect("manifest").version, 0);
        states.revoke(&[1, 3]);
        assert_eq!(
            states.owned_offsets().keys().copied().collect::<Vec<_>>(),
            [0, 2]
        );
    }
}
