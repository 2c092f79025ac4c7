//! `eddy-loadtest`: the end-to-end demo and load tools (see the library docs).

use clap::{Parser, Subcommand};
use eddy_loadtest::demo::{self, DemoArgs};
use eddy_loadtest::driver::{self, QueryArgs};
use eddy_loadtest::produce::{self, ProduceArgs};
use eddy_loadtest::suite::{self, SuiteArgs};

/// eddy's demo and load generator.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run broker, ingest and query locally, publish a dataset, measure
    /// freshness, recall and latency over HTTP and Arrow Flight.
    Demo(DemoArgs),
    /// Publish a dataset to a topic (JSON, protobuf or Arrow) at a fixed
    /// rate or flat out; report rates, acknowledgement latency and offsets.
    Produce(ProduceArgs),
    /// Load eddy-query (HTTP, Flight DoGet/DoExchange) in a closed or open
    /// loop; report latency, throughput, recall and freshness.
    Query(Box<QueryArgs>),
    /// Run the benchmark suite (ingest, served workloads, mixed read/write,
    /// peers in the same run) and write its report (Markdown, HTML, JSON).
    Suite(Box<SuiteArgs>),
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    match Cli::parse().command {
        Command::Demo(args) => demo::run(args).await,
        Command::Produce(args) => produce::run(args).await,
        Command::Query(args) => driver::run(*args).await,
        Command::Suite(args) => suite::run(*args).await,
    }
}
