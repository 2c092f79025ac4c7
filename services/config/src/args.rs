//! The flags both services share, flattened into each service's config.

use std::path::PathBuf;

use eddy_model::CollectionDef;

/// Settings every service shares.
#[derive(Debug, Clone, clap::Args)]
pub struct CommonArgs {
    /// TOML config file (keys = flag names); flags and EDDY_* variables win.
    #[arg(long, env = "EDDY_CONFIG")]
    pub config: Option<PathBuf>,

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

    /// How often to look for new collections in the store (ms).
    #[arg(long, env = "EDDY_COLLECTION_POLL_MS", default_value_t = 1_000)]
    pub collection_poll_ms: u64,

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

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use super::*;

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        common: CommonArgs,
    }

    #[test]
    fn empty_kafka_property_entries_are_ignored() {
        let cli = Cli::parse_from(["x", "--kafka-property", "", "--kafka-property", "a=b"]);
        assert_eq!(
            cli.common.kafka_client_properties(),
            vec![("a".to_owned(), "b".to_owned())]
        );
        assert!(Cli::try_parse_from(["x", "--kafka-property", "novalue"]).is_err());
    }

    #[test]
    fn shared_flags_keep_their_names_and_defaults() {
        let cli = Cli::parse_from(["x"]);
        assert_eq!(cli.common.store, PathBuf::from("./eddy-data"));
        assert_eq!(cli.common.brokers, "127.0.0.1:9092");
        assert_eq!(cli.common.collection_poll_ms, 1_000);
        assert_eq!(cli.common.log_format, "text");
        assert!(cli.common.config.is_none());
        let cli = Cli::parse_from([
            "x",
            "--config",
            "eddy.toml",
            "--collection-poll-ms",
            "50",
            "--collection",
            "name=a,dim=3",
        ]);
        assert_eq!(cli.common.config, Some(PathBuf::from("eddy.toml")));
        assert_eq!(cli.common.collection_poll_ms, 50);
        assert_eq!(cli.common.collections.len(), 1);
    }
}
