//! What a prompt box completes: `/` to Claude Code's slash commands and skills (as its CLI
//! listed them at start-up), `@` to files and folders under the session's folders.

use serde_json::Value;
use std::path::{Path, PathBuf};

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

/// Directories never searched for `@` completions.
const SKIPPED: [&str; 6] = [
    ".git",
    "node_modules",
    "target",
    ".venv",
    "__pycache__",
    "dist",
];
/// Entries looked at before a search gives up (a huge tree must not stall a keystroke).
const MAX_VISITED: usize = 20_000;

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

/// Files and folders under `roots` whose relative path contains `query` (any case), those
/// whose name starts with it first, at most `limit`. Blocking: run it off the async workers.
pub fn find_files(roots: &[PathBuf], query: &str, limit: usize) -> Vec<FileMatch> {
    let query = query.to_lowercase();
    let mut found = Vec::new();
    let mut visited = 0;
    for root in roots {
        let mut stack = vec![root.clone()];
        while let Some(dir) = stack.pop() {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            let mut entries: Vec<_> = entries.flatten().collect();
            entries.sort_by_key(std::fs::DirEntry::file_name);
            for entry in entries {
                visited += 1;
                if visited > MAX_VISITED {
                    return ranked(found, &query, limit);
                }
                let name = entry.file_name().to_string_lossy().into_owned();
                // The type of the entry itself: a symlink is listed, never followed.
                let Ok(kind) = entry.file_type() else {
                    continue;
                };
                let path = entry.path();
                let relative = relative(root, &path);
                if relative.to_lowercase().contains(&query) {
                    found.push(FileMatch {
                        path: path.clone(),
                        relative,
                        is_dir: kind.is_dir(),
                    });
                }
                if kind.is_dir() && !SKIPPED.contains(&name.as_str()) {
                    stack.push(path);
                }
            }
        }
    }
    ranked(found, &query, limit)
}

fn relative(root: &Path, path: &Path) -> String {
    path.strip_prefix(root)
        .unwrap_or(path)
        .to_string_lossy()
        .into_owned()
}

fn ranked(mut found: Vec<FileMatch>, query: &str, limit: usize) -> Vec<FileMatch> {
    let name_starts = |m: &FileMatch| {
        m.path
            .file_name()
            .is_some_and(|n| n.to_string_lossy().to_lowercase().starts_with(query))
    };
    found.sort_by(|a, b| {
        name_starts(b)
            .cmp(&name_starts(a))
            .then(a.relative.len().cmp(&b.relative.len()))
            .then(a.relative.cmp(&b.relative))
    });
    found.truncate(limit);
    found
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

    #[test]
    fn files_match_by_path_names_first_and_skip_build_folders() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("src/main_dir")).unwrap();
        std::fs::create_dir_all(root.join("node_modules/main")).unwrap();
        std::fs::write(root.join("src/main.rs"), "").unwrap();
        std::fs::write(root.join("src/lib.rs"), "").unwrap();
        std::fs::write(root.join("domain.txt"), "").unwrap();
        let found = find_files(&[root.to_path_buf()], "MAIN", 10);
        let names: Vec<(&str, bool)> = found
            .iter()
            .map(|m| (m.relative.as_str(), m.is_dir))
            .collect();
        assert_eq!(
            names,
            [
                ("src/main.rs", false),
                ("src/main_dir", true),
                ("domain.txt", false)
            ],
            "nothing from node_modules"
        );
        assert_eq!(find_files(&[root.to_path_buf()], "", 2).len(), 2);
    }
}
