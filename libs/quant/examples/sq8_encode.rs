//! Time of SQ8 encoding per row (what the query tail pays for every event
//! under its write lock, and a seal for every row): rows of a dataset's
//! base, or pseudo-random rows of 384 dimensions without one.
//!
//! `cargo run --release -p eddy-quant --example sq8_encode -- [DATASET_DIR] [ROUNDS]`

use std::time::Instant;

use eddy_quant::sq8::{Sq8Config, Sq8Quantizer};

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let rounds: usize = args.get(2).map(|r| r.parse()).transpose()?.unwrap_or(5);
    let (data, dim) = match args.get(1) {
        Some(dir) => {
            let base =
                eddy_dataset::read_fvecs(&std::path::Path::new(dir).join("base.fvecs"), None)?;
            (base.data, base.dim)
        }
        None => {
            let dim = 384;
            let mut state = 0x9E37_79B9_7F4A_7C15u64;
            let data = (0..50_000 * dim)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    (state % 2_001) as f32 / 10_000.0 - 0.1
                })
                .collect();
            (data, dim)
        }
    };
    let q = Sq8Quantizer::train(&data, dim, &Sq8Config::default())?;
    let rows = data.len() / dim;
    let mut code = vec![0u8; dim];
    for round in 1..=rounds {
        let start = Instant::now();
        let mut sum = 0f32;
        for v in data.chunks_exact(dim) {
            sum += q.encode_into(v, &mut code)?;
        }
        let ns = start.elapsed().as_nanos() as f64 / rows as f64;
        println!("round {round}: {rows} rows of {dim}: {ns:.0} ns a row (checksum {sum:.3})");
    }
    Ok(())
}
