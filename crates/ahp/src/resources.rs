//! The `resource*` commands on the local filesystem, confined to a session's working
//! directories: every path is resolved (symlinks included) and must stay inside a root.

use crate::rpc::{RpcError, code};
use ahp_types::commands::{
    ContentEncoding, DirectoryEntry, ResourceCopyParams, ResourceDeleteParams, ResourceListParams,
    ResourceListResult, ResourceMkdirParams, ResourceMoveParams, ResourceReadParams,
    ResourceReadResult, ResourceResolveParams, ResourceResolveResult, ResourceType,
    ResourceWriteMode, ResourceWriteParams,
};
use base64::Engine as _;
use serde_json::{Value, json};
use std::path::{Component, Path, PathBuf};

/// Largest file `resourceRead` returns.
pub const MAX_READ_BYTES: u64 = 64 * 1024 * 1024;

/// Optimistic-concurrency failure (`ifMatch`).
const CONFLICT: i64 = -32011;

/// Directories a client may touch, canonicalized (symlinks resolved) at construction.
#[derive(Debug, Clone)]
pub struct Roots {
    dirs: Vec<PathBuf>,
}

impl Roots {
    /// The roots; each must exist.
    pub fn new(dirs: &[PathBuf]) -> Result<Roots, RpcError> {
        let dirs = dirs
            .iter()
            .map(|d| {
                std::fs::canonicalize(d).map_err(|e| {
                    RpcError::new(
                        code::NOT_FOUND,
                        format!("working directory {}: {e}", d.display()),
                    )
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(Roots { dirs })
    }

    /// The canonical roots.
    pub fn dirs(&self) -> &[PathBuf] {
        &self.dirs
    }

    fn contains(&self, canonical: &Path) -> bool {
        self.dirs.iter().any(|r| canonical.starts_with(r))
    }

    fn is_root(&self, canonical: &Path) -> bool {
        self.dirs.iter().any(|r| canonical == r)
    }

    /// The path of a `file:` URI, lexically normalized and checked: an existing path
    /// resolves (symlinks followed) inside a root; a new one has its deepest existing
    /// ancestor inside a root.
    fn check(&self, uri: &str) -> Result<PathBuf, RpcError> {
        let path = lexical(&path_of(uri)?)?;
        let denied = || {
            RpcError::new(
                code::PERMISSION_DENIED,
                format!(
                    "{} is outside the session's working directories",
                    path.display()
                ),
            )
        };
        match std::fs::canonicalize(&path) {
            Ok(real) if self.contains(&real) => Ok(path),
            Ok(_) => Err(denied()),
            Err(_) => {
                // Not there (or a dangling link): the deepest existing ancestor decides.
                if std::fs::symlink_metadata(&path).is_ok() {
                    // A dangling symlink: where it would write is unknown.
                    return Err(denied());
                }
                let mut ancestor = path.parent();
                while let Some(a) = ancestor {
                    if let Ok(real) = std::fs::canonicalize(a) {
                        return if self.contains(&real) {
                            Ok(path)
                        } else {
                            Err(denied())
                        };
                    }
                    ancestor = a.parent();
                }
                Err(denied())
            }
        }
    }

    /// As [`Roots::check`] for an entry acted on itself (delete, move source): the entry may
    /// be a symlink inside a root (its target does not matter), its parent must resolve
    /// inside a root.
    fn check_entry(&self, uri: &str) -> Result<PathBuf, RpcError> {
        let path = lexical(&path_of(uri)?)?;
        let denied = || {
            RpcError::new(
                code::PERMISSION_DENIED,
                format!(
                    "{} is outside the session's working directories",
                    path.display()
                ),
            )
        };
        let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
            return Err(denied());
        };
        let parent = std::fs::canonicalize(parent).map_err(|_| not_found(&path))?;
        if !self.contains(&parent) {
            return Err(denied());
        }
        let entry = parent.join(name);
        if self.is_root(&entry) || !self.contains(&entry) {
            return Err(denied());
        }
        Ok(entry)
    }
}

fn not_found(path: &Path) -> RpcError {
    RpcError::new(
        code::NOT_FOUND,
        format!("{} does not exist", path.display()),
    )
}

fn io_error(path: &Path, e: &std::io::Error) -> RpcError {
    match e.kind() {
        std::io::ErrorKind::NotFound => not_found(path),
        std::io::ErrorKind::AlreadyExists => RpcError::new(
            code::ALREADY_EXISTS,
            format!("{} already exists", path.display()),
        ),
        std::io::ErrorKind::PermissionDenied => {
            RpcError::new(code::PERMISSION_DENIED, format!("{}: {e}", path.display()))
        }
        _ => RpcError::new(code::INTERNAL_ERROR, format!("{}: {e}", path.display())),
    }
}

/// The path of a `file:` URI (percent-decoded).
fn path_of(uri: &str) -> Result<PathBuf, RpcError> {
    let rest = uri.strip_prefix("file://").ok_or_else(|| {
        RpcError::invalid_params(format!("only file: URIs are served, not {uri}"))
    })?;
    // `file://host/path`: only the local host.
    let rest = rest.strip_prefix("localhost").unwrap_or(rest);
    if !rest.starts_with('/') {
        return Err(RpcError::invalid_params(format!(
            "not an absolute local file URI: {uri}"
        )));
    }
    let bytes = rest.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| RpcError::invalid_params(format!("bad percent-escape in {uri}")))?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    let s = String::from_utf8(out)
        .map_err(|_| RpcError::invalid_params(format!("the path of {uri} is not UTF-8")))?;
    if s.contains('\0') {
        return Err(RpcError::invalid_params("a path cannot contain NUL"));
    }
    Ok(PathBuf::from(s))
}

/// Removes `.` and resolves `..` lexically (never above `/`).
fn lexical(path: &Path) -> Result<PathBuf, RpcError> {
    let mut out = PathBuf::from("/");
    for c in path.components() {
        match c {
            Component::RootDir | Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(n) => out.push(n),
            Component::Prefix(_) => return Err(RpcError::invalid_params("unsupported path")),
        }
    }
    Ok(out)
}

fn uri_of(path: &Path) -> String {
    crate::host::file_uri(path)
}

fn parse<T: serde::de::DeserializeOwned>(params: Value) -> Result<T, RpcError> {
    crate::rpc::from_params(params)
}

fn to_json<T: serde::Serialize>(v: &T) -> Result<Value, RpcError> {
    serde_json::to_value(v).map_err(|e| RpcError::new(code::INTERNAL_ERROR, e.to_string()))
}

/// Whether `method` is one of the resource commands this module serves.
pub fn is_resource_method(method: &str) -> bool {
    matches!(
        method,
        "resourceRead"
            | "resourceWrite"
            | "resourceList"
            | "resourceResolve"
            | "resourceMkdir"
            | "resourceDelete"
            | "resourceMove"
            | "resourceCopy"
    )
}

/// Handles one `resource*` request and returns its result object.
pub async fn handle(roots: &Roots, method: &str, params: Value) -> Result<Value, RpcError> {
    let roots = roots.clone();
    let method = method.to_owned();
    // The filesystem calls block; they run off the async workers.
    tokio::task::spawn_blocking(move || handle_blocking(&roots, &method, params))
        .await
        .map_err(|e| RpcError::new(code::INTERNAL_ERROR, e.to_string()))?
}

fn etag(meta: &std::fs::Metadata) -> String {
    use std::os::unix::fs::MetadataExt;
    format!(
        "{:x}-{:x}-{:x}",
        meta.ino(),
        meta.size(),
        meta.mtime_nsec() + meta.mtime() * 1_000_000_000
    )
}

fn content_type(path: &Path) -> Option<String> {
    let ext = path.extension()?.to_str()?.to_ascii_lowercase();
    Some(
        match ext.as_str() {
            "txt" | "md" | "rs" | "ts" | "js" | "py" | "toml" | "yaml" | "yml" | "sh" => {
                "text/plain"
            }
            "json" => "application/json",
            "png" => "image/png",
            "jpg" | "jpeg" => "image/jpeg",
            "gif" => "image/gif",
            "svg" => "image/svg+xml",
            "html" => "text/html",
            _ => return None,
        }
        .to_owned(),
    )
}

fn handle_blocking(roots: &Roots, method: &str, params: Value) -> Result<Value, RpcError> {
    match method {
        "resourceRead" => {
            let p: ResourceReadParams = parse(params)?;
            let path = roots.check(&p.uri)?;
            let meta = std::fs::metadata(&path).map_err(|e| io_error(&path, &e))?;
            if meta.is_dir() {
                return Err(RpcError::invalid_params(format!(
                    "{} is a directory; use resourceList",
                    path.display()
                )));
            }
            if meta.len() > MAX_READ_BYTES {
                return Err(RpcError::invalid_params(format!(
                    "{} is {} bytes, over the {MAX_READ_BYTES}-byte read limit",
                    path.display(),
                    meta.len()
                )));
            }
            let bytes = std::fs::read(&path).map_err(|e| io_error(&path, &e))?;
            let want_text = !matches!(p.encoding, Some(ContentEncoding::Base64));
            let (data, encoding) = match String::from_utf8(bytes) {
                Ok(text) if want_text => (text, ContentEncoding::Utf8),
                Ok(text) => (
                    base64::engine::general_purpose::STANDARD.encode(text.as_bytes()),
                    ContentEncoding::Base64,
                ),
                Err(e) => (
                    base64::engine::general_purpose::STANDARD.encode(e.as_bytes()),
                    ContentEncoding::Base64,
                ),
            };
            to_json(&ResourceReadResult {
                data,
                encoding,
                content_type: content_type(&path),
            })
        }
        "resourceWrite" => {
            let p: ResourceWriteParams = parse(params)?;
            let path = roots.check(&p.uri)?;
            let data = match p.encoding {
                ContentEncoding::Utf8 => p.data.into_bytes(),
                ContentEncoding::Base64 => base64::engine::general_purpose::STANDARD
                    .decode(p.data.as_bytes())
                    .map_err(|e| RpcError::invalid_params(format!("data is not base64: {e}")))?,
            };
            let existing = std::fs::metadata(&path).ok();
            if existing.as_ref().is_some_and(std::fs::Metadata::is_dir) {
                return Err(RpcError::new(
                    code::ALREADY_EXISTS,
                    format!("{} is a directory", path.display()),
                ));
            }
            if p.create_only == Some(true) && existing.is_some() {
                return Err(RpcError::new(
                    code::ALREADY_EXISTS,
                    format!("{} already exists", path.display()),
                ));
            }
            if let Some(want) = &p.if_match {
                let current = existing.as_ref().map(etag);
                if current.as_deref() != Some(want.as_str()) {
                    return Err(RpcError::new(
                        CONFLICT,
                        format!("{} changed since it was read", path.display()),
                    ));
                }
            }
            let old = if existing.is_some() {
                std::fs::read(&path).map_err(|e| io_error(&path, &e))?
            } else {
                Vec::new()
            };
            let pos = p.position.unwrap_or(0).max(0) as usize;
            let new = match p.mode.unwrap_or(ResourceWriteMode::Truncate) {
                ResourceWriteMode::Truncate => {
                    let mut v = old[..pos.min(old.len())].to_vec();
                    v.extend_from_slice(&data);
                    v
                }
                ResourceWriteMode::Append => {
                    let at = old.len().saturating_sub(pos);
                    let mut v = old[..at].to_vec();
                    v.extend_from_slice(&data);
                    v.extend_from_slice(&old[at..]);
                    v
                }
                ResourceWriteMode::Insert => {
                    let at = pos.min(old.len());
                    let mut v = old[..at].to_vec();
                    v.extend_from_slice(&data);
                    v.extend_from_slice(&old[at..]);
                    v
                }
            };
            std::fs::write(&path, new).map_err(|e| io_error(&path, &e))?;
            Ok(json!({}))
        }
        "resourceList" => {
            let p: ResourceListParams = parse(params)?;
            let path = roots.check(&p.uri)?;
            let mut entries = Vec::new();
            for e in std::fs::read_dir(&path).map_err(|e| io_error(&path, &e))? {
                let e = e.map_err(|e| io_error(&path, &e))?;
                let kind = match e.file_type() {
                    Ok(t) if t.is_dir() => "directory",
                    Ok(t) if t.is_symlink() => "symlink",
                    _ => "file",
                };
                entries.push(DirectoryEntry {
                    name: e.file_name().to_string_lossy().into_owned(),
                    r#type: kind.to_owned(),
                });
            }
            entries.sort_by(|a, b| a.name.cmp(&b.name));
            to_json(&ResourceListResult { entries })
        }
        "resourceResolve" => {
            let p: ResourceResolveParams = parse(params)?;
            let follow = p.follow_symlinks.unwrap_or(true);
            let (path, meta) = if follow {
                let path = roots.check(&p.uri)?;
                let real = std::fs::canonicalize(&path).map_err(|e| io_error(&path, &e))?;
                let meta = std::fs::metadata(&real).map_err(|e| io_error(&real, &e))?;
                (real, meta)
            } else {
                let path = roots.check_entry(&p.uri)?;
                let meta = std::fs::symlink_metadata(&path).map_err(|e| io_error(&path, &e))?;
                (path, meta)
            };
            let kind = if meta.file_type().is_symlink() {
                ResourceType::Symlink
            } else if meta.is_dir() {
                ResourceType::Directory
            } else {
                ResourceType::File
            };
            let mtime = meta.modified().ok().and_then(|t| {
                t.duration_since(std::time::UNIX_EPOCH)
                    .ok()
                    .map(|d| claude_host_agent::mapper::rfc3339_from_millis(d.as_millis() as i64))
            });
            to_json(&ResourceResolveResult {
                uri: uri_of(&path),
                size: (!meta.is_dir()).then_some(meta.len() as i64),
                mtime,
                ctime: None,
                content_type: content_type(&path),
                etag: Some(etag(&meta)),
                r#type: kind,
            })
        }
        "resourceMkdir" => {
            let p: ResourceMkdirParams = parse(params)?;
            let path = roots.check(&p.uri)?;
            if std::fs::metadata(&path).is_ok_and(|m| !m.is_dir()) {
                return Err(RpcError::new(
                    code::ALREADY_EXISTS,
                    format!("{} exists and is not a directory", path.display()),
                ));
            }
            std::fs::create_dir_all(&path).map_err(|e| io_error(&path, &e))?;
            Ok(json!({}))
        }
        "resourceDelete" => {
            let p: ResourceDeleteParams = parse(params)?;
            let path = roots.check_entry(&p.uri)?;
            let meta = std::fs::symlink_metadata(&path).map_err(|e| io_error(&path, &e))?;
            // A symlink is removed itself, never what it points to.
            let r = if meta.is_dir() {
                if p.recursive == Some(true) {
                    std::fs::remove_dir_all(&path)
                } else {
                    std::fs::remove_dir(&path)
                }
            } else {
                std::fs::remove_file(&path)
            };
            r.map_err(|e| io_error(&path, &e))?;
            Ok(json!({}))
        }
        "resourceMove" | "resourceCopy" => {
            let (source, destination, fail_if_exists) = if method == "resourceMove" {
                let p: ResourceMoveParams = parse(params)?;
                (p.source, p.destination, p.fail_if_exists)
            } else {
                let p: ResourceCopyParams = parse(params)?;
                (p.source, p.destination, p.fail_if_exists)
            };
            let from = if method == "resourceMove" {
                roots.check_entry(&source)?
            } else {
                roots.check(&source)?
            };
            let to = roots.check_entry(&destination)?;
            std::fs::symlink_metadata(&from).map_err(|e| io_error(&from, &e))?;
            if std::fs::symlink_metadata(&to).is_ok() {
                if fail_if_exists == Some(true) {
                    return Err(RpcError::new(
                        code::ALREADY_EXISTS,
                        format!("{} already exists", to.display()),
                    ));
                }
                if std::fs::symlink_metadata(&to).is_ok_and(|m| m.is_dir()) {
                    std::fs::remove_dir_all(&to).map_err(|e| io_error(&to, &e))?;
                }
            }
            if method == "resourceMove" {
                std::fs::rename(&from, &to).map_err(|e| io_error(&from, &e))?;
            } else {
                copy_tree(roots, &from, &to)?;
            }
            Ok(json!({}))
        }
        other => Err(RpcError::new(
            code::METHOD_NOT_FOUND,
            format!("unknown method `{other}`"),
        )),
    }
}

/// Copies a file or a directory tree; symlinks inside are copied as links, so nothing from
/// outside the roots is read.
fn copy_tree(roots: &Roots, from: &Path, to: &Path) -> Result<(), RpcError> {
    let meta = std::fs::symlink_metadata(from).map_err(|e| io_error(from, &e))?;
    if meta.file_type().is_symlink() {
        let target = std::fs::read_link(from).map_err(|e| io_error(from, &e))?;
        let _ = std::fs::remove_file(to);
        std::os::unix::fs::symlink(&target, to).map_err(|e| io_error(to, &e))?;
    } else if meta.is_dir() {
        std::fs::create_dir_all(to).map_err(|e| io_error(to, &e))?;
        for e in std::fs::read_dir(from).map_err(|e| io_error(from, &e))? {
            let e = e.map_err(|e| io_error(from, &e))?;
            copy_tree(roots, &e.path(), &to.join(e.file_name()))?;
        }
    } else {
        let real = std::fs::canonicalize(from).map_err(|e| io_error(from, &e))?;
        if !roots.contains(&real) {
            return Err(RpcError::new(
                code::PERMISSION_DENIED,
                format!(
                    "{} is outside the session's working directories",
                    from.display()
                ),
            ));
        }
        std::fs::copy(from, to).map_err(|e| io_error(to, &e))?;
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn setup() -> (tempfile::TempDir, Roots) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("root")).unwrap();
        std::fs::write(dir.path().join("outside.txt"), "secret").unwrap();
        let roots = Roots::new(&[dir.path().join("root")]).unwrap();
        (dir, roots)
    }

    fn u(p: &Path) -> String {
        uri_of(p)
    }

    async fn call(roots: &Roots, method: &str, params: Value) -> Result<Value, RpcError> {
        handle(roots, method, params).await
    }

    #[tokio::test]
    async fn write_read_list_copy_move_delete_inside_the_root() {
        let (dir, roots) = setup();
        let root = dir.path().join("root");
        let f = root.join("a b.txt");
        call(
            &roots,
            "resourceWrite",
            json!({"channel": "x", "uri": u(&f), "data": "héllo", "encoding": "utf-8"}),
        )
        .await
        .unwrap();
        let r = call(
            &roots,
            "resourceRead",
            json!({"channel": "x", "uri": u(&f)}),
        )
        .await
        .unwrap();
        assert_eq!(r["data"], "héllo");
        assert_eq!(r["encoding"], "utf-8");
        let r = call(
            &roots,
            "resourceRead",
            json!({"channel": "x", "uri": u(&f), "encoding": "base64"}),
        )
        .await
        .unwrap();
        assert_eq!(r["encoding"], "base64");
        call(
            &roots,
            "resourceMkdir",
            json!({"channel": "x", "uri": u(&root.join("d/e"))}),
        )
        .await
        .unwrap();
        call(
            &roots,
            "resourceCopy",
            json!({"channel": "x", "source": u(&f), "destination": u(&root.join("d/c.txt"))}),
        )
        .await
        .unwrap();
        call(&roots, "resourceMove", json!({"channel": "x", "source": u(&root.join("d/c.txt")), "destination": u(&root.join("m.txt"))}))
            .await
            .unwrap();
        let l = call(
            &roots,
            "resourceList",
            json!({"channel": "x", "uri": u(&root)}),
        )
        .await
        .unwrap();
        let names: Vec<&str> = l["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["a b.txt", "d", "m.txt"]);
        call(
            &roots,
            "resourceDelete",
            json!({"channel": "x", "uri": u(&root.join("d")), "recursive": true}),
        )
        .await
        .unwrap();
        assert!(!root.join("d").exists());
        let r = call(
            &roots,
            "resourceResolve",
            json!({"channel": "x", "uri": u(&root.join("m.txt"))}),
        )
        .await
        .unwrap();
        assert_eq!(r["type"], "file");
        assert_eq!(r["size"], 6);
    }

    #[tokio::test]
    async fn escapes_are_refused_with_permission_denied() {
        let (dir, roots) = setup();
        let root = dir.path().join("root");
        std::os::unix::fs::symlink(dir.path().join("outside.txt"), root.join("link")).unwrap();
        std::os::unix::fs::symlink(dir.path(), root.join("dirlink")).unwrap();
        for uri in [
            format!("{}/../outside.txt", u(&root)),
            u(&dir.path().join("outside.txt")),
            "file:///etc/passwd".to_owned(),
            u(&root.join("link")),
            u(&root.join("dirlink/outside.txt")),
            format!("{}/%2E%2E/outside.txt", u(&root)),
        ] {
            let e = call(&roots, "resourceRead", json!({"channel": "x", "uri": uri}))
                .await
                .unwrap_err();
            assert_eq!(e.code, code::PERMISSION_DENIED, "{uri}: {e:?}");
        }
        let e = call(&roots, "resourceWrite", json!({"channel": "x", "uri": u(&root.join("dirlink/planted")), "data": "x", "encoding": "utf-8"}))
            .await
            .unwrap_err();
        assert_eq!(e.code, code::PERMISSION_DENIED);
        assert!(!dir.path().join("planted").exists());
        let e = call(
            &roots,
            "resourceWrite",
            json!({"channel": "x", "uri": u(&root.join("link")), "data": "x", "encoding": "utf-8"}),
        )
        .await
        .unwrap_err();
        assert_eq!(
            e.code,
            code::PERMISSION_DENIED,
            "writing through a link out"
        );
        assert_eq!(
            std::fs::read_to_string(dir.path().join("outside.txt")).unwrap(),
            "secret"
        );
        let e = call(
            &roots,
            "resourceDelete",
            json!({"channel": "x", "uri": u(&root), "recursive": true}),
        )
        .await
        .unwrap_err();
        assert_eq!(e.code, code::PERMISSION_DENIED, "the root itself");
        // Deleting a link removes the link only.
        call(
            &roots,
            "resourceDelete",
            json!({"channel": "x", "uri": u(&root.join("link"))}),
        )
        .await
        .unwrap();
        assert!(dir.path().join("outside.txt").exists());
    }

    #[tokio::test]
    async fn precise_errors_for_missing_files_and_bad_uris() {
        let (dir, roots) = setup();
        let root = dir.path().join("root");
        let e = call(
            &roots,
            "resourceRead",
            json!({"channel": "x", "uri": u(&root.join("nope"))}),
        )
        .await
        .unwrap_err();
        assert_eq!(e.code, code::NOT_FOUND);
        let e = call(
            &roots,
            "resourceRead",
            json!({"channel": "x", "uri": "https://example.com/a"}),
        )
        .await
        .unwrap_err();
        assert_eq!(e.code, code::INVALID_PARAMS);
        let e = call(&roots, "resourceRead", json!({"channel": "x"}))
            .await
            .unwrap_err();
        assert_eq!(e.code, code::INVALID_PARAMS);
        let e = call(&roots, "resourceFrob", json!({})).await.unwrap_err();
        assert_eq!(e.code, code::METHOD_NOT_FOUND);
        let f = root.join("f.txt");
        std::fs::write(&f, "1").unwrap();
        let e = call(&roots, "resourceWrite", json!({"channel": "x", "uri": u(&f), "data": "2", "encoding": "utf-8", "createOnly": true}))
            .await
            .unwrap_err();
        assert_eq!(e.code, code::ALREADY_EXISTS);
        let e = call(&roots, "resourceWrite", json!({"channel": "x", "uri": u(&f), "data": "2", "encoding": "utf-8", "ifMatch": "stale"}))
            .await
            .unwrap_err();
        assert_eq!(e.code, CONFLICT);
    }
}
