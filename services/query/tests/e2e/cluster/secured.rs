//! What a secured test cluster runs with: a certificate for `localhost`,
//! API keys of both scopes, and the Kafka user.

use std::path::PathBuf;

/// A self-signed certificate for `localhost` and API keys of both scopes:
/// what a secured cluster runs with.
pub struct Secured {
    /// Holds the PEM files.
    _dir: tempfile::TempDir,
    /// The certificate (PEM file), also the clients' trust root.
    pub cert: PathBuf,
    /// The private key (PEM file).
    pub key: PathBuf,
    /// The certificate as PEM text.
    pub cert_pem: String,
    /// A read-scope key.
    pub read_key: String,
    /// An admin-scope key.
    pub admin_key: String,
    /// The Kafka user's SCRAM password, in a secrets file for the services.
    pub kafka_password: String,
    /// `sasl.password=...`: what `--kafka-secrets-file` names.
    pub kafka_secrets_file: PathBuf,
}

/// The Kafka user of a secured cluster.
pub const KAFKA_USER: &str = "eddy";

impl Secured {
    /// Generates a certificate for `localhost` and two keys.
    pub fn generate() -> Self {
        let dir = tempfile::tempdir().expect("tmp");
        let pair = rcgen::generate_simple_self_signed(vec!["localhost".into()]).expect("cert");
        let cert = dir.path().join("cert.pem");
        let key = dir.path().join("key.pem");
        let cert_pem = pair.cert.pem();
        std::fs::write(&cert, &cert_pem).expect("write cert");
        std::fs::write(&key, pair.key_pair.serialize_pem()).expect("write key");
        let kafka_password = "scram-0123456789abcdef".to_owned();
        let kafka_secrets_file = dir.path().join("kafka.secrets");
        std::fs::write(
            &kafka_secrets_file,
            format!("# the Kafka user's password\nsasl.password={kafka_password}\n"),
        )
        .expect("write secrets");
        // Readable by its owner only, as a secrets file should be.
        std::fs::set_permissions(
            &kafka_secrets_file,
            std::os::unix::fs::PermissionsExt::from_mode(0o600),
        )
        .expect("chmod 600");
        Self {
            _dir: dir,
            cert,
            key,
            cert_pem,
            read_key: "read-0123456789abcdef".into(),
            admin_key: "admin-0123456789abcdef".into(),
            kafka_password,
            kafka_secrets_file,
        }
    }

    /// An HTTP client that trusts the certificate and sends no key.
    pub fn client(&self) -> reqwest::Client {
        let root = reqwest::Certificate::from_pem(self.cert_pem.as_bytes()).expect("root");
        reqwest::Client::builder()
            .add_root_certificate(root)
            .build()
            .expect("client")
    }

    /// Like [`Secured::client`], sending `key` on every request.
    pub(super) fn client_with_key(&self, key: &str) -> reqwest::Client {
        let root = reqwest::Certificate::from_pem(self.cert_pem.as_bytes()).expect("root");
        let mut headers = reqwest::header::HeaderMap::new();
        let value = format!("Bearer {key}").parse().expect("header");
        headers.insert(reqwest::header::AUTHORIZATION, value);
        reqwest::Client::builder()
            .add_root_certificate(root)
            .default_headers(headers)
            .build()
            .expect("client")
    }
}
