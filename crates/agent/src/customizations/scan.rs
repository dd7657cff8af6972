//! Reading customization files: markdown front matter, plugin folders, hooks in settings
//! files, MCP servers in `.mcp.json` and `.claude.json`. Blocking; small files only.

use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Files larger than this are not parsed (a customization file is a page of text).
const MAX_FILE: u64 = 1024 * 1024;

/// The front matter of a markdown customization (`---` … `---`), as flat `key: value` pairs,
/// and the text after it.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct FrontMatter {
    /// Keys in lower case, values with surrounding quotes removed.
    pub fields: BTreeMap<String, String>,
}

impl FrontMatter {
    /// A field's value, when present and not empty.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.fields
            .get(key)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    }

    /// A boolean field (`true`/`false`).
    pub fn flag(&self, key: &str) -> Option<bool> {
        match self.get(key)? {
            "true" => Some(true),
            "false" => Some(false),
            _ => None,
        }
    }

    /// A list field: `a, b` or `[a, b]`.
    pub fn list(&self, key: &str) -> Option<Vec<String>> {
        let raw = self.get(key)?;
        let raw = raw.trim_start_matches('[').trim_end_matches(']');
        Some(
            raw.split(',')
                .map(|s| unquote(s.trim()).to_owned())
                .filter(|s| !s.is_empty())
                .collect(),
        )
    }
}

fn unquote(s: &str) -> &str {
    let s = s.trim();
    for q in ['"', '\''] {
        if s.len() >= 2 && s.starts_with(q) && s.ends_with(q) {
            return &s[1..s.len() - 1];
        }
    }
    s
}

/// Parses the front matter of `text`. Only top-level `key: value` lines count; nested YAML is
/// skipped (Claude Code's own fields are all flat).
pub fn front_matter(text: &str) -> FrontMatter {
    let mut fields = BTreeMap::new();
    let mut lines = text.lines();
    if lines.next().map(str::trim_end) != Some("---") {
        return FrontMatter { fields };
    }
    for line in lines {
        if line.trim_end() == "---" {
            break;
        }
        if line.starts_with([' ', '\t', '-']) {
            continue;
        }
        if let Some((k, v)) = line.split_once(':') {
            fields.insert(k.trim().to_lowercase(), unquote(v).to_owned());
        }
    }
    FrontMatter { fields }
}

/// Reads a small text file.
pub fn read_small(path: &Path) -> Result<String, String> {
    let meta = std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
    if meta.len() > MAX_FILE {
        return Err(format!(
            "{} is larger than {} bytes",
            path.display(),
            MAX_FILE
        ));
    }
    std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))
}

/// A markdown customization file found in a folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    /// The name Claude Code knows it by (front matter `name`, else the file's stem; commands
    /// in sub-folders are `dir:name`).
    pub name: String,
    /// Its file.
    pub path: PathBuf,
    /// Its front matter.
    pub meta: FrontMatter,
    /// Why it could not be read, when it could not.
    pub error: Option<String>,
}

fn found(name: String, path: PathBuf) -> Found {
    match read_small(&path) {
        Ok(text) => {
            let meta = front_matter(&text);
            Found {
                name,
                path,
                meta,
                error: None,
            }
        }
        Err(e) => Found {
            name,
            path,
            meta: FrontMatter::default(),
            error: Some(e),
        },
    }
}

fn sorted_entries(dir: &Path) -> Vec<std::fs::DirEntry> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .map(|r| r.flatten().collect())
        .unwrap_or_default();
    v.sort_by_key(std::fs::DirEntry::file_name);
    v
}

/// `agents/*.md`.
pub fn agents(dir: &Path) -> Vec<Found> {
    md_files(dir, "")
        .into_iter()
        .map(|f| {
            let name = f.meta.get("name").map(str::to_owned).unwrap_or(f.name);
            Found { name, ..f }
        })
        .collect()
}

/// `commands/**/*.md` (a sub-folder makes a `dir:name` command).
pub fn commands(dir: &Path) -> Vec<Found> {
    md_files(dir, "")
}

fn md_files(dir: &Path, prefix: &str) -> Vec<Found> {
    let mut out = Vec::new();
    for e in sorted_entries(dir) {
        let path = e.path();
        let name = e.file_name().to_string_lossy().into_owned();
        let Ok(kind) = e.file_type() else { continue };
        if kind.is_dir() && !name.starts_with('.') {
            out.extend(md_files(&path, &format!("{prefix}{name}:")));
        } else if let Some(stem) = name.strip_suffix(".md") {
            out.push(found(format!("{prefix}{stem}"), path));
        }
    }
    out
}

/// `skills/<name>/SKILL.md`.
pub fn skills(dir: &Path) -> Vec<Found> {
    sorted_entries(dir)
        .into_iter()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir() || t.is_symlink()))
        .filter_map(|e| {
            let path = e.path().join("SKILL.md");
            path.exists().then(|| {
                let dir_name = e.file_name().to_string_lossy().into_owned();
                let f = found(dir_name, path);
                let name = f.meta.get("name").map(str::to_owned).unwrap_or(f.name);
                Found { name, ..f }
            })
        })
        .collect()
}

/// One hook entry of a settings file: an event and its matcher.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookEntry {
    /// `PreToolUse`, `Stop`, ….
    pub event: String,
    /// The tool matcher (empty: every tool).
    pub matcher: String,
    /// The commands it runs, for display.
    pub commands: Vec<String>,
}

