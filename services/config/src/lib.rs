//! Configuration plumbing shared by the eddy services.
//!
//! Settings come from clap flags, each also readable from an `EDDY_*`
//! environment variable, and from an optional TOML file (`--config` or
//! `EDDY_CONFIG`) whose keys are the flags' long names with `_` for `-`.
//! Precedence: flag > environment > file > default. The file is applied by
//! [`apply_config_file`], which sets the environment variables the file names
//! unless they are already set, before clap parses.

pub mod kafka;
pub mod metrics;

use std::path::PathBuf;

use anyhow::Context as _;
use eddy_model::CollectionDef;

/// Settings every service shares.
#[derive(Debug, Clone, clap::Args)]
pub struct CommonArgs {
    /// Segment store directory (collections, manifests, segments).
    #[arg(long, env = "EDDY_STORE", default_value = "./eddy-data")]
    pub store: PathBuf,

    /// Kafka bootstrap servers.
    #[arg(long, env = "EDDY_BROKERS", default_value = "127.0.0.1:9092")]
    pub brokers: String,

    /// Collections to declare at start-up (idempotent create), e.g.
    /// `name=docs,dim=384,metric=cosine,id=u64,field.section=keyword`.
    /// Several may be given; in the environment separate them with `;`.
    #[arg(long = "collection", env = "EDDY_COLLECTIONS", value_delimiter = ';')]
    pub collections: Vec<CollectionDef>,

    /// Extra librdkafka properties, passed through verbatim (`key=value`;
    /// `;`-separated in the environment). Values are never logged.
    #[arg(long = "kafka-property", env = "EDDY_KAFKA_PROPERTIES", value_delimiter = ';', value_parser = parse_key_value)]
    pub kafka_properties: Vec<(String, String)>,

    /// Log format.
    #[arg(long, env = "EDDY_LOG_FORMAT", default_value = "text", value_parser = ["text", "json"])]
    pub log_format: String,
}

fn parse_key_value(s: &str) -> Result<(String, String), String> {
    // An empty entry (`EDDY_KAFKA_PROPERTIES=""`, a trailing `;`) sets nothing.
    if s.trim().is_empty() {
        return Ok((String::new(), String::new()));
    }
    let (k, v) = s
        .split_once('=')
        .ok_or_else(|| format!("expected key=value, got {s:?}"))?;
    Ok((k.trim().to_owned(), v.to_owned()))
}

impl CommonArgs {
    /// The librdkafka properties to pass through, without empty entries.
    pub fn kafka_client_properties(&self) -> Vec<(String, String)> {
        self.kafka_properties
            .iter()
            .filter(|(k, _)| !k.is_empty())
            .cloned()
            .collect()
    }
}

/// Reads the TOML file named by `--config FILE` / `--config=FILE` in `args`
/// or by `EDDY_CONFIG`, and exports each of its keys as `EDDY_<KEY>` unless
/// that variable is already set. Arrays become `;`-separated lists; the
/// `[kafka]` table becomes `EDDY_KAFKA_PROPERTIES`.
///
/// Call it before any other thread starts (it sets environment variables).
pub fn apply_config_file(args: &[String]) -> anyhow::Result<()> {
    let from_args = args.iter().enumerate().find_map(|(i, a)| {
        if a == "--config" {
            args.get(i + 1).cloned()
        } else {
            a.strip_prefix("--config=").map(str::to_owned)
        }
    });
    let Some(path) = from_args.or_else(|| std::env::var("EDDY_CONFIG").ok()) else {
        return Ok(());
    };
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading config file {path}"))?;
    for (key, value) in
        env_from_toml(&text).with_context(|| format!("parsing config file {path}"))?
    {
        if std::env::var_os(&key).is_none() {
            std::env::set_var(key, value);
        }
    }
    Ok(())
}

/// The environment variables a TOML config file stands for.
pub fn env_from_toml(text: &str) -> anyhow::Result<Vec<(String, String)>> {
    let table: toml::Table = text.parse()?;
    let mut out = Vec::new();
    for (key, value) in table {
        let var = if key == "collections" {
            "EDDY_COLLECTIONS".to_owned()
        } else {
            format!("EDDY_{}", key.replace('-', "_").to_ascii_uppercase())
        };
        let text = match value {
            toml::Value::String(s) => s,
            toml::Value::Table(t) if key == "kafka" => {
                let pairs: Vec<String> = t
                    .iter()
                    .map(|(k, v)| format!("{k}={}", scalar(v)))
                    .collect();
                out.push(("EDDY_KAFKA_PROPERTIES".to_owned(), pairs.join(";")));
                continue;
            }
            toml::Value::Array(items) => items.iter().map(scalar).collect::<Vec<_>>().join(";"),
            other => scalar(&other),
        };
        out.push((var, text));
    }
    Ok(out)
}

fn scalar(v: &toml::Value) -> String {
    match v {
        toml::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Starts `tracing` output (`RUST_LOG` filters, default `info`).
pub fn init_tracing(format: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = if format == "json" {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
}

/// The tokio runtime both services run on: few worker threads, because CPU
/// work goes to the rayon pool and librdkafka has threads of its own, and the
/// machine is small (DESIGN.md, "Threads").
pub fn runtime(worker_threads: usize) -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(worker_threads.max(1))
        .enable_all()
        .build()
        .context("building the tokio runtime")
}

/// Resolves on Ctrl-C or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(e) = tokio::signal::ctrl_c().await {
            tracing::warn!(error = %e, "installing the Ctrl-C handler");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn toml_maps_to_env() {
        let env = env_from_toml(
            r#"
store = "/data"
seal-rows = 1000
collections = ["name=a,dim=3", "name=b,dim=4"]
[kafka]
"security.protocol" = "SSL"
"#,
        )
        .expect("valid toml");
        assert!(env.contains(&("EDDY_STORE".into(), "/data".into())));
        assert!(env.contains(&("EDDY_SEAL_ROWS".into(), "1000".into())));
        assert!(env.contains(&(
            "EDDY_COLLECTIONS".into(),
            "name=a,dim=3;name=b,dim=4".into()
        )));
        assert!(env.contains(&(
            "EDDY_KAFKA_PROPERTIES".into(),
            "security.protocol=SSL".into()
        )));
    }

    #[test]
    fn empty_kafka_property_entries_are_ignored() {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            common: CommonArgs,
        }
        use clap::Parser as _;
        let cli = Cli::parse_from(["x", "--kafka-property", "", "--kafka-property", "a=b"]);
        assert_eq!(
            cli.common.kafka_client_properties(),
            vec![("a".to_owned(), "b".to_owned())]
        );
        assert!(Cli::try_parse_from(["x", "--kafka-property", "novalue"]).is_err());
    }
}
