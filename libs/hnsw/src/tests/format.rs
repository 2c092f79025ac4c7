//! The graph byte format: round trip and corruption.

use eddy_format::FormatError;
use eddy_model::Metric;

use super::*;
use crate::*;

fn bytes_of(g: &Graph) -> Vec<u8> {
    let mut b = Vec::new();
    g.write_to(&mut b).expect("write");
    b
}

#[test]
fn format_round_trip() {
    let dim = 8;
    let data = clustered(700, dim, 14, true);
    let g = graph_1t(&data, dim, Metric::Dot);
    let vectors = Vectors::new(&data, dim, Metric::Dot);
    let bytes = bytes_of(&g);
    assert_eq!(&bytes[..8], &MAGIC);
    let buf = AlignedBytes::from_slice(&bytes);
    let v = GraphView::from_bytes(buf.as_bytes()).expect("open");
    assert_eq!(v.len(), g.len());
    assert_eq!(v.dim(), dim);
    assert_eq!(v.m(), 16);
    assert_eq!(v.space(), Metric::Dot);
    assert_eq!(v.memory_bytes(), g.view().memory_bytes());
    let mut c1 = SearchContext::default();
    let mut c2 = SearchContext::default();
    for q in data.chunks_exact(dim).take(20) {
        let a = search(&g.view(), &vectors, &Query::new(10, 32), q, &mut c1);
        let b = search(&v, &vectors, &Query::new(10, 32), q, &mut c2);
        assert_eq!(a, b);
    }
    // Sections are 64-byte aligned.
    for i in 0..5 {
        let off = u64::from_le_bytes(bytes[48 + 16 * i..56 + 16 * i].try_into().expect("8"));
        assert_eq!(off % 64, 0);
    }
}

#[test]
fn format_rejects_corruption() {
    let dim = 4;
    let data = clustered(200, dim, 15, false);
    let g = graph_1t(&data, dim, Metric::L2);
    let bytes = bytes_of(&g);
    let open = |b: &[u8]| {
        let buf = AlignedBytes::from_slice(b);
        GraphView::from_bytes(buf.as_bytes()).map(|_| ())
    };
    assert_eq!(open(&bytes), Ok(()));
    let format_err = |b: &[u8]| match open(b) {
        Err(Error::Format(e)) => e,
        other => panic!("expected a format error, got {other:?}"),
    };
    // Bad magic.
    let mut b = bytes.clone();
    b[0] = b'X';
    assert!(matches!(format_err(&b), FormatError::BadMagic { .. }));
    // Future version.
    let mut b = bytes.clone();
    b[8..12].copy_from_slice(&(FORMAT_VERSION + 1).to_le_bytes());
    assert_eq!(
        format_err(&b).to_string(),
        format!(
            "HNSW graph written by a newer eddy: format version {}, this build reads 1..={FORMAT_VERSION}",
            FORMAT_VERSION + 1
        )
    );
    // Header field flipped.
    let mut b = bytes.clone();
    b[20] ^= 1;
    assert!(matches!(
        format_err(&b),
        FormatError::Checksum {
            what: "HNSW graph header",
            ..
        }
    ));
    // Body byte flipped.
    let mut b = bytes.clone();
    let last = b.len() - 5;
    b[last] ^= 0x40;
    assert!(matches!(
        format_err(&b),
        FormatError::Checksum {
            what: "HNSW graph body",
            ..
        }
    ));
    let buf = AlignedBytes::from_slice(&b);
    assert!(GraphView::from_bytes_unverified(buf.as_bytes()).is_ok());
    // Truncated.
    for len in [bytes.len() - 64, 100, 0] {
        assert!(
            matches!(format_err(&bytes[..len]), FormatError::Truncated { .. }),
            "{len}"
        );
    }
    // Misaligned start.
    let mut shifted = vec![0u8];
    shifted.extend_from_slice(&bytes);
    let buf = AlignedBytes::from_slice(&shifted);
    assert_eq!(
        GraphView::from_bytes(&buf.as_bytes()[1..]).map(|_| ()),
        Err(Error::Misaligned)
    );
}
