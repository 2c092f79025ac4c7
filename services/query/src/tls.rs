//! TLS on both front doors from one certificate chain and key (PEM files):
//! a rustls acceptor for the HTTP threads' handshakes, and tonic's own
//! TLS for Flight. Loaded and checked once at start, so a wrong path or a
//! key that does not match fails the start, not the first client.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;

/// Errors loading the certificate and key.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A PEM file could not be read or holds nothing usable.
    #[error("TLS {what} {path}: {message}")]
    File {
        /// `certificate` or `key`.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// rustls refused the pair (a key that does not match, say).
    #[error("TLS configuration: {0}")]
    Config(#[from] rustls::Error),
}

/// The loaded certificate chain and key, ready for either door.
#[derive(Clone)]
pub struct TlsIdentity {
    cert_pem: Vec<u8>,
    key_pem: Vec<u8>,
    http: Arc<rustls::ServerConfig>,
}

impl std::fmt::Debug for TlsIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TlsIdentity(<key redacted>)")
    }
}

fn read(what: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|e| TlsError::File {
        what,
        path: path.to_owned(),
        message: e.to_string(),
    })
}

impl TlsIdentity {
    /// Reads and checks `cert` (a PEM chain, leaf first) and `key`.
    pub fn load(cert: &Path, key: &Path) -> Result<Self, TlsError> {
        let cert_pem = read("certificate", cert)?;
        let key_pem = read("key", key)?;
        let bad = |what, path: &Path, message: String| TlsError::File {
            what,
            path: path.to_owned(),
            message,
        };
        let chain = CertificateDer::pem_slice_iter(&cert_pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| bad("certificate", cert, e.to_string()))?;
        if chain.is_empty() {
            return Err(bad(
                "certificate",
                cert,
                "no certificate in the file".into(),
            ));
        }
        // The message never quotes the file: it holds the key.
        let private = PrivateKeyDer::from_pem_slice(&key_pem)
            .map_err(|e| bad("key", key, format!("no usable private key ({e})")))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut http = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(chain, private)?;
        http.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Self {
            cert_pem,
            key_pem,
            http: Arc::new(http),
        })
    }

    /// tonic's TLS settings for the Flight server.
    pub fn flight(&self) -> tonic::transport::ServerTlsConfig {
        tonic::transport::ServerTlsConfig::new().identity(tonic::transport::Identity::from_pem(
            &self.cert_pem,
            &self.key_pem,
        ))
    }

    /// The rustls acceptor of the HTTP threads' handshakes.
    pub fn http_acceptor(&self) -> TlsAcceptor {
        TlsAcceptor::from(self.http.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_matching_pair_loads_and_a_wrong_key_is_refused() {
        let dir = tempfile::tempdir().expect("tmp");
        let one = rcgen::generate_simple_self_signed(vec!["localhost".into()]).expect("cert");
        let two = rcgen::generate_simple_self_signed(vec!["localhost".into()]).expect("cert");
        let cert = dir.path().join("cert.pem");
        let key = dir.path().join("key.pem");
        let other_key = dir.path().join("other.pem");
        std::fs::write(&cert, one.cert.pem()).expect("write");
        std::fs::write(&key, one.key_pair.serialize_pem()).expect("write");
        std::fs::write(&other_key, two.key_pair.serialize_pem()).expect("write");
        assert!(TlsIdentity::load(&cert, &key).is_ok());
        assert!(TlsIdentity::load(&cert, &other_key).is_err());
        assert!(
            TlsIdentity::load(&key, &key).is_err(),
            "a key is no certificate"
        );
        let missing = TlsIdentity::load(&dir.path().join("nope"), &key).expect_err("missing");
        assert!(missing.to_string().contains("certificate"), "{missing}");
    }
}
