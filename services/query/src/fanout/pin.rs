//! Pinned snapshots across shards. A node pinning a split collection whose
//! other shards its peers serve asks a peer for each of them to pin too
//! (the Flight action `pin_shards`, a [`PinLegRequest`] answered with the
//! peer's [`PinInfo`]), and keeps their tokens with its own pin as
//! [`RemotePin`]s. A read of the pin sends the legs for those shards to
//! exactly those peers, naming their tokens: never to a replica (which
//! does not hold that snapshot), never hedged, never retried elsewhere. A
//! peer that is gone leaves its shards missing (503, or with
//! `allow_partial` a partial answer); a peer whose pin expired answers
//! 404, which the reader gets as is (pin anew). Every read of a pin fans
//! out to all its shards, so each use extends the peers' pins as well.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Instant;

use serde::{Deserialize, Serialize};
use tracing::warn;

use super::leg::check_serves;
use super::peer::{call_peer, Peer};
use super::{Peers, PIN_SHARDS};
use crate::collection::Collection;
use crate::engine::Engine;
use crate::error::ApiError;
use crate::pins::PinInfo;

/// A pin of some shards of a split collection, as one node asks it of
/// another.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PinLegRequest {
    /// The collection.
    pub collection: String,
    /// The shards to pin (all served by the node asked).
    pub shards: Vec<u32>,
}

/// A pin a peer holds for this node's pinned snapshot: which shards it
/// answers for and the token its legs name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemotePin {
    /// The peer's Flight URL.
    pub peer: String,
    /// The shards of the snapshot it answers for.
    pub shards: Vec<u32>,
    /// Its pin's token (never shown to the job: the job names this node's).
    #[serde(skip)]
    pub token: String,
    /// The manifest version it pinned.
    pub version: u64,
}

impl Peers {
    /// Pins `shards` of `collection` on peers serving them: per peer
    /// asked, its pin and what it reported, and the shards no peer pinned.
    pub async fn pin(
        &self,
        collection: &Collection,
        shards: &[u32],
    ) -> Result<(Vec<(RemotePin, PinInfo)>, Vec<u32>), ApiError> {
        let name = collection.name();
        let mut pinned = Vec::new();
        let missing = self
            .gather(
                collection,
                shards,
                PIN_SHARDS,
                |leg_shards, _| {
                    let request = PinLegRequest {
                        collection: name.to_owned(),
                        shards: leg_shards.to_vec(),
                    };
                    serde_json::to_vec(&request).map_err(|e| ApiError::Internal(e.to_string()))
                },
                |info: PinInfo, peer: &str, leg_shards: &[u32]| {
                    pinned.push((
                        RemotePin {
                            peer: peer.to_owned(),
                            shards: leg_shards.to_vec(),
                            token: info.token.clone(),
                            version: info.version,
                        },
                        info,
                    ));
                },
            )
            .await?;
        Ok((pinned, missing))
    }

