//! Golden file: `tests/data/v1.graph` was written once by `write_golden` (format
//! version 1); every later build must still open it and search it.

use eddy_format::FormatError;
use eddy_hnsw::{
    search, unreachable_count, AlignedBytes, Error, Graph, GraphView, HnswParams, Query,
    SearchContext, Vectors, FORMAT_VERSION,
};
use eddy_model::Metric;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const N: usize = 300;
const DIM: usize = 8;

fn data() -> Vec<f32> {
    let mut rng = ChaCha8Rng::seed_from_u64(2024);
    let mut v: Vec<f32> = (0..N * DIM)
        .map(|_| rng.random_range(-1.0f32..1.0))
        .collect();
    for row in v.chunks_exact_mut(DIM) {
        eddy_kernels::normalize(row);
    }
    // Two exact duplicates of row 5.
    let r5 = v[5 * DIM..6 * DIM].to_vec();
    v[10 * DIM..11 * DIM].copy_from_slice(&r5);
    v[20 * DIM..21 * DIM].copy_from_slice(&r5);
    v
}

fn path() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/v1.graph")
}

#[test]
#[ignore = "writes the golden file; run once with --ignored"]
fn write_golden() {
    let d = data();
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .expect("pool");
    let params = HnswParams {
        m: 8,
        ef_construction: 50,
        seed: 1,
    };
    let g = pool
        .install(|| Graph::build(&Vectors::new(&d, DIM, Metric::Dot), &params))
        .expect("build");
    let mut f = std::fs::File::create(path()).expect("create");
    g.write_to(&mut f).expect("write");
}

#[test]
fn golden_v1_opens_and_searches() {
    let bytes = std::fs::read(path()).expect("tests/data/v1.graph");
    let buf = AlignedBytes::from_slice(&bytes);
    let v = GraphView::from_bytes(buf.as_bytes()).expect("open v1");
    assert_eq!(v.len(), N);
    assert_eq!(v.dim(), DIM);
    assert_eq!(v.m(), 8);
    assert_eq!(v.space(), Metric::Dot);
    assert_eq!(v.duplicate_count(), 2);
    assert_eq!(unreachable_count(&v), 0);
    let d = data();
    let vectors = Vectors::new(&d, DIM, Metric::Dot);
    let mut ctx = SearchContext::default();
    let mut hits = 0;
    for i in 0..50 {
        let q = &d[i * DIM..(i + 1) * DIM];
        let got = search(&v, &vectors, &Query::new(3, 32), q, &mut ctx);
        let best = got.first().map(|g| g.1).unwrap_or(f32::MIN);
        if best >= 1.0 - 1e-5 {
            hits += 1;
        }
    }
    assert!(hits >= 49, "self-hits {hits}/50");
    // Row 5 comes with its duplicates.
    let row5 = &d[5 * DIM..6 * DIM];
    let got = search(&v, &vectors, &Query::new(3, 32), row5, &mut ctx);
    let mut ids: Vec<u32> = got.iter().map(|g| g.0).collect();
    ids.sort_unstable();
    assert_eq!(ids, vec![5, 10, 20]);
}

/// Copies of the golden file damaged one way each are refused with the
/// error that says what is wrong.
#[test]
fn damaged_or_newer_golden_is_refused() {
    let bytes = std::fs::read(path()).expect("tests/data/v1.graph");
    let open = |b: &[u8]| match GraphView::from_bytes(AlignedBytes::from_slice(b).as_bytes()) {
        Err(Error::Format(e)) => e,
        other => panic!("expected a format error, got {other:?}"),
    };
    let mut flipped = bytes.clone();
    let mid = flipped.len() / 2;
    flipped[mid] ^= 0x40;
    assert!(matches!(
        open(&flipped),
        FormatError::Checksum {
            what: "HNSW graph body",
            ..
        }
    ));
    assert!(matches!(
        open(&bytes[..bytes.len() - 4]),
        FormatError::Truncated { .. }
    ));
    let mut newer = bytes.clone();
    newer[8..12].copy_from_slice(&(FORMAT_VERSION + 1).to_le_bytes());
    let err = open(&newer);
    assert!(
        matches!(err, FormatError::UnsupportedVersion { found, .. } if found == FORMAT_VERSION + 1),
        "{err}"
    );
    assert!(err.to_string().contains("written by a newer eddy"), "{err}");
}
