//! Which rows are nearest by sign-bit (Hamming) distance: the first pass of
//! a shortlisted scan, and of a quantized walk's listed rows, without a heap
//! over thousands of rows.

use eddy_quant::binary::BinaryCodes;

thread_local! {
    /// The Hamming distances of a sign-bit scan, one per row, reused by the
    /// thread's next scan.
    pub(super) static DISTANCES: std::cell::RefCell<Vec<u32>> = const { std::cell::RefCell::new(Vec::new()) };
    /// The codes of listed rows, gathered a chunk at a time for the block
    /// kernel, reused by the thread's next scan.
    static GATHERED: std::cell::RefCell<Vec<u64>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Of `rows` (rows of `coarse`), the ones `accept` lets through nearest to
/// the sign-bit `code` by Hamming distance, at least `count` of them where
/// there are so many (see [`nearest_accepted`]). The listed rows' codes are
/// gathered a chunk at a time and scored by the block kernel.
///
/// # Panics
/// If a listed row is past the end of `coarse`.
pub(crate) fn nearest_listed(
    coarse: &BinaryCodes,
    code: &[u64],
    rows: &[u32],
    count: usize,
    accept: &dyn Fn(u32) -> bool,
) -> Vec<u32> {
    /// Rows gathered per kernel call.
    const CHUNK: usize = 1024;
    let words = coarse.quantizer().words_per_vector().max(1);
    let all = coarse.codes();
    let picked = DISTANCES.with_borrow_mut(|distances| {
        distances.resize(rows.len(), 0);
        GATHERED.with_borrow_mut(|gathered| {
            gathered.resize(CHUNK * words, 0);
            for (ids, out) in rows.chunks(CHUNK).zip(distances.chunks_mut(CHUNK)) {
                gather_codes(all, ids, words, gathered);
                eddy_kernels::hamming_block(code, &gathered[..ids.len() * words], out);
            }
        });
        nearest_accepted(distances, code.len() * 64, count, &|i| {
            accept(rows[i as usize])
        })
    });
    picked.into_iter().map(|i| rows[i as usize]).collect()
}

/// Copies the codes of rows `ids` of `all` (`words` each) into `to`, one
/// after another. The usual widths (128 to 1,536 dimensions) copy a fixed
/// number of words, a few moves a row; a width known only at run time
/// made every row's copy a `memmove` call (1.2 % of eddy-query's CPU
/// beside a 2,000/s writer, by `perf`).
pub(crate) fn gather_codes(all: &[u64], ids: &[u32], words: usize, to: &mut [u64]) {
    /// Inlined into each arm below, where `words` is a constant.
    #[inline(always)]
    fn copy_rows(all: &[u64], ids: &[u32], words: usize, to: &mut [u64]) {
        for (&row, to) in ids.iter().zip(to.chunks_exact_mut(words)) {
            let at = row as usize * words;
            to.copy_from_slice(&all[at..at + words]);
        }
    }
    match words {
        2 => copy_rows(all, ids, 2, to),
        4 => copy_rows(all, ids, 4, to),
        6 => copy_rows(all, ids, 6, to),
        8 => copy_rows(all, ids, 8, to),
        12 => copy_rows(all, ids, 12, to),
        16 => copy_rows(all, ids, 16, to),
        24 => copy_rows(all, ids, 24, to),
        _ => copy_rows(all, ids, words, to),
    }
}

/// The rows `accept` lets through with the smallest `distances` (at most
/// `max_distance`), at least `count` of them where there are so many: a
/// histogram of the distances gives the distance to stop at (no heap over
/// thousands of rows), extended while `accept` turns rows away.
///
/// Both passes over the distances avoid dependent stores and branches:
/// the histogram is four interleaved ones (consecutive rows often share a
/// distance, and one array would chain each increment on the last through
/// store forwarding), and rows are gathered by writing every row and
/// advancing by whether it is in range (a few % are; a branch per row
/// mispredicts on them). `accept` is then asked about the gathered rows
/// only. A 20k-row tail scan took 95–99 µs instead of 131–143 with
/// this (`cargo run --release -p eddy-segment --example tail_scan`).
///
/// On many rows the first stop comes from a sample of the distances
/// instead ([`sampled_first_pass`]): the same rows, in the same order,
/// without the histogram of every row (which beside a writer cost as much
/// of eddy-query's CPU as the Hamming distances themselves, by `perf`).
pub(crate) fn nearest_accepted(
    distances: &[u32],
    max_distance: usize,
    count: usize,
    accept: &dyn Fn(u32) -> bool,
) -> Vec<u32> {
    let buckets = max_distance + 2;
    let cap = (max_distance + 1) as u32;
    let mut taken: Vec<u32> = Vec::with_capacity(count + count / 8);
    let mut from = 0;
    if let Some(to) = sampled_first_pass(distances, cap, count, &mut taken) {
        retain_accepted(&mut taken, 0, accept);
        from = to;
        if taken.len() >= count || from >= buckets {
            return taken;
        }
    }
    let histogram = distance_histogram(distances, cap, buckets);
    while taken.len() < count && from < buckets {
        let wanted = count - taken.len();
        let (mut to, mut rows) = (from, 0);
        while to < buckets && rows < wanted {
            rows += histogram[to];
            to += 1;
        }
        let (lo, width) = (from as u32, (to - from) as u32);
        // Exactly `rows` distances fall in [lo, lo + width): room for them
        // and the one slot written past the last.
        let start = taken.len();
        taken.resize(start + rows + 1, 0);
        let mut end = start;
        for (row, &d) in distances.iter().enumerate() {
            taken[end] = row as u32;
            end += usize::from(d.min(cap).wrapping_sub(lo) < width);
        }
        taken.truncate(end);
        retain_accepted(&mut taken, start, accept);
        from = to;
    }
    taken
}

/// Distances whose rows within a limit [`push_within`] packs at a time.
const WITHIN_BLOCK: usize = 1024;

/// Rows from which [`nearest_accepted`] finds its first stop from a sample
/// of the distances: below it the full histogram is a few microseconds.
const SAMPLED_FROM_ROWS: usize = 4_096;

/// One distance in this many is sampled.
const SAMPLE_STRIDE: usize = 8;

/// [`nearest_accepted`]'s first pass without the histogram of every row:
/// a histogram of every [`SAMPLE_STRIDE`]th distance gives a distance
/// that, by the sample, a quarter more than `count` rows are within, one
/// pass gathers those rows (a few % of them, packed by [`push_within`]),
/// and their own histogram gives exactly the stop the full one
/// would (every row up to the sampled distance is among them). Pushes,
/// in row order, the rows closer than that stop (not yet asked
/// `accept`) and returns the stop; `None`, leaving `taken` empty, where
/// there are few rows or the sample fell short.
fn sampled_first_pass(
    distances: &[u32],
    cap: u32,
    count: usize,
    taken: &mut Vec<u32>,
) -> Option<usize> {
    if distances.len() < SAMPLED_FROM_ROWS || count == 0 || count >= distances.len() / 4 {
        return None;
    }
    let buckets = cap as usize + 1;
    let mut sampled = vec![0usize; buckets];
    for &d in distances.iter().step_by(SAMPLE_STRIDE) {
        sampled[d.min(cap) as usize] += 1;
    }
    // A quarter more than `count`, and room for the sample's spread.
    let target = (count + count / 4) / SAMPLE_STRIDE + 8;
    let (mut limit, mut seen) = (0, 0);
    while limit < buckets {
        seen += sampled[limit];
        if seen >= target {
            break;
        }
        limit += 1;
    }
    let limit = u32::try_from(limit).ok()?;
    let mut near: Vec<u32> = Vec::with_capacity(2 * count);
    push_within(distances, limit, cap, &mut near);
    if near.len() < count {
        return None;
    }
    let mut histogram = vec![0usize; limit as usize + 1];
    for &row in &near {
        histogram[distances[row as usize].min(cap) as usize] += 1;
    }
    let (mut to, mut rows) = (0, 0);
    while rows < count {
        rows += histogram[to];
        to += 1;
    }
    taken.extend(
        near.into_iter()
            .filter(|&row| (distances[row as usize].min(cap) as usize) < to),
    );
    Some(to)
}

/// Pushes onto `out`, in order, the position of every one of `distances`
/// that, capped at `cap`, is at most `limit`: packed by the selection
/// kernel ([`eddy_kernels::positions_at_most`]) a block at a time. A branch
/// per row mispredicted on the few % of rows a shortlist keeps: over a
/// 20k-row tail this loop was ~85 % of the selection and as costly as the
/// Hamming distances (`perf annotate`), and the whole shortlisted scan
/// took 59–60 µs a query before and 45 µs after (`cargo run --release -p
/// eddy-segment --example tail_scan`, alternated twice).
fn push_within(distances: &[u32], limit: u32, cap: u32, out: &mut Vec<u32>) {
    // Every capped distance is within when the limit reaches the cap.
    let threshold = if limit < cap { limit } else { u32::MAX };
    let mut within = [0u32; WITHIN_BLOCK];
    for (block, at) in distances
        .chunks(WITHIN_BLOCK)
        .zip((0u32..).step_by(WITHIN_BLOCK))
    {
        let n = eddy_kernels::positions_at_most(block, threshold, &mut within[..block.len()]);
        out.extend(within[..n].iter().map(|&i| at + i));
    }
}

/// Histogram of `distances` capped at `cap`, over `buckets` buckets.
fn distance_histogram(distances: &[u32], cap: u32, buckets: usize) -> Vec<usize> {
    const LANES: usize = 4;
    let mut lanes = vec![0u32; buckets * LANES];
    let mut quads = distances.chunks_exact(LANES);
    for quad in &mut quads {
        for (lane, &d) in quad.iter().enumerate() {
            lanes[lane * buckets + d.min(cap) as usize] += 1;
        }
    }
    for &d in quads.remainder() {
        lanes[d.min(cap) as usize] += 1;
    }
    (0..buckets)
        .map(|b| (0..LANES).map(|l| lanes[l * buckets + b] as usize).sum())
        .collect()
}

/// Keeps, in order, the rows of `taken` from `start` on that `accept` lets
/// through.
fn retain_accepted(taken: &mut Vec<u32>, start: usize, accept: &dyn Fn(u32) -> bool) {
    let mut kept = start;
    for i in start..taken.len() {
        let row = taken[i];
        if accept(row) {
            taken[kept] = row;
            kept += 1;
        }
    }
    taken.truncate(kept);
}
