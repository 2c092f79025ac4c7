//! Parsing Flight tickets and exchange commands: protobuf (`eddy.v1`) or JSON.

use std::collections::BTreeMap;

use eddy_proto::v1::{ExchangeCommand, SearchOptions, SearchTicket};
use prost::Message as _;
use serde::Deserialize;
use serde_json::Value;

use crate::error::ApiError;
use crate::search::{parse_quantization, PayloadSelector, SearchParams};

/// A parsed DoGet ticket.
#[derive(Debug, Clone)]
pub struct ParsedTicket {
    /// Collection to search.
    pub collection: String,
    /// Query vectors (a protobuf ticket's flat list is one entry until
    /// [`ParsedTicket::vectors_for`] splits it).
    pub vectors: Vec<Vec<f32>>,
    /// Whether `vectors` is one flat list of concatenated vectors.
    pub flat: bool,
    /// Options.
    pub params: SearchParams,
    /// Read-your-writes offsets.
    pub min_offsets: BTreeMap<u32, i64>,
}

impl ParsedTicket {
    /// The query vectors for a collection of dimension `dim`.
    pub fn vectors_for(&mut self, dim: usize) -> Result<Vec<Vec<f32>>, ApiError> {
        let vectors = std::mem::take(&mut self.vectors);
        if !self.flat {
            return Ok(vectors);
        }
        let flat: Vec<f32> = vectors.into_iter().flatten().collect();
        if dim == 0 || flat.is_empty() || !flat.len().is_multiple_of(dim) {
            return Err(ApiError::BadRequest(format!(
                "ticket holds {} floats, not a positive multiple of the dimension {dim}",
                flat.len()
            )));
        }
        Ok(flat.chunks_exact(dim).map(<[f32]>::to_vec).collect())
    }
}

/// A parsed DoExchange command.
#[derive(Debug, Clone)]
pub struct ParsedCommand {
    /// Collection to search.
    pub collection: String,
    /// Options.
    pub params: SearchParams,
    /// Read-your-writes offsets.
    pub min_offsets: BTreeMap<u32, i64>,
}

