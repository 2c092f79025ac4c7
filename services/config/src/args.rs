//! The flags both services share, flattened into each service's config.

use std::path::PathBuf;

use eddy_manifest::{Store, StoreLocation};
use eddy_model::CollectionDef;

use crate::error::{Error, Result};

/// Settings every service shares. `Debug` shows Kafka property names
/// only: their values may be credentials.
#[derive(Clone, clap::Args)]
pub struct CommonArgs {
    /// TOML config file (keys = flag names); flags and EDDY_* variables win.
    #[arg(long, env = "EDDY_CONFIG")]
    pub config: Option<PathBuf>,

    /// Where the segment store lives.
    #[command(flatten)]
    pub store: StoreArgs,

    /// Kafka bootstrap servers.
    #[arg(long, env = "EDDY_BROKERS", default_value = "127.0.0.1:9092")]
    pub brokers: String,

    /// Collections to declare at start-up (idempotent create), e.g.
    /// `name=docs,dim=384,metric=cosine,id=u64,field.section=keyword`
    /// (also `topic=`, `shards=`, and `format=json|protobuf|arrow`: the
    /// format of events without a `content-type` header). Several may be
    /// given; in the environment separate them with `;`.
    #[arg(long = "collection", env = "EDDY_COLLECTIONS", value_delimiter = ';')]
    pub collections: Vec<CollectionDef>,

    /// How often to look for new collections in the store (ms).
    #[arg(long, env = "EDDY_COLLECTION_POLL_MS", default_value_t = 1_000)]
    pub collection_poll_ms: u64,

    /// Kafka client properties and secrets.
    #[command(flatten)]
    pub kafka: KafkaArgs,

    /// Log format.
    #[arg(long, env = "EDDY_LOG_FORMAT", default_value = "text", value_parser = ["text", "json"])]
    pub log_format: String,
}

/// Where the segment store lives: the flags of every eddy program that
/// opens it (both services, `eddy fsck`, `eddy resume`).
#[derive(Clone, Debug, clap::Args)]
pub struct StoreArgs {
    /// Segment store: a directory (local or shared), or
    /// `s3://bucket/prefix` on any S3-compatible store that honours
    /// conditional writes (`If-None-Match: *`). Credentials, region and
    /// endpoint come from the standard `AWS_*` environment
    /// (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`,
    /// `AWS_ENDPOINT`, `AWS_ALLOW_HTTP`, …).
    #[arg(long = "store", env = "EDDY_STORE", default_value = "./eddy-data")]
    pub location: StoreLocation,

    /// For an `s3://` store: the local directory segment files are staged
    /// in before upload and fetched to for mapping (kept across restarts).
    #[arg(long, env = "EDDY_STORE_CACHE", default_value = "./eddy-cache")]
    pub store_cache: PathBuf,

    /// For an `s3://` store: the cache's size bound in MiB; past it, files
    /// safe in the bucket are removed, least recently used first (a
    /// segment still mapped stays readable until its last search ends).
    #[arg(long, env = "EDDY_STORE_CACHE_MIB", default_value_t = 65_536)]
    pub store_cache_mib: u64,

    /// For an `s3://` store: object-store settings that override the
    /// environment's (`key=value`, keys as `object_store` names them:
    /// `aws_endpoint`, `aws_region`, `aws_allow_http`,
    /// `aws_skip_signature`, …, and eddy's `retry_timeout_ms`,
    /// `max_retries` and `fetch_ranges`; `;`-separated in the environment). Secrets
    /// (`aws_secret_access_key`, `aws_session_token`) are refused here: they
    /// belong in the environment.
    #[arg(long = "store-option", env = "EDDY_STORE_OPTIONS", value_delimiter = ';', value_parser = KeyValueParser)]
    pub store_options: Vec<(String, String)>,

    /// For an `s3://` store: a file of secret object-store settings
    /// (`aws_secret_access_key=...` lines; `#` comments), read at start-up,
    /// for deployments that mount credentials as files rather than set
    /// `AWS_*` variables. Values are never logged.
    #[arg(long, env = "EDDY_STORE_SECRETS_FILE")]
    pub store_secrets_file: Option<PathBuf>,
}

