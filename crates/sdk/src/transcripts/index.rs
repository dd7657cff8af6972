//! A transcript read in bounded memory: one pass notes where each entry is and how it links
//! (a few words per entry, not the entry), then only the entries wanted are read back from
//! their offsets, one at a time. Memory is the index plus the largest line, however long the
//! file; [`Transcript`](super::Transcript) holds every entry instead.
//!
//! Everything answered here is what the whole-file reader answers for the same file: the same
//! lines are entries or skipped, the main chain is the same walk (the last entry of a uuid
//! wins, `parentUuid` then `logicalParentUuid`, the leaf is the last `last-prompt` pointer or
//! conversation entry off the side chain).

use super::{TranscriptError, io};
use serde::de::{Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};
use std::borrow::Cow;
use std::collections::HashMap;
use std::io::BufRead;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// No key / no entry.
const NONE: u32 = u32::MAX;

/// One parseable line: where it is and what the chain walk needs of it.
#[derive(Debug, Clone, Copy)]
struct Slot {
    offset: u64,
    len: u32,
    /// Its `uuid` (a key), or [`NONE`].
    uuid: u32,
    /// Its `parentUuid`, else its `logicalParentUuid` (a key), or [`NONE`].
    link: u32,
    /// `type` is `user`.
    user: bool,
}

/// A transcript file indexed by byte offsets (see the module's documentation).
#[derive(Debug)]
pub struct TranscriptIndex {
    path: PathBuf,
    file: std::fs::File,
    slots: Vec<Slot>,
    /// Key → the last entry with that uuid (or [`NONE`]).
    by_key: Vec<u32>,
    keys: Keys,
    /// The leaf's key (or [`NONE`]).
    leaf: u32,
    skipped: usize,
    cwd: Option<String>,
    custom_title: Option<String>,
    ai_title: Option<String>,
}

/// Uuids (and any other string used as one) as small numbers.
#[derive(Debug, Default)]
struct Keys {
    uuids: HashMap<u128, u32>,
    others: HashMap<Box<str>, u32>,
    count: u32,
}

impl Keys {
    fn key(&mut self, s: &str) -> u32 {
        let next = self.count;
        let k = match canonical_uuid(s) {
            Some(u) => *self.uuids.entry(u).or_insert(next),
            None => match self.others.get(s) {
                Some(k) => *k,
                None => {
                    self.others.insert(s.into(), next);
                    next
                }
            },
        };
        if k == next {
            self.count += 1;
        }
        k
    }

    fn find(&self, s: &str) -> Option<u32> {
        match canonical_uuid(s) {
            Some(u) => self.uuids.get(&u).copied(),
            None => self.others.get(s).copied(),
        }
    }
}

/// A uuid written the one way the CLI writes them (lowercase, hyphenated), as a number: two
/// strings get the same number only when they are the same string.
fn canonical_uuid(s: &str) -> Option<u128> {
    let b = s.as_bytes();
    if b.len() != 36
        || !b.iter().enumerate().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => *c == b'-',
            _ => matches!(c, b'0'..=b'9' | b'a'..=b'f'),
        })
    {
        return None;
    }
    let mut n = 0u128;
    for c in b.iter().filter(|c| **c != b'-') {
        let d = match c {
            b'0'..=b'9' => c - b'0',
            _ => c - b'a' + 10,
        };
        n = (n << 4) | u128::from(d);
    }
    Some(n)
}

impl TranscriptIndex {
    /// Indexes a session's transcript.
    pub fn of_session(config_dir: &Path, session_id: &str) -> Result<Self, TranscriptError> {
        Self::open(&super::find_session(config_dir, session_id)?)
    }