fn default_k() -> usize {
    10
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonOptions {
    collection: String,
    #[serde(default)]
    vectors: Option<Vec<Vec<f32>>>,
    #[serde(default)]
    vector: Option<Vec<f32>>,
    #[serde(default = "default_k", alias = "limit")]
    k: usize,
    #[serde(default)]
    ef: Option<usize>,
    #[serde(default)]
    exact: bool,
    #[serde(default)]
    quantization: Option<String>,
    #[serde(default)]
    oversampling: Option<f32>,
    #[serde(default)]
    rescore: Option<bool>,
    #[serde(default)]
    with_payload: Option<Value>,
    #[serde(default)]
    filter: Option<Value>,
    #[serde(default)]
    min_offsets: BTreeMap<u32, i64>,
}

fn selector(v: Option<Value>) -> Result<PayloadSelector, ApiError> {
    match v {
        None | Some(Value::Null) | Some(Value::Bool(false)) => Ok(PayloadSelector::None),
        Some(Value::Bool(true)) => Ok(PayloadSelector::All),
        Some(Value::Array(items)) => items
            .into_iter()
            .map(|i| match i {
                Value::String(s) => Ok(s),
                other => Err(ApiError::BadRequest(format!(
                    "with_payload entries must be strings, got {other}"
                ))),
            })
            .collect::<Result<Vec<_>, _>>()
            .map(PayloadSelector::Fields),
        Some(other) => Err(ApiError::BadRequest(format!(
            "with_payload must be a bool or a list of fields, got {other}"
        ))),
    }
}

fn parse_json(bytes: &[u8]) -> Result<(JsonOptions, SearchParams), ApiError> {
    let o: JsonOptions = serde_json::from_slice(bytes)
        .map_err(|e| ApiError::BadRequest(format!("invalid JSON search request: {e}")))?;
    let params = SearchParams {
        k: o.k,
        ef: o.ef,
        exact: o.exact,
        quantization: parse_quantization(o.quantization.as_deref())?,
        oversampling: o.oversampling,
        rescore: o.rescore.unwrap_or(true),
        filter: o.filter.clone(),
        with_payload: selector(o.with_payload.clone())?,
    };
    Ok((o, params))
}

fn from_proto_options(
    o: Option<SearchOptions>,
) -> Result<(SearchParams, BTreeMap<u32, i64>), ApiError> {
    let o = o.unwrap_or_default();
    let filter = if o.filter_json.trim().is_empty() {
        None
    } else {
        Some(
            serde_json::from_str(&o.filter_json)
                .map_err(|e| ApiError::BadRequest(format!("filter_json is not valid JSON: {e}")))?,
        )
    };
    let with_payload = if o.with_payload.is_empty() {
        PayloadSelector::None
    } else if o.with_payload == ["*"] {
        PayloadSelector::All
    } else {
        PayloadSelector::Fields(o.with_payload)
    };
    Ok((
        SearchParams {
            k: if o.k == 0 { 10 } else { o.k as usize },
            ef: (o.ef > 0).then_some(o.ef as usize),
            exact: o.exact,
            quantization: parse_quantization(Some(&o.quantization))?,
            oversampling: (o.oversampling > 0.0).then_some(o.oversampling),
            rescore: o.rescore.unwrap_or(true),
            filter,
            with_payload,
        },
        o.min_offsets.into_iter().collect(),
    ))
}

fn looks_like_json(bytes: &[u8]) -> bool {
    bytes.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{')
}

/// Parses a DoGet ticket.
pub fn parse_ticket(bytes: &[u8]) -> Result<ParsedTicket, ApiError> {
    if looks_like_json(bytes) {
        let (o, params) = parse_json(bytes)?;
        let vectors =
            match (o.vectors, o.vector) {
                (Some(v), None) => v,
                (None, Some(v)) => vec![v],
                _ => return Err(ApiError::BadRequest(
                    "a search ticket needs exactly one of `vectors` (list of vectors) or `vector`"
                        .into(),
                )),
            };
        return Ok(ParsedTicket {
            collection: o.collection,
            vectors,
            flat: false,
            params,
            min_offsets: o.min_offsets,
        });
    }
    let t = SearchTicket::decode(bytes).map_err(|e| {
        ApiError::BadRequest(format!(
            "ticket is neither JSON nor an eddy.v1.SearchTicket: {e}"
        ))
    })?;
    let (params, min_offsets) = from_proto_options(t.options)?;
    Ok(ParsedTicket {
        collection: t.collection,
        vectors: vec![t.vectors],
        flat: true,
        params,
        min_offsets,
    })
}

/// Parses a DoExchange command (the descriptor's `cmd`).
pub fn parse_exchange_command(bytes: &[u8]) -> Result<ParsedCommand, ApiError> {
    if looks_like_json(bytes) {
        let (o, params) = parse_json(bytes)?;
        if o.vectors.is_some() || o.vector.is_some() {
            return Err(ApiError::BadRequest(
                "DoExchange takes the query vectors as RecordBatches, not in the command".into(),
            ));
        }
        return Ok(ParsedCommand {
            collection: o.collection,
            params,
            min_offsets: o.min_offsets,
        });
    }
    let c = ExchangeCommand::decode(bytes).map_err(|e| {
        ApiError::BadRequest(format!(
            "command is neither JSON nor an eddy.v1.ExchangeCommand: {e}"
        ))
    })?;
    let (params, min_offsets) = from_proto_options(c.options)?;
    Ok(ParsedCommand {
        collection: c.collection,
        params,
        min_offsets,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_tickets_parse_and_bad_ones_say_why() {
        let t = parse_ticket(
            br#"{"collection":"c","vectors":[[1,2],[3,4]],"k":3,"with_payload":["a"]}"#,
        )
        .expect("valid");
        assert_eq!(t.vectors.len(), 2);
        assert_eq!(t.params.k, 3);
        assert_eq!(
            t.params.with_payload,
            PayloadSelector::Fields(vec!["a".into()])
        );
        let err = parse_ticket(br#"{"collection":"c"}"#).expect_err("no vectors");
        assert!(err.to_string().contains("vectors"));
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
        assert_eq!((parsed.collection.as_str(), parsed.params.k), ("c", 5));
    }
}
