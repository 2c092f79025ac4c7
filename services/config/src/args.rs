//! The flags both services share, flattened into each service's config.

use std::path::PathBuf;

use eddy_model::CollectionDef;

/// Settings every service shares. `Debug` shows Kafka property names
/// only: their values may be credentials.
#[derive(Clone, clap::Args)]
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
    #[arg(long = "kafka-property", env = "EDDY_KAFKA_PROPERTIES", value_delimiter = ';', value_parser = KeyValueParser, hide_env_values = true)]
    pub kafka_properties: Vec<(String, String)>,

    /// Log format.
    #[arg(long, env = "EDDY_LOG_FORMAT", default_value = "text", value_parser = ["text", "json"])]
    pub log_format: String,
}

/// Parses `key=value` like [`parse_key_value`], with an error that does not
/// repeat the value (clap's own message would).
#[derive(Clone)]
struct KeyValueParser;

impl clap::builder::TypedValueParser for KeyValueParser {
    type Value = (String, String);

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        _arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<Self::Value, clap::Error> {
        let refuse = |message: String| {
            clap::Error::raw(
                clap::error::ErrorKind::ValueValidation,
                format!("--kafka-property: {message}\n"),
            )
            .with_cmd(cmd)
        };
        let text = value
            .to_str()
            .ok_or_else(|| refuse("not UTF-8".to_owned()))?;
        parse_key_value(text).map_err(refuse)
    }
}

fn parse_key_value(s: &str) -> Result<(String, String), String> {
    // An empty entry (`EDDY_KAFKA_PROPERTIES=""`, a trailing `;`) sets nothing.
    if s.trim().is_empty() {
        return Ok((String::new(), String::new()));
    }
    // The error does not repeat the entry: it may hold a password.
    let (k, v) = s.split_once('=').ok_or_else(|| {
        "expected key=value (the entry is not shown: it may hold a secret)".to_owned()
    })?;
    Ok((k.trim().to_owned(), v.to_owned()))
}

impl std::fmt::Debug for CommonArgs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let property_names: Vec<&str> = self
            .kafka_properties
            .iter()
            .map(|(k, _)| k.as_str())
            .collect();
        f.debug_struct("CommonArgs")
            .field("config", &self.config)
            .field("store", &self.store)
            .field("brokers", &self.brokers)
            .field("collections", &self.collections)
            .field("collection_poll_ms", &self.collection_poll_ms)
            .field("kafka_properties", &property_names)
            .field("log_format", &self.log_format)
            .finish()
    }
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
    fn kafka_secrets_stay_out_of_debug_help_and_errors() {
        let cli = Cli::parse_from(["x", "--kafka-property", "sasl.password=hunter2-secret"]);
        let shown = format!("{:?}", cli.common);
        assert!(
            shown.contains("sasl.password") && !shown.contains("hunter2"),
            "{shown}"
        );
        let err = Cli::try_parse_from(["x", "--kafka-property", "hunter2-secret"])
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(!err.contains("hunter2"), "{err}");
        let command = <Cli as clap::CommandFactory>::command();
        let arg = command
            .get_arguments()
            .find(|a| a.get_id() == "kafka_properties");
        assert!(arg.is_some_and(|a| a.is_hide_env_values_set()));
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
