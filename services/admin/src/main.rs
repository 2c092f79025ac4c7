//! `eddy`: the operator's command. Parses flags, runs the subcommand,
//! prints its report and exits 0 (clean), 1 (problems found) or 2 (could
//! not check).

use std::process::ExitCode;

use clap::Parser as _;
use eddy_admin::{Cli, Outcome};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    if let Err(e) = eddy_config::refuse_secret_flags(&args) {
        eprintln!("eddy: {e}");
        return ExitCode::from(2);
    }
    let cli = Cli::parse_from(args);
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    match eddy_admin::run(&cli) {
        Ok(Outcome { text, clean }) => {
            println!("{text}");
            if clean {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Err(e) => {
            eprintln!("eddy: {:#}", anyhow::Error::from(e));
            ExitCode::from(2)
        }
    }
}
