//! The node registry: query nodes that share a store announce the Flight
//! URL their peers reach them at, so a node finds the others from the
//! store alone (no `--peers` list to keep in step with a deployment).
//!
//! Each node keeps one record, `nodes/<id>.json` (the JSON envelope of kind
//! `node`), replaced on every announcement with a new expiry; a node that
//! stops cleanly withdraws it, one that dies lets it expire. Readers skip
//! expired records and remove those long expired, so the directory holds
//! about as many records as there are live nodes.

use std::time::{Duration, SystemTime};

use eddy_format::Versions;
use serde::{Deserialize, Serialize};
use tracing::debug;

use crate::lease::millis;
use crate::{JsonFormat, Result, Store};

/// Node records (`nodes/<id>.json`).
pub const NODE_FORMAT: JsonFormat = JsonFormat {
    kind: "node",
    what: "node record",
    versions: Versions::new(1, 1),
};

/// Records expired this long are removed by the readers that find them.
const FORGET_AFTER: Duration = Duration::from_secs(600);

/// What one node announces.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeRecord {
    /// The node's id (its record's name).
    pub id: String,
    /// The Flight URL its peers reach it at.
    pub flight_url: String,
    /// When the record expires, in ms since the Unix epoch (the writer's
    /// clock): the node announces again well before.
    pub expires_ms: u64,
}

fn node_key(id: &str) -> String {
    format!("nodes/{id}.json")
}

/// Whether `id` can name a record: letters, digits, `-`, `_` and `.`, not
/// starting with `.`, at most 128 bytes.
pub fn valid_node_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 128
        && !id.starts_with('.')
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

impl Store {
    /// Announces node `id` at `flight_url` for `ttl` from now (replacing
    /// its previous announcement).
    pub fn announce_node(&self, id: &str, flight_url: &str, ttl: Duration) -> Result<()> {
        let key = node_key(id);
        let record = NodeRecord {
            id: id.to_owned(),
            flight_url: flight_url.to_owned(),
            expires_ms: millis(SystemTime::now() + ttl),
        };
        let bytes = NODE_FORMAT.encode(&self.backend.describe(&key), &record)?;
        self.backend.replace(&key, &bytes)
    }

    /// Removes node `id`'s announcement: `Ok(false)` if there was none.
    pub fn withdraw_node(&self, id: &str) -> Result<bool> {
        self.backend.remove(&node_key(id))
    }

    /// The announcements that have not expired, by id. Records expired
    /// long ago are removed on the way; a damaged record is skipped (one
    /// node's bad write must not hide the others).
    pub fn announced_nodes(&self) -> Result<Vec<NodeRecord>> {
        let now = millis(SystemTime::now());
        let forget = u64::try_from(FORGET_AFTER.as_millis()).unwrap_or(u64::MAX);
        let mut out = Vec::new();
        for file in self.backend.list("nodes")? {
            let Some(id) = file.name.strip_suffix(".json") else {
                continue;
            };
            let key = node_key(id);
            // None: withdrawn meanwhile.
            let Some(bytes) = self.backend.read(&key)? else {
                continue;
            };
            let record: NodeRecord = match NODE_FORMAT.decode(&self.backend.describe(&key), &bytes)
            {
                Ok(record) => record,
                Err(e) => {
                    debug!(node = id, error = %e, "skipping an unreadable node record");
                    continue;
                }
            };
            if record.expires_ms > now {
                out.push(record);
            } else if now - record.expires_ms > forget {
                self.backend.remove(&key)?;
            }
        }
        out.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Announced nodes are listed until they withdraw or expire; a renewed
    /// announcement replaces the old one.
    #[test]
    fn nodes_are_listed_while_announced() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(dir.path()).expect("store");
        assert!(store.announced_nodes().expect("list").is_empty());
        let minute = Duration::from_secs(60);
        store
            .announce_node("a", "http://a:50051", minute)
            .expect("a");
        store
            .announce_node("b", "http://b:50051", minute)
            .expect("b");
        store
            .announce_node("a", "http://a2:50051", minute)
            .expect("a again");
        let urls: Vec<String> = store
            .announced_nodes()
            .expect("list")
            .into_iter()
            .map(|n| n.flight_url)
            .collect();
        assert_eq!(urls, ["http://a2:50051", "http://b:50051"]);
        assert!(store.withdraw_node("b").expect("withdraw"));
        assert!(!store.withdraw_node("b").expect("withdrawn already"));
        store
            .announce_node("c", "http://c:50051", Duration::ZERO)
            .expect("c");
        let ids: Vec<String> = store
            .announced_nodes()
            .expect("list")
            .into_iter()
            .map(|n| n.id)
            .collect();
        assert_eq!(ids, ["a"], "b withdrew, c expired");
    }

    #[test]
    fn node_ids_are_checked() {
        assert!(valid_node_id("query-0.eu_1"));
        for bad in ["", ".hidden", "a/b", "a b", &"x".repeat(129)] {
            assert!(!valid_node_id(bad), "{bad:?}");
        }
    }
}
