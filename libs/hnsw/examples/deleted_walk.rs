//! What deleted rows cost a walk: a graph over every row of a dataset, a
//! share of its rows deleted (the walk routes through them but returns
//! only live rows), against a graph built over the live rows alone, at the
//! same `ef` sweep. Under upserts a sealed segment's rows are deleted one
//! by one until compaction rewrites it, and every query walks it meanwhile;
//! this says how much that costs at matched recall. The served path walks
//! by SQ8 codes (rescoring 40 candidates), so that walk is measured too,
//! and beside it the scan of the live rows' SQ8 codes
//! ([`eddy_hnsw::scan_sq8_codes`]). Last, at shares of rows refused
//! (deleted, or shadowed by the tail: a search lists the accepted rows
//! either way), the SQ8 walk at `ef` 16 against the two scans a mostly
//! refused segment may be searched with instead: the accepted rows' SQ8
//! codes, and their sign bits first with the nearest thirty-second ranked
//! again by SQ8 ([`eddy_hnsw::scan_sq8_shortlisted`]); `--refused` runs
//! that part alone. Recall@10 is against the exact scan of the live (or
//! accepted) rows.
//!
//! ```text
//! cargo run --release -p eddy-hnsw --example deleted_walk -- ../shared/datasets/debian-minilm [--refused]
//! ```

#[allow(dead_code)] // Not every example uses every helper.
mod common;

use std::time::Instant;

use common::{deleted, exact_top, K};
use eddy_hnsw::{
    scan_sq8_codes, scan_sq8_shortlisted, search_into, search_sq8_into, Graph, HnswParams, Query,
    SearchContext, Sq8View, Vectors,
};
use eddy_model::Metric;
use eddy_quant::binary::{BinaryConfig, BinaryQuantizer, QueryEncoding};
use eddy_quant::sq8::{Sq8Config, Sq8Quantizer};

/// Candidates rescored exactly after an SQ8 walk or scan (the served
/// default: 4 × k).
const RESCORE: usize = 40;
const EFS: [usize; 6] = [10, 16, 32, 64, 128, 256];
const SHARES: [f64; 5] = [0.0, 0.25, 0.5, 0.75, 0.9];
/// Shares of rows refused (deleted or shadowed) for the walk-or-scan
/// comparison.
const REFUSED: [f64; 8] = [0.25, 0.5, 0.65, 0.75, 0.85, 0.9, 0.98, 0.995];

/// The rows not deleted at `share`, of `rows`.
fn kept_rows(rows: usize, share: f64) -> Vec<u32> {
    (0..rows)
        .filter(|&i| !deleted(i, share))
        .map(|i| i as u32)
        .collect()
}

/// One way of searching: the query, and the `(row, score)` hits it fills.
type Search<'a> = dyn FnMut(&[f32], &mut Vec<(u32, f32)>) + 'a;

