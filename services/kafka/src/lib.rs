//! eddy-kafka: the Kafka client plumbing shared by `eddy-ingest` and
//! `eddy-query`.
//!
//! - [`KafkaSettings`]: the user's brokers and pass-through properties, and
//!   the librdkafka configuration of every client role built from them with
//!   one precedence (eddy's defaults < the user's properties < what eddy
//!   enforces);
//! - [`event_message`]: a consumed record as the decoder's
//!   [`eddy_event::Message`], and [`record_of`]: that with the record's
//!   [`Place`], as [`apply`] takes it;
//! - [`apply`]: the one way a consumed record changes a growing buffer
//!   (offset checks, one decode, upsert/delete), for ingest and the tail
//!   ([`apply_decoded`] where the tail decoded it before its write lock);
//! - [`LogRanges`]: partitions' log ranges, read on connections of their
//!   own so that a slow fetch never holds them up (nor they it);
//! - [`lag`]: how far a consumer's position trails a partition's high
//!   watermark.
//!
//! Flags are parsed in `eddy-config`; what an event means is `eddy-event`'s.

mod apply;
mod lag;
mod log_range;
mod message;
mod settings;
mod topic;

pub use apply::{apply, apply_decoded, Cursor, Gaps, Outcome, Place, Record, StopReason};
pub use lag::lag;
pub use log_range::LogRanges;
pub use message::{event_message, record_of};
pub use settings::{
    KafkaSettings, ProtectedProperty, DEAD_LETTER_MAX_BYTES, MANUAL_OFFSETS, PROTECTED_KEYS,
};
pub use topic::{gaps_of, topic_gaps};
