//! Search options shared by the HTTP and Flight clients, serialized with the
//! field names both of eddy-query's JSON request forms take.

use serde::Serialize;
use serde_json::Value;

/// How a search runs: `k`, exact or graph (with an optional `ef`), an
/// optional payload filter.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SearchOptions {
    /// Results per query.
    pub k: usize,
    /// Scan every row instead of walking the graphs.
    pub exact: bool,
    /// Beam width of a graph walk (`None` = the server's default).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ef: Option<usize>,
    /// Payload filter in Qdrant's JSON shape.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub filter: Option<Value>,
    /// Codes the walk uses: `auto`, `none` (f32) or `sq8` (`None` = the
    /// server's default).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quantization: Option<String>,
    /// Quantized walks rescore `k × oversampling` candidates in f32 and keep
    /// a beam of `max(ef, k × oversampling)`; `max(ef, k) / k` rescores the
    /// whole beam, as the engine is measured in process (`None` = the
    /// server's default, 4).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub oversampling: Option<f32>,
}

impl SearchOptions {
    /// `k` results, exact or the server's default graph walk, no filter.
    pub fn new(k: usize, exact: bool) -> Self {
        Self {
            k,
            exact,
            ef: None,
            filter: None,
            quantization: None,
            oversampling: None,
        }
    }

    /// The mode's name in reports: `exact`, `graph` or `ef=N`, followed by
    /// ` oversampling=X` and ` quantization=Q` when asked for.
    pub fn mode(&self) -> String {
        let mut walk: String = match (self.exact, self.ef) {
            (true, _) => "exact".into(),
            (false, None) => "graph".into(),
            (false, Some(ef)) => format!("ef={ef}"),
        };
        if self.exact {
            return walk;
        }
        if let Some(o) = self.oversampling {
            walk.push_str(&format!(" oversampling={o}"));
        }
        if let Some(q) = &self.quantization {
            walk.push_str(&format!(" quantization={q}"));
        }
        walk
    }
}

/// Parses a `--store` value: a directory, or `s3://bucket/prefix`.
pub fn parse_store(text: &str) -> Result<eddy_manifest::StoreLocation, String> {
    eddy_manifest::StoreLocation::parse(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unset_options_are_left_out() {
        let o = SearchOptions::new(10, true);
        assert_eq!(
            serde_json::to_value(&o).expect("serializes"),
            serde_json::json!({"k": 10, "exact": true})
        );
        assert_eq!(o.mode(), "exact");
        let o = SearchOptions {
            ef: Some(64),
            filter: Some(serde_json::json!({"must": []})),
            ..SearchOptions::new(100, false)
        };
        let v = serde_json::to_value(&o).expect("serializes");
        assert_eq!(v["ef"], 64);
        assert_eq!(v["filter"], serde_json::json!({"must": []}));
        assert_eq!(o.mode(), "ef=64");
        assert_eq!(SearchOptions::new(10, false).mode(), "graph");
        let o = SearchOptions {
            ef: Some(32),
            quantization: Some("none".into()),
            ..SearchOptions::new(10, false)
        };
        assert_eq!(
            serde_json::to_value(&o).expect("serializes")["quantization"],
            "none"
        );
        assert_eq!(o.mode(), "ef=32 quantization=none");
        let o = SearchOptions {
            ef: Some(10),
            oversampling: Some(1.0),
            quantization: Some("sq8".into()),
            ..SearchOptions::new(10, false)
        };
        assert_eq!(
            serde_json::to_value(&o).expect("serializes")["oversampling"],
            1.0
        );
        assert_eq!(o.mode(), "ef=10 oversampling=1 quantization=sq8");
    }
}