    /// Indexes one transcript file, skipping bad lines with a warning.
    pub fn open(path: &Path) -> Result<Self, TranscriptError> {
        let file = std::fs::File::open(path).map_err(io(path))?;
        let mut reader = std::io::BufReader::with_capacity(1 << 18, &file);
        let mut index = TranscriptIndex {
            path: path.to_owned(),
            file: file.try_clone().map_err(io(path))?,
            slots: Vec::new(),
            by_key: Vec::new(),
            keys: Keys::default(),
            leaf: NONE,
            skipped: 0,
            cwd: None,
            custom_title: None,
            ai_title: None,
        };
        let mut line = Vec::new();
        let mut offset = 0u64;
        for n in 1.. {
            line.clear();
            let read = reader.read_until(b'\n', &mut line).map_err(io(path))?;
            if read == 0 {
                break;
            }
            let at = offset;
            offset += read as u64;
            let text = line.strip_suffix(b"\n").unwrap_or(&line);
            if text.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            match head(text) {
                Some(h) => index.note(at, text.len(), &h),
                None => {
                    index.skipped += 1;
                    tracing::warn!(path = %path.display(), line = n, "skipping a bad transcript line");
                }
            }
        }
        Ok(index)
    }

    fn note(&mut self, offset: u64, len: usize, h: &Head<'_>) {
        let i = u32::try_from(self.slots.len()).unwrap_or(NONE);
        let uuid = h.uuid.as_deref().map_or(NONE, |u| self.keys.key(u));
        let link = match (&h.parent, &h.logical) {
            (Some(p), _) | (None, Some(p)) => self.keys.key(p),
            (None, None) => NONE,
        };
        let ty = h.ty.as_deref();
        if uuid != NONE {
            let k = uuid as usize;
            if self.by_key.len() <= k {
                self.by_key.resize(k + 1, NONE);
            }
            self.by_key[k] = i;
        }
        if ty == Some("last-prompt") {
            if let Some(l) = &h.leaf {
                self.leaf = self.keys.key(l);
            }
        } else if matches!(ty, Some("user" | "assistant" | "attachment" | "system"))
            && !h.sidechain
            && uuid != NONE
        {
            self.leaf = uuid;
        }
        if self.cwd.is_none() {
            self.cwd = h.cwd.as_deref().map(str::to_owned);
        }
        let title = |own: &Option<Option<Cow<'_, str>>>| match own {
            Some(v) => v.as_deref().map(str::to_owned),
            None => h
                .title
                .as_ref()
                .and_then(|t| t.as_deref())
                .map(str::to_owned),
        };
        match ty {
            Some("custom-title") => {
                if let Some(t) = title(&h.custom_title) {
                    self.custom_title = Some(t);
                }
            }
            Some("ai-title") => {
                if let Some(t) = title(&h.ai_title) {
                    self.ai_title = Some(t);
                }
            }
            _ => {}
        }
        self.slots.push(Slot {
            offset,
            len: u32::try_from(len).unwrap_or(u32::MAX),
            uuid,
            link,
            user: ty == Some("user"),
        });
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Entries (parseable lines).
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether it has no entries.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Lines that could not be parsed.
    pub fn skipped(&self) -> usize {
        self.skipped
    }

    /// The first `cwd` in the file.
    pub fn cwd(&self) -> Option<&str> {
        self.cwd.as_deref()
    }

    /// The latest `custom-title` record's title (`customTitle`, else `title`).
    pub fn custom_title(&self) -> Option<&str> {
        self.custom_title.as_deref()
    }

    /// The latest `ai-title` record's title (`aiTitle`, else `title`).
    pub fn ai_title(&self) -> Option<&str> {
        self.ai_title.as_deref()
    }

    /// Whether entry `i` is a `user` entry.
    pub fn is_user(&self, i: usize) -> bool {
        self.slots.get(i).is_some_and(|s| s.user)
    }

    /// The first entry (in file order) whose `uuid` is `uuid`.
    pub fn first_with_uuid(&self, uuid: &str) -> Option<usize> {
        let k = self.keys.find(uuid)?;
        self.slots.iter().position(|s| s.uuid == k)
    }

    /// The main chain as entry numbers, oldest first: what
    /// [`Transcript::main_chain`](super::Transcript::main_chain) returns, as positions.
    pub fn main_chain(&self) -> Vec<usize> {
        let entry_of = |k: u32| {
            self.by_key
                .get(k as usize)
                .copied()
                .filter(|i| *i != NONE)
                .map(|i| i as usize)
        };
        let mut chain = Vec::new();
        let mut cur = if self.leaf == NONE {
            None
        } else {
            entry_of(self.leaf)
        };
        while let Some(i) = cur {
            chain.push(i);
            if chain.len() > self.slots.len() {
                break; // a cycle in a corrupt file
            }
            let link = self.slots[i].link;
            cur = if link == NONE { None } else { entry_of(link) };
        }
        chain.reverse();
        chain
    }

