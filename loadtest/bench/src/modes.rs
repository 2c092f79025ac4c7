//! The traversal modes a sweep measures: f32, SQ8, binary 1 / 1.5 / 2-bit and
//! rotated 4-bit codes, each walked at every `--ef` and timed.

use std::time::Instant;

use anyhow::{bail, Result};
use eddy_dataset::recall_at_k;
use eddy_hnsw::{
    search_codes_into, search_into, search_sq8_into, CodeQuery, GraphView, Query, SearchContext,
    Sq8View, Vectors,
};
use eddy_model::Metric;
use eddy_quant::binary::{BinaryCodes, BinaryConfig, BinaryEncoding, BinaryQuantizer};
use eddy_quant::rabitq::{RabitqCodes, RabitqConfig, RabitqQuantizer};
use eddy_quant::sq8::{Sq8Config, Sq8Quantizer};
use eddy_quant::CodeScorer;
use eddy_segment::HugePageBytes;

use crate::cli::RunArgs;
use crate::data::Dataset;
use crate::measure::{as_u64, qps_multi, qps_single, recall, run_all};
use crate::report::Point;

/// What every mode's sweep shares: the flags, the data, the graph and the
/// vectors it is searched with.
pub(crate) struct Sweep<'a> {
    pub(crate) args: &'a RunArgs,
    pub(crate) data: &'a Dataset,
    pub(crate) view: &'a GraphView<'a>,
    /// The base vectors as searched (huge-page copy or the loaded array).
    pub(crate) vectors: Vectors<'a>,
    /// Pool of the 2-thread QPS measurement.
    pub(crate) mt_pool: &'a rayon::ThreadPool,
    pub(crate) log: &'a dyn Fn(String),
}

/// What one mode measured.
pub(crate) struct ModeResult {
    pub(crate) points: Vec<Point>,
    /// Bytes of the SQ8 codes, for the `sq8` mode.
    pub(crate) sq8_bytes: Option<usize>,
    /// Bytes of the binary / 4-bit codes, for those modes.
    pub(crate) code_bytes: Option<usize>,
}

/// Codes of a quantized traversal mode (`bin1`, `bin15`, `bin2`, `rq4`).
pub(crate) enum ModeCodes {
    Binary(BinaryCodes),
    Rabitq(RabitqCodes),
}

impl ModeCodes {
    /// Train the mode's quantizer (default config, `metric`) and encode `data`.
    fn train(mode: &str, data: &[f32], dim: usize, metric: Metric) -> Result<Option<Self>> {
        let encoding = match mode {
            "bin1" => BinaryEncoding::OneBit,
            "bin15" => BinaryEncoding::OneAndHalfBits,
            "bin2" => BinaryEncoding::TwoBits,
            "rq4" => {
                let cfg = RabitqConfig {
                    metric,
                    ..RabitqConfig::default()
                };
                let codes = RabitqQuantizer::train(data, dim, &cfg)?.encode_all(data)?;
                return Ok(Some(Self::Rabitq(codes)));
            }
            _ => return Ok(None),
        };
        let cfg = BinaryConfig {
            encoding,
            ..BinaryConfig::default()
        };
        let codes = BinaryQuantizer::train(data, dim, &cfg)?.encode_all(data)?;
        Ok(Some(Self::Binary(codes)))
    }

    /// Code bytes of the whole collection.
    fn memory_bytes(&self) -> usize {
        match self {
            Self::Binary(c) => c.bytes_per_vector() * c.len(),
            Self::Rabitq(c) => c.bytes_per_vector() * c.len(),
        }
    }

    /// What the codes are, for the mode's header line.
    fn kind(&self) -> &'static str {
        match self {
            Self::Binary(_) => "binary code",
            Self::Rabitq(_) => "rotated 4-bit code",
        }
    }
}

/// How a mode walks the graph.
#[derive(Clone, Copy)]
enum Traversal<'a> {
    F32,
    Sq8(Sq8View<'a>),
    Codes(&'a ModeCodes),
}

impl Traversal<'_> {
    /// One search into `out`.
    fn search(
        &self,
        view: &GraphView<'_>,
        vectors: &Vectors<'_>,
        params: &Query<'_>,
        (q, ctx): (&[f32], &mut SearchContext),
        out: &mut Vec<(u32, f32)>,
    ) {
        match self {
            Traversal::F32 => search_into(view, vectors, params, q, ctx, out),
            Traversal::Sq8(codes) => search_sq8_into(view, vectors, codes, params, q, ctx, out),
            Traversal::Codes(ModeCodes::Binary(c)) => {
                codes_search(view, vectors, c, params, (q, ctx), out);
            }
            Traversal::Codes(ModeCodes::Rabitq(c)) => {
                codes_search(view, vectors, c, params, (q, ctx), out);
            }
        }
    }
}

/// Prepare `q` for `codes` and run the code traversal (an unpreparable query gives no results).
fn codes_search<C: CodeScorer>(
    view: &GraphView<'_>,
    vectors: &Vectors<'_>,
    codes: &C,
    params: &Query<'_>,
    (q, ctx): (&[f32], &mut SearchContext),
    out: &mut Vec<(u32, f32)>,
) {
    match codes.prepare(q) {
        Ok(prepared) => {
            let codes = CodeQuery {
                codes,
                prepared: &prepared,
            };
            search_codes_into(view, vectors, &codes, params, q, ctx, out);
        }
        Err(_) => out.clear(),
    }
}

