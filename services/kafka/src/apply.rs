//! The one way a consumed record changes a growing buffer, shared by the
//! ingest worker and the query tail: the offset checks, one decode, and the
//! upsert or delete effect (with ids seen on two partitions resolved the
//! same way everywhere).

use eddy_event::{Event, Message, Rejection};
use eddy_model::{CollectionDef, PointId};
use eddy_segment::{Growing, Origin};

/// A consumed record as [`apply`] sees it.
#[derive(Debug, Clone, Copy)]
pub struct Record<'a> {
    /// Key, value and content type.
    pub message: Message<'a>,
    /// Where it sits in its partition, and when it was written.
    pub place: Place,
}

/// Whether a jump forward in a partition's offsets can be explained.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gaps {
    /// A gap means lost events: the partition stops.
    Refused,
    /// The topic is compacted (`cleanup.policy` has `compact`): removed
    /// records leave gaps, and a gap is accepted.
    Compacted,
}

/// Where one partition stands: the next offset it expects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cursor {
    /// The next offset to apply; every offset below is applied or sealed.
    pub next: i64,
    /// How a gap is judged.
    pub gaps: Gaps,
}

/// Why a partition cannot be read on (ingest stops it, the query tail
/// reports it stale): a closed set, used as a metric label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// The manifest's offset is below the log start: retention deleted
    /// events eddy has not read.
    BelowLogStart,
    /// The manifest's offset is above the high watermark: the topic was
    /// deleted and re-created (or truncated).
    AboveHighWatermark,
    /// An offset above the expected one arrived on a topic that is not
    /// compacted: events between them are missing.
    OffsetGap,
}

impl StopReason {
    /// The stable snake_case name used in metrics and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            StopReason::BelowLogStart => "below_log_start",
            StopReason::AboveHighWatermark => "above_high_watermark",
            StopReason::OffsetGap => "offset_gap",
        }
    }

    /// Why `next` cannot be read from a log holding `[low, high)`, if so.
    /// `next == high` is the caught-up position, not an error.
    pub fn check(next: i64, low: i64, high: i64) -> Option<StopReason> {
        if next < low {
            Some(StopReason::BelowLogStart)
        } else if next > high {
            Some(StopReason::AboveHighWatermark)
        } else {
            None
        }
    }
}

/// What [`apply`] did with a record.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// The record's events took effect (an Arrow message carries many).
    Applied {
        /// Upserted points.
        upserts: usize,
        /// Deleted points.
        deletes: usize,
        /// Events whose id the buffer last saw on another partition (each
        /// resolved by [`Origin::supersedes`]).
        conflicts: usize,
    },
    /// The record is unusable; the cursor moved past it (it belongs on the
    /// dead-letter topic).
    Rejected(Rejection),
    /// Below the expected offset: redelivered, its effect already held.
    Duplicate,
    /// Above the expected offset on a topic where that means lost events:
    /// nothing applied, the cursor unchanged; the partition must stop.
    Gap {
        /// The offset expected.
        expected: i64,
        /// The offset received.
        got: i64,
    },
}

/// Applies one record to `buffer`: checks its offset against `cursor`,
/// decodes it once and upserts or deletes; the cursor moves past every
/// record that is applied or rejected.
pub fn apply(
    def: &CollectionDef,
    buffer: &mut Growing,
    cursor: &mut Cursor,
    record: Record<'_>,
) -> Outcome {
    apply_with(buffer, cursor, record.place, || {
        eddy_event::decode(def, record.message)
    })
}

/// [`apply`] for a record decoded beforehand ([`eddy_event::decode`] of its
/// message, at `place`): the query tail decodes a batch before it takes the
/// write lock searches wait on, so only the effect is applied under it.
/// The same checks and effect as [`apply`]; a record below the cursor is
/// a duplicate whatever it decoded to.
pub fn apply_decoded<'a>(
    buffer: &mut Growing,
    cursor: &mut Cursor,
    place: Place,
    decoded: Result<Event<'a>, Rejection>,
) -> Outcome {
    apply_with(buffer, cursor, place, || decoded)
}

/// Where a record sits in its partition, and when it was written: what
/// [`apply_decoded`] needs of a record besides its decoded value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Place {
    /// The record's partition.
    pub partition: u32,
    /// The record's offset.
    pub offset: i64,
    /// The record's timestamp in ms since the Unix epoch (0 when unknown).
    pub timestamp_ms: i64,
}

