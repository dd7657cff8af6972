//! Claude model ids: the dashed / dated forms Claude Code sends and the dotted, undated forms
//! the Copilot catalog uses.
//!
//! Parsing is syntactic (no catalog): lower-case, strip a `[1m]`-style context suffix and a
//! `-YYYYMMDD` date, then match one of the shapes `claude-{name}-{maj}-{min}`,
//! `claude-{maj}-{min}-{name}`, `claude-{name}-{maj}.{min}`, `claude-{name}-{maj}`,
//! `claude-{maj}-{name}` (each with an optional `-{N}m` modifier), or a bare word such as
//! `opus`. [`resolve`] then picks the catalog entry.

/// A parsed Claude model id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaudeModelId {
    /// Family name: `opus`, `sonnet`, `haiku`, … (or the bare word).
    pub name: String,
    /// Major version; `None` for a bare word.
    pub major: Option<u32>,
    /// Minor version.
    pub minor: Option<u32>,
    /// A modifier such as `1m`.
    pub modifier: Option<String>,
    /// A context suffix such as `1m` from `[1m]`.
    pub context: Option<String>,
}

impl ClaudeModelId {
    /// Parses any supported form; `None` when `id` is not a Claude model id.
    pub fn parse(id: &str) -> Option<Self> {
        let mut s = id.trim().to_ascii_lowercase();
        let mut context = None;
        if s.ends_with(']') {
            let open = s.rfind('[')?;
            let inner = &s[open + 1..s.len() - 1];
            if !is_modifier(inner) {
                return None;
            }
            context = Some(inner.to_owned());
            s.truncate(open);
        }
        strip_date(&mut s);
        let Some(rest) = s.strip_prefix("claude-") else {
            // A bare word such as `opus`; a context suffix makes no sense on it.
            if context.is_none()
                && !s.is_empty()
                && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
            {
                return Some(ClaudeModelId {
                    name: s,
                    major: None,
                    minor: None,
                    modifier: None,
                    context: None,
                });
            }
            return None;
        };
        let mut parts: Vec<&str> = rest.split('-').collect();
        let modifier = match parts.last() {
            Some(last) if parts.len() > 2 && is_modifier(last) => {
                let m = (*last).to_owned();
                parts.pop();
                Some(m)
            }
            _ => None,
        };
        let (name, major, minor) = match parts.as_slice() {
            [n, maj, min] if is_name(n) && is_num(maj) && is_num(min) => {
                (*n, num(maj), Some(num(min)))
            }
            [maj, min, n] if is_name(n) && is_num(maj) && is_num(min) => {
                (*n, num(maj), Some(num(min)))
            }
            [n, dotted] if is_name(n) && dotted.contains('.') => {
                let (maj, min) = dotted.split_once('.')?;
                if !is_num(maj) || !is_num(min) {
                    return None;
                }
                (*n, num(maj), Some(num(min)))
            }
            [n, maj] if is_name(n) && is_num(maj) => (*n, num(maj), None),
            [maj, n] if is_name(n) && is_num(maj) => (*n, num(maj), None),
            _ => return None,
        };
        Some(ClaudeModelId {
            name: name.to_owned(),
            major: Some(major),
            minor,
            modifier,
            context,
        })
    }

    /// Whether this is a bare word (`opus`, `sonnet`) rather than a versioned id.
    pub fn is_bare(&self) -> bool {
        self.major.is_none()
    }

    /// The Copilot (endpoint) id: `claude-{name}-{maj}.{min}`; only `opus` keeps a `1m` modifier.
    pub fn endpoint_id(&self) -> String {
        let Some(major) = self.major else {
            return self.name.clone();
        };
        let mut out = format!("claude-{}-{}", self.name, major);
        if let Some(minor) = self.minor {
            out.push('.');
            out.push_str(&minor.to_string());
        }
        if self.name == "opus" && self.modifier.as_deref() == Some("1m") {
            out.push_str("-1m");
        }
        out
    }

    /// The id in the form Claude Code uses: dashed, with the modifier and context suffix.
    pub fn sdk_id(&self) -> String {
        let Some(major) = self.major else {
            return self.name.clone();
        };
        let mut out = format!("claude-{}-{}", self.name, major);
        if let Some(minor) = self.minor {
            out.push('-');
            out.push_str(&minor.to_string());
        }
        if let Some(m) = &self.modifier {
            out.push('-');
            out.push_str(m);
        }
        if let Some(c) = &self.context {
            out.push('[');
            out.push_str(c);
            out.push(']');
        }
        out
    }
}

