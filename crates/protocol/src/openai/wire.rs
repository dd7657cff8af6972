//! Reading upstream JSON leniently and without copying.

use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;

/// The escaped contents of a JSON string value (without its quotes), `None` for anything
/// that is not a string (absent, `null`, another type).
pub(crate) fn str_inner(raw: Option<&RawValue>) -> Option<&[u8]> {
    let s = raw?.get().as_bytes();
    match s {
        [b'"', inner @ .., b'"'] => Some(inner),
        _ => None,
    }
}

/// Like [`str_inner`], empty strings counted as absent.
pub(crate) fn nonempty(raw: Option<&RawValue>) -> Option<&[u8]> {
    str_inner(raw).filter(|s| !s.is_empty())
}

/// A count that is `None` unless it is a non-negative integer, so that an odd value never
/// fails the whole event.
pub(crate) fn lenient_u64<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    let raw = <&RawValue>::deserialize(d)?;
    Ok(serde_json::from_str(raw.get()).ok())
}

/// Decodes the escaped contents of a JSON string.
pub(crate) fn decode(inner: &[u8]) -> String {
    let mut quoted = Vec::with_capacity(inner.len() + 2);
    quoted.push(b'"');
    quoted.extend_from_slice(inner);
    quoted.push(b'"');
    serde_json::from_slice::<String>(&quoted)
        .unwrap_or_else(|_| String::from_utf8_lossy(inner).into_owned())
}