    /// Asks the peers holding `pins` (a pinned snapshot's) `action` for
    /// `shards`, each leg naming its pin's token: every answer handed to
    /// `take`, and the shards whose peer did not answer. A leg refused as
    /// a bad request, or whose pin the peer no longer knows, fails the
    /// whole call.
    pub(super) async fn gather_pinned<A: serde::de::DeserializeOwned>(
        &self,
        pins: &[RemotePin],
        shards: &[u32],
        action: &str,
        body_for: impl Fn(&[u32], Option<&str>) -> Result<Vec<u8>, ApiError>,
        mut take: impl FnMut(A, &str, &[u32]),
    ) -> Result<Vec<u32>, ApiError> {
        let wanted: BTreeSet<u32> = shards.iter().copied().collect();
        let legs: Vec<(&RemotePin, Vec<u32>)> = pins
            .iter()
            .map(|pin| {
                let leg_shards: Vec<u32> = pin
                    .shards
                    .iter()
                    .filter(|s| wanted.contains(s))
                    .copied()
                    .collect();
                (pin, leg_shards)
            })
            .filter(|(_, leg_shards)| !leg_shards.is_empty())
            .collect();
        let peers = self.list();
        let calls = legs.iter().map(|(pin, leg_shards)| {
            let body = body_for(leg_shards, Some(&pin.token));
            let channel = self.channel_to(&peers, &pin.peer);
            async move {
                let started = Instant::now();
                let bytes = call_peer(
                    channel?,
                    self.key.clone(),
                    pin.peer.clone(),
                    action.to_owned(),
                    body?,
                )
                .await?;
                let answer = serde_json::from_slice::<A>(&bytes)
                    .map_err(|e| ApiError::Unavailable(format!("a peer's {action} answer: {e}")))?;
                self.metrics
                    .fanout_leg_latency
                    .with_label_values(&[action])
                    .observe(started.elapsed().as_secs_f64());
                Ok::<A, ApiError>(answer)
            }
        });
        let answers = futures::future::join_all(calls).await;
        let mut left = wanted;
        for ((pin, leg_shards), answer) in legs.into_iter().zip(answers) {
            self.count_leg(action, &answer);
            match answer {
                Ok(answer) => {
                    for s in &leg_shards {
                        left.remove(s);
                    }
                    take(answer, &pin.peer, &leg_shards);
                }
                Err(ApiError::NotFound(why)) => {
                    return Err(ApiError::NotFound(format!(
                        "the snapshot's pin of shards {leg_shards:?} on {} is gone ({why}): pin a new one (GetFlightInfo)",
                        pin.peer
                    )))
                }
                Err(e @ ApiError::BadRequest(_)) => return Err(e),
                Err(e) => {
                    warn!(peer = %pin.peer, shards = ?leg_shards, error = %e, "a pinned snapshot's leg failed: its shards are missing (that peer alone holds their pin)");
                }
            }
        }
        self.count_missing(action, left.len());
        Ok(left.into_iter().collect())
    }

    /// The channel to the peer at `url`: the known peer's, or a new lazy
    /// connection (a pin outlives a peer's removal from the list).
    fn channel_to(
        &self,
        peers: &[Arc<Peer>],
        url: &str,
    ) -> Result<tonic::transport::Channel, ApiError> {
        match peers.iter().find(|p| p.url == url) {
            Some(peer) => Ok(peer.channel.clone()),
            None => Ok(Peer::connect(url, &self.connect)?.channel),
        }
    }
}

