//! The librdkafka configuration of every client eddy creates, built in one
//! place from the user's brokers and pass-through properties.
//!
//! Precedence, lowest first: `bootstrap.servers` from `--brokers`, the
//! role's defaults, the user's `--kafka-property` entries, then the settings
//! the role enforces. The user's properties (security, SASL, TLS, tuning)
//! therefore pass through untouched and win over eddy's defaults. The
//! offset-safety settings ([`PROTECTED_KEYS`]) are refused outright: a user
//! property naming one is a start-up error, never a silent override.

use rdkafka::ClientConfig;

/// Consumer settings every eddy consumer enforces: eddy decides where to
/// read (from its manifest or snapshot), so offsets are never committed or
/// stored automatically, a fetch outside the log is an error (never a
/// silent jump to either end), only committed transactions are read, and
/// partition ends are not reported as events.
pub const MANUAL_OFFSETS: [(&str, &str); 5] = [
    ("enable.auto.commit", "false"),
    ("enable.auto.offset.store", "false"),
    ("auto.offset.reset", "error"),
    ("isolation.level", "read_committed"),
    ("enable.partition.eof", "false"),
];

/// Kafka properties a user may not set: each decides which offsets eddy
/// reads or who commits them, and eddy's exactly-once promise rests on
/// them (`group.instance.id` is eddy's static member id).
pub const PROTECTED_KEYS: [&str; 5] = [
    "auto.offset.reset",
    "enable.auto.commit",
    "enable.auto.offset.store",
    "group.instance.id",
    "isolation.level",
];

/// A user property eddy refuses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "kafka property {key:?} cannot be set: eddy manages it to keep offsets safe \
     (protected: {protected})",
    protected = PROTECTED_KEYS.join(", ")
)]
pub struct ProtectedProperty {
    /// The refused key, as the user spelled it.
    pub key: String,
}

/// Group-membership timings of ingest's consumer: a dead member is noticed
/// within seconds, and a seal inside the poll loop has a minute. Its
/// fetches wait at most 100 ms (librdkafka's default is 500 ms), so a
/// partition that was idle is read again soon after an event arrives. (The
/// offset watch reads log ranges on connections of its own,
/// [`crate::LogRanges`], so a longer wait a user sets costs no timeouts.)
const INGEST_CONSUMER_DEFAULTS: [(&str, &str); 4] = [
    ("session.timeout.ms", "10000"),
    ("heartbeat.interval.ms", "1000"),
    ("max.poll.interval.ms", "60000"),
    ("fetch.wait.max.ms", "100"),
];

/// Fetch settings of the query tail: a fetch returns after at most 10 ms,
/// so a produced event is searchable soon after the broker has it. Kafka
/// answers a fetch as soon as data arrives, whatever the wait. Tansu 0.6
/// (the test broker) reads the log when the fetch arrives and then sleeps
/// out the rest of the wait before it answers, whatever it found
/// (`tansu-storage` 0.6.0, `service/fetch.rs`, `FetchService::fetch`), so
/// an event appended during a fetch waits for the next one: broker →
/// searchable is about the wait plus half a fetch cycle. Measured on Tansu
/// (debian-minilm, 2 cores), p50: 17–18 ms at 10 ms, 116–170 ms at
/// 100 ms, 14–15 ms at 2 ms — which doubles the broker's CPU, as each
/// fetch costs Tansu ~4 ms.
const TAIL_FETCH: [(&str, &str); 2] = [
    ("fetch.wait.max.ms", "10"),
    ("fetch.error.backoff.ms", "50"),
];

/// Settings the dead-letter producer enforces: a letter counts as written
/// only once every in-sync replica has it, exactly once.
const DEAD_LETTER_DELIVERY: [(&str, &str); 3] = [
    ("acks", "all"),
    ("enable.idempotence", "true"),
    ("linger.ms", "5"),
];

/// The dead-letter producer's request size limit: the largest accepted
/// event plus room for its key and headers, so any rejected event fits
/// (librdkafka's default, 1 MB, is far below the 16 MiB events eddy
/// accepts). A user may set a lower `message.max.bytes` to match the
/// broker; a letter over either limit is sent as a reference instead.
pub const DEAD_LETTER_MAX_BYTES: usize = eddy_event::MAX_EVENT_BYTES + (1 << 20);

/// How often the dead-letter producer refreshes its metadata (librdkafka's
/// default is 5 minutes): once it has given a missing dead-letter topic up,
/// only a refresh tells it the topic now exists, and consumption stays
/// paused until then.
const DEAD_LETTER_METADATA_REFRESH_MS: &str = "5000";

