//! Test builds only (feature `failpoints`): arms the named crash points
//! from the environment, so a test can make a child process die exactly
//! there. `EDDY_CRASH_AT=name[@hit][,name[@hit]...]` makes the process exit
//! at once — no unwinding, no seal, no offset commit, as a SIGKILL would —
//! at the `hit`-th pass (default 1) through fail point `name`. The points:
//!
//! | point | where |
//! |---|---|
//! | `segment::before_fsync` | a segment file written, not yet fsynced (`eddy_segment`) |
//! | `seal::before_publish` | the seal's segment fsynced, its manifest not published |
//! | `seal::before_commit` | the seal's manifest published, the offsets not committed |
//! | `merge::before_publish` | a merged segment written, not published |
//! | `index::before_publish` | an index file written, not published |
//! | `gc::before_delete` | garbage collection between listing and deleting (`eddy_manifest`) |
//! | `maintenance::pass` | the start of a maintenance pass |

use std::sync::atomic::{AtomicUsize, Ordering};

/// The variable naming the crash points.
pub const CRASH_AT_ENV: &str = "EDDY_CRASH_AT";

/// Exit status of a process that died at a crash point.
pub const CRASH_EXIT_CODE: i32 = 86;

/// Arms every crash point `EDDY_CRASH_AT` names (none when unset).
///
/// # Errors
/// A malformed entry, naming it.
pub fn arm_from_env() -> Result<(), String> {
    let Ok(spec) = std::env::var(CRASH_AT_ENV) else {
        return Ok(());
    };
    for entry in spec.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let (name, hit) = match entry.split_once('@') {
            Some((name, hit)) => (
                name,
                hit.parse::<usize>()
                    .map_err(|e| format!("{CRASH_AT_ENV}: {entry}: {e}"))?,
            ),
            None => (entry, 1),
        };
        let hits = AtomicUsize::new(0);
        let point = name.to_owned();
        fail::cfg_callback(name, move || {
            if hits.fetch_add(1, Ordering::SeqCst) + 1 == hit {
                tracing::warn!(point = %point, hit, "crash point reached: exiting");
                std::process::exit(CRASH_EXIT_CODE);
            }
        })?;
    }
    Ok(())
}
