//! eddy-loadtest: the end-to-end demo, a Tansu broker harness for tests, and
//! the clients and statistics the load runs use.
//!
//! - [`broker`]: a throwaway Kafka-protocol broker (Tansu, SQLite storage) for
//!   the demo and the services' integration tests.
//! - [`process`]: free ports and child processes stopped on drop.
//! - [`dataset`]: base vectors, payloads, queries and ground truth from disk
//!   (the committed sample under `data/`, or the full dataset).
//! - [`http`] and [`flight`]: eddy-query clients (HTTP JSON, Arrow Flight).
//! - [`stats`]: percentiles and recall averages for reports.
//! - [`demo`]: `eddy-loadtest demo`, the whole pipeline on one machine.

pub mod broker;
pub mod dataset;
pub mod demo;
pub mod flight;
pub mod http;
pub mod process;
pub mod stats;
