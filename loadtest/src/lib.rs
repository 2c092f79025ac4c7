//! eddy-loadtest: the end-to-end demo, the load tools (producer and query
//! driver), a Tansu broker harness for tests, and the clients and
//! statistics they share.
//!
//! - [`produce`]: `eddy-loadtest produce`, a dataset published to a topic
//!   ([`encode`] → [`publish`] through [`kafka`]), offsets kept in [`offsets`].
//! - [`driver`]: `eddy-loadtest query`, closed and open loops over HTTP and
//!   Flight, recall, and [`freshness`] probes.
//! - [`broker`]: a throwaway Kafka-protocol broker (Tansu, SQLite storage) for
//!   the demo and the services' integration tests; [`secured_broker`]: the
//!   same behind SCRAM and TLS (`SASL_SSL`), as secured clusters run.
//! - [`process`]: free ports and child processes stopped on drop.
//! - [`dataset`]: base vectors, payloads, queries and ground truth from disk
//!   (the committed sample under `data/`, or the full dataset).
//! - [`http`] and [`flight`]: eddy-query clients (HTTP JSON, Arrow Flight),
//!   both taking [`options::SearchOptions`].
//! - [`pacing`], [`histogram`], [`stats`], [`progress`]: drift-free
//!   schedules, HDR latency histograms, percentiles, progress bars.
//! - [`demo`]: `eddy-loadtest demo`, the whole pipeline on one machine.

pub mod broker;
pub mod dataset;
pub mod demo;
pub mod driver;
pub mod encode;
pub mod flight;
pub mod freshness;
pub mod histogram;
pub mod http;
pub mod kafka;
pub mod offsets;
pub mod options;
pub mod pacing;
pub mod process;
pub mod produce;
pub mod progress;
pub mod publish;
pub mod s3_server;
pub mod secured_broker;
pub mod services;
pub mod stats;
pub mod suite;
