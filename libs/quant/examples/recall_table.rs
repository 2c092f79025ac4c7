//! Recall table of every quantizer on debian-minilm (exact scan over codes,
//! then f32 rescoring at oversampling 1, 2, 4, 8). Prints a markdown table.
//!
//! ```text
//! cargo run --release -p eddy-quant --example recall_table [DATASET_DIR] [QUERIES]
//! ```

use std::path::PathBuf;
use std::time::Instant;

use eddy_dataset::{read_fvecs, read_ivecs, recall_at_k, Matrix};
use eddy_model::Metric;
use eddy_quant::binary::{BinaryConfig, BinaryEncoding, BinaryQuantizer, QueryEncoding};
use eddy_quant::pq::{PqConfig, PqQuantizer};
use eddy_quant::rabitq::{RabitqConfig, RabitqQuantizer};
use eddy_quant::sq8::{Sq8Config, Sq8Quantizer};
use eddy_quant::{exact_score, rescore, top_k, CodeScorer};

const K: usize = 10;
const OVERSAMPLING: [usize; 4] = [1, 2, 4, 8];

struct Data {
    base: Matrix<f32>,
    queries: Matrix<f32>,
    gt: Matrix<i32>,
    gt_scores: Matrix<f32>,
}

fn evaluate<C: CodeScorer>(name: &str, codes: &C, train_s: f64, d: &Data) -> anyhow::Result<()> {
    let nq = d.queries.rows();
    let mut no_rescore = 0.0;
    let mut rescored = [0.0f64; OVERSAMPLING.len()];
    let mut scores = vec![0.0f32; codes.len()];
    let mut scan_s = 0.0;
    for qi in 0..nq {
        let q = d.queries.row(qi);
        let t = Instant::now();
        let prepared = codes.prepare(q)?;
        codes.score_all(&prepared, &mut scores);
        let cands: Vec<u32> = top_k(&scores, K * OVERSAMPLING[OVERSAMPLING.len() - 1])
            .into_iter()
            .map(|(i, _)| i)
            .collect();
        scan_s += t.elapsed().as_secs_f64();
        let (truth, truth_scores) = (d.gt.row(qi), d.gt_scores.row(qi));
        // Codes only: the top k by code score, judged by their exact scores.
        let plain: Vec<(u64, f32)> = cands
            .iter()
            .take(K)
            .map(|&i| {
                (
                    u64::from(i),
                    exact_score(Metric::Dot, q, d.base.row(i as usize)),
                )
            })
            .collect();
        no_rescore += recall_at_k(&plain, truth, truth_scores, K);
        for (slot, &os) in rescored.iter_mut().zip(&OVERSAMPLING) {
            let top = rescore(
                &d.base.data,
                Metric::Dot,
                q,
                &cands[..(K * os).min(cands.len())],
                K,
            )?;
            let top: Vec<(u64, f32)> = top.into_iter().map(|(i, s)| (u64::from(i), s)).collect();
            *slot += recall_at_k(&top, truth, truth_scores, K);
        }
    }
    let n = nq as f64;
    print!(
        "| {name} | {} | {:.4} |",
        codes.bytes_per_vector(),
        no_rescore / n
    );
    for r in rescored {
        print!(" {:.4} |", r / n);
    }
    println!(" {:.1} | {:.2} |", train_s, scan_s * 1e3 / n);
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let dir = args.next().map(PathBuf::from).unwrap_or_else(|| {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/datasets/debian-minilm")
    });
    let nq: Option<usize> = args.next().map(|s| s.parse()).transpose()?;
    let d = Data {
        base: read_fvecs(&dir.join("base.fvecs"), None)?,
        queries: read_fvecs(&dir.join("queries-public.fvecs"), nq)?,
        gt: read_ivecs(&dir.join("gt-public.ivecs"), nq)?,
        gt_scores: read_fvecs(&dir.join("gt-public-scores.fvecs"), nq)?,
    };
    let dim = d.base.dim;
    println!(
        "debian-minilm: {} base x {dim}, {} queries, recall@{K} (tie-aware), kernels: {}\n",
        d.base.rows(),
        d.queries.rows(),
        eddy_kernels::backend_name()
    );
    println!("| quantizer | bytes/vec | codes only | os 1 | os 2 | os 4 | os 8 | train+encode s | scan ms/query |");
    println!("|---|---|---|---|---|---|---|---|---|");

    let t = Instant::now();
    let sq8 =
        Sq8Quantizer::train(&d.base.data, dim, &Sq8Config::default())?.encode_all(&d.base.data)?;
    evaluate("SQ8 (u8, q=0.99)", &sq8, t.elapsed().as_secs_f64(), &d)?;

    for (encoding, label) in [
        (BinaryEncoding::OneBit, "1-bit"),
        (BinaryEncoding::OneAndHalfBits, "1.5-bit"),
        (BinaryEncoding::TwoBits, "2-bit"),
    ] {
        for (query, qlabel) in [
            (QueryEncoding::Symmetric, "symmetric"),
            (QueryEncoding::Scalar4, "query 4-bit"),
        ] {
            let t = Instant::now();
            let cfg = BinaryConfig {
                encoding,
                query,
                ..BinaryConfig::default()
            };
            let codes =
                BinaryQuantizer::train(&d.base.data, dim, &cfg)?.encode_all(&d.base.data)?;
            evaluate(
                &format!("binary {label}, {qlabel}"),
                &codes,
                t.elapsed().as_secs_f64(),
                &d,
            )?;
        }
    }
    let t = Instant::now();
    let rq = RabitqQuantizer::train(&d.base.data, dim, &RabitqConfig::default())?
        .encode_all(&d.base.data)?;
    evaluate(
        "rotated 4-bit (RaBitQ-style)",
        &rq,
        t.elapsed().as_secs_f64(),
        &d,
    )?;

    for m in [48, 96] {
        let t = Instant::now();
        let cfg = PqConfig {
            m,
            ..PqConfig::default()
        };
        let pq = PqQuantizer::train(&d.base.data, dim, &cfg)?.encode_all(&d.base.data)?;
        evaluate(
            &format!("PQ m={m} x 256 (k-means, 10 iters)"),
            &pq,
            t.elapsed().as_secs_f64(),
            &d,
        )?;
    }
    Ok(())
}
