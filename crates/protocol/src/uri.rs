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
    percent_encode_into(&mut out, path.as_os_str().as_bytes(), b"/-._~");
    out
}

/// One path segment (a file name) for a URI: every byte outside the unreserved set, `/`
/// included, percent-encoded.
pub fn percent_encode_segment(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    percent_encode_into(&mut out, name.as_bytes(), b"-._~");
    out
}

fn percent_encode_into(out: &mut String, bytes: &[u8], kept: &[u8]) {
    for &b in bytes {
        if b.is_ascii_alphanumeric() || kept.contains(&b) {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
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

/// The scheme of session URIs this host names itself (VS Code's `<provider>:/<id>` form).
pub const CLAUDE_SESSION_PREFIX: &str = "claude:/";
/// The scheme of session URIs newer VS Code builds choose.
pub const AHP_SESSION_PREFIX: &str = "ahp-session:/";
/// The prefix of default chat URIs: `ahp-chat://default/<base64url(session URI)>`.
pub const DEFAULT_CHAT_PREFIX: &str = "ahp-chat://default/";

/// A session's default chat URI in the form VS Code computes and subscribes to.
pub fn default_chat_uri(session_uri: &str) -> String {
    use base64::Engine as _;
    format!(
        "{DEFAULT_CHAT_PREFIX}{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(session_uri)
    )
}

/// The session URI inside a default chat URI.
pub fn session_of_default_chat(chat_uri: &str) -> Option<String> {
    use base64::Engine as _;
    let encoded = chat_uri.strip_prefix(DEFAULT_CHAT_PREFIX)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(encoded)
        .ok()?;
    String::from_utf8(bytes).ok()
}

/// The prefix of subagent chat URIs: `ahp-chat://subagent/<base64url(session URI)>/<toolCallId>`.
pub const SUBAGENT_CHAT_PREFIX: &str = "ahp-chat://subagent/";

/// The chat of the subagent a tool call of a session started, in the form VS Code computes
/// when a tool call names no chat of its own.
pub fn subagent_chat_uri(session_uri: &str, tool_call_id: &str) -> String {
    use base64::Engine as _;
    format!(
        "{SUBAGENT_CHAT_PREFIX}{}/{tool_call_id}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(session_uri)
    )
}

/// The session URI and the tool call id inside a subagent chat URI.
pub fn session_of_subagent_chat(chat_uri: &str) -> Option<(String, String)> {
    use base64::Engine as _;
    let rest = chat_uri.strip_prefix(SUBAGENT_CHAT_PREFIX)?;
    let (encoded, tool_call_id) = rest.split_once('/')?;
    if tool_call_id.is_empty() || tool_call_id.contains('/') {
        return None;
    }
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(encoded)
        .ok()?;
    Some((String::from_utf8(bytes).ok()?, tool_call_id.to_owned()))
}

/// The session id in a session URI of either form clients choose (`claude:/<id>`,
/// `ahp-session:/<id>`).
pub fn session_uri_id(session_uri: &str) -> Option<&str> {
    [CLAUDE_SESSION_PREFIX, AHP_SESSION_PREFIX]
        .iter()
        .find_map(|p| session_uri.strip_prefix(p))
        .map(|rest| rest.trim_start_matches('/'))
        .filter(|id| !id.is_empty())
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_segment_escapes_its_slashes_and_decodes_back() {
        let name = "a b/c%é.md";
        let enc = super::percent_encode_segment(name);
        assert_eq!(enc, "a%20b%2Fc%25%C3%A9.md");
        assert_eq!(super::percent_decode(&enc).unwrap(), name.as_bytes());
    }

    #[test]
    fn default_chat_uris_are_vs_codes_computed_form_and_decode_back() {
        // The example of VS Code's reference: a `claude:/` session and its default chat.
        let session = "claude:/0b9e5c1e-3d0b-4a77-a0a5-0c8e2d8f1a22";
        let chat = default_chat_uri(session);
        assert_eq!(
            chat,
            "ahp-chat://default/Y2xhdWRlOi8wYjllNWMxZS0zZDBiLTRhNzctYTBhNS0wYzhlMmQ4ZjFhMjI"
        );
        assert_eq!(session_of_default_chat(&chat).as_deref(), Some(session));
        assert_eq!(
            default_chat_uri("ahp-session:/0b9e5c1e-3d0b-4a77-a0a5-0c8e2d8f1a22"),
            "ahp-chat://default/YWhwLXNlc3Npb246LzBiOWU1YzFlLTNkMGItNGE3Ny1hMGE1LTBjOGUyZDhmMWEyMg"
        );
        assert_eq!(session_of_default_chat("ahp-chat://default/%%%"), None);
        assert_eq!(session_of_default_chat("ahp-chat:/x"), None);
    }

    #[test]
    fn subagent_chat_uris_decode_back_to_their_session_and_call() {
        let session = "claude:/0b9e5c1e-3d0b-4a77-a0a5-0c8e2d8f1a22";
        let chat = subagent_chat_uri(session, "toolu_01");
        assert_eq!(
            chat,
            "ahp-chat://subagent/Y2xhdWRlOi8wYjllNWMxZS0zZDBiLTRhNzctYTBhNS0wYzhlMmQ4ZjFhMjI/toolu_01"
        );
        assert_eq!(
            session_of_subagent_chat(&chat),
            Some((session.to_owned(), "toolu_01".to_owned()))
        );
        assert_eq!(session_of_subagent_chat("ahp-chat://subagent/Y2xh"), None);
        assert_eq!(session_of_subagent_chat("ahp-chat://subagent/Y2xh/"), None);
        assert_eq!(session_of_subagent_chat("ahp-chat://subagent/%%/t"), None);
        assert_eq!(session_of_subagent_chat(&default_chat_uri(session)), None);
    }

    #[test]
    fn session_ids_come_from_either_client_form() {
        assert_eq!(session_uri_id("claude:/abc"), Some("abc"));
        assert_eq!(session_uri_id("ahp-session:/abc"), Some("abc"));
        assert_eq!(session_uri_id("ahp-session:///abc"), Some("abc"));
        assert_eq!(session_uri_id("ahp-session:/"), None);
        assert_eq!(session_uri_id("copilot:/abc"), None);
    }

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
