//! Finding peers in the store: with `--peer-discovery`, a query node
//! announces the Flight URL its peers reach it at in the store's node
//! registry (`nodes/<id>.json`, see `eddy_manifest::Store::announce_node`)
//! and takes every other announced node as a peer, beside any `--peers`.
//! Nodes that join are asked what they serve at once; nodes that stop
//! withdraw their record, and a node that dies drops out when its record
//! expires (three discovery periods).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use eddy_manifest::Store;
use tracing::{info, warn};

use super::peer::Peer;
use super::Peers;

/// How this node takes part in the node registry.
#[derive(Debug, Clone)]
pub struct Discovery {
    /// The store whose registry is read (and written).
    pub store: Store,
    /// This node's record name.
    pub node_id: String,
    /// The Flight URL announced for this node (`None`: it only looks).
    pub advertise: Option<String>,
    /// How often it announces itself and looks for the others.
    pub every: Duration,
    /// Set once the node has withdrawn: held while announcing, so no
    /// announcement already under way lands after the withdrawal.
    pub withdrawn: Arc<parking_lot::Mutex<bool>>,
}

impl Discovery {
    /// How long an announcement holds: three periods and a margin, so a
    /// late announcement or a slow store does not drop a live node.
    fn ttl(&self) -> Duration {
        self.every * 3 + Duration::from_secs(2)
    }

    /// Announces this node (if it advertises a URL) and reads the other
    /// nodes' URLs.
    async fn round(&self) -> Result<BTreeSet<String>, String> {
        let this = self.clone();
        tokio::task::spawn_blocking(move || {
            if let Some(url) = &this.advertise {
                let withdrawn = this.withdrawn.lock();
                if !*withdrawn {
                    this.store
                        .announce_node(&this.node_id, url, this.ttl())
                        .map_err(|e| format!("announcing this node: {e}"))?;
                }
            }
            let nodes = this
                .store
                .announced_nodes()
                .map_err(|e| format!("reading the node registry: {e}"))?;
            Ok(nodes
                .into_iter()
                .filter(|n| n.id != this.node_id && Some(&n.flight_url) != this.advertise.as_ref())
                .map(|n| n.flight_url)
                .collect())
        })
        .await
        .map_err(|e| format!("the registry task: {e}"))?
    }

    /// Announces this node once (start-up: peers can find it as soon as it
    /// serves).
    pub async fn announce(&self) -> Result<(), String> {
        self.round().await.map(|_| ())
    }

    /// Removes this node's announcement (a clean stop).
    pub async fn withdraw(&self) {
        if self.advertise.is_none() {
            return;
        }
        let this = self.clone();
        let withdrawn = tokio::task::spawn_blocking(move || {
            let mut withdrawn = this.withdrawn.lock();
            *withdrawn = true;
            this.store.withdraw_node(&this.node_id)
        })
        .await;
        match withdrawn {
            Ok(Ok(_)) => info!(node = %self.node_id, "withdrawn from the node registry"),
            Ok(Err(e)) => {
                warn!(node = %self.node_id, error = %e, "withdrawing from the node registry")
            }
            Err(e) => warn!(node = %self.node_id, error = %e, "withdrawing from the node registry"),
        }
    }
}

impl Peers {
    /// Every `discovery.every`, announces this node and makes the peers
    /// `--peers` plus the other announced nodes, asking new ones what they
    /// serve at once; until the runtime stops (run it as a task). A failed
    /// round keeps the peers as they were.
    pub async fn keep_discovering(self: Arc<Self>, discovery: Discovery) {
        loop {
            match discovery.round().await {
                Ok(found) => {
                    if self.set_found(&found) {
                        self.refresh_all().await;
                    }
                }
                Err(e) => warn!(error = %e, "peer discovery: keeping the peers known"),
            }
            tokio::time::sleep(discovery.every).await;
        }
    }

    /// Makes the peers `--peers` plus `found` (Flight URLs, this node's own
    /// left out by the caller): peers still named keep their connection and
    /// view, new ones are connected, the others are let go. Whether any
    /// peer came or went.
    fn set_found(&self, found: &BTreeSet<String>) -> bool {
        let current = self.list();
        let wanted: BTreeSet<&String> = self.connect.urls.iter().chain(found).collect();
        let unchanged =
            current.len() == wanted.len() && current.iter().all(|p| wanted.contains(&p.url));
        if unchanged {
            return false;
        }
        let mut next = Vec::with_capacity(wanted.len());
        for url in wanted {
            match current.iter().find(|p| &p.url == url) {
                Some(p) => next.push(p.clone()),
                None => match Peer::connect(url, &self.connect) {
                    Ok(p) => {
                        info!(peer = %url, "peer found in the store");
                        next.push(Arc::new(p));
                    }
                    Err(e) => warn!(peer = %url, error = %e, "a node announced an unusable URL"),
                },
            }
        }
        for gone in current
            .iter()
            .filter(|p| !next.iter().any(|n| n.url == p.url))
        {
            info!(peer = %gone.url, "peer gone from the store");
        }
        *self.peers.write() = Arc::new(next);
        true
    }
}