impl StoreArgs {
    /// Opens the store (an object store proves it honours conditional
    /// writes first).
    pub fn open(&self) -> Result<Store> {
        if let Some((key, _)) = self.store_options.iter().find(|(k, _)| {
            let k = k.to_ascii_lowercase();
            is_secret_property(&k) || k.contains("token") || k.ends_with("_key")
        }) {
            return Err(Error::SecretStoreOption { key: key.clone() });
        }
        let secrets = match &self.store_secrets_file {
            Some(path) => read_secrets_file(path)?,
            None => Vec::new(),
        };
        let options: Vec<(&str, String)> = self
            .store_options
            .iter()
            .chain(&secrets)
            .map(|(k, v)| (k.as_str(), v.clone()))
            .collect();
        Ok(
            Store::open_location_with(&self.location, &self.store_cache, &options)?
                .with_cache_limit(self.store_cache_mib.saturating_mul(1 << 20)),
        )
    }
}

/// The Kafka client flags every eddy program that talks to Kafka takes
/// (both services, `eddy fsck --brokers`). `Debug` shows property names
/// only: their values may be credentials.
#[derive(Clone, Default, clap::Args)]
pub struct KafkaArgs {
    /// Extra librdkafka properties, passed through verbatim (`key=value`;
    /// `;`-separated in the environment). Values are never logged.
    #[arg(long = "kafka-property", env = "EDDY_KAFKA_PROPERTIES", value_delimiter = ';', value_parser = KeyValueParser, hide_env_values = true)]
    pub kafka_properties: Vec<(String, String)>,

    /// A file of secret librdkafka properties (`key=value` lines such as
    /// `sasl.password=...`; `#` comments), read once at start-up and added
    /// to `--kafka-property`: secrets stay off the command line, where any
    /// user of the machine can read them. Values are never logged.
    #[arg(long, env = "EDDY_KAFKA_SECRETS_FILE")]
    pub kafka_secrets_file: Option<PathBuf>,
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
        f.debug_struct("CommonArgs")
            .field("config", &self.config)
            .field("store", &self.store)
            .field("brokers", &self.brokers)
            .field("collections", &self.collections)
            .field("collection_poll_ms", &self.collection_poll_ms)
            .field("kafka", &self.kafka)
            .field("log_format", &self.log_format)
            .finish()
    }
}

impl std::fmt::Debug for KafkaArgs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let property_names: Vec<&str> = self
            .kafka_properties
            .iter()
            .map(|(k, _)| k.as_str())
            .collect();
        f.debug_struct("KafkaArgs")
            .field("kafka_properties", &property_names)
            .field("kafka_secrets_file", &self.kafka_secrets_file)
            .finish()
    }
}

/// Whether librdkafka property `key` holds a secret (a password, a
/// client secret, a private key or a JAAS line with credentials).
pub fn is_secret_property(key: &str) -> bool {
    let key = key.trim().to_ascii_lowercase();
    key.contains("password")
        || key.contains("secret")
        || key == "sasl.jaas.config"
        || key == "ssl.key.pem"
}

/// Refuses a secret Kafka property given as a `--kafka-property` flag in
/// `args` (the process's command line, readable by every user of the
/// machine): it belongs in `--kafka-secrets-file` or the environment
/// (`EDDY_KAFKA_PROPERTIES`). The error names the key, never the value.
pub fn refuse_secret_flags(args: &[String]) -> Result<()> {
    let mut values = Vec::new();
    let mut iter = args.iter();
    while let Some(arg) = iter.next() {
        if arg == "--kafka-property" {
            values.extend(iter.next().map(String::as_str));
        } else if let Some(v) = arg.strip_prefix("--kafka-property=") {
            values.push(v);
        }
    }
    for value in values {
        if let Ok((key, _)) = parse_key_value(value) {
            if is_secret_property(&key) {
                return Err(Error::SecretOnCommandLine { key });
            }
        }
    }
    Ok(())
}

impl KafkaArgs {
    /// Reads `--kafka-secrets-file` into the Kafka properties (call it
    /// once, at start-up). Errors name the file and line, never a value; a file
    /// others may read is warned about.
    pub fn load_secrets(&mut self) -> Result<()> {
        if let Some(path) = &self.kafka_secrets_file {
            let secrets = read_secrets_file(path)?;
            self.kafka_properties.extend(secrets);
        }
        Ok(())
    }

