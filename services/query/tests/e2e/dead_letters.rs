//! Bad events through the broker: each is counted by reason, goes to the
//! dead-letter topic with headers naming it, and never stalls a partition.

use std::collections::BTreeMap;

use serde_json::json;

use crate::cluster::{metric_sum, vector, Cluster, DIM};

/// Malformed JSON, a wrong dimension, NaN/inf and a wrong id type are
/// counted by reason and skipped without stalling the partition.
pub async fn bad_events_are_counted_and_skipped(
    cluster: &Cluster,
    collection: &str,
    points: &mut BTreeMap<u64, Vec<f32>>,
) {
    let before = cluster.ingest_metrics().await;
    let bad: Vec<(&str, String)> = vec![
        ("900", "{not json".to_owned()),
        ("901", json!({"id": 901, "vector": [1.0, 2.0]}).to_string()),
        (
            "902",
            format!(
                "{{\"id\": 902, \"vector\": [1e39{}]}}",
                ", 0.5".repeat(DIM - 1)
            ),
        ),
        ("abc", json!({"id": "abc", "vector": vector(1)}).to_string()),
    ];
    // Same key on every partition's worth of bad events: put them on several
    // partitions by varying the key.
    for (key, value) in &bad {
        cluster.produce(key, Some(value.as_bytes())).await;
    }
    for id in 950..960u64 {
        let v = vector(id);
        cluster.upsert(id, &v, json!({})).await;
        points.insert(id, v);
    }
    cluster.wait_count(collection, points.len() as u64).await;
    cluster.wait_sealed(collection).await;
    let after = cluster.ingest_metrics().await;
    for reason in [
        "malformed",
        "wrong_dimension",
        "non_finite",
        "wrong_id_type",
    ] {
        let labels = [("collection", collection), ("reason", reason)];
        let delta = metric_sum(&after, "eddy_ingest_rejected_total", &labels)
            - metric_sum(&before, "eddy_ingest_rejected_total", &labels);
        assert!(
            delta >= 1.0,
            "rejections of reason {reason} not counted:\n{after}"
        );
    }
    for id in 900..903u64 {
        let status = cluster.point_status(collection, id).await;
        assert_eq!(status, 404, "rejected event {id} must not be stored");
    }

    // Each went to the dead-letter topic, unchanged, with its reason.
    let letters = dead_letters(cluster, &format!("{collection}.dlq"), bad.len()).await;
    for (key, value) in &bad {
        let letter = letters
            .iter()
            .find(|l| l.key.as_deref() == Some(key.as_bytes()))
            .unwrap_or_else(|| panic!("no dead letter for key {key}: {letters:?}"));
        assert_eq!(letter.value.as_deref(), Some(value.as_bytes()));
        let reason = letter.headers.get(eddy_ingest::dlq::HEADER_REASON);
        assert!(reason.is_some_and(|r| !r.is_empty()), "{letter:?}");
        let offset = letter.headers.get(eddy_ingest::dlq::HEADER_OFFSET);
        assert!(
            offset.is_some_and(|o| o.parse::<i64>().is_ok()),
            "{letter:?}"
        );
        assert_eq!(
            letter
                .headers
                .get(eddy_ingest::dlq::HEADER_TOPIC)
                .map(String::as_str),
            Some(collection)
        );
    }
    let reasons: std::collections::BTreeSet<&str> = letters
        .iter()
        .filter_map(|l| l.headers.get(eddy_ingest::dlq::HEADER_REASON))
        .map(String::as_str)
        .collect();
    for reason in [
        "malformed",
        "wrong_dimension",
        "non_finite",
        "wrong_id_type",
    ] {
        assert!(reasons.contains(reason), "{reason} missing in {reasons:?}");
    }
}

/// A record read back from a topic.
#[derive(Debug)]
struct Letter {
    key: Option<Vec<u8>>,
    value: Option<Vec<u8>>,
    headers: BTreeMap<String, String>,
}

/// Reads at least `n` records of `topic` (all partitions, from the start).
async fn dead_letters(cluster: &Cluster, topic: &str, n: usize) -> Vec<Letter> {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::message::{Headers, Message};
    let brokers = cluster.brokers();
    let topic = topic.to_owned();
    tokio::task::spawn_blocking(move || {
        let consumer: BaseConsumer = rdkafka::ClientConfig::new()
            .set("bootstrap.servers", &brokers)
            .set("group.id", "e2e-dlq-reader")
            .set("enable.auto.commit", "false")
            .create()
            .expect("consumer");
        let mut tpl = rdkafka::TopicPartitionList::new();
        tpl.add_partition_offset(&topic, 0, rdkafka::Offset::Beginning)
            .expect("partition");
        consumer.assign(&tpl).expect("assign");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        let mut out = Vec::new();
        while out.len() < n {
            assert!(
                std::time::Instant::now() < deadline,
                "only {} dead letters in {topic}: {out:?}",
                out.len()
            );
            if let Some(Ok(m)) = consumer.poll(std::time::Duration::from_millis(200)) {
                let headers = m
                    .headers()
                    .map(|h| {
                        h.iter()
                            .map(|h| {
                                (
                                    h.key.to_owned(),
                                    String::from_utf8_lossy(h.value.unwrap_or_default())
                                        .into_owned(),
                                )
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                out.push(Letter {
                    key: m.key().map(<[u8]>::to_vec),
                    value: m.payload().map(<[u8]>::to_vec),
                    headers,
                });
            }
        }
        out
    })
    .await
    .expect("reader")
}
