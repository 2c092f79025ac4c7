//! The seal's side of a grown graph: whether it kept up, the row of the
//! segment each grown row became, the index file finished from it, and the
//! back-off after graphs that fell behind.

use eddy_manifest::Store;
use eddy_model::CollectionDef;
use eddy_segment::{build_index_from, Growing, PriorIndex, Segment};
use tracing::{info, warn};

use super::Grown;

/// The most rows the seal inserts itself to finish a grown graph; with
/// more left (or under half of the rows grown) it publishes flat.
pub(super) const MAX_FINISH_ROWS: usize = 8_192;

/// Whether the seal finishes a graph grown over `carried` of the segment's
/// `rows` rows: when it holds at least half of them and at most
/// [`MAX_FINISH_ROWS`] are left to insert.
pub(super) fn finishes(carried: usize, rows: usize) -> bool {
    carried * 2 >= rows && rows - carried.min(rows) <= MAX_FINISH_ROWS
}

/// Whether buffers grow their graphs, after how the last seals went: a
/// seal whose grown graph fell behind (ingest faster than graph building)
/// means the next buffers are sealed flat without growing one, 1, 2, 4 …
/// up to [`GrowBackoff::MAX_SKIPPED`] of them, so sustained fast ingest
/// does not pay for graphs it then throws away; a graph published with its
/// seal resets it.
#[derive(Debug, Default, Clone, Copy)]
pub(in crate::state) struct GrowBackoff {
    /// Buffers to skip after the next fall behind.
    skip_next: u32,
    /// Buffers still to skip.
    skipping: u32,
}

impl GrowBackoff {
    /// The most buffers skipped in a row.
    const MAX_SKIPPED: u32 = 16;

    /// Records what became of a seal's grown graph (its `index_builds`
    /// outcome).
    pub(in crate::state) fn sealed(&mut self, outcome: Option<&str>) {
        match outcome {
            Some("grown_behind") => {
                self.skip_next = self.skip_next.clamp(1, Self::MAX_SKIPPED);
                self.skipping = self.skip_next;
                self.skip_next = (self.skip_next * 2).min(Self::MAX_SKIPPED);
            }
            Some("grown") => *self = Self::default(),
            _ => {}
        }
    }

    /// Whether a new buffer grows its graph (counting a skipped one).
    pub(in crate::state) fn grow_next(&mut self) -> bool {
        if self.skipping == 0 {
            return true;
        }
        self.skipping -= 1;
        false
    }
}

/// For each of the first `grown` rows of `buffer`, its row in the segment
/// the buffer seals into (its live rows in order); `None` for a row a
/// later event replaced or deleted.
fn segment_rows(buffer: &Growing, grown: usize) -> Vec<Option<u32>> {
    let mut next = 0u32;
    (0..buffer.rows() as u32)
        .map(|row| {
            buffer.is_live(row).then(|| {
                next += 1;
                next - 1
            })
        })
        .take(grown)
        .collect()
}

/// Writes the index file of segment `id` (sealed from `buffer`) from the
/// graph grown over the buffer's first rows: its name, and the outcome
/// `index_builds` counts (`grown`). No name (the segment is published flat,
/// maintenance builds its graph) when the grown graph fell behind: it
/// holds under half of the segment's rows or leaves too many to insert
/// ([`finishes`], `grown_behind`); or when the build fails (logged,
/// `grown_failed`).
pub(in crate::state) fn write_grown_index(
    store: &Store,
    def: &CollectionDef,
    buffer: &Growing,
    id: &str,
    grown: &Grown,
) -> (Option<String>, Option<&'static str>) {
    if buffer.live_rows() < grown.policy.params.min_rows.max(1) {
        // Too few rows for a graph at all: nothing to count.
        return (None, None);
    }
    let rows = segment_rows(buffer, grown.graph.len());
    let carried = rows.iter().flatten().count();
    if !finishes(carried, buffer.live_rows()) {
        info!(collection = %def.name, segment = id, grown = carried, rows = buffer.live_rows(), "the grown graph fell behind: the segment is published flat");
        return (None, Some("grown_behind"));
    }
    let name = store.new_index_name(id);
    let path = store.index_path(&def.name, &name);
    let built = (|| -> std::result::Result<Option<u64>, String> {
        let seg = Segment::open(&store.segment_path(&def.name, id)).map_err(|e| e.to_string())?;
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(grown.policy.threads.max(1))
            .thread_name(|i| format!("eddy-grow-seal-{i}"))
            .build()
            .map_err(|e| e.to_string())?;
        let prior = PriorIndex {
            graph: grown.graph.view(),
            rows: &rows,
        };
        pool.install(|| build_index_from(&seg, &grown.policy.params, &path, Some(prior)))
            .map_err(|e| e.to_string())
    })();
    match built {
        Ok(Some(_)) => (Some(name), Some("grown")),
        Ok(None) => (None, None),
        Err(e) => {
            warn!(collection = %def.name, segment = id, error = %e, "building the segment's index from its grown graph failed: the segment is published flat");
            crate::remove_unused_file(&path);
            (None, Some("grown_failed"))
        }
    }
}
