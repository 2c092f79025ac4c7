//! How the S3 client is configured: the standard `AWS_*` environment, then
//! the pairs a caller passes (named like those variables), eddy's own retry
//! and fetch settings, and eddy's default for payload signing.

use std::path::Path;
use std::time::Duration;

use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
use object_store::RetryConfig;

use super::s3::other;
use crate::Result;

/// Setting (beside `object_store`'s own keys): how long, in ms, a failed
/// request is retried (default 180,000).
const RETRY_TIMEOUT_MS: &str = "retry_timeout_ms";
/// Setting: how many times a failed request is retried (default 10).
const MAX_RETRIES: &str = "max_retries";
/// Setting: how many ranged GETs of one file are in flight at once while it
/// is fetched (default [`DEFAULT_FETCH_RANGES`]; 1 = one request per range,
/// one after another).
const FETCH_RANGES: &str = "fetch_ranges";
/// Ranged GETs in flight per fetched file unless `fetch_ranges` says
/// otherwise: one S3 stream is bound by its round trips and the server's
/// per-request rate, so a node catching up on one large segment reads it
/// in several streams at once.
pub(super) const DEFAULT_FETCH_RANGES: usize = 4;
/// The variable (and setting) that decides payload signing.
const UNSIGNED_PAYLOAD: &str = "aws_unsigned_payload";

/// How the backend talks to its bucket: the client's builder and eddy's
/// own transfer settings.
pub(super) struct S3Settings {
    /// The client, configured.
    pub builder: AmazonS3Builder,
    /// Ranged GETs in flight per fetched file (at least 1).
    pub fetch_ranges: usize,
}

/// The settings for the store at `location`: the environment, then
/// `config` on top, retries and fetch ranges as configured, and unsigned
/// payloads over TLS unless signing is decided explicitly (see
/// [`unsigned_by_default`]).
pub(super) fn settings(location: &str, config: &[(&str, String)]) -> Result<S3Settings> {
    let at = Path::new(location);
    let mut builder = AmazonS3Builder::from_env();
    let mut retry = RetryConfig::default();
    let mut fetch_ranges = DEFAULT_FETCH_RANGES;
    let mut signing_decided = std::env::var_os(UNSIGNED_PAYLOAD.to_ascii_uppercase()).is_some();
    for (name, value) in config {
        match name.to_ascii_lowercase().as_str() {
            RETRY_TIMEOUT_MS => {
                let ms = value.parse().map_err(|e| other(at, e))?;
                retry.retry_timeout = Duration::from_millis(ms);
                continue;
            }
            MAX_RETRIES => {
                retry.max_retries = value.parse().map_err(|e| other(at, e))?;
                continue;
            }
            FETCH_RANGES => {
                fetch_ranges = value.parse().map_err(|e| other(at, e))?;
                if fetch_ranges == 0 {
                    return Err(other(
                        at,
                        std::io::Error::other("fetch_ranges must be at least 1"),
                    ));
                }
                continue;
            }
            UNSIGNED_PAYLOAD => signing_decided = true,
            _ => {}
        }
        let key: AmazonS3ConfigKey = name
            .to_ascii_lowercase()
            .parse()
            .map_err(|e| other(at, e))?;
        builder = builder.with_config(key, value.clone());
    }
    if !signing_decided && unsigned_by_default(&builder) {
        builder = builder.with_unsigned_payload(true);
    }
    Ok(S3Settings {
        builder: builder.with_retry(retry),
        fetch_ranges,
    })
}

/// Whether requests send `UNSIGNED-PAYLOAD` instead of the body's SHA-256
/// when nobody decided: yes over TLS (an `https` endpoint, or AWS itself
/// when none is named). TLS protects the body in transit and eddy's CRC32
/// (signed metadata, checked after every download) end to end, while
/// hashing every uploaded byte cost a fifth of the ingest process's CPU
/// against an S3 server (`ingest_throughput`, 2026-12-03). Over plain HTTP
/// the body stays signed: nothing else protects it there.
fn unsigned_by_default(builder: &AmazonS3Builder) -> bool {
    builder
        .get_config_value(&AmazonS3ConfigKey::Endpoint)
        .is_none_or(|endpoint| endpoint.to_ascii_lowercase().starts_with("https://"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unsigned(config: &[(&str, String)]) -> String {
        settings("s3://b", config)
            .expect("settings")
            .builder
            .get_config_value(&AmazonS3ConfigKey::UnsignedPayload)
            .unwrap_or_default()
    }

    #[test]
    fn payloads_go_unsigned_over_tls_and_signed_over_plain_http_unless_decided() {
        if std::env::var_os("AWS_UNSIGNED_PAYLOAD").is_some()
            || std::env::var_os("AWS_ENDPOINT").is_some()
        {
            return; // the environment decides; nothing to check here
        }
        let https = ("aws_endpoint", "https://s3.example.com".to_owned());
        let http = ("aws_endpoint", "http://127.0.0.1:9000".to_owned());
        assert_eq!(unsigned(&[]), "true", "AWS itself");
        assert_eq!(unsigned(std::slice::from_ref(&https)), "true");
        assert_eq!(unsigned(std::slice::from_ref(&http)), "false");
        let signed = ("aws_unsigned_payload", "false".to_owned());
        assert_eq!(unsigned(&[https, signed]), "false", "decided by the caller");
        let unsigned_http = ("aws_unsigned_payload", "true".to_owned());
        assert_eq!(unsigned(&[http, unsigned_http]), "true");
    }

    #[test]
    fn retry_and_fetch_settings_are_eddys_and_bad_values_are_refused() {
        assert!(settings("s3://b", &[("retry_timeout_ms", "5000".to_owned())]).is_ok());
        assert!(settings("s3://b", &[("max_retries", "many".to_owned())]).is_err());
        assert!(settings("s3://b", &[("aws_no_such_setting", "1".to_owned())]).is_err());
        let ranges = |v: &str| settings("s3://b", &[("fetch_ranges", v.to_owned())]);
        assert_eq!(ranges("8").map(|s| s.fetch_ranges).ok(), Some(8));
        assert!(ranges("0").is_err(), "at least one range");
        assert!(ranges("some").is_err());
        let default = settings("s3://b", &[]).map(|s| s.fetch_ranges).ok();
        assert_eq!(default, Some(DEFAULT_FETCH_RANGES));
    }
}
