//! The adapter from a consumed rdkafka record to the event decoder's view.

use rdkafka::message::{Headers, Message};

use crate::{Place, Record};

/// The header naming an event's encoding.
pub const CONTENT_TYPE: &str = "content-type";

/// The decoder's view of a consumed record: key, value and `content-type`
/// (the first header of that name, matched case-insensitively; a value that
/// is not UTF-8 counts as absent).
pub fn event_message<M: Message>(msg: &M) -> eddy_event::Message<'_> {
    let content_type = msg.headers().and_then(|headers| {
        headers
            .iter()
            .find(|h| h.key.eq_ignore_ascii_case(CONTENT_TYPE))
            .and_then(|h| h.value)
            .and_then(|v| std::str::from_utf8(v).ok())
    });
    eddy_event::Message {
        key: msg.key(),
        value: msg.payload(),
        content_type,
    }
}

/// A consumed record as [`crate::apply`] sees it: its [`event_message`] and
/// its place (partition, offset, and timestamp, 0 when the broker gave none).
pub fn record_of<M: Message>(msg: &M) -> Record<'_> {
    Record {
        message: event_message(msg),
        place: Place {
            partition: msg.partition() as u32,
            offset: msg.offset(),
            timestamp_ms: msg.timestamp().to_millis().unwrap_or(0),
        },
    }
}

#[cfg(test)]
mod tests {
    use rdkafka::message::{Header, OwnedHeaders, OwnedMessage, Timestamp};

    use super::*;

    fn record(headers: Option<OwnedHeaders>) -> OwnedMessage {
        stamped(headers, Timestamp::NotAvailable)
    }

    fn stamped(headers: Option<OwnedHeaders>, timestamp: Timestamp) -> OwnedMessage {
        OwnedMessage::new(
            Some(b"{\"id\":1}".to_vec()),
            Some(b"7".to_vec()),
            "t".to_owned(),
            timestamp,
            2,
            3,
            headers,
        )
    }

    #[test]
    fn a_record_carries_its_partition_offset_and_timestamp() {
        let msg = stamped(None, Timestamp::LogAppendTime(1_700_000_000_123));
        let got = record_of(&msg);
        let place = Place {
            partition: 2,
            offset: 3,
            timestamp_ms: 1_700_000_000_123,
        };
        assert_eq!(got.place, place);
        assert_eq!(got.message.value, Some(&b"{\"id\":1}"[..]));
        assert_eq!(
            record_of(&record(None)).place.timestamp_ms,
            0,
            "no timestamp"
        );
    }

    #[test]
    fn key_value_and_content_type_are_passed_on() {
        let headers = OwnedHeaders::new()
            .insert(Header {
                key: "x-other",
                value: Some("ignored"),
            })
            .insert(Header {
                key: "Content-Type",
                value: Some("application/json"),
            });
        let msg = record(Some(headers));
        let event = event_message(&msg);
        assert_eq!(event.key, Some(&b"7"[..]));
        assert_eq!(event.value, Some(&b"{\"id\":1}"[..]));
        assert_eq!(event.content_type, Some("application/json"));
    }

    #[test]
    fn missing_or_non_utf8_content_type_is_absent() {
        assert_eq!(event_message(&record(None)).content_type, None);
        let headers = OwnedHeaders::new().insert(Header {
            key: "content-type",
            value: Some(&[0xff_u8, 0xfe][..]),
        });
        assert_eq!(event_message(&record(Some(headers))).content_type, None);
    }
}
