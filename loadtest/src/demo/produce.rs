//! Publishing the base vectors at a fixed rate, while measuring on a sample
//! of events how long each takes from `send` until eddy-query returns it by id.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context as _};
use futures::stream::FuturesUnordered;
use futures::{FutureExt as _, StreamExt as _};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{DeliveryFuture, FutureProducer, FutureRecord};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::dataset::Dataset;
use crate::http::QueryClient;

/// How often a latency probe first asks for its point.
const PROBE_POLL: Duration = Duration::from_millis(2);
/// The probe interval grows with the time already waited (1/20 of it, so the
/// measurement stays within ~5%), up to this, to keep slow runs from flooding
/// the query service with lookups.
const PROBE_POLL_MAX: Duration = Duration::from_millis(50);
/// How long a probe waits before it counts the event as not searchable.
const PROBE_TIMEOUT: Duration = Duration::from_secs(30);
/// At most this many probes poll at once; a sampled event is skipped when all
/// are busy (and counted), so probing cannot swamp a small machine.
const MAX_PROBES: usize = 32;

/// How to publish.
#[derive(Debug, Clone)]
pub struct ProduceOptions {
    /// Kafka topic.
    pub topic: String,
    /// Target events per second (0 or less: as fast as possible).
    pub rate: f64,
    /// Probe one event in this many (0: none).
    pub sample_every: usize,
}

/// What publishing measured.
#[derive(Debug, Clone, Default)]
pub struct ProduceStats {
    /// Events published (and acknowledged by the broker).
    pub events: usize,
    /// From the first send to the last send (the pacing the producer kept).
    pub send_elapsed: Duration,
    /// From the first send to the last acknowledgement.
    pub elapsed: Duration,
    /// Send→broker acknowledgement latency of each sampled event (the
    /// broker's share of produce→searchable).
    pub acked_after: Vec<Duration>,
    /// Produce→searchable latency of each probed event.
    pub visible_after: Vec<Duration>,
    /// Probed events that were not searchable within the probe timeout.
    pub probes_timed_out: usize,
    /// Sampled events not probed because all probes were busy.
    pub probes_skipped: usize,
}

impl ProduceStats {
    /// Acknowledged events per second (first send to last acknowledgement).
    pub fn rate(&self) -> f64 {
        self.events as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// Events handed to the producer per second.
    pub fn send_rate(&self) -> f64 {
        self.events as f64 / self.send_elapsed.as_secs_f64().max(1e-9)
    }
}

/// The Kafka event for base row `id`: `{"id", "vector", "payload"}`.
pub fn event_json(ds: &Dataset, id: usize) -> anyhow::Result<String> {
    let mut payload = ds.payloads[id].clone();
    payload.remove("id");
    let event = serde_json::json!({
        "id": id,
        "vector": ds.base.row(id),
        "payload": payload,
    });
    serde_json::to_string(&event).context("encoding event")
}

/// Publishes every base row of `ds` (key = id) and probes a sample of them.
pub async fn produce(
    ds: &Dataset,
    producer: &FutureProducer,
    client: &QueryClient,
    opts: &ProduceOptions,
) -> anyhow::Result<ProduceStats> {
    let mut stats = ProduceStats::default();
    let mut deliveries = FuturesUnordered::new();
    let mut probes = JoinSet::new();
    let probe_slots = Arc::new(Semaphore::new(MAX_PROBES));
    let start = Instant::now();
    for id in 0..ds.len() {
        if opts.rate > 0.0 {
            let due = start + Duration::from_secs_f64(id as f64 / opts.rate);
            if due > Instant::now() {
                tokio::time::sleep_until(due).await;
            }
        }
        let key = id.to_string();
        let value = event_json(ds, id)?;
        let sent_at = Instant::now();
        let sampled = opts.sample_every > 0 && id % opts.sample_every == 0;
        let delivery = send(producer, &opts.topic, &key, &value).await?;
        deliveries.push(delivery.map(move |done| (sampled.then(|| sent_at.elapsed()), done)));
        if sampled {
            match probe_slots.clone().try_acquire_owned() {
                Ok(permit) => {
                    let client = client.clone();
                    probes.spawn(async move {
                        let result = probe(&client, id as u64, sent_at).await;
                        drop(permit);
                        result
                    });
                }
                Err(_) => stats.probes_skipped += 1,
            }
        }
        while let Some(Some((acked_after, done))) = deliveries.next().now_or_never() {
            check_delivery(done, acked_after, &mut stats)?;
        }
        if (id + 1) % 2000 == 0 {
            tracing::info!(events = id + 1, "published");
        }
    }
    stats.send_elapsed = start.elapsed();
    while let Some((acked_after, done)) = deliveries.next().await {
        check_delivery(done, acked_after, &mut stats)?;
    }
    stats.elapsed = start.elapsed();
    while let Some(probe) = probes.join_next().await {
        match probe.context("latency probe panicked")?? {
            Some(latency) => stats.visible_after.push(latency),
            None => stats.probes_timed_out += 1,
        }
    }
    Ok(stats)
}

/// Enqueues one message, waiting while the producer's local queue is full.
async fn send(
    producer: &FutureProducer,
    topic: &str,
    key: &str,
    value: &str,
) -> anyhow::Result<DeliveryFuture> {
    let mut record = FutureRecord::to(topic).key(key).payload(value);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match producer.send_result(record) {
            Ok(delivery) => return Ok(delivery),
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back))
                if Instant::now() < deadline =>
            {
                record = back;
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            Err((e, _)) => bail!("producing event {key} to {topic}: {e}"),
        }
    }
}

fn check_delivery(
    done: Result<
        rdkafka::producer::future_producer::OwnedDeliveryResult,
        futures::channel::oneshot::Canceled,
    >,
    acked_after: Option<Duration>,
    stats: &mut ProduceStats,
) -> anyhow::Result<()> {
    match done {
        Ok(Ok(_delivery)) => {
            stats.events += 1;
            stats.acked_after.extend(acked_after);
            Ok(())
        }
        Ok(Err((e, _msg))) => bail!("broker rejected an event: {e}"),
        Err(_) => bail!("producer dropped a delivery report"),
    }
}

/// Polls `GET /points/{id}` (every 2 ms at first, backing off to 5% of the
/// time waited) until it answers; the time since `sent_at`, or
/// `None` after [`PROBE_TIMEOUT`]. HTTP errors other than 404 abort the probe.
async fn probe(
    client: &QueryClient,
    id: u64,
    sent_at: Instant,
) -> anyhow::Result<Option<Duration>> {
    loop {
        if client
            .get_point(id)
            .await
            .with_context(|| format!("probing point {id}"))?
            .is_some()
        {
            return Ok(Some(sent_at.elapsed()));
        }
        if sent_at.elapsed() > PROBE_TIMEOUT {
            return Ok(None);
        }
        tokio::time::sleep((sent_at.elapsed() / 20).clamp(PROBE_POLL, PROBE_POLL_MAX)).await;
    }
}