/// Answers a `pin_shards` action: pins this node's collection (its own
/// shards only, never fanned out again) and answers the pin. Refused with
/// 503 when this node does not serve one of the asked shards.
pub async fn answer(engine: &Arc<Engine>, body: &[u8]) -> Result<Vec<u8>, ApiError> {
    let leg: PinLegRequest = serde_json::from_slice(body)
        .map_err(|e| ApiError::BadRequest(format!("invalid {PIN_SHARDS} body: {e}")))?;
    let collection = engine.collection(&leg.collection)?;
    check_serves(&collection, &leg.collection, &leg.shards)?;
    let info = engine.pin_here(collection, Vec::new()).await?;
    serde_json::to_vec(&info).map_err(|e| ApiError::Internal(e.to_string()))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::json;

    use super::*;
    use crate::collection::Collection;
    use crate::fanout::fake_peer::FakePeer;
    use crate::fanout::{PeerOptions, COUNT_SHARDS};
    use crate::metrics::QueryMetrics;

    /// A node serving shard 0 of a collection split in two.
    fn shard0() -> Collection {
        let mut def = eddy_model::CollectionDef::new("c", 2);
        def.shards = 2;
        Collection::serving(def, [0])
    }

    fn pinned_at(live: &Collection, peer: &str) -> Collection {
        live.frozen().with_remote_pins(vec![RemotePin {
            peer: peer.to_owned(),
            shards: vec![1],
            token: "t0k".to_owned(),
            version: 3,
        }])
    }

    /// A pinned read asks the peer holding the pin, naming its token, and
    /// never a replica: not while the pinning peer answers, not when it is
    /// gone (its shards are missing), not when it forgot the pin (404).
    #[tokio::test]
    async fn a_pinned_read_goes_to_the_peer_holding_its_pin_alone() {
        let served = json!({"c": [1]});
        let count = |n: u64| json!({"count": n, "offsets": {"1": 5}});
        let replica = FakePeer::start(served.clone(), count(1), Duration::ZERO).await;
        let pinning = FakePeer::start(served.clone(), count(2), Duration::ZERO).await;
        let forgot = FakePeer::refusing(served, tonic::Code::NotFound).await;
        let metrics = QueryMetrics::new(&prometheus::Registry::new()).expect("metrics");
        let opts = PeerOptions {
            urls: vec![replica.url.clone(), pinning.url.clone(), forgot.url.clone()],
            refresh: Duration::from_secs(3600),
            timeout: Duration::from_secs(10),
            ..PeerOptions::default()
        };
        let peers = Peers::new(&opts, metrics.clone()).expect("peers");
        peers.refresh_all().await;
        let live = shard0();

        let pinned = pinned_at(&live, &pinning.url);
        for _ in 0..4 {
            let counted = peers.count(&pinned, &[1], None).await.expect("count");
            assert_eq!(counted.count, 2, "the pinning peer answered");
            assert!(counted.missing.is_empty());
        }
        assert_eq!((replica.calls(), pinning.calls()), (0, 4));
        assert!(
            pinning
                .bodies()
                .iter()
                .all(|b| b.contains(r#""snapshot":"t0k""#)),
            "{:?}",
            pinning.bodies()
        );

        // A live count names no snapshot, whichever peer it asks.
        let counted = peers.count(&live, &[1], None).await.expect("count");
        assert!(counted.missing.is_empty());
        let asked: Vec<String> = [replica.bodies(), pinning.bodies()].concat();
        assert_eq!(asked.iter().filter(|b| !b.contains("snapshot")).count(), 1);

        // The pinning peer gone: shard 1 is missing, no replica asked.
        let asked_before = replica.calls() + forgot.calls();
        let gone = pinned_at(&live, "http://127.0.0.1:1");
        let counted = peers.count(&gone, &[1], None).await.expect("count");
        assert_eq!(counted.missing, vec![1]);
        assert_eq!(replica.calls() + forgot.calls(), asked_before);

        // A peer that no longer knows the pin: the read fails as not found.
        let expired = pinned_at(&live, &forgot.url);
        let err = peers
            .count(&expired, &[1], None)
            .await
            .expect_err("the pin is gone");
        assert_eq!(err.status().as_u16(), 404, "{err}");
        assert!(err.to_string().contains("pin a new one"), "{err}");
        let legs = |outcome: &str| {
            metrics
                .fanout_legs
                .with_label_values(&[COUNT_SHARDS, outcome])
                .get()
        };
        assert_eq!((legs("ok"), legs("failed"), legs("refused")), (5, 1, 1));
    }

    /// Pinning asks one peer per shard it lacks and keeps its token.
    #[tokio::test]
    async fn pinning_asks_a_peer_for_the_shards_it_lacks() {
        let info = json!({
            "token": "abc", "version": 7, "offsets": {"1": 9, "3": 4},
            "tail_rows": 2, "ttl_ms": 1000
        });
        let peer = FakePeer::start(json!({"c": [1]}), info, Duration::ZERO).await;
        let metrics = QueryMetrics::new(&prometheus::Registry::new()).expect("metrics");
        let opts = PeerOptions {
            urls: vec![peer.url.clone()],
            refresh: Duration::from_secs(3600),
            timeout: Duration::from_secs(10),
            ..PeerOptions::default()
        };
        let peers = Peers::new(&opts, metrics).expect("peers");
        peers.refresh_all().await;
        let (pinned, missing) = peers.pin(&shard0(), &[1]).await.expect("pin");
        assert!(missing.is_empty());
        assert_eq!(pinned.len(), 1);
        let (pin, info) = &pinned[0];
        assert_eq!(
            pin,
            &RemotePin {
                peer: peer.url.clone(),
                shards: vec![1],
                token: "abc".to_owned(),
                version: 7,
            }
        );
        assert_eq!(info.tail_rows, 2);
        assert_eq!(
            peer.bodies(),
            vec![r#"{"collection":"c","shards":[1]}"#.to_owned()]
        );
    }
}
