//! Flight answers on the wire, each saying what it reflects, as HTTP
//! answers do: the offsets and, when events may be missing, why (`stale`).
//!
//! That JSON rides in the `app_metadata` of the first record-batch message
//! of each answer: the one DoGet answer, each DoExchange input batch's
//! answer, a scan's stream. Large answers are split into several messages
//! (gRPC clients refuse messages over 4 MiB by default); only the first
//! carries it. An answer without rows is still sent, as one empty batch,
//! so no answer's metadata is lost (arrow-flight's own encoder drops empty
//! batches, hence this one).

use std::collections::BTreeMap;

use arrow_array::RecordBatch;
use arrow_flight::error::FlightError;
use arrow_flight::{FlightData, SchemaAsIpc};
use arrow_ipc::writer::{CompressionContext, DictionaryTracker, IpcDataGenerator, IpcWriteOptions};
use arrow_schema::{Schema, SchemaRef};
use bytes::Bytes;
use futures::stream::{self, BoxStream};
use futures::{Stream, StreamExt};
use serde::Serialize;

/// Target size of one message's data (half the common 4 MiB limit).
const MAX_MESSAGE_BYTES: usize = 2 << 20;

/// One answer (or one more batch of it) and the metadata its first
/// message carries.
#[derive(Debug)]
pub(super) struct Answer {
    batch: RecordBatch,
    metadata: Option<Bytes>,
}

/// What an answer reflects.
#[derive(Debug, Serialize)]
struct Reflects<'a> {
    offsets: &'a BTreeMap<u32, i64>,
    /// Why the answer may miss published events (absent when it cannot).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    stale: Vec<String>,
}

impl Answer {
    /// An answer of `batch` reflecting `offsets`, missing events for the
    /// reasons in `stale` (none: it cannot).
    pub(super) fn new(
        batch: RecordBatch,
        offsets: &BTreeMap<u32, i64>,
        stale: Vec<String>,
    ) -> Self {
        let json = serde_json::to_vec(&Reflects { offsets, stale }).unwrap_or_default();
        Self {
            batch,
            metadata: Some(Bytes::from(json)),
        }
    }

    /// A further batch of the answer before it (a scan's stream).
    pub(super) fn more(batch: RecordBatch) -> Self {
        Self {
            batch,
            metadata: None,
        }
    }
}

/// The batches `batch` is sent as: slices of about [`MAX_MESSAGE_BYTES`],
/// or itself when it has no rows.
fn slices(batch: &RecordBatch) -> Vec<RecordBatch> {
    let rows = batch.num_rows();
    let bytes: usize = batch
        .columns()
        .iter()
        .map(|c| c.get_buffer_memory_size())
        .sum();
    let parts = bytes.div_ceil(MAX_MESSAGE_BYTES).max(1);
    let per_part = (rows / parts).max(1);
    if rows == 0 {
        return vec![batch.clone()];
    }
    (0..rows)
        .step_by(per_part)
        .map(|start| batch.slice(start, per_part.min(rows - start)))
        .collect()
}

/// The IPC state of one stream: the schema goes first, once.
struct Encoder {
    generator: IpcDataGenerator,
    dictionaries: DictionaryTracker,
    options: IpcWriteOptions,
    compression: CompressionContext,
    schema_sent: bool,
    /// Set after an error: the stream ends.
    failed: bool,
}

impl Encoder {
    fn new() -> Self {
        Self {
            generator: IpcDataGenerator::default(),
            dictionaries: DictionaryTracker::new(false),
            options: IpcWriteOptions::default(),
            compression: CompressionContext::default(),
            schema_sent: false,
            failed: false,
        }
    }

    fn schema(&mut self, schema: &Schema) -> FlightData {
        self.schema_sent = true;
        SchemaAsIpc::new(schema, &self.options).into()
    }

    fn answer(&mut self, answer: Answer) -> Result<Vec<FlightData>, FlightError> {
        let mut out = Vec::new();
        if !self.schema_sent {
            out.push(self.schema(&answer.batch.schema()));
        }
        let mut metadata = answer.metadata;
        for slice in slices(&answer.batch) {
            let (dictionaries, batch) = self.generator.encode(
                &slice,
                &mut self.dictionaries,
                &self.options,
                &mut self.compression,
            )?;
            out.extend(dictionaries.into_iter().map(FlightData::from));
            let mut data = FlightData::from(batch);
            if let Some(m) = metadata.take() {
                data.app_metadata = m;
            }
            out.push(data);
        }
        Ok(out)
    }
}

