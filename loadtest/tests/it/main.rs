//! eddy-loadtest's integration tests, one binary: the broker harness, and
//! the producer and query driver against Tansu, eddy-ingest and eddy-query.
//!
//! Needs the `tansu` binary (see `eddy_loadtest::broker::TANSU_INSTALL`).

mod broker;
mod cluster;
mod load;