/// Train `mode`'s codes, then measure it at every `--ef`.
pub(crate) fn sweep_mode(s: &Sweep<'_>, mode: &str) -> Result<ModeResult> {
    let (base, dim, metric) = (&s.data.base, s.vectors.dim, s.vectors.metric);
    let t_codes = Instant::now();
    let mode_codes = ModeCodes::train(mode, &base.data, dim, metric)?;
    let sq8 = if mode == "sq8" {
        let config = Sq8Config {
            metric,
            ..Sq8Config::default()
        };
        Some(Sq8Quantizer::train(&base.data, dim, &config)?.encode_all(&base.data)?)
    } else if mode == "f32" || mode_codes.is_some() {
        None
    } else {
        bail!("unknown mode {mode}");
    };
    let huge_codes = match (&sq8, s.args.huge_pages) {
        (Some(c), true) => Some((
            HugePageBytes::copy_of(c.codes())?,
            HugePageBytes::copy_of(bytemuck::cast_slice(c.corrections()))?,
        )),
        _ => None,
    };
    let sq8_view = match (&sq8, &huge_codes) {
        (Some(c), Some((hc, hk))) => Some(Sq8View::from_parts(
            dim,
            c.quantizer().lo(),
            c.quantizer().delta(),
            hc.as_bytes(),
            bytemuck::cast_slice(hk.as_bytes()),
        )?),
        (Some(c), None) => Some(Sq8View::from_codes(c)),
        _ => None,
    };
    let traversal = match (&sq8_view, &mode_codes) {
        (Some(v), _) => Traversal::Sq8(*v),
        (None, Some(c)) => Traversal::Codes(c),
        (None, None) => Traversal::F32,
    };
    (s.log)(mode_header(
        s,
        mode,
        &traversal,
        t_codes.elapsed().as_secs_f64(),
    ));
    (s.log)(format!(
        "{:>5} {:>9} {:>9} {:>9} {:>10} {:>10}",
        "ef", "recall@1", "recall@10", "recall@100", "QPS 1T", "QPS 2T"
    ));
    let points = s
        .args
        .ef
        .iter()
        .map(|&ef| measure_point(s, mode, traversal, ef))
        .collect();
    Ok(ModeResult {
        points,
        sq8_bytes: sq8_view.as_ref().map(Sq8View::memory_bytes),
        code_bytes: mode_codes.as_ref().map(ModeCodes::memory_bytes),
    })
}

/// The line that opens a mode's table.
fn mode_header(s: &Sweep<'_>, mode: &str, traversal: &Traversal<'_>, train_secs: f64) -> String {
    let rescoring = if s.args.rescore == 0 {
        "all ef candidates".to_string()
    } else {
        s.args.rescore.to_string()
    };
    let detail = match traversal {
        Traversal::Codes(c) => format!(
            " ({} traversal, {} B/vector, trained+encoded in {train_secs:.1} s, exact f32 rescoring of {rescoring})",
            c.kind(),
            c.memory_bytes() / s.data.base.rows().max(1),
        ),
        Traversal::Sq8(_) => format!(" (SQ8 traversal, exact f32 rescoring of {rescoring})"),
        Traversal::F32 => String::new(),
    };
    format!("\nmode {mode}{detail}")
}

/// Recall@1/10/100 and QPS of `traversal` at `ef`, logged as one table row.
fn measure_point(s: &Sweep<'_>, mode: &str, traversal: Traversal<'_>, ef: usize) -> Point {
    let (view, vectors) = (s.view, s.vectors);
    let rescore = if s.args.rescore == 0 {
        ef
    } else {
        s.args.rescore
    };
    let f = move |ctx: &mut SearchContext, q: &[f32], k: usize, out: &mut Vec<(u32, f32)>| {
        let params = Query::new(k, ef).with_rescore(rescore);
        traversal.search(view, &vectors, &params, (q, ctx), out);
    };
    let (queries, gt, gts) = (&s.data.queries, &s.data.gt, &s.data.gts);
    let r10 = run_all(queries, 10, &f);
    let r100 = run_all(queries, 100, &f);
    let recall1 = recall(&r10, gt, gts, 1);
    let recall10 = recall(&r10, gt, gts, 10);
    let recall100 = recall(&r100, gt, gts, 100);
    if std::env::var_os("EDDY_BENCH_DIAG").is_some() {
        print_misses(s.data, ef, &r10);
    }
    let qps1 = qps_single(queries, 10, s.args.min_secs, &f);
    let qps2 = (!s.args.no_mt).then(|| qps_multi(s.mt_pool, queries, 10, s.args.min_secs, &f));
    (s.log)(format!(
        "{ef:>5} {recall1:>9.4} {recall10:>9.4} {recall100:>10.4} {qps1:>10.0} {:>10}",
        qps2.map_or("-".to_string(), |q| format!("{q:.0}"))
    ));
    Point {
        mode: mode.to_owned(),
        ef,
        recall1,
        recall10,
        recall100,
        qps1,
        qps2,
    }
}

/// `EDDY_BENCH_DIAG`: every query whose recall@10 is below 1, with its truth and hits.
fn print_misses(data: &Dataset, ef: usize, r10: &[Vec<(u32, f32)>]) {
    for (i, r) in r10.iter().enumerate() {
        let rc = recall_at_k(&as_u64(r), data.gt.row(i), data.gts.row(i), 10);
        if rc < 1.0 {
            eprintln!(
                "diag ef={ef} q={i} recall={rc} gt={:?} gts={:?} got={:?}",
                &data.gt.row(i)[..10],
                &data.gts.row(i)[..10],
                r
            );
        }
    }
}
