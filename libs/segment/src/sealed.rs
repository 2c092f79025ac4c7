//! Searching and indexing a sealed segment: the HNSW graph and SQ8 codes of
//! its index file, payload filters answered from its payload index, and the
//! exact-scan path that small segments and selective filters take.

use std::cell::RefCell;
use std::path::Path;

use eddy_filter::{Filter, IndexError, Plan, Planner, RoaringBitmap};
use eddy_hnsw::{
    exact_scan, scan_sq8_codes, scan_sq8_shortlisted, GraphView, HnswParams, Query, ScanRows,
    SearchContext, Sq8View, Vectors,
};
use eddy_quant::binary::BinaryCodes;
use eddy_quant::sq8::{Sq8Config, Sq8Quantizer};

use crate::index_file::{IndexFile, IndexSection, IndexWriter};
use crate::refused::{bit_scan_pays, code_scan_pays, RowMask};
use crate::scan_codes::{scan_rescore_depth, scan_shortlist_depth, ScanCodes};
use crate::search::{neighbors, Neighbor};
use crate::{Error, Result, Segment};

/// Default for [`IndexParams::min_rows`]: segments with fewer rows get no graph: an exact block scan of
/// a few thousand rows is as fast as a graph walk and always exact.
pub const MIN_GRAPH_ROWS: usize = 2_048;

/// Default beam width of a graph search.
pub const DEFAULT_EF: usize = 128;

/// Which representation a graph walk scores candidates with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Quantization {
    /// SQ8 codes when the segment has them, else f32.
    #[default]
    Auto,
    /// Full-precision f32 vectors.
    None,
    /// SQ8 codes, candidates rescored in f32.
    Sq8,
}

impl std::str::FromStr for Quantization {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "auto" => Ok(Quantization::Auto),
            "none" | "f32" => Ok(Quantization::None),
            "sq8" | "int8" | "scalar" => Ok(Quantization::Sq8),
            other => Err(format!(
                "unknown quantization {other:?}; expected auto, none or sq8"
            )),
        }
    }
}

/// How one query searches one sealed segment.
#[derive(Debug, Clone, Copy)]
pub struct SealedQuery<'a> {
    /// Neighbours wanted.
    pub k: usize,
    /// Beam width of the graph walk (raised to `k`).
    pub ef: usize,
    /// Scan every row exactly instead of walking the graph.
    pub exact: bool,
    /// Which codes the walk scores with.
    pub quantization: Quantization,
    /// Candidates rescored in f32 after a quantized walk, as a multiple of
    /// `k` (at least 1).
    pub oversampling: f32,
    /// Rescore `k * oversampling` quantized candidates with f32 (off: the
    /// walk's top `k` by code score, reported with their f32 scores).
    pub rescore: bool,
    /// Payload filter.
    pub filter: Option<&'a Filter>,
    /// When a filter is answered by exact scan instead of the graph.
    pub planner: Planner,
}

impl Default for SealedQuery<'_> {
    fn default() -> Self {
        Self {
            k: 10,
            ef: DEFAULT_EF,
            exact: false,
            quantization: Quantization::Auto,
            oversampling: 4.0,
            rescore: true,
            filter: None,
            planner: Planner::default(),
        }
    }
}

/// Index build settings.
#[derive(Debug, Clone, Copy)]
pub struct IndexParams {
    /// Graph parameters.
    pub hnsw: HnswParams,
    /// Also write SQ8 codes.
    pub sq8: bool,
    /// Segments with fewer rows get no index.
    pub min_rows: usize,
}

impl Default for IndexParams {
    fn default() -> Self {
        Self {
            hnsw: HnswParams::default(),
            sq8: true,
            min_rows: MIN_GRAPH_ROWS,
        }
    }
}

/// An earlier graph to start a segment's graph build from, with the row of
/// the segment each of its rows became (`None`: dropped): a merge's input's
/// index, or the graph ingest grew while the segment's events arrived.
#[derive(Debug, Clone, Copy)]
pub struct PriorIndex<'a> {
    /// The earlier graph.
    pub graph: GraphView<'a>,
    /// For each earlier row, its row in the segment being indexed.
    pub rows: &'a [Option<u32>],
}

