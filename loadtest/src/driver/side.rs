//! What runs beside the query phases: freshness probes and a background
//! writer re-publishing the base as upserts at a fixed rate (mixed
//! read/write). Both produce to the collection's topic.

use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context as _};
use tokio::task::JoinHandle;

use super::QueryArgs;
use crate::dataset::Base;
use crate::encode::{self, EncodeOptions, Format, PayloadColumns, Record};
use crate::freshness::{self, FreshnessSummary, ProbeOptions};
use crate::http::QueryClient;
use crate::kafka;
use crate::progress;
use crate::publish::{self, PublishOptions, PublishSummary};

/// Options of the side tasks.
#[derive(Debug, Clone, clap::Args)]
pub struct SideArgs {
    /// Kafka bootstrap servers (needed by `--freshness` and `--write-rate`).
    #[arg(long, env = "EDDY_LOADTEST_QUERY_BROKERS")]
    pub brokers: Option<String>,
    /// The collection's topic (default: the collection's name).
    #[arg(long, env = "EDDY_LOADTEST_QUERY_TOPIC")]
    pub topic: Option<String>,
    /// Format of the probe and writer events (json or protobuf).
    #[arg(
        long,
        env = "EDDY_LOADTEST_QUERY_FORMAT",
        value_enum,
        default_value = "json"
    )]
    pub format: Format,
    /// The writer's and the probes' events carry no `content-type` header:
    /// the collection declares `--format` (`format=` in its spec). Tansu
    /// 0.6 scans its whole header table for every record it fetches, so a
    /// header per event slows every later fetch. Arrow batches
    /// (`--write-batch` over 1) always carry theirs.
    #[arg(long, env = "EDDY_LOADTEST_QUERY_NO_HEADER")]
    pub no_header: bool,
    /// librdkafka producer property KEY=VALUE (repeatable).
    #[arg(short = 'X', long = "kafka", value_parser = kafka::parse_property)]
    pub kafka: Vec<(String, String)>,
    /// Freshness probes to run beside the phases (0 = none).
    #[arg(long, env = "EDDY_LOADTEST_QUERY_FRESHNESS", default_value_t = 0)]
    pub freshness: u64,
    /// Freshness probes started per second.
    #[arg(
        long,
        env = "EDDY_LOADTEST_QUERY_FRESHNESS_RATE",
        default_value_t = 20.0
    )]
    pub freshness_rate: f64,
    /// Seconds a probe waits for its event.
    #[arg(
        long,
        env = "EDDY_LOADTEST_QUERY_FRESHNESS_TIMEOUT",
        default_value_t = 30.0
    )]
    pub freshness_timeout: f64,
    /// Background writer: upsert base rows at this many events per second
    /// while the phases run (0 = none).
    #[arg(long, env = "EDDY_LOADTEST_QUERY_WRITE_RATE", default_value_t = 0.0)]
    pub write_rate: f64,
    /// Points per writer record: 1 publishes one `--format` event per point;
    /// more publishes Arrow batches of up to this many consecutive rows (a
    /// pipeline's micro-batches; at most 49, a batch never holds a probe's
    /// row). The rate stays in points per second.
    #[arg(long, env = "EDDY_LOADTEST_QUERY_WRITE_BATCH", default_value_t = 1)]
    pub write_batch: usize,
}

/// The writer's records: rows of `base` upserted one event per point in
/// `format`, or as Arrow batches of up to `batch` rows; a probe's row is never
/// among them (see `freshness::PROBE_STRIDE`).
fn writer_records(base: &Base, format: Format, batch: usize) -> anyhow::Result<Vec<Record>> {
    if batch <= 1 {
        let opts = EncodeOptions {
            format,
            arrow_rows: 1,
            proto_vector_bytes: false,
        };
        let mut records = encode::encode_rows(
            &base.vectors,
            &base.payloads,
            0..base.len(),
            &opts,
            &PayloadColumns::default(),
        )?;
        records.retain(|r| r.key.parse().is_ok_and(|row| !freshness::is_probe_row(row)));
        return Ok(records);
    }
    let columns = PayloadColumns::infer(&base.payloads);
    let runs = writer_runs(base.len(), batch);
    Ok(encode::encode_arrow_runs(
        &base.vectors,
        &base.payloads,
        &runs,
        &columns,
    )?)
}

/// The `content-type` header of the writer's records: Arrow's for batches
/// (whatever the collection declares), else `format`'s unless the
/// collection declares it (`no_header`).
fn writer_content_type(format: Format, batch: usize, no_header: bool) -> Option<&'static str> {
    if batch > 1 {
        Some(Format::Arrow.content_type())
    } else {
        (!no_header).then(|| format.content_type())
    }
}

