//! The sweep, step by step: load the dataset, build (or load) the graph,
//! open it as the service would, measure every mode and filter, report.

use std::collections::BTreeMap;
use std::time::Instant;

use anyhow::Result;
use eddy_dataset::Matrix;
use eddy_hnsw::{
    search, unreachable_count, AlignedBytes, Graph, GraphView, Query, SearchContext, Vectors,
};
use eddy_segment::HugePageBytes;

use crate::cli::RunArgs;
use crate::data::Dataset;
use crate::filter::filter_bench;
use crate::measure::pool;
use crate::modes::{sweep_mode, Sweep};
use crate::report::{rss_bytes, Report};

/// Run the sweep `a` describes.
pub(crate) fn run(a: &RunArgs) -> Result<()> {
    let metric = a.metric()?;
    let data = Dataset::load(a)?;
    let (n, dim) = (data.base.rows(), data.base.dim);
    let log = |s: String| {
        if !a.json {
            println!("{s}");
        }
    };
    log(format!(
        "dataset {} n={n} dim={dim} queries={} kernels={}",
        data.dir.display(),
        data.queries.rows(),
        eddy_kernels::backend_name()
    ));
    let loaded = Vectors::new(&data.base.data, dim, metric);
    if a.sq8_beam && a.load_graph.is_none() {
        log_beam_fidelity(&loaded, a.seed, &log)?;
    }
    let huge_base = if a.huge_pages {
        Some(HugePageBytes::copy_of(bytemuck::cast_slice(
            &data.base.data,
        ))?)
    } else {
        None
    };
    let base_data: &[f32] = huge_base
        .as_ref()
        .map_or(&data.base.data[..], |h| bytemuck::cast_slice(h.as_bytes()));
    let vectors = Vectors::new(base_data, dim, metric);
    let (graph, build_secs) = build_graph(a, &vectors)?;
    let held = HeldGraph::hold(a, graph)?;
    let view = held.view()?;
    let unreachable = unreachable_count(&view);
    log_graph(a, &view, n, build_secs, unreachable, &log);
    if let Ok(list) = std::env::var("EDDY_BENCH_NODES") {
        print_nodes(&view, &loaded, &data.base, &list)?;
    }
    let mt_pool = pool(2)?;
    let sweep = Sweep {
        args: a,
        data: &data,
        view: &view,
        vectors,
        mt_pool: &mt_pool,
        log: &log,
    };
    let mut report = Report {
        dataset: data.dir.display().to_string(),
        n,
        dim,
        queries: data.queries.rows(),
        m: a.m,
        ef_construction: a.efc,
        build_threads: a.threads,
        build_secs,
        unreachable,
        duplicates_folded: view.duplicate_count(),
        graph_bytes: view.memory_bytes(),
        vector_bytes: data.base.data.len() * 4,
        sq8_bytes: 0,
        code_bytes: BTreeMap::new(),
        rss_bytes: 0,
        kernels: eddy_kernels::backend_name().to_string(),
        points: Vec::new(),
        filtered: Vec::new(),
    };
    for mode in &a.modes {
        let result = sweep_mode(&sweep, mode)?;
        report.points.extend(result.points);
        if let Some(b) = result.sq8_bytes {
            report.sq8_bytes = b;
        }
        if let Some(b) = result.code_bytes {
            report.code_bytes.insert(mode.clone(), b);
        }
    }
    if a.filter {
        report.filtered = filter_bench(&sweep)?;
    }
    report.rss_bytes = rss_bytes();
    report.print(a.json, a.huge_pages)
}

/// Log how well SQ8 codes rank neighbours, and so which beam the build uses.
fn log_beam_fidelity(vectors: &Vectors<'_>, seed: u64, log: &dyn Fn(String)) -> Result<()> {
    let fidelity = eddy_hnsw::sq8_beam_fidelity(vectors, seed)?;
    log(format!(
        "sq8 beam fidelity {fidelity:.4} (construction beam on {})",
        if fidelity >= eddy_hnsw::SQ8_BEAM_MIN_FIDELITY {
            "SQ8 codes"
        } else {
            "f32: below the threshold"
        }
    ));
    Ok(())
}