impl<'a> PriorIndex<'a> {
    /// The graph of index file `index` as a prior, its rows mapped by
    /// `rows`; an error when the file holds no readable graph.
    pub fn of_index(index: &'a IndexFile, rows: &'a [Option<u32>]) -> Result<Self> {
        let bad = |what: String| Error::corrupt(index.path(), what);
        let graph = graph_view(index)
            .ok_or_else(|| bad("no graph section".into()))?
            .map_err(|e| bad(format!("graph: {e}")))?;
        Ok(Self { graph, rows })
    }
}

/// Builds the graph (on the current rayon pool) and SQ8 codes of `seg` and
/// writes them as an index file at `path`; returns its size. Segments below
/// `params.min_rows` get no index (`Ok(None)`).
pub fn build_index(seg: &Segment, params: &IndexParams, path: &Path) -> Result<Option<u64>> {
    build_index_from(seg, params, path, None)
}

/// [`build_index`] whose graph starts from `prior`'s where it has one that
/// fits (same dimension, `M` and space): the links among its surviving
/// rows are kept and only the other rows are inserted
/// ([`eddy_hnsw::Graph::build_from_prior`]). A prior whose graph does not
/// open or fit leaves a fresh build.
pub fn build_index_from(
    seg: &Segment,
    params: &IndexParams,
    path: &Path,
    prior: Option<PriorIndex<'_>>,
) -> Result<Option<u64>> {
    if seg.rows() < params.min_rows.max(1) {
        return Ok(None);
    }
    let vectors = segment_vectors(seg);
    let index_err = |what: &str, e: String| Error::Index(format!("{what}: {e}"));
    // The SQ8 codes are trained first: the graph build's construction beam
    // scores on the same codes the index file stores.
    let codes = if params.sq8 {
        let config = Sq8Config {
            metric: vectors.metric,
            ..Sq8Config::default()
        };
        let q = Sq8Quantizer::train(vectors.data, vectors.dim, &config)
            .map_err(|e| index_err("sq8 training", e.to_string()))?;
        Some(
            q.encode_all(vectors.data)
                .map_err(|e| index_err("sq8 encoding", e.to_string()))?,
        )
    } else {
        None
    };
    let prior_graph = prior.map(|p| eddy_hnsw::Prior {
        view: p.graph,
        rows: p.rows,
    });
    let options = eddy_hnsw::BuildOptions::default();
    let sq8 = codes.as_ref().map(Sq8View::from_codes);
    let graph = match (&prior_graph, &sq8) {
        (Some(p), sq8) => {
            eddy_hnsw::Graph::build_from_prior(&vectors, &params.hnsw, &options, sq8.as_ref(), p)
        }
        (None, Some(c)) => eddy_hnsw::Graph::build_with_sq8(&vectors, &params.hnsw, &options, c),
        (None, None) => eddy_hnsw::Graph::build(&vectors, &params.hnsw),
    }
    .map_err(|e| index_err("graph build", e.to_string()))?;
    let mut graph_bytes = Vec::new();
    graph
        .write_to(&mut graph_bytes)
        .map_err(|e| index_err("graph write", e.to_string()))?;
    drop(graph);
    let mut writer = IndexWriter::new(seg.rows(), vectors.dim);
    writer.section(IndexSection::Graph, graph_bytes);
    if let Some(codes) = codes {
        let q = codes.quantizer();
        let mut params_bytes = Vec::with_capacity(8);
        params_bytes.extend_from_slice(&q.lo().to_le_bytes());
        params_bytes.extend_from_slice(&q.delta().to_le_bytes());
        writer.section(IndexSection::Sq8Params, params_bytes);
        writer.section(IndexSection::Sq8Codes, codes.codes().to_vec());
        writer.section(
            IndexSection::Sq8Corrections,
            bytemuck::cast_slice(codes.corrections()).to_vec(),
        );
    }
    writer.finish(path).map(Some)
}

/// Checks an index file's graph and codes once, at load, so searches can
/// use the unverified (header-only) views.
pub fn check_index(seg: &Segment, index: &IndexFile) -> Result<()> {
    let bad = |what: String| Error::corrupt(index.path(), what);
    let graph = graph_view(index).ok_or_else(|| bad("no graph section".into()))?;
    let graph = graph.map_err(|e| bad(format!("graph: {e}")))?;
    if graph.len() != seg.rows() || graph.dim() != seg.dim() {
        return Err(bad(format!(
            "graph covers {} rows of dim {}, segment has {} of dim {}",
            graph.len(),
            graph.dim(),
            seg.rows(),
            seg.dim()
        )));
    }
    if let Some(codes) = sq8_view(seg, index) {
        codes.map_err(|e| bad(format!("sq8 codes: {e}")))?;
    }
    Ok(())
}

