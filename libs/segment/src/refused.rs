//! Rows a search refuses in a graph segment (deleted, or shadowed by
//! fresher events), and what they decide: whether the segment is walked or
//! its accepted rows scanned, and the sign bits that make that scan cheap.
//!
//! A walk routes through refused nodes, so it costs more the fewer rows
//! are accepted; under upserts a sealed segment's rows are shadowed one by
//! one (then deleted) until compaction rewrites it, and every query
//! searches it meanwhile.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use eddy_quant::binary::BinaryCodes;

use crate::scan_codes::sign_bit_quantizer;
use crate::Segment;

/// What the caller knows of the rows its `accept` refuses in one segment,
/// so [`crate::search_sealed`] can choose between walking the graph and
/// scanning the accepted rows' codes.
#[derive(Debug, Clone, Copy, Default)]
pub struct RowMask<'a> {
    /// One bit per row, set where `accept` refuses the row (`None`: none
    /// refused); a scan reads the accepted rows' codes only.
    pub refused: Option<&'a [u64]>,
    /// How many rows `accept` refuses, counted once each, never more: a
    /// segment with every row masked is not searched at all.
    pub masked: usize,
}

impl RowMask<'_> {
    /// The rows of a segment of `rows` rows that are not refused, in order.
    pub fn accepted_rows(&self, rows: usize) -> Vec<u32> {
        let Some(refused) = self.refused else {
            return (0..rows as u32).collect();
        };
        let mut out = Vec::with_capacity(rows.saturating_sub(self.masked));
        for (w, &word) in refused.iter().enumerate().take(rows.div_ceil(64)) {
            let mut free = !word;
            while free != 0 {
                let row = w * 64 + free.trailing_zeros() as usize;
                if row >= rows {
                    break;
                }
                out.push(row as u32);
                free &= free - 1;
            }
        }
        // Rows past the bits are not refused.
        out.extend((refused.len() * 64).min(rows) as u32..rows as u32);
        out
    }
}

/// One walk step's cost in SQ8-scored rows, fitted on debian-minilm (see
/// [`code_scan_pays`]).
const ROWS_PER_BEAM_SLOT: f64 = 94.0;

/// What a walk of a graph of `rows` rows with a beam of `beam` costs, in
/// SQ8-scored rows, when `accepted` of them are accepted: it routes through
/// refused nodes, so its cost grows as the accepted share `f` falls, about
/// as `f^-0.7` (with none accepted it visits every node).
fn walk_cost(accepted: usize, rows: usize, beam: usize) -> f64 {
    let share = (accepted.max(1) as f64) / rows.max(1) as f64;
    ROWS_PER_BEAM_SLOT * beam as f64 * share.powf(-0.7)
}

/// Whether a graph segment of `rows` rows of which `accepted` are not
/// deleted or shadowed is searched for less by scanning `scanned` rows'
/// SQ8 codes (the accepted ones) than by walking its graph with a beam of
/// `beam`. An SQ8 walk of beam 40 on 61,681 rows of debian-minilm took 76,
/// 89, 132, 199, 273 and 1,129 µs at 25, 50, 75, 85, 90 and 98 % refused;
/// a scan of the accepted rows' SQ8 codes ~20 ns a row (`cargo run
/// --release -p eddy-hnsw --example deleted_walk -- DATASET --refused`),
/// both made of the same SQ8 kernel calls. The scan pays below ~94 · beam ·
/// f^-0.7 scanned rows: at beam 40, from ~85 % refused on 61k rows (171
/// against 199 µs).
pub fn code_scan_pays(scanned: usize, accepted: usize, rows: usize, beam: usize) -> bool {
    rows > 0 && accepted < rows && (scanned as f64) < walk_cost(accepted, rows, beam)
}

/// [`code_scan_pays`] for a scan that ranks the `accepted` rows by sign
/// bits first ([`eddy_hnsw::scan_sq8_shortlisted`]): ~9 ns a row on the
/// same data, about half an SQ8-scored row, so it pays from ~75 % refused
/// on 61k rows (135 against 132 µs; at 90 %, 59 against 273). With the
/// shortlist a thirty-second of the rows (was a sixteenth) the crossover
/// stayed between 65 and 75 % refused (181 against 151 µs at 65 %, 121
/// against 155 at 75 %, ef 16), so the model is unchanged.
pub fn bit_scan_pays(accepted: usize, rows: usize, beam: usize) -> bool {
    /// A row ranked by sign bits (gathered) and its share of the SQ8
    /// shortlist, in SQ8-scored rows.
    const BIT_ROW_COST: f64 = 0.5;
    rows > 0
        && accepted < rows
        && BIT_ROW_COST * (accepted as f64) < walk_cost(accepted, rows, beam)
}