/// Consecutive rows of `0..len` in runs of at most `batch`, cut before and
/// after every probe row (which is left out).
fn writer_runs(len: usize, batch: usize) -> Vec<Range<usize>> {
    let mut runs = Vec::new();
    let mut start = 0;
    for row in 0..=len {
        let cut = row == len || freshness::is_probe_row(row);
        if cut || row - start == batch.max(1) {
            if row > start {
                runs.push(start..row);
            }
            start = if cut { row + 1 } else { row };
        }
    }
    runs
}

type Task<T> = JoinHandle<anyhow::Result<T>>;

/// The running side tasks.
pub(super) struct SideTasks {
    freshness: Option<Task<FreshnessSummary>>,
    writer: Option<(Arc<AtomicBool>, Task<PublishSummary>)>,
}

impl SideTasks {
    /// Starts what `args` asks for (nothing, by default).
    pub(super) async fn start(args: &QueryArgs, client: &QueryClient) -> anyhow::Result<Self> {
        let s = &args.side;
        let mut tasks = Self {
            freshness: None,
            writer: None,
        };
        if s.freshness == 0 && s.write_rate <= 0.0 {
            return Ok(tasks);
        }
        let Some(brokers) = &s.brokers else {
            bail!("--freshness and --write-rate need --brokers");
        };
        super::check_side_format(s.format)?;
        let topic = s.topic.clone().unwrap_or_else(|| args.collection.clone());
        let producer = kafka::producer(brokers, &s.kafka)?;
        let dir = args.dataset.clone();
        let base = tokio::task::spawn_blocking(move || Base::load(&dir, None))
            .await
            .context("base loader panicked")??;
        let base = Arc::new(base);
        if s.write_rate > 0.0 {
            let (b, format, batch) = (base.clone(), s.format, s.write_batch);
            let records = tokio::task::spawn_blocking(move || writer_records(&b, format, batch))
                .await
                .context("encoder panicked")??;
            let stop = Arc::new(AtomicBool::new(false));
            let publish_opts = PublishOptions {
                topic: topic.clone(),
                content_type: writer_content_type(s.format, s.write_batch, s.no_header),
                rate: s.write_rate,
                passes: 0,
                delete_every: 0,
            };
            let (producer, stop_flag) = (producer.clone(), stop.clone());
            let task = tokio::spawn(async move {
                let pb = progress::bar("writer", None, "events");
                let stats =
                    publish::publish(&producer, &records, &publish_opts, &stop_flag, &pb).await?;
                pb.finish_and_clear();
                Ok(stats.summary())
            });
            tasks.writer = Some((stop, task));
        }
        if s.freshness > 0 {
            let opts = ProbeOptions {
                topic,
                format: s.format,
                header: !s.no_header,
                probes: s.freshness,
                rate: s.freshness_rate,
                timeout: Duration::from_secs_f64(s.freshness_timeout.max(0.001)),
            };
            let client = client.clone();
            tasks.freshness = Some(tokio::spawn(async move {
                let pb = progress::bar("freshness", Some(opts.probes), "probes");
                let stats =
                    freshness::probe_freshness(&producer, &client, base, &opts, &pb).await?;
                pb.finish_and_clear();
                Ok(stats.summary())
            }));
        }
        Ok(tasks)
    }

    /// Waits for the probes, then stops the writer; their summaries.
    pub(super) async fn finish(
        self,
    ) -> anyhow::Result<(Option<FreshnessSummary>, Option<PublishSummary>)> {
        // The writer is stopped whatever the probes did, then errors surface.
        let freshness = match self.freshness {
            Some(task) => Some(task.await.context("freshness task panicked")),
            None => None,
        };
        let writer = match self.writer {
            Some((stop, task)) => {
                stop.store(true, Ordering::Relaxed);
                Some(task.await.context("writer task panicked")??)
            }
            None => None,
        };
        let freshness = freshness.transpose()?.transpose()?;
        Ok((freshness, writer))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writer_runs_skip_probe_rows_and_respect_the_batch() {
        let runs = writer_runs(120, 20);
        // Probe rows are 49 and 99.
        assert_eq!(
            runs,
            vec![0..20, 20..40, 40..49, 50..70, 70..90, 90..99, 100..120]
        );
        let rows: usize = runs.iter().map(|r| r.len()).sum();
        assert_eq!(rows, 118);
        assert!(runs
            .iter()
            .cloned()
            .flatten()
            .all(|r| !freshness::is_probe_row(r)));
        assert_eq!(writer_runs(5, 1), vec![0..1, 1..2, 2..3, 3..4, 4..5]);
        assert_eq!(writer_runs(0, 10), Vec::<Range<usize>>::new());
    }
}
