//! Kafka plumbing both services share: turning an rdkafka message into the
//! decoder's view of it.

use rdkafka::message::{BorrowedMessage, Headers, Message};

/// The decoder's view of a consumed record: key, value and `content-type`.
pub fn event_message<'a>(msg: &'a BorrowedMessage<'_>) -> eddy_event::Message<'a> {
    let content_type = msg.headers().and_then(|headers| {
        headers
            .iter()
            .find(|h| h.key.eq_ignore_ascii_case("content-type"))
            .and_then(|h| h.value)
            .and_then(|v| std::str::from_utf8(v).ok())
    });
    eddy_event::Message {
        key: msg.key(),
        value: msg.payload(),
        content_type,
    }
}