fn graph_view(index: &IndexFile) -> Option<std::result::Result<GraphView<'_>, eddy_hnsw::Error>> {
    index
        .section(IndexSection::Graph)
        .map(GraphView::from_bytes_unverified)
}

fn sq8_view<'a>(
    seg: &Segment,
    index: &'a IndexFile,
) -> Option<std::result::Result<Sq8View<'a>, eddy_hnsw::Error>> {
    let params = index.section(IndexSection::Sq8Params)?;
    let codes = index.section(IndexSection::Sq8Codes)?;
    let corrections = index.section(IndexSection::Sq8Corrections)?;
    let bad = |m: &str| eddy_hnsw::Error::InvalidInput(m.to_owned());
    let Some((lo, delta)) = params.get(0..8).map(|p| {
        (
            f32::from_le_bytes([p[0], p[1], p[2], p[3]]),
            f32::from_le_bytes([p[4], p[5], p[6], p[7]]),
        )
    }) else {
        return Some(Err(bad("sq8 parameters are truncated")));
    };
    let Ok(corrections) = bytemuck::try_cast_slice::<u8, f32>(corrections) else {
        return Some(Err(bad("sq8 corrections are misaligned")));
    };
    Some(Sq8View::from_parts(
        seg.dim(),
        lo,
        delta,
        codes,
        corrections,
    ))
}

/// The segment's vectors as the graph and the exact scan read them.
fn segment_vectors(seg: &Segment) -> Vectors<'_> {
    Vectors::new(seg.vectors(), seg.dim(), seg.metric())
}

thread_local! {
    /// Per search thread: the graph walk's reusable state.
    static CONTEXT: RefCell<SearchContext> = RefCell::new(SearchContext::default());
}

/// The rows of `seg` matching `filter`: from the payload index when the
/// segment has one covering the filter's fields, else by reading payloads.
pub fn filter_rows(seg: &Segment, filter: &Filter) -> RoaringBitmap {
    if let Some(Ok(index)) = seg.payload_index() {
        match index.evaluate(filter) {
            Ok(rows) => return rows,
            Err(IndexError::FieldNotIndexed(_) | IndexError::FieldTypeMismatch { .. }) => {}
            Err(e) => {
                tracing::warn!(segment = %seg.path().display(), error = %e, "payload index unusable; reading payloads")
            }
        }
    }
    (0..seg.rows() as u32)
        .filter(|&row| filter.matches_json(seg.payload_json(row)))
        .collect()
}

/// The codes and vectors [`search_sealed`] would scan every row of `seg`
/// by: no graph to walk, scan codes kept, no filter, and a query that lets
/// codes rank rows. For a scan joint with the other rows without a graph
/// ([`crate::scan_many`]); `None` where `search_sealed` answers otherwise.
pub fn scanned_by_codes<'a>(
    seg: &'a Segment,
    index: Option<&IndexFile>,
    scan_codes: Option<&'a ScanCodes>,
    mask: RowMask<'_>,
    q: &SealedQuery<'_>,
) -> Option<(&'a ScanCodes, Vectors<'a>)> {
    let codes_rank = !q.exact && q.quantization != Quantization::None && q.filter.is_none();
    let graph = index.and_then(graph_view).is_some_and(|g| g.is_ok());
    let anything = mask.masked < seg.rows();
    let codes = scan_codes.filter(|_| codes_rank && !graph && anything)?;
    Some((codes, segment_vectors(seg)))
}

