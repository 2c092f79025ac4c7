//! Unit tests of the growing buffer: upserts, deletes, prunes, the touch
//! journal and the code scan against the exact scan.

use super::*;
use crate::Segment;

fn id(n: u64) -> PointId {
    PointId::Num(n)
}

#[test]
fn upserts_replace_and_deletes_remove() {
    let mut g = Growing::new(2, Metric::Dot, IdType::U64);
    g.upsert(id(1), &[1.0, 0.0], b"{}", 0, 10);
    g.upsert(id(2), &[0.0, 1.0], b"{}", 0, 11);
    g.upsert(id(1), &[0.5, 0.5], br#"{"v":2}"#, 0, 12);
    g.delete(id(2), 0, 13);
    g.delete(id(3), 1, 5);
    assert_eq!(g.live_rows(), 1);
    let hits = g.search(&[1.0, 0.0], 10, &|_| true);
    assert_eq!(hits.len(), 1);
    assert_eq!(g.row(hits[0].row).payload_json, br#"{"v":2}"#);
    assert_eq!(g.touched(&id(2)).map(|t| t.deleted), Some(true));
    assert_eq!(g.touched(&id(3)).map(|t| t.offset), Some(5));
}

#[test]
fn prune_drops_rows_covered_by_segments() {
    let mut g = Growing::new(1, Metric::L2, IdType::U64);
    g.upsert(id(1), &[1.0], b"", 0, 1);
    g.upsert(id(2), &[2.0], b"", 1, 1);
    g.delete(id(3), 0, 2);
    g.upsert(id(4), &[4.0], b"", 0, 3);
    g.prune_below(&BTreeMap::from([(0, 3)]));
    assert_eq!(g.live_rows(), 2);
    assert!(g.touched(&id(1)).is_none());
    assert!(g.touched(&id(3)).is_none());
    assert!(g.row_of(&id(2)).is_some() && g.row_of(&id(4)).is_some());
}

/// A pseudo-random unit vector of `dim` values for row `n`.
fn unit(n: u64, dim: usize) -> Vec<f32> {
    let mut state = n.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let v: Vec<f32> = (0..dim)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % 2_001) as f32 / 1_000.0 - 1.0
        })
        .collect();
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    v.into_iter().map(|x| x / norm).collect()
}

#[test]
fn the_touch_journal_hands_over_each_touch_once() {
    let mut plain = Growing::new(2, Metric::Dot, IdType::U64);
    plain.upsert(id(1), &[1.0, 0.0], b"{}", 0, 1);
    assert!(
        plain.take_touched_since().is_empty(),
        "kept only when asked"
    );

    let mut g = Growing::new(2, Metric::Dot, IdType::U64).with_touch_journal();
    g.upsert(id(1), &[1.0, 0.0], b"{}", 0, 1);
    g.delete(id(7), 0, 2);
    g.upsert(id(1), &[0.0, 1.0], b"{}", 0, 3);
    assert_eq!(g.take_touched_since(), vec![id(1), id(7), id(1)]);
    assert!(g.take_touched_since().is_empty());
    g.upsert(id(2), &[1.0, 1.0], b"{}", 0, 4);
    g.prune_below(&BTreeMap::from([(0, 3)]));
    assert!(g.take_touched_since().is_empty(), "a prune empties it");
    g.delete(id(3), 0, 5);
    assert_eq!(g.take_touched_since(), vec![id(3)], "and keeps journaling");
}

