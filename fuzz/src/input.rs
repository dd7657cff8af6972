//! Turning fuzz bytes into structured inputs, deterministically.

/// Splits `data` into chunks whose sizes cycle through `sizes` (each 0..=63 bytes; a size of
/// 0 yields an empty chunk, which a parser must take too). No sizes: one chunk.
pub fn chunks<'a>(data: &'a [u8], sizes: &[u8]) -> Vec<&'a [u8]> {
    if sizes.is_empty() {
        return vec![data];
    }
    let mut out = Vec::new();
    let mut at = 0;
    let mut i = 0;
    while at < data.len() {
        let n = usize::from(sizes[i % sizes.len()] % 64).min(data.len() - at);
        out.push(&data[at..at + n]);
        at += n;
        i += 1;
        // Empty chunks are taken, but a run of them must not loop forever.
        if i > data.len() * 2 + sizes.len() {
            out.push(&data[at..]);
            break;
        }
    }
    out
}

/// The first `n` bytes as control bytes and the rest as payload (short inputs: all control).
pub fn split(data: &[u8], n: usize) -> (&[u8], &[u8]) {
    data.split_at(n.min(data.len()))
}

/// The non-empty lines of `data` (lossy UTF-8).
pub fn lines(data: &[u8]) -> Vec<String> {
    data.split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| String::from_utf8_lossy(l).into_owned())
        .collect()
}

/// `value` through JSON and back: the round trip must give it back unchanged.
pub fn assert_json_round_trip<T>(value: &T, what: &str)
where
    T: serde::Serialize + serde::de::DeserializeOwned + PartialEq + std::fmt::Debug,
{
    let text = match serde_json::to_string(value) {
        Ok(t) => t,
        Err(e) => panic!("{what} does not serialize: {e}: {value:?}"),
    };
    let back: T = match serde_json::from_str(&text) {
        Ok(v) => v,
        Err(e) => panic!("{what} does not read back: {e}: {text}"),
    };
    assert_eq!(&back, value, "{what} changed through JSON: {text}");
}

/// Reads JSON text as a `Value`, with every surrogate escape (`\ud800`-`\udfff`) read as
/// U+FFFD first: a lone surrogate is valid JSON text (JavaScript reads it) that `Value`
/// refuses, and what the project passes through untouched may hold one.
pub fn json_value(text: &[u8]) -> Result<serde_json::Value, serde_json::Error> {
    let mut text = text.to_vec();
    let mut i = 0;
    while i + 1 < text.len() {
        if text[i] != b'\\' {
            i += 1;
            continue;
        }
        let hex = text.get(i + 2..i + 6);
        if text[i + 1] == b'u'
            && hex.is_some_and(|h| {
                h.iter().all(u8::is_ascii_hexdigit)
                    && h[0].eq_ignore_ascii_case(&b'd')
                    && matches!(h[1].to_ascii_lowercase(), b'8'..=b'9' | b'a'..=b'f')
            })
        {
            text[i + 2..i + 6].copy_from_slice(b"FFFD");
            i += 6;
        } else {
            // Any other escape: skip the escaped character (a `\\` must not start another).
            i += 2;
        }
    }
    serde_json::from_slice(&text)
}
