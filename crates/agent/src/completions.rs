//! What a prompt box completes: `/` to Claude Code's slash commands and skills (as its CLI
//! listed them at start-up), `@` to files and folders under the session's folders (searched
//! in their [`crate::file_index`]).

use serde_json::Value;
use std::path::PathBuf;

/// A slash command or skill of the CLI.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlashCommand {
    /// The name, without the slash.
    pub name: String,
    /// What it does.
    pub description: String,
    /// Its arguments, as a hint (`[files]`).
    pub argument_hint: String,
    /// The `SKILL.md` of a skill (`file:` URI), when it is one and its file is known.
    pub skill: Option<String>,
}

/// The commands in the CLI's `initialize` answer (`commands[]`).
pub fn slash_commands(initialize: &Value) -> Vec<SlashCommand> {
    let text = |c: &Value, k: &str| c.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
    initialize
        .get("commands")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|c| c.get("name").and_then(Value::as_str).is_some())
        .map(|c| SlashCommand {
            name: text(c, "name"),
            description: text(c, "description"),
            argument_hint: text(c, "argumentHint"),
            skill: None,
        })
        .collect()
}

/// The word being typed at `offset` (in characters) and where it starts, when it begins with
/// `/` or `@` at the start of the text or after whitespace.
pub fn trigger(text: &str, offset: usize) -> Option<(char, String, usize)> {
    let chars: Vec<char> = text.chars().collect();
    let end = offset.min(chars.len());
    let start = chars[..end]
        .iter()
        .rposition(|c| c.is_whitespace())
        .map_or(0, |i| i + 1);
    let word: String = chars[start..end].iter().collect();
    let first = word.chars().next()?;
    matches!(first, '/' | '@').then(|| (first, word[first.len_utf8()..].to_owned(), start))
}

/// A file or folder matching an `@` query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileMatch {
    /// Its absolute path.
    pub path: PathBuf,
    /// Its path relative to the folder it was found in.
    pub relative: String,
    /// Whether it is a folder.
    pub is_dir: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use serde_json::json;

    #[test]
    fn the_word_at_the_cursor_triggers_only_after_whitespace_or_at_the_start() {
        assert_eq!(trigger("/rev", 4), Some(('/', "rev".into(), 0)));
        assert_eq!(
            trigger("look at @src/ma", 15),
            Some(('@', "src/ma".into(), 8))
        );
        assert_eq!(trigger("a/b", 3), None);
        assert_eq!(trigger("mail me@x", 9), None);
        assert_eq!(trigger("/", 1), Some(('/', String::new(), 0)));
        assert_eq!(trigger("héllo @é", 8), Some(('@', "é".into(), 6)));
    }

    #[test]
    fn commands_come_from_the_initialize_answer() {
        let init = json!({"commands": [
            {"name": "review", "description": "Review changes", "argumentHint": "[files]"},
            {"description": "nameless"}]});
        assert_eq!(
            slash_commands(&init),
            [SlashCommand {
                name: "review".into(),
                description: "Review changes".into(),
                argument_hint: "[files]".into(),
                skill: None,
            }]
        );
    }
}
