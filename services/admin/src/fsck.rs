//! `eddy fsck`: the store checked over its own files
//! ([`eddy_manifest::fsck`]) and, with broker access, every offset below
//! each partition's `next_offset` accounted for. An offset is accounted for
//! when its event is
//!
//! - **live**: the last event of its id (by source: partition, then
//!   offset, as ingest resolves it), an upsert, stored as exactly the one
//!   live row of the id, written by this very event;
//! - **superseded**: a later event of the same id is below `next_offset`;
//! - **deleted**: the last event of its id, a tombstone, and the id has no
//!   live row;
//! - **dead-lettered**: rejected, and `<topic>.dlq` holds it.
//!
//! Anything else is a finding: an upsert with no live row or a rejected
//! event with no dead letter is **lost**; a tombstone whose id is still
//! live is **deleted but visible**; a live row from another event than the
//! id's last is **stale**; a live row no event below `next_offset`
//! explains is **unexplained**. Duplicates come from the store check.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use eddy_kafka::KafkaSettings;
use eddy_manifest::{FsckReport, LiveRows, Store};
use eddy_model::{CollectionDef, PointId};
use serde::Serialize;

use crate::offsets::{read_dead_letters, read_topic, EventKind, TopicRead};
use crate::{report, Error, FsckArgs, Outcome, Result};

/// How long reading one collection's topic and dead letters may take.
const READ_TIMEOUT: Duration = Duration::from_secs(300);

/// An event or row a finding is about.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Finding {
    /// The point id, when known.
    pub id: Option<PointId>,
    /// The partition of the event (or of the row's source).
    pub partition: u32,
    /// The offset of the event (or of the row's source).
    pub offset: i64,
    /// What is wrong.
    pub why: String,
}

/// How every offset below the manifest's `next_offset` is accounted for.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct OffsetAccount {
    /// Events read.
    pub events: u64,
    /// Events whose row is the live row of their id.
    pub live: u64,
    /// Events replaced by a later event of the same id.
    pub superseded: u64,
    /// Tombstones honoured.
    pub deleted: u64,
    /// Rejected events found in the dead-letter topic.
    pub dead_lettered: u64,
    /// Offsets below the log start (removed by retention; not checkable).
    pub below_log_start: u64,
    /// Events whose effect is missing from the store.
    pub lost: Vec<Finding>,
    /// Tombstoned ids that still have a live row.
    pub deleted_but_visible: Vec<Finding>,
    /// Live rows from another event than their id's last.
    pub stale: Vec<Finding>,
    /// Live rows no event below `next_offset` explains.
    pub unexplained: Vec<Finding>,
    /// Partitions whose manifest offset is above the topic's high
    /// watermark (the topic was deleted and re-created).
    pub beyond_high_watermark: Vec<(u32, i64, i64)>,
}

impl OffsetAccount {
    /// Whether every offset is accounted for.
    pub fn is_clean(&self) -> bool {
        self.lost.is_empty()
            && self.deleted_but_visible.is_empty()
            && self.stale.is_empty()
            && self.unexplained.is_empty()
            && self.beyond_high_watermark.is_empty()
    }
}

/// What `eddy fsck` found for one collection.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CollectionFsck {
    /// The collection, or for a split collection the shard's manifest
    /// chain (`docs.1`).
    pub collection: String,
    /// The check of the store's own files.
    pub store: FsckReport,
    /// The offset accounting (with broker access only).
    pub offsets: Option<OffsetAccount>,
}

impl CollectionFsck {
    /// Whether nothing is wrong.
    pub fn is_clean(&self) -> bool {
        self.store.is_clean() && self.offsets.as_ref().is_none_or(OffsetAccount::is_clean)
    }
}

/// Runs `eddy fsck` as `args` say.
pub fn run(args: &FsckArgs) -> Result<Outcome> {
    let store = args.store.open()?;
    let defs = match &args.collection {
        Some(name) => vec![store
            .collection(name)?
            .ok_or_else(|| Error::NoCollection(name.clone()))?],
        None => store.collections()?,
    };
    let kafka = match &args.brokers {
        Some(brokers) => {
            let mut client = args.kafka.clone();
            client.load_secrets()?;
            Some(KafkaSettings::new(
                brokers.clone(),
                client.client_properties(),
            )?)
        }
        None => None,
    };
    let mut checked = Vec::with_capacity(defs.len());
    for def in &defs {
        checked.extend(fsck_collection(&store, def, kafka.as_ref())?);
    }
    let clean = checked.iter().all(CollectionFsck::is_clean);
    let text = if args.json {
        serde_json::to_string_pretty(&checked)?
    } else {
        report::render(&checked)
    };
    Ok(Outcome { text, clean })
}

