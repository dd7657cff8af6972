//! Client-supplied text made safe to log: a request's `model`, a session name, a channel URI,
//! a method name. Logged raw, a newline forges a log line, an escape sequence reaches the
//! terminal of whoever reads the log, and a 100 KB value fills it.

use std::fmt;

/// How many characters of a value are logged.
pub const MAX_CHARS: usize = 200;

/// Displays `text` with control characters escaped (`\n`, `\u{1b}`) and cut after
/// [`MAX_CHARS`] characters (the rest counted).
#[derive(Clone, Copy)]
pub struct Safe<'a>(pub &'a str);

impl fmt::Display for Safe<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use fmt::Write as _;
        for (shown, (at, c)) in self.0.char_indices().enumerate() {
            if shown == MAX_CHARS {
                return write!(f, "…[+{} bytes]", self.0.len() - at);
            }
            if c.is_control() || matches!(c, '\u{2028}' | '\u{2029}' | '\u{202e}') {
                for e in c.escape_default() {
                    f.write_char(e)?;
                }
            } else {
                f.write_char(c)?;
            }
        }
        Ok(())
    }
}

impl fmt::Debug for Safe<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "\"{self}\"")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_are_escaped_and_long_values_cut() {
        assert_eq!(Safe("claude-opus-4-5").to_string(), "claude-opus-4-5");
        assert_eq!(
            Safe("x\n2026-01-01 INFO forged\u{1b}[31m").to_string(),
            "x\\n2026-01-01 INFO forged\\u{1b}[31m"
        );
        let long = "é".repeat(100_000);
        let shown = Safe(&long).to_string();
        assert!(shown.starts_with(&"é".repeat(MAX_CHARS)));
        assert!(shown.ends_with(&format!("…[+{} bytes]", 2 * (100_000 - MAX_CHARS))));
        assert!(shown.len() < 500);
    }
}
