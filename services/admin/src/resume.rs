//! `eddy partition resume`: the operator's way out of a stopped partition,
//! through [`eddy_ingest::resume_partition`] (the same call the tests use).

use crate::{Outcome, Result};

/// Flags of `eddy partition resume`.
#[derive(Debug, Clone, clap::Args)]
pub struct ResumeArgs {
    /// The segment store.
    #[command(flatten)]
    pub store: eddy_config::StoreArgs,
    /// The collection.
    #[arg(long)]
    pub collection: String,
    /// The partition to resume.
    #[arg(long)]
    pub partition: u32,
    /// The offset to read on from (for example the log start the stop
    /// report named).
    #[arg(long)]
    pub offset: i64,
    /// Who resumes it (recorded in the manifest).
    #[arg(long)]
    pub by: String,
    /// Why (recorded in the manifest).
    #[arg(long)]
    pub reason: String,
}

/// Publishes the resume and says which manifest version records it.
pub fn run(args: &ResumeArgs) -> Result<Outcome> {
    let store = args.store.open()?;
    let manifest = eddy_ingest::resume_partition(
        &store,
        &args.collection,
        args.partition,
        args.offset,
        &args.by,
        &args.reason,
    )?;
    let previous = manifest
        .resumes
        .get(&args.partition)
        .map_or(0, |r| r.previous_offset);
    Ok(Outcome {
        text: format!(
            "collection {} partition {}: resumed at offset {} (was {previous}), manifest version {}",
            args.collection, args.partition, args.offset, manifest.version
        ),
        clean: true,
    })
}
