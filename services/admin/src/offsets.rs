//! Reading a collection's topic and its dead-letter topic back, for the
//! offset accounting of `eddy fsck --brokers`: every event below the
//! manifest's `next_offset` decoded as ingest decodes it, and the source
//! (partition, offset) of every dead letter.

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};

use eddy_event::Event;
use eddy_kafka::KafkaSettings;
use eddy_model::{CollectionDef, PointId};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{BorrowedMessage, Headers, Message};
use rdkafka::{Offset, TopicPartitionList};

use crate::{Error, Result};

/// Header of a dead letter naming its source topic (as `eddy-ingest`'s
/// `dlq` module writes it).
pub const HEADER_TOPIC: &str = "eddy-source-topic";
/// Header of a dead letter naming its source partition (decimal).
pub const HEADER_PARTITION: &str = "eddy-source-partition";
/// Header of a dead letter naming its source offset (decimal).
pub const HEADER_OFFSET: &str = "eddy-source-offset";

/// How long a broker call (watermarks, metadata) may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// What one event was, as ingest decodes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventKind {
    /// An upsert of the id.
    Upsert(PointId),
    /// A tombstone of the id.
    Delete(PointId),
    /// A rejected event (it must be in the dead-letter topic).
    Rejected(String),
}

/// One event of the topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicEvent {
    /// Its partition.
    pub partition: u32,
    /// Its offset.
    pub offset: i64,
    /// What it was.
    pub kind: EventKind,
}

/// The topic read below the manifest's offsets.
#[derive(Debug, Clone, Default)]
pub struct TopicRead {
    /// Every event read, in partition then offset order.
    pub events: Vec<TopicEvent>,
    /// Per partition, the first offset still in the log (earlier ones were
    /// removed by retention and cannot be checked).
    pub log_start: BTreeMap<u32, i64>,
    /// Per partition, the high watermark (a manifest offset above it means
    /// the topic was re-created).
    pub high_watermark: BTreeMap<u32, i64>,
}

/// A consumer that reads by assignment only (it joins no group and
/// commits nothing).
fn reader(kafka: &KafkaSettings) -> Result<BaseConsumer> {
    kafka
        .client_config(
            &[
                ("group.id", "eddy-fsck"),
                ("enable.auto.commit", "false"),
                ("enable.auto.offset.store", "false"),
                ("auto.offset.reset", "error"),
            ],
            &[],
        )
        .create()
        .map_err(Error::kafka("creating the reader"))
}

/// Reads every event of `def`'s topic below `until[p]` for each partition.
pub fn read_topic(
    kafka: &KafkaSettings,
    def: &CollectionDef,
    until: &BTreeMap<u32, i64>,
    timeout: Duration,
) -> Result<TopicRead> {
    let consumer = reader(kafka)?;
    let mut read = TopicRead::default();
    let mut ranges = BTreeMap::new();
    for (&p, &end) in until {
        let (low, high) = consumer
            .fetch_watermarks(&def.topic, p as i32, CALL_TIMEOUT)
            .map_err(Error::kafka("reading watermarks"))?;
        read.log_start.insert(p, low);
        read.high_watermark.insert(p, high);
        let end = end.min(high);
        if end > low {
            ranges.insert(p, (low, end));
        }
    }
    read_ranges(&consumer, &def.topic, &ranges, timeout, |msg| {
        let kinds = match eddy_event::decode(def, eddy_kafka::event_message(msg)) {
            Ok(Event::Upsert(point)) => vec![EventKind::Upsert(point.id)],
            Ok(Event::Delete(id)) => vec![EventKind::Delete(id)],
            Ok(Event::Bulk(points)) => bulk_upserts(&points),
            Err(rejection) => vec![EventKind::Rejected(rejection.to_string())],
        };
        for kind in kinds {
            read.events.push(TopicEvent {
                partition: msg.partition() as u32,
                offset: msg.offset(),
                kind,
            });
        }
    })?;
    read.events.sort_by_key(|e| (e.partition, e.offset));
    Ok(read)
}

/// One upsert per distinct id of a bulk message: a later row of the same
/// id replaces an earlier one, so only the last counts.
fn bulk_upserts(points: &eddy_event::Points) -> Vec<EventKind> {
    let rows: Vec<_> = points.iter().collect();
    let mut seen = HashSet::new();
    let mut kinds: Vec<EventKind> = rows
        .into_iter()
        .rev()
        .filter(|p| seen.insert(p.id.clone()))
        .map(|p| EventKind::Upsert(p.id.clone()))
        .collect();
    kinds.reverse();
    kinds
}