/// The offset checks, then the effect of what `decode` gives (asked only
/// for a record at or past the cursor that no gap stops).
fn apply_with<'a>(
    buffer: &mut Growing,
    cursor: &mut Cursor,
    place: Place,
    decode: impl FnOnce() -> Result<Event<'a>, Rejection>,
) -> Outcome {
    let Place {
        partition,
        offset,
        timestamp_ms,
    } = place;
    if offset < cursor.next {
        return Outcome::Duplicate;
    }
    if offset > cursor.next && cursor.gaps == Gaps::Refused {
        return Outcome::Gap {
            expected: cursor.next,
            got: offset,
        };
    }
    cursor.next = offset + 1;
    let origin = Origin {
        timestamp_ms,
        partition,
        offset,
        row: 0,
    };
    let mut effect = Effect::default();
    match decode() {
        Ok(Event::Upsert(point)) => {
            if effect.admit(buffer, &point.id, origin) {
                buffer.upsert_from(point.id, &point.vector, &point.payload, origin);
                effect.upserts += 1;
            }
        }
        Ok(Event::Delete(id)) => {
            if effect.admit(buffer, &id, origin) {
                buffer.delete_from(id, origin);
                effect.deletes += 1;
            }
        }
        Ok(Event::Bulk(points)) => {
            for point in points.iter() {
                let origin = Origin {
                    row: point.row,
                    ..origin
                };
                if effect.admit(buffer, point.id, origin) {
                    buffer.upsert_from(point.id.clone(), point.vector, point.payload, origin);
                    effect.upserts += 1;
                }
            }
        }
        Err(rejection) => return Outcome::Rejected(rejection),
    }
    Outcome::Applied {
        upserts: effect.upserts,
        deletes: effect.deletes,
        conflicts: effect.conflicts,
    }
}

/// Counts of one record's effect.
#[derive(Debug, Default)]
struct Effect {
    upserts: usize,
    deletes: usize,
    conflicts: usize,
}

