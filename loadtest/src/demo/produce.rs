//! Publishing the base vectors at a fixed rate, while measuring on a sample
//! of events how long each takes from `send` until eddy-query returns it by id.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context as _};
use futures::stream::FuturesUnordered;
use futures::{FutureExt as _, StreamExt as _};
use rdkafka::producer::FutureProducer;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::dataset::Dataset;
use crate::encode::{self, EncodeOptions, Format};
use crate::freshness::wait_visible;
use crate::http::QueryClient;
use crate::kafka;
use crate::pacing::Schedule;

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
    /// Event format (one point per record).
    pub format: Format,
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
    let schedule = Schedule::new(start, opts.rate);
    let encode_opts = EncodeOptions {
        format: opts.format,
        arrow_rows: 1,
        proto_vector_bytes: false,
    };
    for id in 0..ds.len() {
        schedule.wait(id as u64).await;
        let key = id.to_string();
        let value =
            encode::encode_point(&encode_opts, id as u64, ds.base.row(id), &ds.payloads[id])
                .context("encoding event")?;
        let sent_at = Instant::now();
        let sampled = opts.sample_every > 0 && id % opts.sample_every == 0;
        let delivery = kafka::send(
            producer,
            &opts.topic,
            &key,
            Some(&value),
            // No header: the demo collection declares its format. Tansu
            // 0.6 looks each fetched record's headers up by a scan of its
            // whole header table, so a header on every event makes
            // fetches slow down as the topic grows.
            None,
        )
        .await?;
        deliveries.push(delivery.map(move |done| (sampled.then(|| sent_at.elapsed()), done)));
        if sampled {
            match probe_slots.clone().try_acquire_owned() {
                Ok(permit) => {
                    let client = client.clone();
                    probes.spawn(async move {
                        let result =
                            wait_visible(&client, id as u64, None, sent_at, PROBE_TIMEOUT).await;
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
