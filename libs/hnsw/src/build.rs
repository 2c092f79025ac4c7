//! Parallel construction, step by step: check the input, fold exact
//! duplicates, draw the levels, lay out the adjacency, pick the construction
//! beam's codes, insert every node on the current rayon pool
//! ([`crate::insert`], [`crate::link`]), then the passes of [`crate::repair`].

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering::Relaxed};

use eddy_kernels::Kernels;
use eddy_quant::sq8::Sq8Codes;
use parking_lot::Mutex;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::insert::{insert, Worker};
use crate::link::BuildState;
use crate::prior::Prior;
use crate::repair::{boost_in_degree, repair};
use crate::space::space_of;
use crate::sq8::{fidelity_of, train_sq8, Sq8View, SQ8_BEAM_MIN_FIDELITY};
use crate::{Error, Graph, HnswParams, Result, Vectors};

/// Build switches beyond [`HnswParams`]; the defaults are what eddy uses.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BuildOptions {
    /// Fold exact duplicate vectors onto one graph node (returned together).
    pub dedup: bool,
    /// After the build, link every node the level-0 graph cannot reach from the entry.
    pub repair: bool,
    /// Fill a pruned list up to half its capacity with the pruned candidates
    /// (closest first); the other half stays free for later back links.
    pub keep_pruned: bool,
    /// After the build, give every node with fewer level-0 in-links than this
    /// back links from its own nearest neighbours (hidden near-duplicates), 0 = off.
    pub min_in_degree: usize,
    /// Select up to `2M` (instead of `M`) level-0 links for a new node.
    pub wide_level0: bool,
    /// Vamana-style relaxed pruning: after Malkov's heuristic (alpha = 1), a pruned
    /// candidate `c` is still kept unless some kept `r` has `alpha * d(c, r) <= d(c, base)`.
    /// Values above 1 keep links past near-duplicates (which otherwise dominate
    /// every candidate and leave tight clusters with few in-links). 1.0 = off.
    pub alpha: f32,
    /// Run the construction beam over asymmetric SQ8 codes (trained and encoded
    /// inside the build) and rescore its `ef_construction` candidates in f32 before
    /// the heuristic: the beam's distance computations read a quarter of the bytes.
    /// Used only where the codes rank neighbours well enough
    /// ([`crate::sq8_beam_fidelity`] ≥ [`SQ8_BEAM_MIN_FIDELITY`]); f32 otherwise.
    pub sq8_beam: bool,
    /// The [`crate::sq8_beam_fidelity`] the beam's codes must reach
    /// ([`SQ8_BEAM_MIN_FIDELITY`] by default). 0 skips the check, whose 64
    /// probes score every row (a third of the CPU of a graph grown in many
    /// small rounds): for a caller that checked codes trained alike once.
    pub sq8_beam_min_fidelity: f64,
}

impl Default for BuildOptions {
    fn default() -> Self {
        Self {
            dedup: true,
            repair: true,
            keep_pruned: true,
            min_in_degree: 4,
            wide_level0: false,
            alpha: 1.1,
            sq8_beam: true,
            sq8_beam_min_fidelity: SQ8_BEAM_MIN_FIDELITY,
        }
    }
}