/// Checks one collection: its store, and with `kafka` its offsets; one
/// check per manifest chain (a split collection has one per shard, each
/// accounting for its own partitions).
pub fn fsck_collection(
    store: &Store,
    def: &CollectionDef,
    kafka: Option<&KafkaSettings>,
) -> Result<Vec<CollectionFsck>> {
    def.chains()
        .iter()
        .map(|chain| fsck_chain(store, def, chain, kafka))
        .collect()
}

/// Checks one manifest chain of `def`.
fn fsck_chain(
    store: &Store,
    def: &CollectionDef,
    chain: &str,
    kafka: Option<&KafkaSettings>,
) -> Result<CollectionFsck> {
    let manifest = store.latest_manifest(chain)?;
    let (report, rows) = eddy_manifest::fsck(store, chain)?;
    let offsets = match kafka {
        None => None,
        Some(kafka) => {
            let until: BTreeMap<u32, i64> = manifest
                .partitions
                .iter()
                .map(|(p, s)| (*p, s.next_offset))
                .collect();
            let topic = read_topic(kafka, def, &until, READ_TIMEOUT)?;
            let dead = read_dead_letters(kafka, &def.topic, READ_TIMEOUT)?;
            Some(account(&until, &topic, &dead, &rows))
        }
    };
    Ok(CollectionFsck {
        collection: chain.to_owned(),
        store: report,
        offsets,
    })
}

/// Accounts for every event of `topic` against the live `rows` and the
/// dead letters `dead` (see the module docs).
pub fn account(
    until: &BTreeMap<u32, i64>,
    topic: &TopicRead,
    dead: &HashSet<(u32, i64)>,
    rows: &LiveRows,
) -> OffsetAccount {
    let mut acc = OffsetAccount {
        events: topic.events.len() as u64,
        ..OffsetAccount::default()
    };
    for (&p, &next) in until {
        let low = topic.log_start.get(&p).copied().unwrap_or(0);
        acc.below_log_start += low.clamp(0, next.max(0)) as u64;
        let high = topic.high_watermark.get(&p).copied().unwrap_or(0);
        if next > high {
            acc.beyond_high_watermark.push((p, next, high));
        }
    }
    // The last event of every id, by source.
    let mut last: HashMap<&PointId, (u32, i64)> = HashMap::new();
    for e in &topic.events {
        if let EventKind::Upsert(id) | EventKind::Delete(id) = &e.kind {
            let source = (e.partition, e.offset);
            let known = last.entry(id).or_insert(source);
            *known = (*known).max(source);
        }
    }
    let finding = |id: Option<&PointId>, p: u32, o: i64, why: &str| Finding {
        id: id.cloned(),
        partition: p,
        offset: o,
        why: why.to_owned(),
    };
    let mut explained: HashSet<(u32, i64)> = HashSet::new();
    for e in &topic.events {
        let (p, o) = (e.partition, e.offset);
        let id = match &e.kind {
            EventKind::Rejected(why) => {
                if dead.contains(&(p, o)) {
                    acc.dead_lettered += 1;
                } else {
                    acc.lost.push(finding(
                        None,
                        p,
                        o,
                        &format!("rejected ({why}), not dead-lettered"),
                    ));
                }
                continue;
            }
            EventKind::Upsert(id) | EventKind::Delete(id) => id,
        };
        if last.get(id) != Some(&(p, o)) {
            acc.superseded += 1;
            continue;
        }
        let live = rows.get(id).map_or(&[][..], Vec::as_slice);
        match (&e.kind, live) {
            (EventKind::Delete(_), []) => acc.deleted += 1,
            (EventKind::Delete(_), _) => {
                acc.deleted_but_visible.push(finding(
                    Some(id),
                    p,
                    o,
                    "tombstone, but the id is live",
                ));
            }
            (_, []) => acc
                .lost
                .push(finding(Some(id), p, o, "upsert with no live row")),
            (_, rows) => {
                if rows.iter().any(|r| (r.partition, r.offset) == (p, o)) {
                    acc.live += 1;
                    explained.insert((p, o));
                }
                for r in rows.iter().filter(|r| (r.partition, r.offset) != (p, o)) {
                    acc.stale.push(finding(
                        Some(id),
                        r.partition,
                        r.offset,
                        &format!(
                            "live row from offset {}, the id's last event is {p}/{o}",
                            r.offset
                        ),
                    ));
                    explained.insert((r.partition, r.offset));
                }
            }
        }
    }
    for (id, live) in rows {
        for r in live {
            let checkable = until.get(&r.partition).is_some_and(|_| {
                r.offset >= topic.log_start.get(&r.partition).copied().unwrap_or(0)
            });
            if checkable && !explained.contains(&(r.partition, r.offset)) {
                acc.unexplained.push(finding(
                    Some(id),
                    r.partition,
                    r.offset,
                    "live row no event below next_offset explains",
                ));
            }
        }
    }
    for list in [
        &mut acc.lost,
        &mut acc.deleted_but_visible,
        &mut acc.stale,
        &mut acc.unexplained,
    ] {
        list.sort();
    }
    acc
}

