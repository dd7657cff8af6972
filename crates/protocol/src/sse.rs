//! Server-sent events framing (the subset Anthropic uses): events are blocks of `field: value`
//! lines ended by a blank line; `\n` and `\r\n` line ends are both accepted.

use bytes::{Bytes, BytesMut};
use std::borrow::Cow;

/// Finds the end of the first complete event in `buf`, scanning from `from` (a position
/// returned by an earlier call, so bytes are never scanned twice). `Ok(end)` is the index just
/// past the blank line; `Err(resume)` means no complete event yet.
pub fn find_event_end(buf: &[u8], from: usize) -> Result<usize, usize> {
    let start = from.min(buf.len());
    for i in memchr::memchr_iter(b'\n', &buf[start..]).map(|i| i + start) {
        match buf.get(i + 1) {
            Some(b'\n') => return Ok(i + 2),
            Some(b'\r') => match buf.get(i + 2) {
                Some(b'\n') => return Ok(i + 3),
                Some(_) => {}
                None => return Err(i),
            },
            Some(_) => {}
            None => return Err(i),
        }
    }
    Err(buf.len())
}

/// The value of the `event:` field of a raw event, if present.
pub fn event_name(raw: &[u8]) -> Option<&[u8]> {
    for line in lines(raw) {
        if let Some(v) = field(line, b"event") {
            return Some(v);
        }
    }
    None
}

/// The concatenated `data:` lines of a raw event (joined with `\n`, as the SSE spec says).
pub fn event_data(raw: &[u8]) -> Cow<'_, [u8]> {
    let mut single: Option<&[u8]> = None;
    let mut joined: Option<Vec<u8>> = None;
    for line in lines(raw) {
        if let Some(v) = field(line, b"data") {
            match (&mut joined, single) {
                (Some(j), _) => {
                    j.push(b'\n');
                    j.extend_from_slice(v);
                }
                (None, Some(first)) => {
                    let mut j = first.to_vec();
                    j.push(b'\n');
                    j.extend_from_slice(v);
                    joined = Some(j);
                }
                (None, None) => single = Some(v),
            }
        }
    }
    match (joined, single) {
        (Some(j), _) => Cow::Owned(j),
        (None, Some(s)) => Cow::Borrowed(s),
        (None, None) => Cow::Borrowed(&[]),
    }
}

/// Formats one event as `event: <name>\ndata: <data>\n\n`.
pub fn format_event(name: &str, data: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(name.len() + data.len() + 16);
    out.extend_from_slice(b"event: ");
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b"\ndata: ");
    out.extend_from_slice(data);
    out.extend_from_slice(b"\n\n");
    out.freeze()
}

/// The lines of `raw` (split at every `\n`, as `split` would, a trailing `\r` removed). Found
/// with `memchr`: a relay reads the name and data of every event it translates, and a
/// byte-at-a-time split was a fifth of the translating proxy's CPU (docs/BENCHMARKS.md,
/// *Translation to OpenAI's APIs*).
fn lines(raw: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut ends = memchr::memchr_iter(b'\n', raw);
    let mut start = Some(0);
    std::iter::from_fn(move || {
        let from = start?;
        let end = ends.next();
        start = end.map(|e| e + 1);
        let line = &raw[from..end.unwrap_or(raw.len())];
        Some(line.strip_suffix(b"\r").unwrap_or(line))
    })
}

fn field<'a>(line: &'a [u8], name: &[u8]) -> Option<&'a [u8]> {
    let rest = line.strip_prefix(name)?;
    let rest = rest.strip_prefix(b":")?;
    Some(rest.strip_prefix(b" ").unwrap_or(rest))
}

/// One parsed event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// The `event:` field; empty when absent.
    pub name: String,
    /// The joined `data:` lines.
    pub data: String,
}

/// An incremental parser for consumers that want owned events (tests, replay recording).
#[derive(Debug, Default)]
pub struct EventParser {
    buf: BytesMut,
    scan: usize,
}

impl EventParser {
    /// A new, empty parser.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends bytes received from the wire.
    pub fn push(&mut self, chunk: &[u8]) {
        self.buf.extend_from_slice(chunk);
    }

    /// The next complete event, if any. Events with neither a name nor data (comments,
    /// stray blank lines) are skipped.
    pub fn next_event(&mut self) -> Option<Event> {
        loop {
            match find_event_end(&self.buf, self.scan) {
                Ok(end) => {
                    let raw = self.buf.split_to(end);
                    self.scan = 0;
                    let name = event_name(&raw).unwrap_or_default();
                    let data = event_data(&raw);
                    if name.is_empty() && data.is_empty() {
                        continue;
                    }
                    return Some(Event {
                        name: String::from_utf8_lossy(name).into_owned(),
                        data: String::from_utf8_lossy(&data).into_owned(),
                    });
                }
                Err(resume) => {
                    self.scan = resume;
                    return None;
                }
            }
        }
    }

    /// Bytes received but not yet part of a complete event.
    pub fn pending(&self) -> &[u8] {
        &self.buf
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn splits_lf_and_crlf() {
        let s = b"event: a\ndata: 1\n\nevent: b\r\ndata: 2\r\n\r\nevent: c\ndata: 3\n";
        let mut p = EventParser::new();
        p.push(s);
        assert_eq!(
            p.next_event().unwrap(),
            Event {
                name: "a".into(),
                data: "1".into()
            }
        );
        assert_eq!(
            p.next_event().unwrap(),
            Event {
                name: "b".into(),
                data: "2".into()
            }
        );
        assert_eq!(p.next_event(), None);
        p.push(b"\n");
        assert_eq!(
            p.next_event().unwrap(),
            Event {
                name: "c".into(),
                data: "3".into()
            }
        );
    }

    proptest! {
        #[test]
        fn lines_split_as_split_does(raw in proptest::collection::vec(
            prop_oneof![Just(b'\n'), Just(b'\r'), Just(b'a')], 0..24)) {
            let expected: Vec<&[u8]> = raw
                .split(|b| *b == b'\n')
                .map(|l| l.strip_suffix(b"\r").unwrap_or(l))
                .collect();
            prop_assert_eq!(lines(&raw).collect::<Vec<_>>(), expected);
        }
    }

    #[test]
    fn multi_line_data_is_joined() {
        assert_eq!(&*event_data(b"data: a\ndata:b\n\n"), b"a\nb");
        assert_eq!(event_name(b": comment\nevent:x\n\n"), Some(&b"x"[..]));
    }

    proptest! {
        #[test]
        fn any_chunking_yields_the_same_events(cuts in proptest::collection::vec(0usize..200, 0..8)) {
            let stream = b"event: message_start\ndata: {\"a\":1}\n\nevent: ping\ndata: {}\r\n\r\n: keep\n\nevent: x\ndata: y\ndata: z\n\n";
            let mut whole = EventParser::new();
            whole.push(stream);
            let expected: Vec<_> = std::iter::from_fn(|| whole.next_event()).collect();
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c % stream.len()).collect();
            cuts.sort_unstable();
            let mut p = EventParser::new();
            let mut got = Vec::new();
            let mut last = 0;
            for c in cuts.into_iter().chain([stream.len()]) {
                p.push(&stream[last..c]);
                last = c;
                while let Some(e) = p.next_event() { got.push(e); }
            }
            prop_assert_eq!(got, expected);
        }

        #[test]
        fn never_panics(data in proptest::collection::vec(any::<u8>(), 0..512)) {
            let mut p = EventParser::new();
            p.push(&data);
            while p.next_event().is_some() {}
        }
    }
}