    /// Reads entry `i` back (`None`: no such entry, or a line the index took that does not
    /// parse whole, which only a corrupt file has).
    pub fn entry(&self, i: usize) -> Result<Option<Map<String, Value>>, TranscriptError> {
        let mut buf = Vec::new();
        self.entry_into(i, &mut buf)
    }

    /// Reads entries in the order given, one at a time, with one buffer.
    pub fn entries<'a>(
        &'a self,
        at: impl IntoIterator<Item = usize> + 'a,
    ) -> impl Iterator<Item = Result<Map<String, Value>, TranscriptError>> + 'a {
        let mut buf = Vec::new();
        at.into_iter()
            .filter_map(move |i| self.entry_into(i, &mut buf).transpose())
    }

    fn entry_into(
        &self,
        i: usize,
        buf: &mut Vec<u8>,
    ) -> Result<Option<Map<String, Value>>, TranscriptError> {
        let Some(slot) = self.slots.get(i) else {
            return Ok(None);
        };
        buf.resize(slot.len as usize, 0);
        self.file
            .read_exact_at(buf, slot.offset)
            .map_err(io(&self.path))?;
        Ok(serde_json::from_slice::<Map<String, Value>>(buf).ok())
    }
}

/// What the index reads of a line: its type, links, and the few fields the restore needs from
/// anywhere in the file. `None`: not a JSON object (the whole-file reader skips it too).
fn head(line: &[u8]) -> Option<Head<'_>> {
    let text = std::str::from_utf8(line).ok()?;
    let head: Head<'_> = serde_json::from_str(text).ok()?;
    // Skipped values are checked for syntax only; a `\u` escape of a lone surrogate is the one
    // thing a JSON encoder writes that a full parse refuses, so such a line is parsed whole.
    if has_surrogate_escape(line) && serde_json::from_str::<Value>(text).is_err() {
        return None;
    }
    Some(head)
}

fn has_surrogate_escape(line: &[u8]) -> bool {
    memchr::memmem::find_iter(line, b"\\u").any(|i| {
        matches!(line.get(i + 2), Some(b'd' | b'D'))
            && matches!(
                line.get(i + 3),
                Some(b'8'..=b'9' | b'a'..=b'f' | b'A'..=b'F')
            )
    })
}

/// The fields of an entry the index keeps (the last of a repeated key wins, as in a map).
#[derive(Default)]
struct Head<'a> {
    ty: Option<Cow<'a, str>>,
    uuid: Option<Cow<'a, str>>,
    parent: Option<Cow<'a, str>>,
    logical: Option<Cow<'a, str>>,
    leaf: Option<Cow<'a, str>>,
    sidechain: bool,
    cwd: Option<Cow<'a, str>>,
    /// Present (`Some`) with a string value or not.
    custom_title: Option<Option<Cow<'a, str>>>,
    ai_title: Option<Option<Cow<'a, str>>>,
    title: Option<Option<Cow<'a, str>>>,
}

impl<'de> Deserialize<'de> for Head<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Head<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a transcript entry")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Head<'de>, A::Error> {
                let mut h = Head::default();
                while let Some(Str(key)) = map.next_key::<Str<'de>>()? {
                    let slot = match key.as_ref() {
                        "type" => &mut h.ty,
                        "uuid" => &mut h.uuid,
                        "parentUuid" => &mut h.parent,
                        "logicalParentUuid" => &mut h.logical,
                        "leafUuid" => &mut h.leaf,
                        "cwd" => &mut h.cwd,
                        "customTitle" => {
                            h.custom_title = Some(map.next_value::<MaybeStr<'de>>()?.0);
                            continue;
                        }
                        "aiTitle" => {
                            h.ai_title = Some(map.next_value::<MaybeStr<'de>>()?.0);
                            continue;
                        }
                        "title" => {
                            h.title = Some(map.next_value::<MaybeStr<'de>>()?.0);
                            continue;
                        }
                        "isSidechain" => {
                            h.sidechain = map.next_value::<MaybeTrue>()?.0;
                            continue;
                        }
                        _ => {
                            map.next_value::<IgnoredAny>()?;
                            continue;
                        }
                    };
                    *slot = map.next_value::<MaybeStr<'de>>()?.0;
                }
                Ok(h)
            }
        }
        d.deserialize_map(V)
    }
}