/// Encodes `answers` as a Flight stream: the schema first (at once when
/// known up front, else with the first answer), then each answer's
/// messages; the stream ends at the first error.
pub(super) fn encode<S>(
    schema: Option<SchemaRef>,
    answers: S,
) -> BoxStream<'static, Result<FlightData, FlightError>>
where
    S: Stream<Item = Result<Answer, FlightError>> + Send + 'static,
{
    let mut encoder = Encoder::new();
    let first: Vec<Result<FlightData, FlightError>> =
        schema.map(|s| Ok(encoder.schema(&s))).into_iter().collect();
    let rest = answers
        .scan(encoder, |encoder, answer| {
            if encoder.failed {
                return futures::future::ready(None);
            }
            let out = answer.and_then(|a| encoder.answer(a));
            encoder.failed = out.is_err();
            futures::future::ready(Some(out))
        })
        .flat_map(|out| match out {
            Ok(messages) => stream::iter(messages.into_iter().map(Ok)).boxed(),
            Err(e) => stream::once(futures::future::ready(Err(e))).boxed(),
        });
    stream::iter(first).chain(rest).boxed()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::UInt32Array;
    use arrow_flight::decode::{DecodedPayload, FlightDataDecoder};
    use arrow_schema::{DataType, Field};
    use futures::TryStreamExt;

    use super::*;

    fn batch(rows: u32) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![Field::new("n", DataType::UInt32, false)]));
        RecordBatch::try_new(
            schema,
            vec![Arc::new(UInt32Array::from_iter_values(0..rows))],
        )
        .expect("batch")
    }

    /// Answers of 600,000 rows (split into messages), none, and 2 rows,
    /// then one more batch of the last: each answer's first message
    /// carries its metadata, the empty answer is sent, and the decoder
    /// reads every row back.
    #[tokio::test]
    async fn each_answer_is_sent_with_its_metadata_on_its_first_message() {
        let reflects = |n: i64| BTreeMap::from([(0u32, n)]);
        let answers = vec![
            Ok(Answer::new(batch(600_000), &reflects(1), Vec::new())),
            Ok(Answer::new(batch(0), &reflects(2), vec!["why".to_owned()])),
            Ok(Answer::new(batch(2), &reflects(3), Vec::new())),
            Ok(Answer::more(batch(5))),
        ];
        let encoded = encode(None, stream::iter(answers));
        let mut decoder = FlightDataDecoder::new(encoded);
        let mut seen: Vec<(usize, String)> = Vec::new();
        while let Some(data) = decoder.try_next().await.expect("decoded") {
            if let DecodedPayload::RecordBatch(b) = &data.payload {
                let metadata = String::from_utf8_lossy(&data.inner.app_metadata).into_owned();
                seen.push((b.num_rows(), metadata));
            }
        }
        let rows: usize = seen.iter().map(|(r, _)| r).sum();
        assert_eq!(rows, 600_007);
        assert!(seen.len() > 4, "the large answer was split: {}", seen.len());
        let tagged: Vec<&str> = seen
            .iter()
            .filter(|(_, m)| !m.is_empty())
            .map(|(_, m)| m.as_str())
            .collect();
        assert_eq!(
            tagged,
            [
                r#"{"offsets":{"0":1}}"#,
                r#"{"offsets":{"0":2},"stale":["why"]}"#,
                r#"{"offsets":{"0":3}}"#
            ]
        );
        assert!(!seen[0].1.is_empty(), "the first message carries it");
    }

    #[tokio::test]
    async fn an_up_front_schema_comes_first_and_an_error_ends_the_stream() {
        let answers = vec![
            Err(FlightError::ProtocolError("bad".into())),
            Ok(Answer::more(batch(1))),
        ];
        let schema = batch(0).schema();
        let out: Vec<Result<FlightData, FlightError>> =
            encode(Some(schema), stream::iter(answers)).collect().await;
        assert_eq!(out.len(), 2, "schema, error, nothing after");
        assert!(out[0].is_ok());
        assert!(out[1].is_err());
    }
}
