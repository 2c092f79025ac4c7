//! eddy-query binary: parse config, start tracing, serve until Ctrl-C/SIGTERM.

use clap::Parser as _;
use eddy_query::QueryConfig;

/// jemalloc, not glibc's malloc: glibc keeps what the tail, decoding and
/// answer buffers free in per-thread arenas (~300 MiB held at idle after a
/// soak, on top of the served segments), where jemalloc's background
/// thread returns unused pages to the system after a decay.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    eddy_config::apply_config_file(&args)?;
    eddy_config::refuse_secret_flags(&args)?;
    let config = QueryConfig::parse_from(args);
    eddy_config::init_tracing(&config.common.log_format);
    let runtime = eddy_config::runtime(2)?;
    runtime.block_on(async move {
        let query = eddy_query::start(config).await?;
        let (http, grpc) = if query.tls() {
            ("https", "grpc+tls")
        } else {
            ("http", "grpc")
        };
        println!(
            "eddy-query serving HTTP on {http}://{} and Arrow Flight on {grpc}://{}",
            query.http_addr(),
            query.flight_addr()
        );
        eddy_config::shutdown_signal().await;
        tracing::info!("shutting down");
        query.shutdown().await;
        Ok(())
    })
}
