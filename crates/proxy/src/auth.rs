//! The nonce, bearer-token check and Host-header check.

use std::net::SocketAddr;
use subtle::ConstantTimeEq;

/// A per-start secret: 256 random bits as 64 lower-case hex characters.
pub struct Nonce(pub(crate) String);

impl Nonce {
    /// Draws a fresh nonce from the OS random source.
    pub fn generate() -> Self {
        let bytes: [u8; 32] = rand::random();
        let mut hex = String::with_capacity(64);
        for b in bytes {
            hex.push_str(&format!("{b:02x}"));
        }
        Nonce(hex)
    }

    /// The hex text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Nonce {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Nonce(<redacted>)")
    }
}

/// Checks `Authorization: Bearer <nonce>.<sessionId>`; returns the session id.
pub(crate) fn check_bearer<'a>(header: Option<&'a [u8]>, nonce: &Nonce) -> Option<&'a str> {
    let value = std::str::from_utf8(header?).ok()?;
    let token = value
        .strip_prefix("Bearer ")
        .or_else(|| value.strip_prefix("bearer "))?
        .trim();
    let (given, session) = token.split_once('.')?;
    let ok: bool = given.as_bytes().ct_eq(nonce.as_str().as_bytes()).into();
    (ok && !session.is_empty()).then_some(session)
}

/// The Host header values served: the loopback names with the bound port, plus the explicit
/// listen address when it is not loopback.
pub(crate) fn allowed_hosts(requested: SocketAddr, bound: SocketAddr) -> Vec<String> {
    let port = bound.port();
    let mut hosts = vec![
        format!("127.0.0.1:{port}"),
        format!("localhost:{port}"),
        format!("[::1]:{port}"),
    ];
    if !requested.ip().is_loopback() && !requested.ip().is_unspecified() {
        hosts.push(SocketAddr::new(requested.ip(), port).to_string());
    }
    hosts
}

pub(crate) fn host_allowed(host: Option<&[u8]>, allowed: &[String]) -> bool {
    let Some(host) = host.and_then(|h| std::str::from_utf8(h).ok()) else {
        return false;
    };
    allowed.iter().any(|a| a.eq_ignore_ascii_case(host.trim()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nonce_is_256_bit_hex_and_fresh() {
        let a = Nonce::generate();
        let b = Nonce::generate();
        assert_eq!(a.as_str().len(), 64);
        assert!(
            a.as_str()
                .bytes()
                .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
        );
        assert_ne!(a.as_str(), b.as_str());
        assert_eq!(format!("{a:?}"), "Nonce(<redacted>)");
    }

    #[test]
    fn bearer_forms() {
        let n = Nonce::generate();
        let good = format!("Bearer {}.sess-1", n.as_str());
        assert_eq!(check_bearer(Some(good.as_bytes()), &n), Some("sess-1"));
        for bad in [
            String::new(),
            format!("Bearer {}", n.as_str()),
            format!("Bearer {}.", n.as_str()),
            format!("Basic {}.s", n.as_str()),
            "Bearer 00.s".to_owned(),
            format!("Bearer {}x.s", n.as_str()),
        ] {
            assert_eq!(check_bearer(Some(bad.as_bytes()), &n), None, "{bad}");
        }
        assert_eq!(check_bearer(None, &n), None);
    }

    #[test]
    fn hosts() {
        let bound: SocketAddr = "127.0.0.1:4000".parse().unwrap();
        let allowed = allowed_hosts("127.0.0.1:0".parse().unwrap(), bound);
        assert!(host_allowed(Some(b"127.0.0.1:4000"), &allowed));
        assert!(host_allowed(Some(b"LOCALHOST:4000"), &allowed));
        assert!(host_allowed(Some(b"[::1]:4000"), &allowed));
        assert!(!host_allowed(Some(b"evil.example:4000"), &allowed));
        assert!(!host_allowed(Some(b"127.0.0.1:4001"), &allowed));
        assert!(!host_allowed(None, &allowed));
        let lan = allowed_hosts(
            "192.168.1.5:0".parse().unwrap(),
            "192.168.1.5:4000".parse().unwrap(),
        );
        assert!(host_allowed(Some(b"192.168.1.5:4000"), &lan));
    }
}