impl Effect {
    /// Whether an event for `id` from `origin` takes effect: always, unless
    /// the buffer's latest event for `id` came from another partition and
    /// supersedes it (a conflict either way, counted).
    fn admit(&mut self, buffer: &Growing, id: &PointId, origin: Origin) -> bool {
        match buffer.touched(id) {
            Some(touch) if touch.partition != origin.partition => {
                self.conflicts += 1;
                origin.supersedes(&touch.origin)
            }
            _ => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use eddy_model::{IdType, Metric};

    use super::*;

    #[test]
    fn an_offset_outside_the_log_is_a_reason_to_stop() {
        assert_eq!(StopReason::check(5, 0, 10), None);
        assert_eq!(StopReason::check(10, 0, 10), None, "caught up");
        assert_eq!(StopReason::check(0, 0, 0), None, "empty log");
        assert_eq!(
            StopReason::check(0, 3, 10),
            Some(StopReason::BelowLogStart),
            "checked at offset 0 too"
        );
        assert_eq!(
            StopReason::check(50, 0, 10),
            Some(StopReason::AboveHighWatermark)
        );
    }

    fn def() -> CollectionDef {
        let mut def = CollectionDef::new("c", 2);
        def.metric = Metric::Dot;
        def.id_type = IdType::U64;
        def
    }

    fn record(value: &[u8], partition: u32, offset: i64, timestamp_ms: i64) -> Record<'_> {
        Record {
            message: Message {
                key: None,
                value: Some(value),
                content_type: None,
            },
            place: Place {
                partition,
                offset,
                timestamp_ms,
            },
        }
    }

    fn buffer() -> Growing {
        Growing::new(2, Metric::Dot, IdType::U64)
    }

    #[test]
    fn offsets_below_are_duplicates_and_gaps_stop_unless_compacted() {
        let def = def();
        let mut buffer = buffer();
        let mut cursor = Cursor {
            next: 10,
            gaps: Gaps::Refused,
        };
        let v = br#"{"id": 1, "vector": [1, 0]}"#;
        assert_eq!(
            apply(&def, &mut buffer, &mut cursor, record(v, 0, 9, 0)),
            Outcome::Duplicate
        );
        assert!(matches!(
            apply(&def, &mut buffer, &mut cursor, record(v, 0, 10, 0)),
            Outcome::Applied { upserts: 1, .. }
        ));
        assert_eq!(
            apply(&def, &mut buffer, &mut cursor, record(v, 0, 13, 0)),
            Outcome::Gap {
                expected: 11,
                got: 13
            }
        );
        assert_eq!(cursor.next, 11, "a gap moves nothing");
        cursor.gaps = Gaps::Compacted;
        assert!(matches!(
            apply(&def, &mut buffer, &mut cursor, record(v, 0, 13, 0)),
            Outcome::Applied { .. }
        ));
        assert_eq!(cursor.next, 14);
    }

    /// The query tail decodes a batch before its write lock: a record
    /// decoded beforehand has the outcome and effect [`apply`] gives it,
    /// checked against the cursor the same way (a duplicate or a gap stays
    /// one whatever it decoded to).
    #[test]
    fn a_record_decoded_beforehand_applies_as_apply_does() {
        let def = def();
        let records = [
            record(
                br#"{"id": 1, "vector": [1, 0], "payload": {"a": 1}}"#,
                0,
                10,
                5,
            ),
            record(br#"{"id": 1, "vector": [0, 1]}"#, 0, 9, 6),
            record(b"{", 0, 11, 7),
            record(br#"{"id": 2, "vector": [0, 1]}"#, 0, 14, 8),
            record(br#"{"id": 2, "vector": [1, 1]}"#, 0, 12, 9),
        ];
        let cursor = Cursor {
            next: 10,
            gaps: Gaps::Refused,
        };
        let (mut direct, mut decoded) = (buffer(), buffer());
        let (mut c1, mut c2) = (cursor, cursor);
        for r in records {
            let expected = apply(&def, &mut direct, &mut c1, r);
            let event = eddy_event::decode(&def, r.message);
            let got = apply_decoded(&mut decoded, &mut c2, r.place, event);
            assert_eq!(got, expected, "offset {}", r.place.offset);
            assert_eq!(c2, c1, "offset {}", r.place.offset);
        }
        assert_eq!(
            c2.next, 13,
            "10 and 12 applied, 11 rejected, the gap at 14 applied nothing"
        );
        for id in [PointId::Num(1), PointId::Num(2)] {
            let (a, b) = (direct.row_of(&id), decoded.row_of(&id));
            assert!(a.is_some());
            let (a, b) = (direct.row(a.expect("live")), decoded.row(b.expect("live")));
            assert_eq!((a.vector, a.payload_json), (b.vector, b.payload_json));
            assert_eq!((a.partition, a.offset), (b.partition, b.offset));
        }
    }

    #[test]
    fn rejected_records_move_the_cursor_and_change_nothing() {
        let mut buffer = buffer();
        let mut cursor = Cursor {
            next: 0,
            gaps: Gaps::Refused,
        };
        let outcome = apply(&def(), &mut buffer, &mut cursor, record(b"{", 0, 0, 0));
        assert!(matches!(outcome, Outcome::Rejected(_)));
        assert_eq!(cursor.next, 1);
        assert!(buffer.is_empty());
    }

    #[test]
    fn payload_bytes_reach_the_buffer_as_they_arrived() {
        let mut buffer = buffer();
        let mut cursor = Cursor {
            next: 0,
            gaps: Gaps::Refused,
        };
        let v = br#"{"id": 1, "vector": [1, 0], "payload": {"b": 2, "a": 1.50}}"#;
        apply(&def(), &mut buffer, &mut cursor, record(v, 0, 0, 0));
        let row = buffer.row_of(&PointId::Num(1)).expect("live row");
        assert_eq!(buffer.row(row).payload_json, br#"{"b": 2, "a": 1.50}"#);
    }

    #[test]
    fn an_id_on_two_partitions_resolves_by_timestamp_then_partition_then_offset() {
        let def = def();
        let older = br#"{"id": 1, "vector": [1, 0], "payload": {"v": "old"}}"#;
        let newer = br#"{"id": 1, "vector": [0, 1], "payload": {"v": "new"}}"#;
        // Whatever order the partitions are read in, the same event wins.
        for flip in [false, true] {
            let mut buffer = buffer();
            let mut cursors = [
                Cursor {
                    next: 0,
                    gaps: Gaps::Refused,
                },
                Cursor {
                    next: 0,
                    gaps: Gaps::Refused,
                },
            ];
            let events = [(older, 0_u32, 100_i64), (newer, 1, 200)];
            let order: Vec<_> = if flip {
                events.iter().rev().collect()
            } else {
                events.iter().collect()
            };
            let mut conflicts = 0;
            for (value, partition, ts) in order {
                let cursor = &mut cursors[*partition as usize];
                if let Outcome::Applied { conflicts: c, .. } = apply(
                    &def,
                    &mut buffer,
                    cursor,
                    record(*value, *partition, 0, *ts),
                ) {
                    conflicts += c;
                }
            }
            assert_eq!(conflicts, 1, "counted once");
            let row = buffer.row_of(&PointId::Num(1)).expect("live");
            assert_eq!(buffer.row(row).payload_json, br#"{"v": "new"}"#);
        }
        // Equal timestamps: the higher partition wins.
        let mut buffer = buffer();
        let mut c0 = Cursor {
            next: 0,
            gaps: Gaps::Refused,
        };
        let mut c1 = c0;
        apply(&def, &mut buffer, &mut c1, record(newer, 1, 0, 5));
        apply(&def, &mut buffer, &mut c0, record(older, 0, 0, 5));
        let row = buffer.row_of(&PointId::Num(1)).expect("live");
        assert_eq!(buffer.row(row).payload_json, br#"{"v": "new"}"#);
    }
}
