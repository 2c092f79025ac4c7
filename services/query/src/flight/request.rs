//! Flight tickets and exchange commands: protobuf (`eddy.v1`) or the JSON
//! form of [`crate::request::SearchRequestJson`]; both become the one
//! [`SearchRequest`].

use eddy_proto::v1::{ExchangeCommand, SearchTicket};
use prost::Message as _;

use crate::error::ApiError;
use crate::request::{from_proto, SearchRequest, SearchRequestJson, Vectors};

/// A parsed DoGet ticket.
#[derive(Debug, Clone)]
pub struct ParsedTicket {
    /// Collection to search.
    pub collection: String,
    /// Query vectors.
    pub vectors: Vectors,
    /// The request.
    pub request: SearchRequest,
}

/// A parsed DoExchange command.
#[derive(Debug, Clone)]
pub struct ParsedCommand {
    /// Collection to search.
    pub collection: String,
    /// The request.
    pub request: SearchRequest,
}

fn looks_like_json(bytes: &[u8]) -> bool {
    bytes.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{')
}

fn collection_of(named: Option<String>) -> Result<String, ApiError> {
    named
        .filter(|c| !c.is_empty())
        .ok_or_else(|| ApiError::BadRequest("missing field `collection`".into()))
}

/// Parses a DoGet ticket.
/// A DoGet ticket: a search, or a scan of the collection's points.
#[derive(Debug)]
pub enum DoGetTicket {
    /// Search these vectors.
    Search(ParsedTicket),
    /// Stream the live points of `collection` (a filter may narrow them).
    Scan {
        /// The collection.
        collection: String,
        /// Filter, columns.
        request: crate::request::ScanRequest,
    },
}

/// Parses a DoGet ticket: JSON `{"scan": "c", ...}` is a scan, anything
/// else a search ticket ([`parse_ticket`]).
pub fn parse_do_get(bytes: &[u8]) -> Result<DoGetTicket, ApiError> {
    if looks_like_json(bytes) {
        // A search ticket fails this at its first key (`collection`,
        // `vectors`): the search path pays next to nothing for it.
        if let Ok(scan) = serde_json::from_slice::<crate::request::ScanRequestJson>(bytes) {
            let request = scan.into_request()?;
            if let Some(collection) = request.collection.clone() {
                return Ok(DoGetTicket::Scan {
                    collection,
                    request,
                });
            }
        }
    }
    parse_ticket(bytes).map(DoGetTicket::Search)
}

/// Parses a search ticket: JSON or a protobuf `eddy.v1.SearchTicket`.
pub fn parse_ticket(bytes: &[u8]) -> Result<ParsedTicket, ApiError> {
    if looks_like_json(bytes) {
        let parsed = SearchRequestJson::from_slice(bytes)?.into_parts()?;
        let vectors = parsed.vectors.ok_or_else(|| {
            ApiError::BadRequest(
                "a search ticket needs one of `vectors` (list of vectors) or `vector`".into(),
            )
        })?;
        return Ok(ParsedTicket {
            collection: collection_of(parsed.collection)?,
            vectors,
            request: parsed.request,
        });
    }
    let t = SearchTicket::decode(bytes).map_err(|e| {
        ApiError::BadRequest(format!(
            "ticket is neither JSON nor an eddy.v1.SearchTicket: {e}"
        ))
    })?;
    Ok(ParsedTicket {
        collection: collection_of(Some(t.collection))?,
        vectors: Vectors::Flat(t.vectors),
        request: from_proto(t.options)?,
    })
}

/// Parses a DoExchange command (the descriptor's `cmd`).
pub fn parse_exchange_command(bytes: &[u8]) -> Result<ParsedCommand, ApiError> {
    if looks_like_json(bytes) {
        let parsed = SearchRequestJson::from_slice(bytes)?.into_parts()?;
        if parsed.vectors.is_some() {
            return Err(ApiError::BadRequest(
                "DoExchange takes the query vectors as RecordBatches, not in the command".into(),
            ));
        }
        return Ok(ParsedCommand {
            collection: collection_of(parsed.collection)?,
            request: parsed.request,
        });
    }
    let c = ExchangeCommand::decode(bytes).map_err(|e| {
        ApiError::BadRequest(format!(
            "command is neither JSON nor an eddy.v1.ExchangeCommand: {e}"
        ))
    })?;
    Ok(ParsedCommand {
        collection: collection_of(Some(c.collection))?,
        request: from_proto(c.options)?,
    })
}

#[cfg(test)]
mod tests {
    use eddy_proto::v1::SearchOptions;

    use super::*;
    use crate::request::PayloadSelector;

    #[test]
    fn json_tickets_parse_and_bad_ones_say_why() {
        let t = parse_ticket(
            br#"{"collection":"c","vectors":[[1,2],[3,4]],"k":3,"with_payload":["a"]}"#,
        )
        .expect("valid");
        assert_eq!(
            t.vectors,
            Vectors::Rows(vec![vec![1.0, 2.0], vec![3.0, 4.0]])
        );
        assert_eq!(t.request.params.k, 3);
        assert_eq!(
            t.request.params.with_payload,
            PayloadSelector::Fields(vec!["a".into()])
        );
        let err = parse_ticket(br#"{"collection":"c"}"#).expect_err("no vectors");
        assert!(err.to_string().contains("vectors"));
        let err = parse_ticket(br#"{"vector":[1]}"#).expect_err("no collection");
        assert!(err.to_string().contains("collection"));
        let err = parse_ticket(br#"{"collection":"c","vector":[1],"bogus":1}"#)
            .expect_err("unknown field");
        assert!(err.to_string().contains("bogus"));
        assert!(parse_ticket(b"\xff\xff").is_err());
    }

    #[test]
    fn protobuf_commands_parse() {
        let cmd = ExchangeCommand {
            collection: "c".into(),
            options: Some(SearchOptions {
                k: 5,
                ..Default::default()
            }),
        };
        let parsed = parse_exchange_command(&cmd.encode_to_vec()).expect("valid");
        assert_eq!(
            (parsed.collection.as_str(), parsed.request.params.k),
            ("c", 5)
        );
    }
}