/// Refused share of a graph segment's rows from which its sign bits are
/// made (ahead of [`bit_scan_pays`], which wants them from ~75 %).
const SIGN_BITS_FROM_REFUSED: f64 = 0.5;

/// Held while a segment's sign bits are made.
static MAKING: Mutex<()> = Mutex::new(());

/// Sign bits of a graph segment's rows, made on first need on a thread of
/// their own, never on a search's path: index files do not hold them, and
/// only segments whose rows are mostly refused are scanned by them (for
/// cosine rows of [`crate::SHORTLIST_MIN_DIM`] dimensions or more; other
/// segments never get any).
#[derive(Debug, Default)]
pub struct LazySignBits {
    bits: OnceLock<Option<BinaryCodes>>,
    requested: AtomicBool,
}

impl LazySignBits {
    /// The bits, once made.
    pub fn get(&self) -> Option<&BinaryCodes> {
        self.bits.get().and_then(Option::as_ref)
    }

    /// [`LazySignBits::request`] once `masked` of `segment`'s rows are
    /// refused, half of them or more (a search of a graph segment calls
    /// this with its [`RowMask::masked`]; one atomic load once made).
    pub fn request_when_refused(self: &Arc<Self>, segment: &Arc<Segment>, masked: usize) {
        if self.get().is_none() && masked as f64 >= SIGN_BITS_FROM_REFUSED * segment.rows() as f64 {
            self.request(segment);
        }
    }

    /// Starts making the bits of `segment`'s rows, once: later calls (and
    /// calls once they exist) return at once.
    pub fn request(self: &Arc<Self>, segment: &Arc<Segment>) {
        if self.requested.swap(true, Ordering::AcqRel) {
            return;
        }
        let (cell, segment) = (Arc::clone(self), Arc::clone(segment));
        let spawned = std::thread::Builder::new()
            .name("eddy-sign-bits".into())
            .spawn(move || {
                // One segment's bits at a time, whatever number of
                // segments cross the threshold together (a bulk delete):
                // at most one core goes to them.
                let _one = MAKING.lock().unwrap_or_else(PoisonError::into_inner);
                let _ = cell.bits.set(sign_bits_of(&segment));
            });
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "cannot start the thread that makes a segment's sign bits");
            self.requested.store(false, Ordering::Release);
        }
    }

    /// Makes the bits of `segment` on this thread (tests; a caller that is
    /// off the search path already).
    pub fn make_now(&self, segment: &Segment) {
        self.requested.store(true, Ordering::Release);
        let _ = self.bits.set(sign_bits_of(segment));
    }
}

/// The sign bits of every row of `segment`, where its metric and
/// dimensions take them.
fn sign_bits_of(segment: &Segment) -> Option<BinaryCodes> {
    let vectors = segment.vectors();
    let quantizer = sign_bit_quantizer(vectors, segment.dim(), segment.metric())?;
    quantizer.encode_all(vectors).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepted_rows_are_the_unset_bits_below_the_row_count() {
        let refused = [0b1011u64, u64::MAX, 1 << 63];
        let mask = RowMask {
            refused: Some(&refused),
            masked: 3 + 64 + 1,
        };
        let rows = mask.accepted_rows(190);
        let mut want: Vec<u32> = vec![2];
        want.extend(4..64);
        want.extend(128..190);
        assert_eq!(rows, want);
        // Row 190 and the rows past the bits (192..200) are accepted, 191
        // not; none refused lists every row.
        assert_eq!(mask.accepted_rows(200).len(), want.len() + 9);
        assert_eq!(RowMask::default().accepted_rows(5), vec![0, 1, 2, 3, 4]);
    }

    #[test]
    fn scans_pay_only_when_most_rows_are_refused() {
        let rows = 61_681;
        // The SQ8 scan of the accepted rows: from ~85 % refused.
        assert!(!code_scan_pays(rows / 4, rows / 4, rows, 40));
        assert!(code_scan_pays(rows / 10, rows / 10, rows, 40));
        // Sign bits first: from ~75 % refused.
        assert!(!bit_scan_pays(rows / 2, rows, 40));
        assert!(bit_scan_pays(rows / 5, rows, 40));
        assert!(!bit_scan_pays(rows, rows, 40), "nothing refused: walk");
        assert!(!code_scan_pays(0, 0, 0, 40));
    }
}