/// Build the graph on `--threads` threads (an empty one with `--load-graph`);
/// returns it with the build time in seconds.
fn build_graph(a: &RunArgs, vectors: &Vectors<'_>) -> Result<(Graph, f64)> {
    let params = a.hnsw_params();
    let build_pool = pool(a.threads)?;
    let t0 = Instant::now();
    let graph = if a.load_graph.is_some() {
        Graph::build(&Vectors::new(&[], vectors.dim, vectors.metric), &params)?
    } else {
        let opts = a.build_options();
        build_pool.install(|| Graph::build_with(vectors, &params, &opts))?
    };
    Ok((graph, t0.elapsed().as_secs_f64()))
}

/// The graph as the sweep reads it: built in memory, round-tripped through
/// the file format (`--save-graph`, `--load-graph`), and copied into huge
/// pages (`--huge-pages`).
struct HeldGraph {
    graph: Graph,
    file_bytes: Option<AlignedBytes>,
    huge: Option<HugePageBytes>,
}

impl HeldGraph {
    fn hold(a: &RunArgs, graph: Graph) -> Result<Self> {
        let mut file_bytes = None;
        if let Some(p) = &a.save_graph {
            let mut f = std::io::BufWriter::new(std::fs::File::create(p)?);
            graph.write_to(&mut f)?;
            drop(f);
            file_bytes = Some(AlignedBytes::from_slice(&std::fs::read(p)?));
        }
        if let Some(p) = &a.load_graph {
            file_bytes = Some(AlignedBytes::from_slice(&std::fs::read(p)?));
        }
        if a.huge_pages && file_bytes.as_ref().is_none_or(|b| b.as_bytes().is_empty()) {
            let mut buf = Vec::new();
            graph.write_to(&mut buf)?;
            file_bytes = Some(AlignedBytes::from_slice(&buf));
        }
        let huge = match (&file_bytes, a.huge_pages) {
            (Some(b), true) => Some(HugePageBytes::copy_of(b.as_bytes())?),
            _ => None,
        };
        Ok(Self {
            graph,
            file_bytes,
            huge,
        })
    }

    /// The view the sweep searches: huge pages, else the file bytes, else the graph.
    fn view(&self) -> Result<GraphView<'_>> {
        Ok(match (&self.huge, &self.file_bytes) {
            (Some(h), _) => GraphView::from_bytes(h.as_bytes())?,
            (None, Some(b)) => GraphView::from_bytes(b.as_bytes())?,
            (None, None) => self.graph.view(),
        })
    }
}

/// Log the build time and the graph's shape.
fn log_graph(
    a: &RunArgs,
    view: &GraphView<'_>,
    n: usize,
    build_secs: f64,
    unreachable: usize,
    log: &dyn Fn(String),
) {
    let links0: usize = (0..n as u32).map(|i| view.neighbors(i).len()).sum();
    let nodes = n - view.duplicate_count();
    let mean_degree0 = links0 as f64 / nodes.max(1) as f64;
    log(format!(
        "build: {build_secs:.2} s on {} threads (M={} efc={} alpha={}), unreachable={unreachable}, duplicates folded={}, max level={}, mean level-0 degree={mean_degree0:.1}",
        a.threads, a.m, a.efc, a.alpha, view.duplicate_count(), view.max_level()
    ));
}

/// `EDDY_BENCH_NODES=a,b,..`: in-links, out-links and a self-search of each node.
fn print_nodes(
    view: &GraphView<'_>,
    vectors: &Vectors<'_>,
    base: &Matrix<f32>,
    list: &str,
) -> Result<()> {
    let n = base.rows();
    let mut indeg = vec![0u32; n];
    for i in 0..n as u32 {
        for &v in view.neighbors(i) {
            indeg[v as usize] += 1;
        }
    }
    for tok in list.split(',') {
        let x: u32 = tok.parse()?;
        let innodes: Vec<u32> = (0..n as u32)
            .filter(|&i| view.neighbors(i).contains(&x))
            .collect();
        let xv = base.row(x as usize);
        let nb: Vec<(u32, f32, u32)> = view
            .neighbors(x)
            .iter()
            .map(|&v| {
                let score = eddy_kernels::dot(xv, base.row(v as usize));
                (v, score, indeg[v as usize])
            })
            .collect();
        eprintln!(
            "node {x}: indeg {} in-from {innodes:?} dups {:?}\n  out {nb:?}",
            indeg[x as usize],
            view.duplicates(x)
        );
        let mut ctx = SearchContext::default();
        let r = search(view, vectors, &Query::new(10, 64), xv, &mut ctx);
        eprintln!("  self-search ef64: {r:?}");
    }
    Ok(())
}