#[test]
fn a_quantized_tail_answers_like_the_exact_scan() {
    let dim = 32;
    let mut g = Growing::new(dim, Metric::Cosine, IdType::U64).with_quantized_scan(100);
    for n in 0..99 {
        g.upsert(id(n), &unit(n, dim), b"", 0, n as i64);
    }
    assert!(!g.is_quantized(), "below its threshold the tail scans f32");
    for n in 99..1_000 {
        g.upsert(id(n), &unit(n, dim), b"", 0, n as i64);
    }
    assert!(g.is_quantized());
    // Replaced and deleted rows stay out, as in the exact scan.
    for n in (0..1_000).step_by(7) {
        g.upsert(id(n), &unit(n + 5_000, dim), b"", 1, n as i64);
    }
    for n in (0..1_000).step_by(11) {
        g.delete(id(n), 1, 2_000 + n as i64);
    }
    let odd_ids = |row: u32| matches!(g.row(row).id, PointId::Num(n) if n % 2 == 1);
    for q in 0..20 {
        let query = unit(10_000 + q, dim);
        let exact = g.search(&query, 10, &odd_ids);
        let quantized = g.search_quantized(&query, 10, 200, &odd_ids);
        let rows = |hits: &[Neighbor]| hits.iter().map(|n| n.row).collect::<Vec<_>>();
        assert_eq!(rows(&quantized), rows(&exact), "query {q}");
        for (a, b) in quantized.iter().zip(&exact) {
            assert!((a.score - b.score).abs() < 1e-5, "scores are exact");
        }
    }
    // A prune keeps the trained range and codes every row it keeps.
    let before = g.codes.as_ref().map(|c| *c.sq8().quantizer());
    g.prune_below(&BTreeMap::from([(0, 500)]));
    assert_eq!(g.codes.as_ref().map(|c| *c.sq8().quantizer()), before);
    assert_eq!(g.codes.as_ref().map(|c| c.len()), Some(g.rows()));
    let query = unit(42, dim);
    let exact = g.search(&query, 5, &|_| true);
    assert_eq!(g.search_quantized(&query, 5, 100, &|_| true), exact);
}

#[test]
fn a_tail_without_live_rows_answers_nothing_and_finds_the_next_upsert() {
    let dim = 32;
    let mut g = Growing::new(dim, Metric::Cosine, IdType::U64).with_quantized_scan(100);
    for n in 0..200 {
        g.upsert(id(n), &unit(n, dim), b"", 0, n as i64);
    }
    assert!(g.is_quantized());
    let query = unit(7, dim);
    // Every row sealed (pruned), or deleted: nothing to answer.
    g.prune_below(&BTreeMap::from([(0, 150)]));
    for n in 150..200 {
        g.delete(id(n), 0, 200 + n as i64);
    }
    assert_eq!(g.live_rows(), 0);
    assert!(g.search(&query, 10, &|_| true).is_empty());
    assert!(g.search_quantized(&query, 10, 40, &|_| true).is_empty());
    // The next event is searchable again, by both scans.
    g.upsert(id(7), &query, b"", 0, 400);
    for hits in [
        g.search(&query, 10, &|_| true),
        g.search_quantized(&query, 10, 40, &|_| true),
    ] {
        assert_eq!(hits.len(), 1);
        assert_eq!(g.row(hits[0].row).id, &id(7));
    }
}

#[test]
fn sealed_segment_round_trips() {
    let dir = tempfile::tempdir().expect("tmp dir");
    let path = dir.path().join("s.seg");
    let mut g = Growing::new(3, Metric::Cosine, IdType::String);
    g.upsert(
        PointId::Str("a".into()),
        &[1.0, 0.0, 0.0],
        br#"{"x":1}"#,
        2,
        7,
    );
    g.upsert(PointId::Str("b".into()), &[0.0, 1.0, 0.0], b"", 2, 8);
    g.upsert(PointId::Str("c".into()), &[0.0, 0.0, 1.0], b"", 0, 3);
    g.delete(PointId::Str("b".into()), 2, 9);
    let written = g.write_segment(&path, &BTreeMap::new()).expect("write");
    // Size and CRC-32 come from the bytes as they were written: those of
    // the file, footer included (an upload sends this CRC as the object's).
    let on_disk = std::fs::read(&path).expect("read back");
    assert_eq!(written.bytes, on_disk.len() as u64);
    assert_eq!(written.crc32, eddy_format::crc32(&on_disk));
    let seg = Segment::open(&path).expect("open");
    assert_eq!(seg.rows(), 2);
    assert_eq!(seg.id(0), Some(PointId::Str("a".into())));
    assert_eq!(seg.row_of(&PointId::Str("c".into())), Some(1));
    assert_eq!(seg.payload_json(0), br#"{"x":1}"#);
    assert_eq!((seg.partition(1), seg.offset(1)), (0, 3));
    assert_eq!(seg.meta().offset_ranges[&2], (7, 7));
    assert_eq!(seg.vector(1), &[0.0, 0.0, 1.0]);
}