/// Build a graph over `vectors` (see [`Graph::build_with_sq8`] for
/// `given_sq8`).
pub(crate) fn build(
    vectors: &Vectors<'_>,
    params: &HnswParams,
    opts: &BuildOptions,
    given_sq8: Option<Sq8View<'_>>,
    prior: Option<&Prior<'_>>,
) -> Result<Graph> {
    let n = check_input(vectors, params, opts)?;
    let rep = if opts.dedup {
        duplicates(vectors)
    } else {
        (0..n as u32).collect()
    };
    let prior = prior.filter(|p| p.fits(vectors, params, n));
    let carried = prior.and_then(|p| Some((p, p.carried(&rep)?)));
    let mut levels = node_levels(&rep, params);
    if let Some((p, c)) = &carried {
        for &r in &c.nodes {
            if let Some(level) = p.level_of(c, r) {
                levels[r as usize] = level;
            }
        }
    }
    let (dup_start, dup_rows) = duplicate_table(&rep);
    let order: Vec<u32> = (0..n as u32)
        .filter(|&i| rep[i as usize] == i)
        .filter(|&i| {
            carried
                .as_ref()
                .is_none_or(|(_, c)| c.old[i as usize].is_none())
        })
        .collect();
    // The beam's codes: the caller's (already trained for its index file) or
    // trained here; either way only when they rank neighbours well enough.
    let trained = match given_sq8 {
        None if opts.sq8_beam && n > 0 => Some(train_sq8(vectors)?),
        _ => None,
    };
    let beam_codes = beam_codes(vectors, params, opts, given_sq8, trained.as_ref());
    let state = layout(vectors, params, opts, &levels, beam_codes);
    let (entry, max_level) = match &carried {
        Some((p, c)) => {
            p.link(&state, c);
            insert_all(&state, &levels, c.entry, &order)
        }
        None => match order.split_first() {
            Some((&first, rest)) => insert_all(
                &state,
                &levels,
                (first, usize::from(levels[first as usize])),
                rest,
            ),
            None => (0, 0),
        },
    };
    let BuildState {
        level0,
        upper,
        upper_start,
        ..
    } = state;
    let mut graph = Graph {
        n: n as u32,
        dim: vectors.dim as u32,
        m: params.m as u32,
        space: space_of(vectors.metric),
        entry,
        max_level,
        level0: level0.into_iter().map(AtomicU32::into_inner).collect(),
        upper_start,
        upper: upper.into_iter().map(AtomicU32::into_inner).collect(),
        dup_start,
        dup_rows,
    };
    if opts.min_in_degree > 0 && n > 0 {
        boost_in_degree(&mut graph, vectors, &rep, opts.min_in_degree);
    }
    if opts.repair && n > 0 {
        repair(&mut graph, vectors, &rep, params.ef_construction);
    }
    Ok(graph)
}

/// The number of rows, once the shape and the parameters are valid.
fn check_input(vectors: &Vectors<'_>, params: &HnswParams, opts: &BuildOptions) -> Result<usize> {
    let dim = vectors.dim;
    if dim == 0 || !vectors.data.len().is_multiple_of(dim) {
        return Err(Error::InvalidInput(format!(
            "{} values is not a multiple of dim {dim}",
            vectors.data.len()
        )));
    }
    let n = vectors.data.len() / dim;
    if n >= u32::MAX as usize || dim > u32::MAX as usize {
        return Err(Error::InvalidInput(format!("{n} rows is too many")));
    }
    let m = params.m;
    if !(2..=2048).contains(&m) {
        return Err(Error::InvalidInput(format!("M = {m} not in 2..=2048")));
    }
    if params.ef_construction == 0 {
        return Err(Error::InvalidInput("ef_construction must be > 0".into()));
    }
    if !(1.0..=4.0).contains(&opts.alpha) {
        return Err(Error::InvalidInput(format!(
            "alpha = {} not in 1.0..=4.0",
            opts.alpha
        )));
    }
    Ok(n)
}

/// `rep[i]` = first row with a bit-identical vector.
fn duplicates(vectors: &Vectors<'_>) -> Vec<u32> {
    let dim = vectors.dim;
    let n = vectors.rows();
    let mut rep: Vec<u32> = (0..n as u32).collect();
    let mut seen: HashMap<u64, Vec<u32>> = HashMap::with_capacity(n);
    for (i, v) in vectors.data.chunks_exact(dim).enumerate() {
        let h = v.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, x| {
            (h ^ u64::from(x.to_bits())).wrapping_mul(0x0000_0100_0000_01b3)
        });
        let bucket = seen.entry(h).or_default();
        let same = bucket.iter().copied().find(|&r| {
            vectors
                .row(r)
                .iter()
                .zip(v)
                .all(|(a, b)| a.to_bits() == b.to_bits())
        });
        match same {
            Some(r) => rep[i] = r,
            None => bucket.push(i as u32),
        }
    }
    rep
}