/// A string, borrowed from the line when it has no escapes.
struct Str<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Str<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Str<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Str<'de>, E> {
                Ok(Str(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Str<'de>, E> {
                Ok(Str(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E>(self, v: String) -> Result<Str<'de>, E> {
                Ok(Str(Cow::Owned(v)))
            }
        }
        d.deserialize_str(V)
    }
}

/// Any value; `Some` when it is a string.
struct MaybeStr<'a>(Option<Cow<'a, str>>);

/// Any value; `true` when it is `true`.
struct MaybeTrue(bool);

/// Implements the visitor methods for every non-string value: `$answer`, with `$b` the value
/// when it is a boolean.
macro_rules! any_other {
    ($out:ty, $b:ident => $answer:expr) => {
        fn visit_bool<E>(self, v: bool) -> Result<$out, E> {
            let $b = Some(v);
            Ok($answer)
        }
        fn visit_i64<E>(self, _: i64) -> Result<$out, E> {
            let $b: Option<bool> = None;
            Ok($answer)
        }
        fn visit_u64<E>(self, _: u64) -> Result<$out, E> {
            let $b: Option<bool> = None;
            Ok($answer)
        }
        fn visit_f64<E>(self, _: f64) -> Result<$out, E> {
            let $b: Option<bool> = None;
            Ok($answer)
        }
        fn visit_unit<E>(self) -> Result<$out, E> {
            let $b: Option<bool> = None;
            Ok($answer)
        }
        fn visit_none<E>(self) -> Result<$out, E> {
            let $b: Option<bool> = None;
            Ok($answer)
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<$out, A::Error> {
            while seq.next_element::<IgnoredAny>()?.is_some() {}
            let $b: Option<bool> = None;
            Ok($answer)
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<$out, A::Error> {
            while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
            let $b: Option<bool> = None;
            Ok($answer)
        }
    };
}

impl<'de> Deserialize<'de> for MaybeStr<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = MaybeStr<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("any value")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<MaybeStr<'de>, E> {
                Ok(MaybeStr(Some(Cow::Borrowed(v))))
            }
            fn visit_str<E>(self, v: &str) -> Result<MaybeStr<'de>, E> {
                Ok(MaybeStr(Some(Cow::Owned(v.to_owned()))))
            }
            fn visit_string<E>(self, v: String) -> Result<MaybeStr<'de>, E> {
                Ok(MaybeStr(Some(Cow::Owned(v))))
            }
            any_other!(MaybeStr<'de>, _b => MaybeStr(None));
        }
        d.deserialize_any(V)
    }
}

impl<'de> Deserialize<'de> for MaybeTrue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = MaybeTrue;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("any value")
            }
            fn visit_str<E>(self, _: &str) -> Result<MaybeTrue, E> {
                Ok(MaybeTrue(false))
            }
            any_other!(MaybeTrue, b => MaybeTrue(b == Some(true)));
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_uuids_only() {
        assert!(canonical_uuid("8d3ef059-0b47-4f5e-9a43-1c2d3e4f5a6b").is_some());
        assert!(canonical_uuid("8D3EF059-0B47-4F5E-9A43-1C2D3E4F5A6B").is_none());
        assert!(canonical_uuid("8d3ef0590b474f5e9a431c2d3e4f5a6b").is_none());
        assert!(canonical_uuid("not-a-uuid").is_none());
    }

    #[test]
    fn heads_read_like_maps() {
        let h = head(br#"{"type":"user","uuid":"a","uuid":7,"isSidechain":true,"cwd":"/x","x":[1,{"y":null}]}"#).unwrap();
        assert_eq!(h.ty.as_deref(), Some("user"));
        assert_eq!(h.uuid, None, "the last of a repeated key wins");
        assert!(h.sidechain);
        assert_eq!(h.cwd.as_deref(), Some("/x"));
        assert!(head(b"[1]").is_none());
        assert!(
            head(br#"{"a":"\ud800"}"#).is_none()
                == serde_json::from_str::<Value>(r#"{"a":"\ud800"}"#).is_err()
        );
        assert!(head(b"{\"a\":\"\xff\"}").is_none());
    }
}