/// How long the dead-letter producer keeps retrying one letter before it
/// reports it failed (the worker then re-queues it and stays paused).
const DEAD_LETTER_TIMEOUT_MS: &str = "30000";

/// The user's Kafka connection settings, from which every client's
/// configuration is built.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KafkaSettings {
    brokers: String,
    properties: Vec<(String, String)>,
}

impl KafkaSettings {
    /// Settings for `brokers` (`bootstrap.servers`) with the user's
    /// pass-through librdkafka `properties` (entries with an empty key are
    /// dropped). A property in [`PROTECTED_KEYS`] (matched after trimming,
    /// case-insensitively) is refused. Property values are never logged.
    pub fn new(
        brokers: impl Into<String>,
        properties: Vec<(String, String)>,
    ) -> Result<Self, ProtectedProperty> {
        let properties: Vec<(String, String)> = properties
            .into_iter()
            .filter(|(key, _)| !key.trim().is_empty())
            .collect();
        if let Some((key, _)) = properties.iter().find(|(key, _)| {
            PROTECTED_KEYS
                .iter()
                .any(|p| key.trim().eq_ignore_ascii_case(p))
        }) {
            return Err(ProtectedProperty { key: key.clone() });
        }
        Ok(Self {
            brokers: brokers.into(),
            properties,
        })
    }

    /// The bootstrap servers.
    pub fn brokers(&self) -> &str {
        &self.brokers
    }

    /// A client configuration: `bootstrap.servers`, then `defaults`, then the
    /// user's properties, then `enforced` (each later one wins).
    pub fn client_config(
        &self,
        defaults: &[(&str, &str)],
        enforced: &[(&str, &str)],
    ) -> ClientConfig {
        let mut config = ClientConfig::new();
        config.set("bootstrap.servers", &self.brokers);
        for (key, value) in defaults {
            config.set(*key, *value);
        }
        for (key, value) in &self.properties {
            config.set(key, value);
        }
        for (key, value) in enforced {
            config.set(*key, *value);
        }
        config
    }

    /// The admin client (creating topics): the user's settings alone.
    pub fn admin(&self) -> ClientConfig {
        self.client_config(&[], &[])
    }

    /// Ingest's consumer: a member of consumer group `group_id` with the
    /// static member id `instance_id` (`group.instance.id`), so a restarted
    /// process takes its partitions back at once.
    pub fn ingest_consumer(&self, group_id: &str, instance_id: &str) -> ClientConfig {
        let mut defaults = vec![("group.id", group_id)];
        defaults.extend(INGEST_CONSUMER_DEFAULTS);
        let mut enforced = MANUAL_OFFSETS.to_vec();
        enforced.push(("group.instance.id", instance_id));
        self.client_config(&defaults, &enforced)
    }

    /// The query tail's consumer: it assigns partitions itself (the group id
    /// `group_id` only names it to the broker) and fetches with a short wait.
    pub fn tail_consumer(&self, group_id: &str) -> ClientConfig {
        let mut defaults = vec![("group.id", group_id)];
        defaults.extend(TAIL_FETCH);
        self.client_config(&defaults, &MANUAL_OFFSETS)
    }

    /// The client that reads partitions' log ranges ([`crate::LogRanges`]):
    /// the user's connection settings alone; it joins no group and fetches
    /// nothing.
    pub fn log_range_reader(&self) -> ClientConfig {
        self.client_config(&[], &[])
    }

    /// The dead-letter producer: acknowledged by every in-sync replica,
    /// idempotent (these settings override the user's), with a request
    /// limit that fits the largest accepted event unless the user set a
    /// lower one ([`DEAD_LETTER_MAX_BYTES`]).
    pub fn dead_letter_producer(&self) -> ClientConfig {
        let max_bytes = DEAD_LETTER_MAX_BYTES.to_string();
        let defaults = [
            ("message.max.bytes", max_bytes.as_str()),
            ("message.timeout.ms", DEAD_LETTER_TIMEOUT_MS),
            (
                "topic.metadata.refresh.interval.ms",
                DEAD_LETTER_METADATA_REFRESH_MS,
            ),
        ];
        self.client_config(&defaults, &DEAD_LETTER_DELIVERY)
    }