    /// The librdkafka properties to pass through, without empty entries.
    pub fn client_properties(&self) -> Vec<(String, String)> {
        self.kafka_properties
            .iter()
            .filter(|(k, _)| !k.is_empty())
            .cloned()
            .collect()
    }
}

/// Reads a secrets file: `key=value` lines, `#` comments. Errors name the
/// file and line, never a value; a file others may read is warned about.
fn read_secrets_file(path: &std::path::Path) -> Result<Vec<(String, String)>> {
    let refuse = |line: usize, reason: &'static str| Error::SecretsFile {
        path: path.to_owned(),
        line,
        reason,
    };
    let text = std::fs::read_to_string(path).map_err(|source| Error::ReadFile {
        path: path.to_owned(),
        source,
    })?;
    warn_if_shared(path);
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (key, value) =
            parse_key_value(line).map_err(|_| refuse(i + 1, "expected key=value"))?;
        if key.is_empty() {
            return Err(refuse(i + 1, "empty key"));
        }
        out.push((key, value.trim().to_owned()));
    }
    Ok(out)
}

/// Warns when the secrets file at `path` may be read by other users.
fn warn_if_shared(path: &std::path::Path) {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        if let Ok(meta) = std::fs::metadata(path) {
            if meta.permissions().mode() & 0o077 != 0 {
                tracing::warn!(path = %path.display(), "a secrets file may be read by other users: chmod 600 it");
            }
        }
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
            cli.common.kafka.client_properties(),
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
        assert_eq!(
            cli.common.store.location,
            StoreLocation::Dir(PathBuf::from("./eddy-data"))
        );
        assert_eq!(cli.common.store.store_cache, PathBuf::from("./eddy-cache"));
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

    #[test]
    fn secrets_come_from_the_file_and_never_show() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("kafka.secrets");
        std::fs::write(
            &path,
            "# SCRAM credentials\nsasl.password = hunter2-secret\n\nssl.key.password=k3y\n",
        )
        .expect("write");
        let mut cli = Cli::parse_from([
            "x",
            "--kafka-property",
            "sasl.username=alice",
            "--kafka-secrets-file",
            path.to_str().expect("utf-8"),
        ]);
        cli.common.kafka.load_secrets().expect("loaded");
        let properties = cli.common.kafka.client_properties();
        assert!(properties.contains(&("sasl.password".into(), "hunter2-secret".into())));
        assert!(properties.contains(&("ssl.key.password".into(), "k3y".into())));
        assert!(properties.contains(&("sasl.username".into(), "alice".into())));
        let shown = format!("{:?}", cli.common);
        assert!(
            !shown.contains("hunter2") && !shown.contains("k3y"),
            "{shown}"
        );

        std::fs::write(&path, "sasl.password hunter2-secret\n").expect("write");
        let mut cli = Cli::parse_from(["x", "--kafka-secrets-file", path.to_str().expect("utf-8")]);
        let err = cli
            .common
            .kafka
            .load_secrets()
            .expect_err("malformed")
            .to_string();
        assert!(err.contains("line 1") && !err.contains("hunter2"), "{err}");
    }

    #[test]
    fn secret_properties_are_refused_on_the_command_line_only() {
        for args in [
            vec!["x", "--kafka-property", "sasl.password=hunter2"],
            vec!["x", "--kafka-property=sasl.jaas.config=x"],
            vec!["x", "--kafka-property", " SSL.Key.Password=p"],
        ] {
            let args: Vec<String> = args.into_iter().map(str::to_owned).collect();
            let err = refuse_secret_flags(&args)
                .expect_err("secret flag")
                .to_string();
            assert!(err.contains("--kafka-secrets-file"), "{err}");
            assert!(!err.contains("hunter2"), "{err}");
        }
        let fine: Vec<String> = ["x", "--kafka-property", "sasl.username=alice"]
            .into_iter()
            .map(str::to_owned)
            .collect();
        refuse_secret_flags(&fine).expect("not a secret");
    }
}