/// The source (partition, offset) of every dead letter of `topic` in
/// `<topic>.dlq` (none when that topic does not exist).
pub fn read_dead_letters(
    kafka: &KafkaSettings,
    topic: &str,
    timeout: Duration,
) -> Result<HashSet<(u32, i64)>> {
    let consumer = reader(kafka)?;
    let dlq = format!("{topic}.dlq");
    let metadata = consumer
        .fetch_metadata(Some(&dlq), CALL_TIMEOUT)
        .map_err(Error::kafka("reading the dead-letter topic's metadata"))?;
    let mut ranges = BTreeMap::new();
    for t in metadata.topics().iter().filter(|t| t.error().is_none()) {
        for p in t.partitions() {
            let (low, high) = consumer
                .fetch_watermarks(&dlq, p.id(), CALL_TIMEOUT)
                .map_err(Error::kafka("reading dead-letter watermarks"))?;
            if high > low {
                ranges.insert(p.id() as u32, (low, high));
            }
        }
    }
    let mut sources = HashSet::new();
    read_ranges(&consumer, &dlq, &ranges, timeout, |msg| {
        let header = |name: &str| {
            msg.headers()?
                .iter()
                .find(|h| h.key == name)
                .and_then(|h| std::str::from_utf8(h.value?).ok())
                .map(str::to_owned)
        };
        if header(HEADER_TOPIC).as_deref() != Some(topic) {
            return;
        }
        let partition = header(HEADER_PARTITION).and_then(|p| p.parse().ok());
        let offset = header(HEADER_OFFSET).and_then(|o| o.parse().ok());
        if let (Some(p), Some(o)) = (partition, offset) {
            sources.insert((p, o));
        }
    })?;
    Ok(sources)
}

/// Reads offsets `[start, end)` of each partition of `topic`, handing each
/// message to `each`, within `timeout` overall.
fn read_ranges(
    consumer: &BaseConsumer,
    topic: &str,
    ranges: &BTreeMap<u32, (i64, i64)>,
    timeout: Duration,
    mut each: impl FnMut(&BorrowedMessage<'_>),
) -> Result<()> {
    if ranges.is_empty() {
        return Ok(());
    }
    let mut tpl = TopicPartitionList::new();
    for (&p, &(start, _)) in ranges {
        tpl.add_partition_offset(topic, p as i32, Offset::Offset(start))
            .map_err(Error::kafka("building the assignment"))?;
    }
    consumer
        .assign(&tpl)
        .map_err(Error::kafka("assigning partitions"))?;
    let mut next: BTreeMap<u32, i64> = ranges.iter().map(|(&p, &(s, _))| (p, s)).collect();
    let done = |next: &BTreeMap<u32, i64>| ranges.iter().all(|(p, (_, end))| next[p] >= *end);
    let deadline = Instant::now() + timeout;
    while !done(&next) {
        if Instant::now() >= deadline {
            let (&partition, &reached) = next
                .iter()
                .find(|(p, o)| **o < ranges[p].1)
                .unwrap_or((&0, &0));
            return Err(Error::Incomplete {
                topic: topic.to_owned(),
                partition,
                reached,
                wanted: ranges.get(&partition).map_or(0, |r| r.1),
            });
        }
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(msg)) => {
                let p = msg.partition() as u32;
                let Some(&(_, end)) = ranges.get(&p) else {
                    continue;
                };
                if msg.offset() < end {
                    each(&msg);
                }
                if let Some(n) = next.get_mut(&p) {
                    *n = (*n).max(msg.offset() + 1);
                }
            }
            Some(Err(e)) => return Err(Error::kafka("reading")(e)),
            // Idle: the position also moves past offsets no message holds
            // (transaction markers, compacted records).
            None => {
                let position = consumer
                    .position()
                    .map_err(Error::kafka("reading positions"))?;
                for e in position.elements_for_topic(topic) {
                    if let (Offset::Offset(o), Some(n)) =
                        (e.offset(), next.get_mut(&(e.partition() as u32)))
                    {
                        *n = (*n).max(o);
                    }
                }
            }
        }
    }
    Ok(())
}