    /// The producer's effective `message.max.bytes` for dead letters.
    pub fn dead_letter_max_bytes(&self) -> usize {
        self.dead_letter_producer()
            .get("message.max.bytes")
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(DEAD_LETTER_MAX_BYTES)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn try_user(properties: &[(&str, &str)]) -> Result<KafkaSettings, ProtectedProperty> {
        KafkaSettings::new(
            "b:9092",
            properties
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        )
    }

    fn user(properties: &[(&str, &str)]) -> KafkaSettings {
        try_user(properties).expect("no protected property")
    }

    #[test]
    fn user_properties_pass_through_and_win_over_defaults() {
        let settings = user(&[
            ("security.protocol", "SSL"),
            ("session.timeout.ms", "20000"),
            ("", "dropped"),
        ]);
        let consumer = settings.ingest_consumer("eddy-ingest.docs", "eddy-ingest-h");
        assert_eq!(consumer.get("bootstrap.servers"), Some("b:9092"));
        assert_eq!(consumer.get("security.protocol"), Some("SSL"));
        assert_eq!(consumer.get("session.timeout.ms"), Some("20000"));
        assert_eq!(consumer.get("auto.offset.reset"), Some("error"));
        assert_eq!(consumer.get("group.id"), Some("eddy-ingest.docs"));
        assert_eq!(consumer.get("group.instance.id"), Some("eddy-ingest-h"));
        assert_eq!(consumer.get("enable.auto.commit"), Some("false"));
        assert_eq!(consumer.get(""), None);
    }

    #[test]
    fn offset_safety_properties_are_refused_naming_the_key() {
        for key in PROTECTED_KEYS {
            let err = try_user(&[("client.id", "x"), (key, "whatever")]).expect_err(key);
            assert_eq!(err.key, key);
            assert!(err.to_string().contains(key), "{err}");
        }
        let err = try_user(&[(" Auto.Offset.Reset ", "latest")]).expect_err("spelling");
        assert!(err.to_string().contains("Auto.Offset.Reset"), "{err}");
    }

    #[test]
    fn every_consumer_reads_from_offsets_it_was_given_or_fails() {
        let settings = user(&[]);
        for consumer in [
            settings.ingest_consumer("g", "i"),
            settings.tail_consumer("g"),
        ] {
            for (key, value) in MANUAL_OFFSETS {
                assert_eq!(consumer.get(key), Some(value), "{key}");
            }
        }
    }

    #[test]
    fn dead_letters_fit_the_largest_accepted_event_unless_the_user_lowers_it() {
        let settings = user(&[]);
        assert!(settings.dead_letter_max_bytes() > eddy_event::MAX_EVENT_BYTES);
        let lowered = user(&[("message.max.bytes", "65536")]);
        assert_eq!(lowered.dead_letter_max_bytes(), 65_536);
    }

    #[test]
    fn each_role_gets_its_own_settings() {
        let settings = user(&[]);
        let tail = settings.tail_consumer("eddy-query-tail.docs");
        assert_eq!(tail.get("group.id"), Some("eddy-query-tail.docs"));
        assert_eq!(tail.get("fetch.wait.max.ms"), Some("10"));
        assert_eq!(tail.get("enable.auto.offset.store"), Some("false"));
        assert_eq!(tail.get("group.instance.id"), None);
        let ingest = settings.ingest_consumer("eddy-ingest.docs", "w-1");
        assert_eq!(ingest.get("fetch.wait.max.ms"), Some("100"));
        assert_eq!(ingest.get("group.instance.id"), Some("w-1"));
        let admin = settings.admin();
        assert_eq!(admin.get("bootstrap.servers"), Some("b:9092"));
        assert_eq!(admin.get("group.id"), None);
    }

    #[test]
    fn enforced_settings_win_over_the_user() {
        let settings = user(&[("acks", "1"), ("client.id", "mine")]);
        let producer = settings.dead_letter_producer();
        assert_eq!(producer.get("acks"), Some("all"));
        assert_eq!(producer.get("enable.idempotence"), Some("true"));
        assert_eq!(producer.get("client.id"), Some("mine"));
        assert_eq!(
            producer.get("topic.metadata.refresh.interval.ms"),
            Some(DEAD_LETTER_METADATA_REFRESH_MS),
            "a dead-letter topic created late is found within seconds"
        );
    }

    #[test]
    fn the_user_may_name_other_brokers() {
        let settings = user(&[("bootstrap.servers", "other:9093")]);
        assert_eq!(
            settings.admin().get("bootstrap.servers"),
            Some("other:9093")
        );
        assert_eq!(settings.brokers(), "b:9092");
    }
}
