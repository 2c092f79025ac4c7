//! What a graph grown in rounds costs against one build of the same rows:
//! ingest grows a buffer's graph while its events arrive, each round
//! starting from the last round's graph ([`Graph::build_from_prior`]) with
//! the in-degree and repair passes left to the last build. The first
//! 20,000 rows of a dataset get a graph both ways on one thread (rounds
//! that insert an eighth or a half of the rows grown so far; the SQ8 beam's
//! fidelity checked every round or once, or an f32 beam), alternated;
//! recall@10 at ef 16/64 against the exact scan of the rows.
//!
//! ```text
//! cargo run --release -p eddy-hnsw --example grow_rounds -- ../shared/datasets/debian-minilm
//! ```

#[allow(dead_code)] // Not every example uses every helper.
mod common;

use std::time::Instant;

use common::{exact_top, recall};
use eddy_hnsw::{BuildOptions, Graph, HnswParams, Prior, Vectors};
use eddy_model::Metric;

const ROWS: usize = 20_000;
const FIRST: usize = 1_024;

/// The graph over `data` grown in rounds of `1/share` of the rows grown
/// (at least 256, at most 4,096), then finished with the default options;
/// the seconds the rounds and the finish took, and the rounds' count.
fn grown(
    data: &[f32],
    dim: usize,
    params: &HnswParams,
    share: usize,
    sq8_beam: bool,
    checked_once: bool,
) -> Result<(Graph, f64, f64, usize), eddy_hnsw::Error> {
    let rows = data.len() / dim;
    let mut round_options = BuildOptions {
        repair: false,
        min_in_degree: 0,
        sq8_beam,
        ..BuildOptions::default()
    };
    let started = Instant::now();
    let mut graph: Option<Graph> = None;
    let mut count = 0;
    loop {
        let have = graph.as_ref().map_or(0, Graph::len);
        let due = (have / share).clamp(256, 4_096);
        let next = (have + due).max(FIRST).min(rows);
        if next - have < due || next == rows {
            break;
        }
        let v = Vectors::new(&data[..next * dim], dim, Metric::Cosine);
        if checked_once && graph.is_none() {
            round_options.sq8_beam = sq8_beam
                && eddy_hnsw::sq8_beam_fidelity(&v, params.seed)?
                    >= eddy_hnsw::SQ8_BEAM_MIN_FIDELITY;
            round_options.sq8_beam_min_fidelity = 0.0;
        }
        graph = Some(match &graph {
            None => Graph::build_with(&v, params, &round_options)?,
            Some(last) => {
                let map: Vec<Option<u32>> = (0..last.len() as u32).map(Some).collect();
                let prior = Prior {
                    view: last.view(),
                    rows: &map,
                };
                Graph::build_from_prior(&v, params, &round_options, None, &prior)?
            }
        });
        count += 1;
    }
    let rounds = started.elapsed().as_secs_f64();
    let started = Instant::now();
    let v = Vectors::new(data, dim, Metric::Cosine);
    let last = graph.ok_or_else(|| eddy_hnsw::Error::InvalidInput("no round".into()))?;
    let map: Vec<Option<u32>> = (0..last.len() as u32).map(Some).collect();
    let prior = Prior {
        view: last.view(),
        rows: &map,
    };
    let done = Graph::build_from_prior(&v, params, &BuildOptions::default(), None, &prior)?;
    Ok((done, rounds, started.elapsed().as_secs_f64(), count))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let common::Dataset {
        data,
        dim,
        rows,
        queries,
    } = common::load()?;
    let pool = rayon::ThreadPoolBuilder::new().num_threads(1).build()?;
    let params = HnswParams::default();
    let rows = ROWS.min(rows);
    let data = &data[..rows * dim];
    let vectors = Vectors::new(data, dim, Metric::Cosine);
    let all: Vec<u32> = (0..rows as u32).collect();
    let truth = exact_top(&vectors, &queries, &all);
    println!("{rows} rows, one thread");
    for pass in 0..2 {
        let started = Instant::now();
        let one = pool.install(|| Graph::build(&vectors, &params))?;
        let took = started.elapsed().as_secs_f64();
        println!(
            "pass {pass}: one build {took:.2} s, recall@10 ef 16/64 {:.4}/{:.4}",
            recall(&one, &vectors, &queries, &truth, 16),
            recall(&one, &vectors, &queries, &truth, 64)
        );
        for (share, beam, once) in [
            (8, true, true),
            (8, true, false),
            (8, false, false),
            (2, true, true),
        ] {
            let (g, rounds, finish, count) =
                pool.install(|| grown(data, dim, &params, share, beam, once))?;
            println!(
                "pass {pass}: rounds of 1/{share} (sq8 beam {beam}, checked once {once}): {count} rounds {rounds:.2} s + finish {finish:.2} s = {:.2} s ({:.2}x), recall@10 {:.4}/{:.4}",
                rounds + finish,
                (rounds + finish) / took,
                recall(&g, &vectors, &queries, &truth, 16),
                recall(&g, &vectors, &queries, &truth, 64)
            );
        }
    }
    Ok(())
}
