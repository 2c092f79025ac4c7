//! The readable form of `eddy fsck`'s findings (the JSON form is the
//! serialised [`CollectionFsck`] list).

use std::fmt::Write as _;

use crate::fsck::{CollectionFsck, Finding};

/// Findings of one kind listed in full before "... and N more".
const SHOWN: usize = 10;

/// One block per collection: the verdict, the counts, then each finding.
pub fn render(checked: &[CollectionFsck]) -> String {
    let mut out = String::new();
    for c in checked {
        let s = &c.store;
        let verdict = if c.is_clean() {
            "clean"
        } else {
            "PROBLEMS FOUND"
        };
        let _ = writeln!(out, "collection {}: {verdict}", c.collection);
        let _ = writeln!(
            out,
            "  manifest v{} ({} retained versions read), {} segments, {} live rows",
            s.version, s.versions_checked, s.segments, s.live_rows
        );
        list(
            &mut out,
            "duplicate ids",
            s.duplicates
                .iter()
                .map(|(id, n)| format!("{id:?} live {n} times")),
        );
        list(
            &mut out,
            "delete counts that disagree",
            s.delete_count_mismatches.iter().cloned(),
        );
        list(
            &mut out,
            "damaged or missing files",
            s.damaged_files.iter().cloned(),
        );
        list(
            &mut out,
            "manifest chain errors",
            s.chain_errors.iter().cloned(),
        );
        list(
            &mut out,
            "live rows beyond next_offset",
            s.rows_beyond_offsets
                .iter()
                .map(|(id, p, o)| format!("{id:?} from {p}/{o}")),
        );
        match &c.offsets {
            None => {
                let _ = writeln!(out, "  offsets: not checked (no --brokers)");
            }
            Some(a) => {
                let _ = writeln!(
                    out,
                    "  offsets: {} events: {} live, {} superseded, {} deleted, {} dead-lettered; {} below the log start (unchecked)",
                    a.events, a.live, a.superseded, a.deleted, a.dead_lettered, a.below_log_start
                );
                findings(&mut out, "LOST", &a.lost);
                findings(&mut out, "deleted but visible", &a.deleted_but_visible);
                findings(&mut out, "stale values", &a.stale);
                findings(&mut out, "unexplained rows", &a.unexplained);
                list(
                    &mut out,
                    "manifest offsets above the high watermark (topic re-created?)",
                    a.beyond_high_watermark.iter().map(|(p, next, high)| {
                        format!("partition {p}: next_offset {next}, high watermark {high}")
                    }),
                );
            }
        }
    }
    out.trim_end().to_owned()
}

fn findings(out: &mut String, what: &str, found: &[Finding]) {
    list(
        out,
        what,
        found.iter().map(|f| match &f.id {
            Some(id) => format!("{id:?} at {}/{}: {}", f.partition, f.offset, f.why),
            None => format!("{}/{}: {}", f.partition, f.offset, f.why),
        }),
    );
}

fn list(out: &mut String, what: &str, items: impl ExactSizeIterator<Item = String>) {
    let n = items.len();
    if n == 0 {
        return;
    }
    let _ = writeln!(out, "  {what}: {n}");
    for item in items.take(SHOWN) {
        let _ = writeln!(out, "    {item}");
    }
    if n > SHOWN {
        let _ = writeln!(out, "    ... and {} more", n - SHOWN);
    }
}
