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
