//! The librdkafka configuration of every client eddy creates, built in one
//! place from the user's brokers and pass-through properties.
//!
//! Precedence, lowest first: `bootstrap.servers` from `--brokers`, the
//! role's defaults, the user's `--kafka-property` entries, then the settings
//! the role enforces. The user's properties (security, SASL, TLS, tuning)
//! therefore pass through untouched and win over eddy's defaults; only the
//! enforced settings of a role cannot be overridden.

use rdkafka::ClientConfig;

/// Consumer settings every eddy consumer starts from: eddy decides where to
/// read (from its manifest or snapshot), so offsets are never committed or
/// stored automatically, and partition ends are not reported as events.
pub const MANUAL_OFFSETS: [(&str, &str); 4] = [
    ("enable.auto.commit", "false"),
    ("enable.auto.offset.store", "false"),
    ("auto.offset.reset", "earliest"),
    ("enable.partition.eof", "false"),
];

/// Group-membership timings of ingest's consumer: a dead member is noticed
/// within seconds, and a seal inside the poll loop has a minute.
const INGEST_GROUP_TIMINGS: [(&str, &str); 3] = [
    ("session.timeout.ms", "10000"),
    ("heartbeat.interval.ms", "1000"),
    ("max.poll.interval.ms", "60000"),
];

/// Fetch settings of the query tail: a fetch returns after at most 10 ms,
/// so a produced event is searchable soon after the broker has it.
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
    /// dropped). Property values are never logged.
    pub fn new(brokers: impl Into<String>, properties: Vec<(String, String)>) -> Self {
        Self {
            brokers: brokers.into(),
            properties: properties
                .into_iter()
                .filter(|(key, _)| !key.is_empty())
                .collect(),
        }
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
        defaults.extend(MANUAL_OFFSETS);
        defaults.extend(INGEST_GROUP_TIMINGS);
        defaults.push(("group.instance.id", instance_id));
        self.client_config(&defaults, &[])
    }

    /// The query tail's consumer: it assigns partitions itself (the group id
    /// `group_id` only names it to the broker) and fetches with a short wait.
    pub fn tail_consumer(&self, group_id: &str) -> ClientConfig {
        let mut defaults = vec![("group.id", group_id)];
        defaults.extend(MANUAL_OFFSETS);
        defaults.extend(TAIL_FETCH);
        self.client_config(&defaults, &[])
    }

    /// The dead-letter producer: acknowledged by every in-sync replica,
    /// idempotent (these settings override the user's).
    pub fn dead_letter_producer(&self) -> ClientConfig {
        self.client_config(&[], &DEAD_LETTER_DELIVERY)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(properties: &[(&str, &str)]) -> KafkaSettings {
        KafkaSettings::new(
            "b:9092",
            properties
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        )
    }

    #[test]
    fn user_properties_pass_through_and_win_over_defaults() {
        let settings = user(&[
            ("security.protocol", "SSL"),
            ("auto.offset.reset", "latest"),
            ("", "dropped"),
        ]);
        let consumer = settings.ingest_consumer("eddy-ingest.docs", "eddy-ingest-h");
        assert_eq!(consumer.get("bootstrap.servers"), Some("b:9092"));
        assert_eq!(consumer.get("security.protocol"), Some("SSL"));
        assert_eq!(consumer.get("auto.offset.reset"), Some("latest"));
        assert_eq!(consumer.get("group.id"), Some("eddy-ingest.docs"));
        assert_eq!(consumer.get("group.instance.id"), Some("eddy-ingest-h"));
        assert_eq!(consumer.get("enable.auto.commit"), Some("false"));
        assert_eq!(consumer.get("session.timeout.ms"), Some("10000"));
        assert_eq!(consumer.get(""), None);
    }

    #[test]
    fn each_role_gets_its_own_settings() {
        let settings = user(&[]);
        let tail = settings.tail_consumer("eddy-query-tail.docs");
        assert_eq!(tail.get("group.id"), Some("eddy-query-tail.docs"));
        assert_eq!(tail.get("fetch.wait.max.ms"), Some("10"));
        assert_eq!(tail.get("enable.auto.offset.store"), Some("false"));
        assert_eq!(tail.get("group.instance.id"), None);
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