/// µs per query and recall@10 of `run` over `queries` against `truth`.
fn measure(queries: &[Vec<f32>], truth: &[Vec<u32>], run: &mut Search<'_>) -> (f64, f64) {
    let mut out = Vec::new();
    let t = Instant::now();
    let mut found = 0usize;
    for (q, want) in queries.iter().zip(truth) {
        run(q, &mut out);
        found += out.iter().filter(|(r, _)| want.contains(r)).count();
    }
    let us = t.elapsed().as_secs_f64() * 1e6 / queries.len() as f64;
    (us, found as f64 / (queries.len() * K) as f64)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let common::Dataset {
        data,
        dim,
        rows,
        queries,
    } = common::load()?;
    let all = Vectors::new(&data, dim, Metric::Cosine);
    let params = HnswParams::default();
    let t = Instant::now();
    let full = Graph::build(&all, &params)?;
    println!(
        "{} rows x {dim}, graph built in {:.1} s; {} queries, k={K}",
        rows,
        t.elapsed().as_secs_f64(),
        queries.len()
    );
    let config = Sq8Config {
        metric: Metric::Cosine,
        ..Sq8Config::default()
    };
    let codes = Sq8Quantizer::train(&data, dim, &config)?.encode_all(&data)?;
    let codes = Sq8View::from_codes(&codes);
    println!(
        "{:>8} {:>5} {:>14} {:>8} {:>14} {:>8} {:>14} {:>8}",
        "deleted",
        "ef",
        "walk us/query",
        "recall",
        "sq8 walk us",
        "recall",
        "live-only us",
        "recall"
    );
    let mut ctx = SearchContext::default();
    let deleted_shares: &[f64] = if std::env::args().nth(2).as_deref() == Some("--refused") {
        &[]
    } else {
        &SHARES
    };
    for &share in deleted_shares {
        let live = kept_rows(rows, share);
        let is_live = |r: u32| !deleted(r as usize, share);
        let truth = exact_top(&all, &queries, &live);
        // The live rows alone, renumbered, and their own graph.
        let live_data: Vec<f32> = live
            .iter()
            .flat_map(|&r| {
                data[r as usize * dim..(r as usize + 1) * dim]
                    .iter()
                    .copied()
            })
            .collect();
        let live_vectors = Vectors::new(&live_data, dim, Metric::Cosine);
        let live_graph = Graph::build(&live_vectors, &params)?;
        for ef in EFS {
            let walked = measure(&queries, &truth, &mut |q, out| {
                let query = Query::new(K, ef).with_accept(&is_live);
                search_into(&full.view(), &all, &query, q, &mut ctx, out);
            });
            let walked_sq8 = measure(&queries, &truth, &mut |q, out| {
                let query = Query::new(K, ef)
                    .with_rescore(RESCORE)
                    .with_accept(&is_live);
                search_sq8_into(&full.view(), &all, &codes, &query, q, &mut ctx, out);
            });
            let rebuilt = measure(&queries, &truth, &mut |q, out| {
                search_into(
                    &live_graph.view(),
                    &live_vectors,
                    &Query::new(K, ef),
                    q,
                    &mut ctx,
                    out,
                );
                for (r, _) in out.iter_mut() {
                    *r = live[*r as usize];
                }
            });
            println!(
                "{:>8.2} {ef:>5} {:>14.1} {:>8.4} {:>14.1} {:>8.4} {:>14.1} {:>8.4}",
                share, walked.0, walked.1, walked_sq8.0, walked_sq8.1, rebuilt.0, rebuilt.1
            );
        }
        let scanned = measure(&queries, &truth, &mut |q, out| {
            *out = scan_sq8_codes(&all, &codes, q, K, RESCORE, Some(&live), &is_live);
        });
        println!(
            "{:>8.2} the live rows' SQ8 codes scanned ({} rows): {:.1} us/query, recall {:.4}",
            share,
            live.len(),
            scanned.0,
            scanned.1
        );
    }
    // Rows refused (deleted, or shadowed by the tail) listed or not, the
    // accepted ones are what a scan reads: their SQ8 codes, or their sign
    // bits first with the nearest thirty-second ranked again by SQ8 (as
    // `eddy_segment::scan_shortlist_depth`).
    let bit_config = BinaryConfig {
        query: QueryEncoding::Symmetric,
        ..BinaryConfig::default()
    };
    let bits = BinaryQuantizer::train(&data, dim, &bit_config)?.encode_all(&data)?;
    println!("refused: SQ8 walk (ef 16) against scans of the accepted rows");
    for share in REFUSED {
        let accepted = kept_rows(rows, share);
        let is_accepted = |r: u32| !deleted(r as usize, share);
        let truth = exact_top(&all, &queries, &accepted);
        let walked = measure(&queries, &truth, &mut |q, out| {
            let query = Query::new(K, 16)
                .with_rescore(RESCORE)
                .with_accept(&is_accepted);
            search_sq8_into(&full.view(), &all, &codes, &query, q, &mut ctx, out);
        });
        let scanned = measure(&queries, &truth, &mut |q, out| {
            *out = scan_sq8_codes(&all, &codes, q, K, RESCORE, Some(&accepted), &is_accepted);
        });
        let shortlist = (accepted.len() / 32).max(K * 40);
        let shortlisted = measure(&queries, &truth, &mut |q, out| {
            *out = scan_sq8_shortlisted(
                &all,
                &codes,
                &bits,
                q,
                K,
                shortlist,
                RESCORE,
                &accepted,
                &is_accepted,
            );
        });
        println!(
            "{:>8.3} refused ({} accepted): walk {:.1} us/query, recall {:.4}; sq8 scan {:.1} us, recall {:.4}; bits+sq8 scan {:.1} us, recall {:.4}",
            share,
            accepted.len(),
            walked.0,
            walked.1,
            scanned.0,
            scanned.1,
            shortlisted.0,
            shortlisted.1
        );
    }
    Ok(())
}