/// The hooks a settings file (`settings.json`, `hooks/hooks.json`) declares.
pub fn hooks(settings: &Value) -> Vec<HookEntry> {
    let mut out = Vec::new();
    let Some(events) = settings.get("hooks").and_then(Value::as_object) else {
        return out;
    };
    for (event, groups) in events {
        for g in groups.as_array().into_iter().flatten() {
            let commands = g
                .get("hooks")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|h| h.get("command").and_then(Value::as_str))
                .map(str::to_owned)
                .collect();
            out.push(HookEntry {
                event: event.clone(),
                matcher: g
                    .get("matcher")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_owned(),
                commands,
            });
        }
    }
    out
}

/// Reads a JSON file; `Ok(None)` when it does not exist.
pub fn json_file(path: &Path) -> Result<Option<Value>, String> {
    if !path.exists() {
        return Ok(None);
    }
    let text = read_small(path)?;
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|e| format!("{} is not valid JSON: {e}", path.display()))
}

/// The MCP servers an `mcpServers` object declares, by name, with their transport.
pub fn mcp_servers(v: &Value) -> Vec<(String, String)> {
    v.get("mcpServers")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .map(|(name, cfg)| {
            let transport = cfg
                .get("type")
                .and_then(Value::as_str)
                .unwrap_or(if cfg.get("url").is_some() {
                    "http"
                } else {
                    "stdio"
                })
                .to_owned();
            (name.clone(), transport)
        })
        .collect()
}

/// The `CLAUDE.md` files Claude Code reads for a working directory: the user's, then those of
/// the folder and every folder above it (`CLAUDE.md`, `.claude/CLAUDE.md`, `CLAUDE.local.md`).
pub fn memory_files(user_dir: &Path, cwd: &Path) -> Vec<(PathBuf, bool)> {
    let mut out = Vec::new();
    let user = user_dir.join("CLAUDE.md");
    if user.is_file() {
        out.push((user, true));
    }
    let mut dirs: Vec<&Path> = cwd.ancestors().collect();
    dirs.reverse();
    for d in dirs {
        for f in ["CLAUDE.md", ".claude/CLAUDE.md", "CLAUDE.local.md"] {
            let p = d.join(f);
            if p.is_file() {
                out.push((p, false));
            }
        }
    }
    out
}

/// A plugin folder's manifest (`.claude-plugin/plugin.json`): its name and version. A folder
/// without one is named after itself; a manifest that cannot be read or parsed is an error.
pub fn plugin_manifest(dir: &Path) -> Result<(String, Option<String>), String> {
    if !dir.is_dir() {
        return Err(format!("{} is not a readable folder", dir.display()));
    }
    let manifest = dir.join(".claude-plugin").join("plugin.json");
    let fallback = || {
        dir.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "plugin".to_owned())
    };
    match json_file(&manifest)? {
        None => Ok((fallback(), None)),
        Some(v) => {
            let Some(name) = v.get("name").and_then(Value::as_str) else {
                return Err(format!("{} has no \"name\"", manifest.display()));
            };
            let version = v.get("version").and_then(Value::as_str).map(str::to_owned);
            Ok((name.to_owned(), version))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn front_matter_reads_flat_fields_and_lists() {
        let fm = front_matter(
            "---\nname: reviewer\ndescription: \"Reviews code\"\ntools: Read, Grep\nnested:\n  - x\nuser-invocable: false\n---\nbody: not a field\n",
        );
        assert_eq!(fm.get("name"), Some("reviewer"));
        assert_eq!(fm.get("description"), Some("Reviews code"));
        assert_eq!(
            fm.list("tools"),
            Some(vec!["Read".to_owned(), "Grep".to_owned()])
        );
        assert_eq!(fm.flag("user-invocable"), Some(false));
        assert_eq!(fm.get("body"), None);
        assert_eq!(front_matter("no front matter\n---\n").fields.len(), 0);
    }

    #[test]
    fn hooks_and_mcp_servers_come_from_settings_shapes() {
        let s = serde_json::json!({"hooks": {"PostToolUse": [
            {"matcher": "Write", "hooks": [{"type": "command", "command": "echo hi"}]}]}});
        assert_eq!(
            hooks(&s),
            [HookEntry {
                event: "PostToolUse".into(),
                matcher: "Write".into(),
                commands: vec!["echo hi".into()]
            }]
        );
        let m =
            serde_json::json!({"mcpServers": {"a": {"command": "x"}, "b": {"url": "http://h"}}});
        assert_eq!(
            mcp_servers(&m),
            [("a".into(), "stdio".into()), ("b".into(), "http".into())]
        );
    }

    #[test]
    fn a_malformed_manifest_is_an_error_and_a_missing_one_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("plug");
        std::fs::create_dir_all(p.join(".claude-plugin")).unwrap();
        assert_eq!(plugin_manifest(&p).unwrap().0, "plug");
        std::fs::write(p.join(".claude-plugin/plugin.json"), "{\"name\": ").unwrap();
        let e = plugin_manifest(&p).unwrap_err();
        assert!(e.contains("not valid JSON"), "{e}");
        std::fs::write(
            p.join(".claude-plugin/plugin.json"),
            r#"{"name":"good","version":"1.0.0"}"#,
        )
        .unwrap();
        assert_eq!(
            plugin_manifest(&p).unwrap(),
            ("good".into(), Some("1.0.0".into()))
        );
        assert!(plugin_manifest(&dir.path().join("missing")).is_err());
    }
}
