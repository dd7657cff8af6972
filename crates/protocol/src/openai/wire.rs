//! Reading upstream JSON leniently and without copying.

use serde::de::{self, Visitor};
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
    d.deserialize_any(LenientU64)
}

struct LenientU64;

impl<'de> Visitor<'de> for LenientU64 {
    type Value = Option<u64>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
        Ok(Some(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
        Ok(u64::try_from(v).ok())
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<de::IgnoredAny>()?.is_some() {}
        Ok(None)
    }

    fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        while map
            .next_entry::<de::IgnoredAny, de::IgnoredAny>()?
            .is_some()
        {}
        Ok(None)
    }
}

/// A JSON array read without allocating for its first element (streams' `choices` and
/// `tool_calls` nearly always hold one); anything but an array reads as empty.
#[derive(Debug)]
pub(crate) struct List<T> {
    first: Option<T>,
    rest: Vec<T>,
}

impl<T> Default for List<T> {
    fn default() -> Self {
        List {
            first: None,
            rest: Vec::new(),
        }
    }
}

impl<T> IntoIterator for List<T> {
    type Item = T;
    type IntoIter = std::iter::Chain<std::option::IntoIter<T>, std::vec::IntoIter<T>>;

    fn into_iter(self) -> Self::IntoIter {
        self.first.into_iter().chain(self.rest)
    }
}

impl<'a, T> IntoIterator for &'a List<T> {
    type Item = &'a T;
    type IntoIter = std::iter::Chain<std::option::Iter<'a, T>, std::slice::Iter<'a, T>>;

    fn into_iter(self) -> Self::IntoIter {
        self.first.iter().chain(&self.rest)
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for List<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct ListVisitor<T>(std::marker::PhantomData<T>);

        impl<'de, T: Deserialize<'de>> Visitor<'de> for ListVisitor<T> {
            type Value = List<T>;

            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an array")
            }

            fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<List<T>, A::Error> {
                let mut list = List {
                    first: seq.next_element()?,
                    rest: Vec::new(),
                };
                while let Some(item) = seq.next_element()? {
                    list.rest.push(item);
                }
                Ok(list)
            }

            fn visit_unit<E: de::Error>(self) -> Result<List<T>, E> {
                Ok(List::default())
            }
        }

        d.deserialize_seq(ListVisitor(std::marker::PhantomData))
    }
}

/// A nested value that is `None` unless it has the expected shape, so that an odd value in a
/// field this translator reads never fails the whole event.
pub(crate) fn lenient<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    let raw = <&'de RawValue>::deserialize(d)?;
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
