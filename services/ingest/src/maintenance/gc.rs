//! The garbage-collection job: removes manifest versions older than the
//! newest kept ones and past the grace period, and the files no retained
//! version names.

use std::time::{Duration, Instant, SystemTime};

use eddy_manifest::GcPolicy;
use eddy_model::CollectionDef;
use tracing::{error, info, warn};

use super::Maintenance;

/// When and what garbage collection removes.
#[derive(Debug, Clone, Copy)]
pub struct GcSchedule {
    /// Time between passes.
    pub every: Duration,
    /// What each collection keeps.
    pub policy: GcPolicy,
}

impl Maintenance {
    /// Collects the garbage of every collection when the schedule says it
    /// is due (`last` is when it last ran).
    pub(super) fn collect_garbage_if_due(
        &self,
        collections: &[CollectionDef],
        last: &mut Option<Instant>,
    ) {
        let Some(gc) = &self.gc else { return };
        if last.is_some_and(|t| t.elapsed() < gc.every) {
            return;
        }
        *last = Some(Instant::now());
        for def in collections {
            self.collect_garbage(&def.name, &gc.policy);
        }
        // Dropped collections: their whole directory, once the drop is
        // older than the grace and no pinned snapshot holds it.
        match self.store.collect_dropped(gc.policy.grace) {
            Ok(collected) => {
                for collection in collected.removed {
                    info!(collection, "dropped collection's files collected");
                }
                for (collection, reason) in collected.refused {
                    error!(collection, %reason, "a dropped collection's files are kept: its drop marker or leases cannot be read; repair or remove them by hand");
                }
            }
            Err(e) => warn!(error = %e, "collecting dropped collections"),
        }
    }

    /// One garbage-collection pass over `collection`, logged and counted.
    fn collect_garbage(&self, collection: &str, policy: &GcPolicy) {
        let report = match self
            .store
            .collect_garbage(collection, policy, SystemTime::now())
        {
            Ok(report) => report,
            Err(e) => {
                warn!(collection, error = %e, "garbage collection failed");
                return;
            }
        };
        for (kind, n) in [
            ("manifest", report.manifests),
            ("segment", report.segments),
            ("index", report.indexes),
            ("delete", report.deletes),
            ("other", report.other),
        ] {
            self.metrics
                .gc_files
                .with_label_values(&[collection, kind])
                .inc_by(n as u64);
        }
        self.metrics
            .gc_bytes
            .with_label_values(&[collection])
            .inc_by(report.bytes);
        if report.files() > 0 {
            info!(collection, ?report, "garbage collected");
        }
    }
}
