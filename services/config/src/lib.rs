//! Configuration plumbing shared by the eddy services.
//!
//! Settings come from clap flags, each also readable from an `EDDY_*`
//! environment variable, and from an optional TOML file (`--config` or
//! `EDDY_CONFIG`) whose keys are the flags' long names with `_` for `-`.
//! Precedence: flag > environment > file > default. The file is applied by
//! [`apply_config_file`], which sets the environment variables the file names
//! unless they are already set, before clap parses.
//!
//! - [`CommonArgs`]: the flags both services share;
//! - [`apply_config_file`] / [`env_from_toml`]: the TOML file;
//! - [`init_tracing`], [`runtime`], [`shutdown_signal`]: process set-up;
//! - [`metrics`]: registering metrics and encoding `/metrics`.

mod args;
mod error;
mod file;
pub mod metrics;
mod process;

pub use args::{is_secret_property, refuse_secret_flags, CommonArgs, KafkaArgs, StoreArgs};
pub use error::{Error, Result};
pub use file::{apply_config_file, env_from_toml};
pub use process::{init_tracing, runtime, shutdown_signal};