#[cfg(test)]
mod tests {
    use eddy_manifest::LiveRow;

    use super::*;
    use crate::offsets::TopicEvent;

    fn n(id: u64) -> PointId {
        PointId::Num(id)
    }

    fn event(partition: u32, offset: i64, kind: EventKind) -> TopicEvent {
        TopicEvent {
            partition,
            offset,
            kind,
        }
    }

    fn row(partition: u32, offset: i64) -> LiveRow {
        LiveRow {
            segment: "s".to_owned(),
            row: offset as u32,
            partition,
            offset,
        }
    }

    /// Partition 0 below offset 7: id 1 upserted twice, id 2 upserted then
    /// deleted, a rejected event at 4, id 3 upserted, id 4 upserted.
    fn topic() -> TopicRead {
        use EventKind::*;
        TopicRead {
            events: vec![
                event(0, 0, Upsert(n(1))),
                event(0, 1, Upsert(n(2))),
                event(0, 2, Upsert(n(1))),
                event(0, 3, Delete(n(2))),
                event(0, 4, Rejected("malformed".to_owned())),
                event(0, 5, Upsert(n(3))),
                event(0, 6, Upsert(n(4))),
            ],
            log_start: BTreeMap::from([(0, 0)]),
            high_watermark: BTreeMap::from([(0, 9)]),
        }
    }

    #[test]
    fn every_offset_of_a_correct_store_is_accounted_for() {
        let until = BTreeMap::from([(0, 7)]);
        let rows: LiveRows = [
            (n(1), vec![row(0, 2)]),
            (n(3), vec![row(0, 5)]),
            (n(4), vec![row(0, 6)]),
        ]
        .into_iter()
        .collect();
        let dead = HashSet::from([(0, 4)]);
        let acc = account(&until, &topic(), &dead, &rows);
        assert!(acc.is_clean(), "{acc:?}");
        assert_eq!(
            (
                acc.events,
                acc.live,
                acc.superseded,
                acc.deleted,
                acc.dead_lettered
            ),
            (7, 3, 2, 1, 1)
        );
    }

    #[test]
    fn loss_resurrection_staleness_and_strays_are_found() {
        let until = BTreeMap::from([(0, 7)]);
        // id 1 holds its first value, id 2 (deleted) is live, id 3 is
        // missing, id 9 has a row no event explains; no dead letters.
        let rows: LiveRows = [
            (n(1), vec![row(0, 0)]),
            (n(2), vec![row(0, 1)]),
            (n(4), vec![row(0, 6)]),
            (n(9), vec![row(0, 8)]),
        ]
        .into_iter()
        .collect();
        let acc = account(&until, &topic(), &HashSet::new(), &rows);
        assert!(!acc.is_clean());
        let at = |f: &[Finding]| {
            f.iter()
                .map(|f| (f.partition, f.offset))
                .collect::<Vec<_>>()
        };
        assert_eq!(at(&acc.lost), vec![(0, 4), (0, 5)], "rejected and missing");
        assert_eq!(at(&acc.deleted_but_visible), vec![(0, 3)]);
        assert_eq!(at(&acc.stale), vec![(0, 0)]);
        assert_eq!(at(&acc.unexplained), vec![(0, 1), (0, 8)]);
        assert_eq!(acc.live, 1);
    }

    #[test]
    fn a_manifest_above_the_high_watermark_is_reported() {
        let until = BTreeMap::from([(0, 20)]);
        let acc = account(
            &until,
            &TopicRead {
                high_watermark: BTreeMap::from([(0, 3)]),
                ..TopicRead::default()
            },
            &HashSet::new(),
            &LiveRows::new(),
        );
        assert_eq!(acc.beyond_high_watermark, vec![(0, 20, 3)]);
        assert!(!acc.is_clean());
    }
}
