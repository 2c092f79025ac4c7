//! Which peer a fan-out leg asks: the peers serving each shard (reachable
//! ones first, in a rotation that spreads legs over replicas), and a plan
//! covering the shards with as few legs as the peers allow.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::peer::Peer;
use super::Peers;

impl Peers {
    /// Untried peers that last said they serve `shard` of `collection`:
    /// the reachable ones, in the rotation's order; when none is, the
    /// unreachable ones (a failure may have passed since, and asking is
    /// the only way left to answer whole).
    fn serving(
        &self,
        peers: &[Arc<Peer>],
        collection: &str,
        shard: u32,
        tried: &BTreeSet<usize>,
    ) -> Vec<usize> {
        let n = peers.len();
        let start = self.next.load(Ordering::Relaxed);
        let (reachable, unreachable): (Vec<usize>, Vec<usize>) = (0..n)
            .map(|i| (start + i) % n)
            .filter(|i| !tried.contains(i))
            .filter(|i| {
                peers[*i]
                    .view
                    .read()
                    .served
                    .get(collection)
                    .is_some_and(|s| s.contains(&shard))
            })
            .partition(|i| peers[*i].view.read().reachable);
        if reachable.is_empty() {
            unreachable
        } else {
            reachable
        }
    }

    /// A plan for `shards`: which peer is asked for which of them, as few
    /// legs as the peers allow (each leg goes to the peer serving most of
    /// the shards still unplanned); shards no untried peer serves are left
    /// out.
    pub(super) fn plan(
        &self,
        peers: &[Arc<Peer>],
        collection: &str,
        shards: &BTreeSet<u32>,
        tried: &BTreeSet<usize>,
    ) -> Vec<(usize, Vec<u32>)> {
        let mut left: BTreeSet<u32> = shards.clone();
        let mut plan = Vec::new();
        loop {
            let mut by_peer: BTreeMap<usize, Vec<u32>> = BTreeMap::new();
            for s in &left {
                for p in self.serving(peers, collection, *s, tried) {
                    by_peer.entry(p).or_default().push(*s);
                }
            }
            // Most shards first; among equals, the rotation's first choice.
            let n = peers.len().max(1);
            let start = self.next.load(Ordering::Relaxed) % n;
            let rank = |p: usize| (p + n - start) % n;
            let best = by_peer
                .into_iter()
                .filter(|(p, _)| !plan.iter().any(|(q, _)| q == p))
                .max_by_key(|(p, s)| (s.len(), std::cmp::Reverse(rank(*p))));
            let Some((peer, covered)) = best else { break };
            for s in &covered {
                left.remove(s);
            }
            plan.push((peer, covered));
            if left.is_empty() {
                break;
            }
        }
        self.next.fetch_add(1, Ordering::Relaxed);
        plan
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::time::Duration;

    use super::*;
    use crate::fanout::peer::View;
    use crate::fanout::PeerOptions;
    use crate::metrics::QueryMetrics;

    fn metrics() -> QueryMetrics {
        QueryMetrics::new(&prometheus::Registry::new()).expect("metrics")
    }

    fn peers(served: &[(bool, &[u32])]) -> Peers {
        let opts = PeerOptions {
            urls: (0..served.len())
                .map(|i| format!("http://127.0.0.1:{}", 1 + i))
                .collect(),
            refresh: Duration::from_secs(1),
            timeout: Duration::from_secs(1),
            ..PeerOptions::default()
        };
        let peers = Peers::new(&opts, metrics()).expect("peers");
        for (peer, (reachable, shards)) in peers.list().iter().zip(served) {
            *peer.view.write() = View {
                reachable: *reachable,
                served: HashMap::from([("c".to_owned(), shards.to_vec())]),
            };
        }
        peers
    }

    /// A plan asks as few peers as serve the shards, prefers reachable
    /// ones, skips those already tried, and asks an unreachable one only
    /// for shards no reachable one serves.
    #[tokio::test]
    async fn a_plan_covers_shards_with_few_peers_reachable_first() {
        let peers = peers(&[(true, &[1]), (true, &[1, 2]), (false, &[2, 3])]);
        let wanted: BTreeSet<u32> = [1, 2, 3].into();
        assert_eq!(
            peers.plan(&peers.list(), "c", &wanted, &BTreeSet::new()),
            vec![(1, vec![1, 2]), (2, vec![3])]
        );
        assert_eq!(
            peers.plan(&peers.list(), "c", &wanted, &[1].into()),
            vec![(2, vec![2, 3]), (0, vec![1])],
            "shard 2's other peer is tried though unreachable"
        );
        assert_eq!(
            peers.plan(&peers.list(), "c", &wanted, &[1, 2].into()),
            vec![(0, vec![1])],
            "nobody else serves shards 2 and 3"
        );
        assert!(peers
            .plan(&peers.list(), "other", &wanted, &BTreeSet::new())
            .is_empty());
    }

    /// Equal peers take turns being asked first.
    #[tokio::test]
    async fn replicas_take_turns() {
        let peers = peers(&[(true, &[1]), (true, &[1])]);
        let wanted: BTreeSet<u32> = [1].into();
        let first: Vec<usize> = (0..4)
            .map(|_| peers.plan(&peers.list(), "c", &wanted, &BTreeSet::new())[0].0)
            .collect();
        assert_eq!(first, [0, 1, 0, 1]);
    }
}
