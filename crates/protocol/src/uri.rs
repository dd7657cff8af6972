//! `file:` URIs as AHP and ACP clients send them, in one place.

use std::ffi::OsString;
use std::fmt::Write as _;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

/// Why a `file:` URI names no local path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FileUriError {
    /// Another scheme.
    #[error("only file: URIs are served, not {0:?}")]
    NotFile(String),
    /// A query or fragment (an unencoded `?` or `#` in a file name would silently name
    /// another file).
    #[error("{0:?} has a query or fragment; percent-encode `?` and `#` in file names")]
    QueryOrFragment(String),
    /// An authority other than this host.
    #[error("{uri:?} names the host {host:?}; only files on this host are served")]
    RemoteHost {
        /// The URI.
        uri: String,
        /// Its host.
        host: String,
    },
    /// A broken `%` escape.
    #[error("{0:?} has a malformed %-escape")]
    BadEscape(String),
    /// A NUL byte.
    #[error("{0:?} has a NUL byte in its path")]
    Nul(String),
    /// Not absolute.
    #[error("{0} is a relative path")]
    Relative(String),
}

/// A `file://` URI for a path, every byte outside the unreserved set percent-encoded.
pub fn file_uri(path: &Path) -> String {
    let mut out = String::from("file://");
    for &b in path.as_os_str().as_bytes() {
        if b.is_ascii_alphanumeric() || b"/-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// Decodes `%XX` escapes; `None` for a malformed one.
pub fn percent_decode(s: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(s.len());
    let mut bytes = s.bytes();
    while let Some(b) = bytes.next() {
        if b == b'%' {
            let hi = char::from(bytes.next()?).to_digit(16)?;
            let lo = char::from(bytes.next()?).to_digit(16)?;
            out.push(u8::try_from(hi * 16 + lo).ok()?);
        } else {
            out.push(b);
        }
    }
    Some(out)
}

/// The absolute local path a `file:` URI names (percent-decoded, not normalized).
pub fn file_path(uri: &str) -> Result<PathBuf, FileUriError> {
    let rest = uri
        .split_once(':')
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("file"))
        .map(|(_, rest)| rest)
        .ok_or_else(|| FileUriError::NotFile(uri.to_owned()))?;
    if rest.contains(['?', '#']) {
        return Err(FileUriError::QueryOrFragment(uri.to_owned()));
    }
    let encoded = match rest.strip_prefix("//") {
        Some(authority_and_path) => {
            let at = authority_and_path
                .find('/')
                .unwrap_or(authority_and_path.len());
            let (host, path) = authority_and_path.split_at(at);
            if !host.is_empty() && !host.eq_ignore_ascii_case("localhost") {
                return Err(FileUriError::RemoteHost {
                    uri: uri.to_owned(),
                    host: host.to_owned(),
                });
            }
            path
        }
        None => rest,
    };
    let bytes = percent_decode(encoded).ok_or_else(|| FileUriError::BadEscape(uri.to_owned()))?;
    if bytes.contains(&0) {
        return Err(FileUriError::Nul(uri.to_owned()));
    }
    let path = PathBuf::from(OsString::from_vec(bytes));
    if !path.is_absolute() {
        return Err(FileUriError::Relative(path.display().to_string()));
    }
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_refusals() {
        let p = Path::new("/tmp/a b/ü#?.txt");
        let uri = file_uri(p);
        assert_eq!(uri, "file:///tmp/a%20b/%C3%BC%23%3F.txt");
        assert_eq!(file_path(&uri).unwrap(), p);
        assert_eq!(
            file_path("file://localhost/x").unwrap(),
            PathBuf::from("/x")
        );
        assert!(matches!(
            file_path("http://x/y"),
            Err(FileUriError::NotFile(_))
        ));
        assert!(matches!(
            file_path("file:///a?b"),
            Err(FileUriError::QueryOrFragment(_))
        ));
        assert!(matches!(
            file_path("file://evil/etc"),
            Err(FileUriError::RemoteHost { .. })
        ));
        assert!(matches!(
            file_path("file:///a%zz"),
            Err(FileUriError::BadEscape(_))
        ));
        assert!(matches!(
            file_path("file:///a%00b"),
            Err(FileUriError::Nul(_))
        ));
        assert!(matches!(
            file_path("file:relative"),
            Err(FileUriError::Relative(_))
        ));
    }
}
