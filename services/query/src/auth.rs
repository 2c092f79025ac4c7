//! API keys and their scopes: who may read (search, points, count,
//! listings, metrics) and who may also administer (create collections).
//!
//! Both doors ask the same [`ApiKeys`]: HTTP with `Authorization: Bearer
//! KEY` or an `api-key: KEY` header, Flight with the same metadata or a
//! handshake (`Basic` credentials whose password is the key, answered with
//! a bearer token). Keys are compared in constant time and never logged:
//! [`ApiKey`]'s `Debug` prints only the scope.

use std::fmt;
use std::net::SocketAddr;
use std::path::Path;

use crate::error::ApiError;

/// What a key may do; `Admin` includes `Read`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Scope {
    /// Search, points, count, listings, metrics.
    Read,
    /// Also create collections.
    Admin,
}

impl Scope {
    fn name(self) -> &'static str {
        match self {
            Scope::Read => "read",
            Scope::Admin => "admin",
        }
    }
}

/// One key with its scope; the key text never appears in `Debug`.
#[derive(Clone)]
pub struct ApiKey {
    secret: Vec<u8>,
    scope: Scope,
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ApiKey({}, <redacted>)", self.scope.name())
    }
}

/// A key as configured (flag, environment): `Debug` hides it, so a
/// printed config shows no secret.
#[derive(Clone)]
pub struct SecretKey(String);

impl std::str::FromStr for SecretKey {
    type Err = std::convert::Infallible;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(Self(s.to_owned()))
    }
}

impl fmt::Debug for SecretKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// Errors reading the key configuration.
#[derive(Debug, thiserror::Error)]
pub enum KeysError {
    /// The keys file could not be read.
    #[error("reading the API keys file {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// The error.
        source: std::io::Error,
    },
    /// A line of the keys file is not `read KEY` or `admin KEY`.
    #[error("API keys file {path}, line {line}: expected `read KEY` or `admin KEY`")]
    Line {
        /// The file.
        path: String,
        /// 1-based line number (the line itself is not repeated: it holds a key).
        line: usize,
    },
    /// A key is too short to be a secret.
    #[error("an API key must have at least {min} characters")]
    TooShort {
        /// The least length.
        min: usize,
    },
    /// No keys, and a listener reachable from other hosts.
    #[error(
        "no API keys are configured and {addr} is reachable from other hosts: set \
         EDDY_ADMIN_API_KEYS / EDDY_READ_API_KEYS or --api-keys-file, or pass \
         --insecure-no-auth to serve without keys"
    )]
    OpenOnNetwork {
        /// The listener.
        addr: SocketAddr,
    },
}

/// The least key length accepted.
pub const MIN_KEY_LEN: usize = 16;

/// The keys a service accepts. With none configured every caller is an
/// admin (allowed only on loopback listeners or with `--insecure-no-auth`).
#[derive(Debug, Clone, Default)]
pub struct ApiKeys {
    keys: Vec<ApiKey>,
}

impl ApiKeys {
    /// Keys from the flag lists and an optional file of `read KEY` /
    /// `admin KEY` lines (`#` starts a comment).
    pub fn load(
        read: &[SecretKey],
        admin: &[SecretKey],
        file: Option<&Path>,
    ) -> Result<Self, KeysError> {
        let mut keys = Vec::new();
        let mut add = |key: &str, scope: Scope| -> Result<(), KeysError> {
            let key = key.trim();
            if key.is_empty() {
                return Ok(());
            }
            if key.len() < MIN_KEY_LEN {
                return Err(KeysError::TooShort { min: MIN_KEY_LEN });
            }
            keys.push(ApiKey {
                secret: key.as_bytes().to_vec(),
                scope,
            });
            Ok(())
        };
        for k in read {
            add(&k.0, Scope::Read)?;
        }
        for k in admin {
            add(&k.0, Scope::Admin)?;
        }
        if let Some(path) = file {
            let shown = path.display().to_string();
            let text = std::fs::read_to_string(path).map_err(|source| KeysError::Read {
                path: shown.clone(),
                source,
            })?;
            for (i, line) in text.lines().enumerate() {
                let line = line.split('#').next().unwrap_or_default().trim();
                if line.is_empty() {
                    continue;
                }
                let bad = || KeysError::Line {
                    path: shown.clone(),
                    line: i + 1,
                };
                let (scope, key) = line.split_once(char::is_whitespace).ok_or_else(bad)?;
                let scope = match scope {
                    "read" => Scope::Read,
                    "admin" => Scope::Admin,
                    _ => return Err(bad()),
                };
                add(key, scope)?;
            }
        }
        Ok(Self { keys })
    }

    /// Whether any key is configured (else the service is open).
    pub fn enabled(&self) -> bool {
        !self.keys.is_empty()
    }

    /// Refuses an open service on a listener other hosts can reach, unless
    /// `insecure` says that is meant.
    pub fn check_exposure(&self, addrs: &[SocketAddr], insecure: bool) -> Result<(), KeysError> {
        if self.enabled() || insecure {
            return Ok(());
        }
        match addrs.iter().find(|a| !a.ip().is_loopback()) {
            Some(addr) => Err(KeysError::OpenOnNetwork { addr: *addr }),
            None => Ok(()),
        }
    }

    /// The scope of a presented key, `None` for an unknown one. Every
    /// configured key is compared, each in constant time.
    fn scope_of(&self, presented: &[u8]) -> Option<Scope> {
        let mut found = None;
        for key in &self.keys {
            if constant_time_eq(&key.secret, presented) {
                found = found.max(Some(key.scope));
            }
        }
        found
    }

