//! eddy-loadtest's integration tests, one binary: the broker harness, and
//! the producer and query driver against Tansu, eddy-ingest and eddy-query.
//!
//! Needs the `tansu` binary (see `eddy_loadtest::broker::TANSU_INSTALL`).

mod broker;
mod cluster;
mod load;
mod suite;

/// The tests take turns: each starts its own Tansu, and two brokers under
/// load on a 2-core machine starve each other's consumer groups.
pub static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
