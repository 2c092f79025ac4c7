//! eddy-ingest binary: parse config, start tracing, run until Ctrl-C/SIGTERM.

use clap::Parser as _;
use eddy_ingest::IngestConfig;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    eddy_config::apply_config_file(&args)?;
    eddy_config::refuse_secret_flags(&args)?;
    let config = IngestConfig::parse_from(args);
    eddy_config::init_tracing(&config.common.log_format);
    #[cfg(feature = "failpoints")]
    eddy_ingest::failpoints::arm_from_env().map_err(anyhow::Error::msg)?;
    let runtime = eddy_config::runtime(2)?;
    runtime.block_on(async move {
        let ingest = eddy_ingest::start(config).await?;
        eddy_config::shutdown_signal().await;
        tracing::info!("shutting down");
        ingest.shutdown().await;
        Ok(())
    })
}