/// Each node's top level, drawn from `params.seed` (level 0 for folded duplicates).
fn node_levels(rep: &[u32], params: &HnswParams) -> Vec<u8> {
    let mut rng = ChaCha8Rng::seed_from_u64(params.seed);
    let mult = 1.0 / (params.m as f64).ln();
    let mut levels: Vec<u8> = (0..rep.len())
        .map(|_| {
            let u: f64 = rng.random::<f64>();
            let l = -(1.0 - u).ln() * mult;
            l.floor().min(16.0) as u8
        })
        .collect();
    for (i, l) in levels.iter_mut().enumerate() {
        if rep[i] != i as u32 {
            *l = 0;
        }
    }
    levels
}

/// The duplicate side table, CSR by representative: `(dup_start, dup_rows)`.
fn duplicate_table(rep: &[u32]) -> (Vec<u32>, Vec<u32>) {
    let n = rep.len();
    let mut dup_start = vec![0u32; n + 1];
    for (i, &r) in rep.iter().enumerate() {
        if r != i as u32 {
            dup_start[r as usize + 1] += 1;
        }
    }
    for i in 0..n {
        dup_start[i + 1] += dup_start[i];
    }
    let mut dup_rows = vec![0u32; dup_start[n] as usize];
    let mut fill = dup_start.clone();
    for (i, &r) in rep.iter().enumerate() {
        if r != i as u32 {
            dup_rows[fill[r as usize] as usize] = i as u32;
            fill[r as usize] += 1;
        }
    }
    (dup_start, dup_rows)
}

/// The codes the construction beam runs on: the caller's or the `trained`
/// ones, when `opts.sq8_beam` and they rank neighbours well enough.
fn beam_codes<'c>(
    vectors: &Vectors<'_>,
    params: &HnswParams,
    opts: &BuildOptions,
    given: Option<Sq8View<'c>>,
    trained: Option<&'c Sq8Codes>,
) -> Option<Sq8View<'c>> {
    let n = vectors.rows();
    match (given, trained) {
        (Some(v), _) => Some(v),
        (None, Some(c)) => Some(Sq8View::from_codes(c)),
        (None, None) => None,
    }
    .filter(|v| {
        let min = opts.sq8_beam_min_fidelity;
        opts.sq8_beam && n > 0 && (min <= 0.0 || fidelity_of(vectors, v, params.seed) >= min)
    })
}

/// Empty adjacency for nodes of `levels`, and the settings the linking needs.
fn layout<'a>(
    vectors: &Vectors<'a>,
    params: &HnswParams,
    opts: &BuildOptions,
    levels: &[u8],
    sq8: Option<Sq8View<'a>>,
) -> BuildState<'a> {
    let (n, m) = (levels.len(), params.m);
    let mut upper_start = Vec::with_capacity(n + 1);
    let mut acc = 0u32;
    upper_start.push(0);
    for &l in levels {
        acc += u32::from(l);
        upper_start.push(acc);
    }
    BuildState {
        vectors: *vectors,
        m,
        k: Kernels::get(),
        level0: (0..n * (1 + 2 * m)).map(|_| AtomicU32::new(0)).collect(),
        upper: (0..acc as usize * (1 + m))
            .map(|_| AtomicU32::new(0))
            .collect(),
        upper_start,
        locks: (0..n).map(|_| Mutex::new(())).collect(),
        ef_construction: params.ef_construction,
        keep_pruned: opts.keep_pruned,
        level0_out: if opts.wide_level0 { 2 * m } else { m },
        alpha: opts.alpha,
        sq8,
    }
}

/// Insert the nodes of `order` on every thread of the current rayon pool,
/// starting from `entry` (a node already placed, and its top level);
/// returns the final entry point and top level.
fn insert_all(
    state: &BuildState<'_>,
    levels: &[u8],
    entry: (u32, usize),
    order: &[u32],
) -> (u32, u32) {
    let n = levels.len();
    let global = Mutex::new(entry);
    let next = AtomicUsize::new(0);
    let threads = rayon::current_num_threads().max(1);
    rayon::scope(|s| {
        for _ in 0..threads {
            s.spawn(|_| {
                let mut worker = Worker::new(n);
                loop {
                    let i = next.fetch_add(1, Relaxed);
                    let Some(&q) = order.get(i) else { break };
                    insert(state, &global, levels, q, &mut worker);
                }
            });
        }
    });
    let (entry, top) = global.into_inner();
    (entry, top as u32)
}
