//! Copying a client's plugin to the host: the client publishes a plugin by its own URI and
//! serves its files through server→client `resourceList` / `resourceRead`; the copy goes to a
//! folder of the session's, replaced whole when the plugin's `nonce` changes.

use serde_json::{Value, json};
use std::path::{Path, PathBuf};

/// Server→client requests to the client that published something.
#[async_trait::async_trait]
pub trait ClientFiles: Send + Sync {
    /// Sends request `method` and waits for its result (an error as its message).
    async fn request(&self, method: &str, params: Value) -> Result<Value, String>;
}

/// Limits on what a client plugin may bring.
#[derive(Debug, Clone, Copy)]
pub struct CopyLimits {
    /// Files, at most.
    pub files: usize,
    /// Bytes in all, at most.
    pub bytes: u64,
    /// Folder depth, at most.
    pub depth: usize,
}

impl Default for CopyLimits {
    fn default() -> Self {
        CopyLimits {
            files: 2_000,
            bytes: 64 * 1024 * 1024,
            depth: 16,
        }
    }
}

/// Copies the folder `uri` of the client into `dest` (replacing what was there) and returns
/// `dest`. Nothing is left half-copied: the files go to a fresh folder beside `dest` first.
pub async fn copy_plugin(
    files: &dyn ClientFiles,
    channel: &str,
    uri: &str,
    dest: &Path,
    limits: CopyLimits,
) -> Result<PathBuf, String> {
    let parent = dest
        .parent()
        .ok_or_else(|| format!("{} has no parent folder", dest.display()))?;
    make_private_dir(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
    let staging = parent.join(format!(".staging-{}", uuid::Uuid::new_v4()));
    make_private_dir(&staging).map_err(|e| format!("{}: {e}", staging.display()))?;
    let mut budget = (limits.files, limits.bytes);
    let copied = copy_dir(files, channel, uri, &staging, limits.depth, &mut budget).await;
    if let Err(e) = copied {
        let _ = std::fs::remove_dir_all(&staging);
        return Err(e);
    }
    if dest.exists() {
        std::fs::remove_dir_all(dest).map_err(|e| format!("{}: {e}", dest.display()))?;
    }
    std::fs::rename(&staging, dest).map_err(|e| format!("{}: {e}", dest.display()))?;
    Ok(dest.to_path_buf())
}

fn make_private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

fn join_uri(base: &str, name: &str) -> String {
    format!(
        "{}/{}",
        base.trim_end_matches('/'),
        claude_host_protocol::uri::percent_encode_segment(name)
    )
}

fn copy_dir<'a>(
    files: &'a dyn ClientFiles,
    channel: &'a str,
    uri: &'a str,
    into: &'a Path,
    depth: usize,
    budget: &'a mut (usize, u64),
) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), String>> + Send + 'a>> {
    Box::pin(async move {
        let listed = files
            .request("resourceList", json!({"channel": channel, "uri": uri}))
            .await
            .map_err(|e| format!("cannot list {uri}: {e}"))?;
        let entries: ahp_types::commands::ResourceListResult = serde_json::from_value(listed)
            .map_err(|e| format!("the client's listing of {uri} is malformed: {e}"))?;
        for entry in entries.entries {
            let name = entry.name;
            if name.is_empty() || name == "." || name == ".." || name.contains(['/', '\\', '\0']) {
                return Err(format!("{uri} lists a file named {name:?}"));
            }
            let child = join_uri(uri, &name);
            let path = into.join(&name);
            match entry.r#type.as_str() {
                "directory" => {
                    if depth == 0 {
                        return Err(format!("{uri} is nested too deeply"));
                    }
                    make_private_dir(&path).map_err(|e| format!("{}: {e}", path.display()))?;
                    copy_dir(files, channel, &child, &path, depth - 1, budget).await?;
                }
                "file" => {
                    if budget.0 == 0 {
                        return Err("the plugin has too many files".into());
                    }
                    budget.0 -= 1;
                    let read = files
                        .request(
                            "resourceRead",
                            json!({"channel": channel, "uri": child, "encoding": "base64"}),
                        )
                        .await
                        .map_err(|e| format!("cannot read {child}: {e}"))?;
                    let bytes = decode(read).map_err(|e| format!("{child}: {e}"))?;
                    let len = u64::try_from(bytes.len()).unwrap_or(u64::MAX);
                    if len > budget.1 {
                        return Err("the plugin is too large".into());
                    }
                    budget.1 -= len;
                    write_private(&path, &bytes).map_err(|e| format!("{}: {e}", path.display()))?;
                }
                // Symbolic links and anything else are not copied: a plugin is files.
                _ => {}
            }
        }
        Ok(())
    })
}

