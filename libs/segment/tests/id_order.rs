//! A segment's rows in id order: one current row per id (a later row of
//! the same id wins), sorted by id, and the cursor seek a scroll page uses.

use eddy_model::{IdType, Metric, PointId};
use eddy_segment::{RowRef, Segment, SegmentWriter};

fn write(dir: &std::path::Path, id_type: IdType, ids: &[PointId]) -> Segment {
    let mut w = SegmentWriter::new(2, Metric::L2, id_type);
    for (i, id) in ids.iter().enumerate() {
        w.push(RowRef {
            id,
            vector: &[i as f32, 0.0],
            partition: 0,
            offset: i as i64,
            payload_json: b"",
        })
        .expect("row");
    }
    let path = dir.join(format!("{id_type:?}.seg"));
    w.finish(&path).expect("written");
    Segment::open(&path).expect("open")
}

#[test]
fn current_rows_come_in_id_order_and_the_cursor_seeks() {
    let dir = tempfile::tempdir().expect("tmp");
    let ids: Vec<PointId> = [30u64, 10, 20, 10, 5].map(PointId::Num).to_vec();
    let seg = write(dir.path(), IdType::U64, &ids);
    // Row 1 (id 10) is superseded by row 3.
    assert_eq!(seg.rows_in_id_order(), &[4, 3, 2, 0]);
    assert_eq!(seg.id_order_after(None), 0);
    assert_eq!(seg.id_order_after(Some(&PointId::Num(10))), 2);
    assert_eq!(seg.id_order_after(Some(&PointId::Num(11))), 2);
    assert_eq!(seg.id_order_after(Some(&PointId::Num(4))), 0);
    assert_eq!(seg.id_order_after(Some(&PointId::Num(30))), 4);

    let names: Vec<PointId> = ["b", "a", "c", "ab"]
        .map(|s| PointId::Str(s.to_owned()))
        .to_vec();
    let seg = write(dir.path(), IdType::String, &names);
    let ordered: Vec<PointId> = seg
        .rows_in_id_order()
        .iter()
        .filter_map(|&r| seg.id(r))
        .collect();
    assert_eq!(
        ordered,
        ["a", "ab", "b", "c"].map(|s| PointId::Str(s.to_owned()))
    );
    assert_eq!(seg.id_order_after(Some(&PointId::Str("a".into()))), 1);
}