/// Maps a requested model id onto one of `catalog` (Copilot ids), or `None` when it names no
/// catalog model. Tries, in order: the id itself; a bare family word (`opus`) → the newest
/// catalog model of that family; the endpoint id with a `1m` variant when a 1M context was
/// asked for; the endpoint id; the endpoint id without its modifier.
pub fn resolve<'a, S: AsRef<str>>(requested: &str, catalog: &'a [S]) -> Option<&'a str> {
    let find = |id: &str| {
        catalog
            .iter()
            .map(AsRef::as_ref)
            .find(|c| c.eq_ignore_ascii_case(id))
    };
    if let Some(hit) = find(requested.trim()) {
        return Some(hit);
    }
    let parsed = ClaudeModelId::parse(requested)?;
    if parsed.is_bare() {
        return catalog
            .iter()
            .map(AsRef::as_ref)
            .filter_map(|c| ClaudeModelId::parse(c).map(|p| (c, p)))
            .filter(|(_, p)| !p.is_bare() && p.name == parsed.name)
            .max_by_key(|(_, p)| (p.major, p.minor, p.modifier.is_none()))
            .map(|(c, _)| c);
    }
    let mut candidates = Vec::with_capacity(3);
    if parsed.context.as_deref() == Some("1m") && parsed.modifier.is_none() {
        let mut with_1m = parsed.clone();
        with_1m.modifier = Some("1m".to_owned());
        candidates.push(with_1m.endpoint_id());
    }
    candidates.push(parsed.endpoint_id());
    if parsed.modifier.is_some() {
        let mut plain = parsed.clone();
        plain.modifier = None;
        candidates.push(plain.endpoint_id());
    }
    candidates.iter().find_map(|c| find(c))
}

fn is_modifier(s: &str) -> bool {
    s.len() >= 2 && s.ends_with('m') && s[..s.len() - 1].bytes().all(|b| b.is_ascii_digit())
}

fn is_name(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_lowercase())
}

fn is_num(s: &str) -> bool {
    !s.is_empty() && s.len() <= 3 && s.bytes().all(|b| b.is_ascii_digit())
}

fn num(s: &str) -> u32 {
    // `is_num` admits at most three ASCII digits, which always fit in a u32.
    s.parse().unwrap_or(0)
}

fn strip_date(s: &mut String) {
    let b = s.as_bytes();
    if b.len() > 9 && b[b.len() - 9] == b'-' && b[b.len() - 8..].iter().all(u8::is_ascii_digit) {
        s.truncate(s.len() - 9);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn endpoint(id: &str) -> Option<String> {
        ClaudeModelId::parse(id).map(|p| p.endpoint_id())
    }

    #[test]
    fn reference_vectors() {
        assert_eq!(
            endpoint("claude-sonnet-4-5-20250929").as_deref(),
            Some("claude-sonnet-4.5")
        );
        assert_eq!(
            endpoint("claude-opus-4-6-1m-20251101").as_deref(),
            Some("claude-opus-4.6-1m")
        );
        assert_eq!(
            endpoint("claude-3-5-sonnet-20241022").as_deref(),
            Some("claude-sonnet-3.5")
        );
        assert_eq!(
            endpoint("claude-sonnet-4-1m").as_deref(),
            Some("claude-sonnet-4")
        );
        assert_eq!(
            endpoint("claude-sonnet-4-20250514").as_deref(),
            Some("claude-sonnet-4")
        );
        assert_eq!(
            endpoint("claude-opus-5-5").as_deref(),
            Some("claude-opus-5.5")
        );
        assert_eq!(
            endpoint("Claude-Sonnet-4.5").as_deref(),
            Some("claude-sonnet-4.5")
        );
        assert_eq!(endpoint("claude-3-opus").as_deref(), Some("claude-opus-3"));
        assert_eq!(endpoint("foo").as_deref(), Some("foo"));
        assert_eq!(endpoint("gpt-4o"), None);
        assert_eq!(endpoint("claude-"), None);
        assert_eq!(endpoint("claude-sonnet-4-5[x]"), None);
    }

    #[test]
    fn sdk_ids_round_trip() {
        for id in [
            "claude-sonnet-4.5",
            "claude-opus-4.6-1m",
            "claude-sonnet-4",
            "claude-haiku-5.5",
        ] {
            let sdk = ClaudeModelId::parse(id).unwrap().sdk_id();
            assert_eq!(endpoint(&sdk).as_deref(), Some(id), "{id} -> {sdk}");
        }
        assert_eq!(
            ClaudeModelId::parse("claude-opus-4-6[1m]")
                .unwrap()
                .sdk_id(),
            "claude-opus-4-6[1m]"
        );
    }

    #[test]
    fn resolve_against_catalog() {
        let catalog = [
            "claude-opus-5.5",
            "claude-sonnet-4.5",
            "claude-sonnet-5.5",
            "claude-opus-4.6",
            "claude-opus-4.6-1m",
            "claude-sonnet-4",
        ];
        let r = |id| resolve(id, &catalog);
        assert_eq!(r("claude-opus-5-5"), Some("claude-opus-5.5"));
        assert_eq!(r("claude-sonnet-4-5-20250929"), Some("claude-sonnet-4.5"));
        assert_eq!(r("claude-sonnet-4.5"), Some("claude-sonnet-4.5"));
        assert_eq!(r("sonnet"), Some("claude-sonnet-5.5"));
        assert_eq!(r("opus"), Some("claude-opus-5.5"));
        assert_eq!(r("claude-opus-4-6[1m]"), Some("claude-opus-4.6-1m"));
        assert_eq!(r("claude-opus-4-6"), Some("claude-opus-4.6"));
        assert_eq!(r("claude-sonnet-4-5[1m]"), Some("claude-sonnet-4.5"));
        assert_eq!(r("claude-sonnet-4-20250514"), Some("claude-sonnet-4"));
        assert_eq!(r("claude-haiku-4-5"), None);
        assert_eq!(r("gpt-4o"), None);
        assert_eq!(r("haiku"), None);
    }
}