fn decode(read: Value) -> Result<Vec<u8>, String> {
    use base64::Engine;
    let r: ahp_types::commands::ResourceReadResult =
        serde_json::from_value(read).map_err(|e| format!("malformed resourceRead answer: {e}"))?;
    match r.encoding {
        ahp_types::commands::ContentEncoding::Base64 => base64::engine::general_purpose::STANDARD
            .decode(r.data.as_bytes())
            .map_err(|e| format!("bad base64: {e}")),
        ahp_types::commands::ContentEncoding::Utf8 => Ok(r.data.into_bytes()),
    }
}

fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// A client serving a folder tree from memory, as VS Code serves its plugin folders.
    struct Served(BTreeMap<String, Option<&'static str>>);

    #[async_trait::async_trait]
    impl ClientFiles for Served {
        async fn request(&self, method: &str, params: Value) -> Result<Value, String> {
            let uri = params["uri"].as_str().unwrap_or_default().to_owned();
            match method {
                "resourceList" => {
                    let prefix = format!("{uri}/");
                    let mut entries = Vec::new();
                    for (k, v) in &self.0 {
                        if let Some(rest) = k.strip_prefix(&prefix)
                            && !rest.contains('/')
                        {
                            let t = if v.is_some() { "file" } else { "directory" };
                            entries.push(json!({"name": rest, "type": t}));
                        }
                    }
                    Ok(json!({ "entries": entries }))
                }
                "resourceRead" => match self.0.get(&uri) {
                    Some(Some(text)) => {
                        use base64::Engine;
                        let data = base64::engine::general_purpose::STANDARD.encode(text);
                        Ok(json!({"data": data, "encoding": "base64"}))
                    }
                    _ => Err(format!("no such file {uri}")),
                },
                _ => Err("unknown method".into()),
            }
        }
    }

    fn served(entries: &[(&str, Option<&'static str>)]) -> Served {
        Served(
            entries
                .iter()
                .map(|(k, v)| (format!("file:///c/p{k}"), *v))
                .collect(),
        )
    }

    #[tokio::test]
    async fn a_plugin_is_copied_whole_and_replaced_whole() {
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("plugins/p1");
        let client = served(&[
            ("/.claude-plugin", None),
            ("/.claude-plugin/plugin.json", Some(r#"{"name":"p"}"#)),
            ("/skills", None),
            ("/skills/greet", None),
            ("/skills/greet/SKILL.md", Some("---\nname: greet\n---\nhi")),
        ]);
        let got = copy_plugin(&client, "s", "file:///c/p", &dest, CopyLimits::default())
            .await
            .unwrap();
        assert_eq!(
            std::fs::read_to_string(got.join("skills/greet/SKILL.md")).unwrap(),
            "---\nname: greet\n---\nhi"
        );
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(got.join(".claude-plugin/plugin.json"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let smaller = served(&[("/README.md", Some("x"))]);
        copy_plugin(&smaller, "s", "file:///c/p", &dest, CopyLimits::default())
            .await
            .unwrap();
        assert!(!dest.join("skills").exists(), "the old copy is gone");
        assert!(dest.join("README.md").exists());
    }

    #[tokio::test]
    async fn an_unreadable_file_or_a_hostile_name_fails_and_leaves_the_old_copy() {
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("p1");
        let good = served(&[("/a.md", Some("a"))]);
        copy_plugin(&good, "s", "file:///c/p", &dest, CopyLimits::default())
            .await
            .unwrap();
        /// Lists `gone.md` but refuses to read it, as a client without permission does.
        struct Failing(Served);
        #[async_trait::async_trait]
        impl ClientFiles for Failing {
            async fn request(&self, method: &str, params: Value) -> Result<Value, String> {
                if method == "resourceRead" && params["uri"].as_str().unwrap().ends_with("gone.md")
                {
                    return Err("permission denied".into());
                }
                self.0.request(method, params).await
            }
        }
        let client = Failing(served(&[("/a.md", Some("b")), ("/gone.md", Some("x"))]));
        let e = copy_plugin(&client, "s", "file:///c/p", &dest, CopyLimits::default())
            .await
            .unwrap_err();
        assert!(
            e.contains("gone.md") && e.contains("permission denied"),
            "{e}"
        );
        assert_eq!(std::fs::read_to_string(dest.join("a.md")).unwrap(), "a");
        /// Names a file outside the folder it lists.
        struct Lister;
        #[async_trait::async_trait]
        impl ClientFiles for Lister {
            async fn request(&self, _: &str, _: Value) -> Result<Value, String> {
                Ok(json!({"entries": [{"name": "../escape", "type": "file"}]}))
            }
        }
        let e = copy_plugin(&Lister, "s", "file:///c/p", &dest, CopyLimits::default())
            .await
            .unwrap_err();
        assert!(e.contains("escape"), "{e}");
        assert!(!dir.path().join("escape").exists());
    }
}