    /// Allows a caller that presented `presented` (the text after `Bearer`,
    /// or an `api-key` header) to do what `need` covers: 401 without a
    /// valid key, 403 with a key of too small a scope.
    pub fn authorize(&self, presented: Option<&str>, need: Scope) -> Result<(), ApiError> {
        if !self.enabled() {
            return Ok(());
        }
        let Some(presented) = presented else {
            return Err(ApiError::Unauthorized(
                "an API key is required: send `Authorization: Bearer KEY` or `api-key: KEY`".into(),
            ));
        };
        match self.scope_of(presented.as_bytes()) {
            None => Err(ApiError::Unauthorized("unknown API key".into())),
            Some(scope) if scope >= need => Ok(()),
            Some(scope) => Err(ApiError::Forbidden(format!(
                "this API key has the {} scope; this needs {}",
                scope.name(),
                need.name()
            ))),
        }
    }

    /// The key a Flight `Basic` handshake header carries (its password),
    /// if it is one of ours.
    pub fn basic_password(&self, header: &str) -> Option<String> {
        use base64::Engine as _;
        let encoded = header.strip_prefix("Basic ")?.trim();
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .ok()?;
        let text = String::from_utf8(decoded).ok()?;
        let (_, password) = text.split_once(':')?;
        self.scope_of(password.as_bytes())
            .map(|_| password.to_owned())
    }
}

/// The key a request presents, from its headers: `Authorization: Bearer
/// KEY` or `api-key: KEY`. `get` reads one header as text.
pub fn presented_key<'a>(get: impl Fn(&str) -> Option<&'a str>) -> Option<&'a str> {
    if let Some(auth) = get("authorization") {
        if let Some(token) = auth.strip_prefix("Bearer ") {
            return Some(token.trim());
        }
    }
    get("api-key").map(str::trim)
}

/// Compares two byte strings in time that depends only on their lengths.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    const READ: &str = "read-key-0123456789";
    const ADMIN: &str = "admin-key-0123456789";

    fn keys() -> ApiKeys {
        let secret = |s: &str| SecretKey(s.to_owned());
        ApiKeys::load(&[secret(READ)], &[secret(ADMIN)], None).expect("keys")
    }

    #[test]
    fn scopes_decide_401_and_403() {
        let k = keys();
        assert!(k.authorize(Some(READ), Scope::Read).is_ok());
        assert!(k.authorize(Some(ADMIN), Scope::Read).is_ok());
        assert!(k.authorize(Some(ADMIN), Scope::Admin).is_ok());
        let status = |r: Result<(), ApiError>| r.map_err(|e| e.status().as_u16()).err();
        assert_eq!(status(k.authorize(Some(READ), Scope::Admin)), Some(403));
        assert_eq!(status(k.authorize(None, Scope::Read)), Some(401));
        assert_eq!(status(k.authorize(Some("nope"), Scope::Read)), Some(401));
        assert!(ApiKeys::default().authorize(None, Scope::Admin).is_ok());
    }

    #[test]
    fn headers_give_the_key_and_debug_hides_it() {
        let headers = [("authorization", "Bearer abc"), ("api-key", "def")];
        let get = |name: &str| headers.iter().find(|h| h.0 == name).map(|h| h.1);
        assert_eq!(presented_key(get), Some("abc"));
        assert_eq!(
            presented_key(|n| (n == "api-key").then_some(" def ")),
            Some("def")
        );
        assert_eq!(presented_key(|_| None), None);
        let shown = format!("{:?}", keys());
        assert!(!shown.contains(READ) && !shown.contains(ADMIN), "{shown}");
    }

    #[test]
    fn the_keys_file_and_its_errors() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("keys");
        std::fs::write(
            &path,
            format!("# ops\nadmin {ADMIN}\n\nread {READ} # jobs\n"),
        )
        .expect("write");
        let k = ApiKeys::load(&[], &[], Some(&path)).expect("keys");
        assert!(k.authorize(Some(ADMIN), Scope::Admin).is_ok());
        assert!(k.authorize(Some(READ), Scope::Admin).is_err());
        std::fs::write(&path, format!("write {ADMIN}\n")).expect("write");
        let err = ApiKeys::load(&[], &[], Some(&path)).expect_err("bad scope");
        assert!(!err.to_string().contains(ADMIN), "{err}");
        assert!(matches!(
            ApiKeys::load(&[SecretKey("short".into())], &[], None),
            Err(KeysError::TooShort { .. })
        ));
    }

    #[test]
    fn an_open_service_stays_on_loopback() {
        let local: SocketAddr = "127.0.0.1:8080".parse().expect("addr");
        let any: SocketAddr = "0.0.0.0:8080".parse().expect("addr");
        let open = ApiKeys::default();
        assert!(open.check_exposure(&[local], false).is_ok());
        assert!(open.check_exposure(&[local, any], false).is_err());
        assert!(open.check_exposure(&[any], true).is_ok());
        assert!(keys().check_exposure(&[any], false).is_ok());
    }

    #[test]
    fn a_basic_handshake_carries_the_key_as_its_password() {
        use base64::Engine as _;
        let k = keys();
        let basic = |s: &str| {
            format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(s)
            )
        };
        assert_eq!(
            k.basic_password(&basic(&format!("job:{READ}"))).as_deref(),
            Some(READ)
        );
        assert_eq!(k.basic_password(&basic("job:wrong")), None);
        assert_eq!(k.basic_password("Bearer x"), None);
    }
}