/// The `k` closest rows of `seg` to `query` that `accept` (deletes, rows
/// shadowed by fresher events) and the query's filter let through, closest
/// first, scores "higher is closer". `index` is the segment's index file
/// (graph, codes) once built; until then `scan_codes`
/// ([`crate::train_scan_codes`] of its vectors), if given, let an unfiltered
/// non-exact search scan codes instead of every f32 row. `mask` (which
/// rows `accept` refuses, and how many) lets a graph segment be searched
/// by a scan of its accepted rows' codes where that costs less than a walk
/// through the refused nodes: ranked by `sign_bits` first where given and
/// [`bit_scan_pays`], else by SQ8 codes where [`code_scan_pays`]; and a
/// segment whose every row is refused is skipped.
#[allow(clippy::too_many_arguments)]
pub fn search_sealed(
    seg: &Segment,
    index: Option<&IndexFile>,
    scan_codes: Option<&ScanCodes>,
    sign_bits: Option<&BinaryCodes>,
    mask: RowMask<'_>,
    query: &[f32],
    q: &SealedQuery<'_>,
    accept: &dyn Fn(u32) -> bool,
) -> Vec<Neighbor> {
    if mask.masked >= seg.rows() {
        // Every row deleted or shadowed: nothing to find.
        return Vec::new();
    }
    let vectors = segment_vectors(seg);
    let allowed = q.filter.map(|f| filter_rows(seg, f));
    let graph = if q.exact {
        None
    } else {
        index.and_then(graph_view).and_then(|g| g.ok())
    };
    if let Some(allowed) = &allowed {
        let plan = q.planner.plan(allowed.len(), seg.rows() as u64);
        if matches!(plan, Plan::Empty) {
            return Vec::new();
        }
        if graph.is_none() || matches!(plan, Plan::Exact) {
            let rows: Vec<u32> = allowed.iter().filter(|&r| accept(r)).collect();
            return neighbors(exact_scan(&vectors, query, q.k, ScanRows::Listed(&rows)));
        }
    }
    let Some(graph) = graph else {
        // No graph: scan every row, by its codes where the segment has scan
        // codes and the query lets codes rank rows.
        let codes = scan_codes.filter(|_| !q.exact && q.quantization != Quantization::None);
        return neighbors(match codes {
            Some(codes) => codes.search(&vectors, query, q.k, scan_rescore_depth(q.k), accept),
            None => exact_scan(&vectors, query, q.k, ScanRows::All(accept)),
        });
    };
    let combined = |row: u32| allowed.as_ref().is_none_or(|a| a.contains(row)) && accept(row);
    let codes = match q.quantization {
        Quantization::None => None,
        Quantization::Auto | Quantization::Sq8 => {
            index.and_then(|i| sq8_view(seg, i)).and_then(|c| c.ok())
        }
    };
    // Without rescoring the walk's top k by code score is kept (their f32
    // scores are still what is reported).
    let rescore = if q.rescore {
        ((q.k as f32) * q.oversampling.max(1.0)).ceil() as usize
    } else {
        q.k
    };
    // A graph mostly deleted or shadowed: scanning codes can cost less than
    // a walk routed through the refused nodes.
    if let (Some(codes), None) = (&codes, &allowed) {
        let beam = q.ef.max(q.k).max(rescore);
        let (rows, accepted) = (seg.rows(), seg.rows().saturating_sub(mask.masked));
        let keep = rescore.max(scan_rescore_depth(q.k));
        match sign_bits {
            Some(bits) if bit_scan_pays(accepted, rows, beam) => {
                let listed = mask.accepted_rows(rows);
                let shortlist = scan_shortlist_depth(q.k, listed.len());
                return neighbors(scan_sq8_shortlisted(
                    &vectors, codes, bits, query, q.k, shortlist, keep, &listed, accept,
                ));
            }
            _ if code_scan_pays(accepted, accepted, rows, beam) => {
                let listed = mask.accepted_rows(rows);
                return neighbors(scan_sq8_codes(
                    &vectors,
                    codes,
                    query,
                    q.k,
                    keep,
                    Some(&listed),
                    accept,
                ));
            }
            _ => {}
        }
    }
    let params = Query::new(q.k, q.ef)
        .with_rescore(rescore)
        .with_accept(&combined);
    let hits = CONTEXT.with(|ctx| {
        let mut ctx = ctx.borrow_mut();
        match codes {
            Some(codes) => {
                eddy_hnsw::search_sq8(&graph, &vectors, &codes, &params, query, &mut ctx)
            }
            None => eddy_hnsw::search(&graph, &vectors, &params, query, &mut ctx),
        }
    });
    neighbors(hits)
}
