//! eddy-admin: the operator's command `eddy` and the checks behind it.
//!
//! - [`fsck`]: a collection's store checked over its own files, and with
//!   broker access every offset below the manifest's `next_offset`
//!   accounted for ([`offsets`] reads the topic and its dead letters);
//! - [`report`]: the readable and JSON forms of what `fsck` found;
//! - [`resume`]: `eddy partition resume`, the operator's way out of a
//!   stopped partition (the one command here that writes: a manifest
//!   version recording who resumed it, why and from which offset).
//!
//! Everything else only reads the store and the topic.

mod error;
pub mod fsck;
pub mod offsets;
pub mod report;
pub mod resume;

pub use error::{Error, Result};
pub use fsck::{fsck_collection, CollectionFsck};

/// `eddy`'s command line.
#[derive(Debug, clap::Parser)]
#[command(name = "eddy", version, about = "eddy's operator command")]
pub struct Cli {
    /// The subcommand.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Checks collections over their stored files and, with `--brokers`,
    /// accounts for every offset of their topics.
    Fsck(FsckArgs),
    /// Operations on one partition of a collection.
    #[command(subcommand)]
    Partition(PartitionCommand),
}

/// `eddy partition ...`.
#[derive(Debug, clap::Subcommand)]
pub enum PartitionCommand {
    /// Restarts a stopped partition (its offset left the log, or a gap)
    /// from `--offset`; events between its old offset and `--offset` are
    /// not indexed. Recorded in the manifest with `--by` and `--reason`.
    Resume(resume::ResumeArgs),
}

/// Flags of `eddy fsck`.
#[derive(Debug, Clone, clap::Args)]
pub struct FsckArgs {
    /// The segment store.
    #[command(flatten)]
    pub store: eddy_config::StoreArgs,
    /// Check only this collection (default: every collection).
    #[arg(long)]
    pub collection: Option<String>,
    /// Kafka bootstrap servers; with them every offset is accounted for.
    #[arg(long, env = "EDDY_BROKERS")]
    pub brokers: Option<String>,
    /// Kafka client properties and secrets (a secured cluster), as the
    /// services take them.
    #[command(flatten)]
    pub kafka: eddy_config::KafkaArgs,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

/// What a subcommand prints, and whether everything was in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// The report, readable or JSON.
    pub text: String,
    /// Whether nothing is wrong (exit code 0).
    pub clean: bool,
}

/// Runs the command `cli` names.
pub fn run(cli: &Cli) -> Result<Outcome> {
    match &cli.command {
        Command::Fsck(args) => fsck::run(args),
        Command::Partition(PartitionCommand::Resume(args)) => resume::run(args),
    }
}
