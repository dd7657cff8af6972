//! The `resource*` commands (`resourceRead`, `resourceWrite`, `resourceList`,
//! `resourceResolve`, `resourceMkdir`, `resourceDelete`, `resourceMove`, `resourceCopy`) on the
//! local filesystem, confined to a set of root directories (a session's working directories).
//!
//! How a URI is confined:
//! - only `file:` URIs for this host; the path is percent-decoded, must be absolute, and is
//!   normalized lexically (`.`, `..`) before anything touches the filesystem;
//! - each root is opened once as a [`cap_std::fs::Dir`], and every filesystem operation goes
//!   through one of them, on a path relative to it. cap-std resolves that path beneath the root
//!   (`openat2` with `RESOLVE_BENEATH` on Linux, a component-by-component walk elsewhere) and
//!   refuses any step out of it, by `..`, by an absolute symlink or by a symlink that leads out.
//!   Confinement holds by construction, also against a folder swapped for a symlink while a
//!   command runs: the worst such a race can do is make the command fail;
//! - a request path is mapped to the innermost root it lies in, lexically. A path that maps to
//!   none (a root spelled through a symlink above it), or whose resolution cap-std refuses (an
//!   absolute symlink, or one into another root), is spelled anew from where the kernel
//!   resolves it (`std::fs::canonicalize` of its deepest existing part, which may not be a
//!   dangling symlink) and tried once more through the root that spelling lies in. That lookup
//!   only spells a path: nothing is opened, read or written through it;
//! - commands that act on an entry itself (delete, move, `followSymlinks: false`, a copy's
//!   destination) open only its parent folder and act on the name in it, so a symlink is
//!   removed, moved or replaced as a link and never followed; a root, or a directory holding
//!   one, cannot be deleted or replaced;
//! - a path outside the roots is refused the same way whether or not it exists, so the errors
//!   say nothing about the filesystem outside.

use crate::rpc::{RpcError, code, from_params};
use ahp_types::commands::{
    ContentEncoding, DirectoryEntry, ResourceCopyParams, ResourceCopyResult, ResourceDeleteParams,
    ResourceDeleteResult, ResourceListParams, ResourceListResult, ResourceMkdirParams,
    ResourceMkdirResult, ResourceMoveParams, ResourceMoveResult, ResourceReadParams,
    ResourceReadResult, ResourceResolveParams, ResourceResolveResult, ResourceType,
    ResourceWriteMode, ResourceWriteParams, ResourceWriteResult,
};
use base64::Engine as _;
use cap_std::fs::{
    Dir, DirBuilder, DirBuilderExt as _, Metadata, MetadataExt as _, OpenOptions,
    OpenOptionsExt as _, PermissionsExt as _,
};
use claude_host_protocol::uri::file_uri;
use serde_json::Value;
use std::ffi::OsString;
use std::io::{self, Read as _, Write as _};
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::time::UNIX_EPOCH;

/// Largest file `resourceRead` returns, and the most bytes an `append`/`insert` write moves.
pub const MAX_READ_BYTES: u64 = 64 * 1024 * 1024;

/// The protocol's `Conflict`: an `ifMatch` precondition failed.
const CONFLICT: i64 = -32011;

/// The methods this module serves.
const METHODS: [&str; 8] = [
    "resourceRead",
    "resourceWrite",
    "resourceList",
    "resourceResolve",
    "resourceMkdir",
    "resourceDelete",
    "resourceMove",
    "resourceCopy",
];

/// A directory a client may touch: its canonical path and the directory itself, opened.
#[derive(Debug)]
struct Root {
    path: PathBuf,
    dir: Dir,
}

/// Directories a client may touch, canonicalized (symlinks resolved) and opened at
/// construction.
#[derive(Debug, Clone)]
pub struct Roots {
    roots: Arc<[Root]>,
}

impl Roots {
    /// Canonicalizes and opens `dirs`; fails with `NotFound` if one does not exist or is not a
    /// directory, `PermissionDenied` if one cannot be resolved or opened for lack of permission.
    pub fn new(dirs: &[PathBuf]) -> Result<Roots, RpcError> {
        let mut out: Vec<Root> = Vec::with_capacity(dirs.len());
        for dir in dirs {
            let failed = |e: io::Error| {
                let code = if e.kind() == io::ErrorKind::PermissionDenied {
                    code::PERMISSION_DENIED
                } else {
                    code::NOT_FOUND
                };
                let shown = dir.display();
                match e.kind() {
                    io::ErrorKind::NotADirectory => RpcError::new(
                        code,
                        format!("working directory {shown} is not a directory"),
                    ),
                    _ => RpcError::new(code, format!("working directory {shown}: {e}")),
                }
            };
            let path = std::fs::canonicalize(dir).map_err(failed)?;
            if out.iter().any(|r| r.path == path) {
                continue;
            }
            // The one use of ambient authority: the session's working directories are what
            // this host was asked to serve. Everything else is reached through these handles.
            let dir = Dir::open_ambient_dir(&path, cap_std::ambient_authority()).map_err(failed)?;
            out.push(Root { path, dir });
        }
        Ok(Roots { roots: out.into() })
    }

    /// The canonical roots.
    #[cfg(test)]
    pub fn dirs(&self) -> Vec<PathBuf> {
        self.roots.iter().map(|r| r.path.clone()).collect()
    }

    /// The innermost root that `path` (absolute, normalized) lies in, lexically.
    fn place(&self, path: &Path) -> Option<Place<'_>> {
        self.roots
            .iter()
            .filter_map(|root| Some((root, path.strip_prefix(&root.path).ok()?)))
            .max_by_key(|(root, _)| root.path.as_os_str().len())
            .map(|(root, rel)| Place {
                root,
                rel: rel.to_path_buf(),
            })
    }

    /// Where `path` leads as the kernel resolves it from `/` (its deepest existing part,
    /// symlinks followed, and the rest), if that lies in a root. Used only to spell a path that
    /// is then reached through the root; never to open anything.
    fn respelled(&self, path: &Path) -> Option<Place<'_>> {
        // `symlink_metadata` counts a dangling link as present, so it is refused below rather
        // than skipped over.
        let ancestor = path
            .ancestors()
            .find(|a| std::fs::symlink_metadata(a).is_ok())?;
        let base = std::fs::canonicalize(ancestor).ok()?;
        let rest = path.strip_prefix(ancestor).ok()?;
        self.place(&base.join(rest))
    }

    /// The root whose canonical path is `path`, if any.
    fn root_at(&self, path: &Path) -> Option<&Root> {
        self.roots.iter().find(|r| r.path == path)
    }

    /// Whether removing or replacing `entry` would take a root with it.
    fn holds_root(&self, entry: &Path) -> bool {
        self.roots.iter().any(|r| r.path.starts_with(entry))
    }
}

/// Whether `method` is one of the resource commands this module serves.
pub fn is_resource_method(method: &str) -> bool {
    METHODS.contains(&method)
}

/// Handles one `resource*` request. `method` is the JSON-RPC method name, `params` its params
/// object; returns the result object. An unknown method is `MethodNotFound` (-32601).
pub async fn handle(roots: &Roots, method: &str, params: Value) -> Result<Value, RpcError> {
    if !is_resource_method(method) {
        return Err(RpcError::new(
            code::METHOD_NOT_FOUND,
            format!("unknown method `{method}`"),
        ));
    }
    let roots = roots.clone();
    let owned = method.to_owned();
    // Every step is a blocking system call; none of them may stall the async workers.
    tokio::task::spawn_blocking(move || dispatch(&roots, &owned, params))
        .await
        .map_err(|e| RpcError::new(code::INTERNAL_ERROR, format!("{method} failed: {e}")))?
}

fn dispatch(roots: &Roots, method: &str, params: Value) -> Result<Value, RpcError> {
    match method {
        "resourceRead" => to_json(&read(roots, from_params(params)?)?),
        "resourceWrite" => to_json(&write(roots, from_params(params)?)?),
        "resourceList" => to_json(&list(roots, from_params(params)?)?),
        "resourceResolve" => to_json(&resolve(roots, from_params(params)?)?),
        "resourceMkdir" => to_json(&mkdir(roots, from_params(params)?)?),
        "resourceDelete" => to_json(&delete(roots, from_params(params)?)?),
        "resourceMove" => to_json(&rename(roots, from_params(params)?)?),
        "resourceCopy" => to_json(&copy(roots, from_params(params)?)?),
        other => Err(RpcError::new(
            code::METHOD_NOT_FOUND,
            format!("unknown method `{other}`"),
        )),
    }
}

fn to_json<T: serde::Serialize>(value: &T) -> Result<Value, RpcError> {
    serde_json::to_value(value).map_err(|e| RpcError::new(code::INTERNAL_ERROR, e.to_string()))
}

// ─── URIs and confinement ─────────────────────────────────────────────────────

/// The path a `file:` URI names: percent-decoded, absolute, normalized lexically.
fn request_path(uri: &str) -> Result<PathBuf, RpcError> {
    use claude_host_protocol::uri::FileUriError;
    let path = claude_host_protocol::uri::file_path(uri).map_err(|e| match e {
        FileUriError::RemoteHost { .. } => RpcError::new(code::PERMISSION_DENIED, e.to_string()),
        FileUriError::Relative(p) => RpcError::new(
            code::PERMISSION_DENIED,
            format!(
                "{p} is a relative path; only absolute paths inside the session's working directories are served"
            ),
        ),
        other => RpcError::invalid_params(other.to_string()),
    })?;
    Ok(normalize(&path))
}

/// Drops `.` and applies `..` lexically (never above `/`): the kernel would apply a `..`
/// after a symlinked component to the link's target, so the path checked could differ from
/// the path used.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for c in path.components() {
        match c {
            Component::Normal(name) => out.push(name),
            Component::ParentDir => {
                out.pop();
            }
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    out
}

/// A path in a root, relative to it.
struct Place<'r> {
    root: &'r Root,
    rel: PathBuf,
}

impl Place<'_> {
    /// The absolute path of `inner`, a path relative to the root (as cap-std's `canonicalize`
    /// returns it, `.` for the root itself).
    fn absolute(&self, inner: &Path) -> PathBuf {
        let mut out = self.root.path.clone();
        out.extend(
            inner
                .components()
                .filter(|c| matches!(c, Component::Normal(_))),
        );
        out
    }
}

/// `.` for the empty path: cap-std, like the system calls, takes `""` for a missing file.
fn dot(rel: &Path) -> &Path {
    if rel.as_os_str().is_empty() {
        Path::new(".")
    } else {
        rel
    }
}

/// Whether an error is cap-std refusing a path that would lead out of its directory (or a
/// symlink loop): worth spelling the path anew, since it may lead into a root all the same.
fn led_out(e: &io::Error) -> bool {
    (e.kind() == io::ErrorKind::PermissionDenied && e.raw_os_error().is_none())
        || e.raw_os_error() == Some(libc::ELOOP)
}

/// Runs `op` on the root `path` lies in, with the path relative to it; if cap-std refuses to
/// follow it there, once more where the kernel resolves the path to (see the module doc).
/// Errors name `shown`; a path that leads outside every root is refused as [`denied`].
fn within<'r, T>(
    roots: &'r Roots,
    path: &Path,
    shown: &Path,
    op: impl Fn(&Dir, &Path) -> io::Result<T>,
) -> Result<(T, Place<'r>), RpcError> {
    if let Some(place) = roots.place(path) {
        match op(&place.root.dir, dot(&place.rel)) {
            Ok(v) => return Ok((v, place)),
            Err(e) if !led_out(&e) => return Err(io_error(shown, &e)),
            Err(_) => {}
        }
    }
    let place = roots.respelled(path).ok_or_else(|| denied(shown))?;
    match op(&place.root.dir, dot(&place.rel)) {
        Ok(v) => Ok((v, place)),
        Err(e) if led_out(&e) => Err(denied(shown)),
        Err(e) => Err(io_error(shown, &e)),
    }
}

/// An entry in a folder, itself (a final symlink is not followed): the folder opened beneath
/// a root, the name, and the entry's canonical path.
struct Child {
    dir: Dir,
    name: OsString,
    real: PathBuf,
}

/// What a path names as an entry: a root itself, or an entry in a folder.
enum Entry<'r> {
    Root(&'r Root),
    Child(Child),
}

/// The entry `path` names: its parent is resolved (symlinks followed, within the roots) and
/// opened, and the last name kept. Whether the entry exists is left to the caller.
fn entry<'r>(roots: &'r Roots, path: &Path) -> Result<Entry<'r>, RpcError> {
    if let Some(root) = roots.root_at(path) {
        return Ok(Entry::Root(root));
    }
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(denied(path));
    };
    let ((dir, real_parent), place) = within(roots, parent, path, |dir, rel| {
        let real = dir.canonicalize(rel)?;
        Ok((dir.open_dir(&real)?, real))
    })?;
    Ok(Entry::Child(Child {
        dir,
        name: name.to_owned(),
        real: place.absolute(&real_parent).join(name),
    }))
}

/// The entry `path` names, which must be neither a root nor hold one (it is to be `what`:
/// deleted, moved, replaced).
fn child_entry(roots: &Roots, path: &Path, what: &str) -> Result<Child, RpcError> {
    match entry(roots, path)? {
        Entry::Child(c) if !roots.holds_root(&c.real) => Ok(c),
        _ => Err(RpcError::new(
            code::PERMISSION_DENIED,
            format!(
                "{} is a working directory of the session (or holds one) and cannot be {what}",
                path.display()
            ),
        )),
    }
}

// ─── Errors ─────────────────────────────────────────────────────────────────

fn denied(path: &Path) -> RpcError {
    RpcError::new(
        code::PERMISSION_DENIED,
        format!(
            "{} is outside the session's working directories",
            path.display()
        ),
    )
}

fn not_found(path: &Path) -> RpcError {
    RpcError::new(
        code::NOT_FOUND,
        format!("{} does not exist", path.display()),
    )
}

fn already_exists(path: &Path) -> RpcError {
    RpcError::new(
        code::ALREADY_EXISTS,
        format!("{} already exists", path.display()),
    )
}

fn io_error(path: &Path, e: &io::Error) -> RpcError {
    use io::ErrorKind as K;
    let shown = path.display();
    match e.kind() {
        K::NotFound => not_found(path),
        K::NotADirectory => RpcError::new(
            code::NOT_FOUND,
            format!("{shown} does not exist (a parent is not a directory)"),
        ),
        K::AlreadyExists => already_exists(path),
        K::PermissionDenied | K::ReadOnlyFilesystem => {
            RpcError::new(code::PERMISSION_DENIED, format!("{shown}: {e}"))
        }
        K::IsADirectory => RpcError::invalid_params(format!("{shown} is a directory")),
        K::DirectoryNotEmpty => {
            RpcError::invalid_params(format!("{shown} is a directory that is not empty"))
        }
        _ => RpcError::new(code::INTERNAL_ERROR, format!("{shown}: {e}")),
    }
}

fn too_large(path: &Path, len: u64) -> RpcError {
    RpcError::invalid_params(format!(
        "{} is {len} bytes; resourceRead returns at most {MAX_READ_BYTES} bytes",
        path.display()
    ))
}

// ─── Metadata ───────────────────────────────────────────────────────────────

/// The version token `resourceResolve` reports and `resourceWrite`'s `ifMatch` checks: any
/// write changes the modification time, a replacement the inode.
fn etag(meta: &Metadata) -> String {
    format!(
        "{:x}-{:x}-{}.{:09}",
        meta.ino(),
        meta.size(),
        meta.mtime(),
        meta.mtime_nsec()
    )
}

fn iso8601(time: io::Result<cap_std::time::SystemTime>) -> Option<String> {
    let since = time.ok()?.into_std().duration_since(UNIX_EPOCH).ok()?;
    let ms = i64::try_from(since.as_millis()).ok()?;
    Some(claude_host_protocol::time::rfc3339_from_millis(ms))
}

/// A MIME type from the extension, else (given the content) from its first bytes.
fn content_type(path: &Path, content: Option<&[u8]>) -> Option<String> {
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    let by_ext = ext.as_deref().and_then(|e| {
        Some(match e {
            "txt" | "md" | "rs" | "ts" | "tsx" | "js" | "jsx" | "mjs" | "py" | "toml" | "yaml"
            | "yml" | "sh" | "c" | "h" | "cpp" | "go" | "java" | "log" | "csv" => "text/plain",
            "html" | "htm" => "text/html",
            "css" => "text/css",
            "json" => "application/json",
            "xml" => "application/xml",
            "pdf" => "application/pdf",
            "png" => "image/png",
            "jpg" | "jpeg" => "image/jpeg",
            "gif" => "image/gif",
            "webp" => "image/webp",
            "svg" => "image/svg+xml",
            _ => return None,
        })
    });
    by_ext
        .or_else(|| content.and_then(sniff))
        .map(str::to_owned)
}

fn sniff(bytes: &[u8]) -> Option<&'static str> {
    if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
        Some("image/png")
    } else if bytes.starts_with(b"\xff\xd8\xff") {
        Some("image/jpeg")
    } else if bytes.starts_with(b"GIF87a") || bytes.starts_with(b"GIF89a") {
        Some("image/gif")
    } else if bytes.starts_with(b"%PDF-") {
        Some("application/pdf")
    } else if bytes.starts_with(b"RIFF") && bytes.get(8..12) == Some(b"WEBP".as_slice()) {
        Some("image/webp")
    } else if !bytes.contains(&0) && std::str::from_utf8(bytes).is_ok() {
        Some("text/plain")
    } else {
        None
    }
}

// ─── Commands ───────────────────────────────────────────────────────────────

fn read(roots: &Roots, p: ResourceReadParams) -> Result<ResourceReadResult, RpcError> {
    let path = request_path(&p.uri)?;
    let ((meta, file), _) = within(roots, &path, &path, |dir, rel| {
        let meta = dir.metadata(rel)?;
        // Opening a FIFO blocks until a writer comes, and a device may never end; should one
        // be swapped in after this check, O_NONBLOCK keeps the open from waiting.
        let file = meta
            .is_file()
            .then(|| {
                let mut options = OpenOptions::new();
                options.read(true).custom_flags(libc::O_NONBLOCK);
                dir.open_with(rel, &options)
            })
            .transpose()?;
        Ok((meta, file))
    })?;
    let Some(file) = file else {
        let what = if meta.is_dir() {
            "is a directory; use resourceList"
        } else {
            "is not a regular file"
        };
        return Err(RpcError::invalid_params(format!(
            "{} {what}",
            path.display()
        )));
    };
    if meta.len() > MAX_READ_BYTES {
        return Err(too_large(&path, meta.len()));
    }
    let mut bytes = Vec::new();
    // The file may have grown since it was measured.
    file.take(MAX_READ_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| io_error(&path, &e))?;
    let len = u64::try_from(bytes.len()).unwrap_or(u64::MAX);
    if len > MAX_READ_BYTES {
        return Err(too_large(&path, len));
    }
    let content_type = content_type(&path, Some(bytes.as_slice()));
    let base64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
    let (data, encoding) = match p.encoding {
        Some(ContentEncoding::Base64) => (base64(&bytes), ContentEncoding::Base64),
        // Text when asked or left to us; bytes that are not UTF-8 fall back to base64, as the
        // protocol requires.
        _ => match String::from_utf8(bytes) {
            Ok(text) => (text, ContentEncoding::Utf8),
            Err(e) => (base64(e.as_bytes()), ContentEncoding::Base64),
        },
    };
    Ok(ResourceReadResult {
        data,
        encoding,
        content_type,
    })
}

/// Where a `resourceWrite` lands: the folder the file is in (opened beneath a root) and its
/// name there.
enum Target {
    /// The file exists (a final symlink followed to it), opened to read.
    Existing {
        dir: Dir,
        name: OsString,
        file: cap_std::fs::File,
    },
    /// No file there yet; its folder exists.
    New { dir: Dir, name: OsString },
    /// Its folder does not exist.
    NoFolder,
    /// A directory, or something else that is not a regular file.
    NotAFile { directory: bool },
}

impl Target {
    fn find(dir: &Dir, rel: &Path) -> io::Result<Target> {
        let meta = match dir.metadata(rel) {
            Ok(meta) => meta,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let (Some(parent), Some(name)) = (rel.parent(), rel.file_name()) else {
                    return Err(e);
                };
                return match dir.open_dir(dot(parent)) {
                    Ok(dir) => Ok(Target::New {
                        dir,
                        name: name.to_owned(),
                    }),
                    Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Target::NoFolder),
                    Err(e) => Err(e),
                };
            }
            Err(e) => return Err(e),
        };
        if !meta.is_file() {
            return Ok(Target::NotAFile {
                directory: meta.is_dir(),
            });
        }
        // The replacement goes beside the file itself, not beside a symlink to it.
        let real = dir.canonicalize(rel)?;
        let (Some(parent), Some(name)) = (real.parent(), real.file_name()) else {
            return Ok(Target::NotAFile { directory: true });
        };
        let dir = dir.open_dir(dot(parent))?;
        let mut options = OpenOptions::new();
        options.read(true).custom_flags(libc::O_NONBLOCK);
        let file = dir.open_with(name, &options)?;
        Ok(Target::Existing {
            dir,
            name: name.to_owned(),
            file,
        })
    }
}

fn write(roots: &Roots, p: ResourceWriteParams) -> Result<ResourceWriteResult, RpcError> {
    let path = request_path(&p.uri)?;
    let data = match p.encoding {
        ContentEncoding::Utf8 => p.data.into_bytes(),
        ContentEncoding::Base64 => base64::engine::general_purpose::STANDARD
            .decode(p.data.as_bytes())
            .map_err(|e| RpcError::invalid_params(format!("`data` is not base64: {e}")))?,
    };
    let position = u64::try_from(p.position.unwrap_or(0))
        .map_err(|_| RpcError::invalid_params("`position` must not be negative"))?;
    let (target, _) = within(roots, &path, &path, Target::find)?;
    let fail = |e: io::Error| io_error(&path, &e);
    let (dir, name, old, mode) = match target {
        Target::NotAFile { directory } => {
            let what = if directory {
                "is a directory"
            } else {
                "is not a regular file"
            };
            return Err(RpcError::invalid_params(format!(
                "{} {what}",
                path.display()
            )));
        }
        Target::NoFolder => {
            let parent = path.parent().unwrap_or(&path);
            return Err(RpcError::new(
                code::NOT_FOUND,
                format!(
                    "the directory {} does not exist (create it with resourceMkdir)",
                    parent.display()
                ),
            ));
        }
        Target::New { .. } if p.if_match.is_some() => {
            return Err(RpcError::new(
                CONFLICT,
                format!(
                    "{} does not exist, so it cannot match `ifMatch`",
                    path.display()
                ),
            ));
        }
        Target::New { dir, name } => (dir, name, Vec::new(), None),
        Target::Existing { .. } if p.create_only == Some(true) => {
            return Err(already_exists(&path));
        }
        Target::Existing {
            dir,
            name,
            mut file,
        } => {
            let meta = file.metadata().map_err(fail)?;
            if let Some(want) = &p.if_match
                && *want != etag(&meta)
            {
                return Err(RpcError::new(
                    CONFLICT,
                    format!(
                        "{} changed since `ifMatch` was read from it",
                        path.display()
                    ),
                ));
            }
            if meta.len() > MAX_READ_BYTES {
                return Err(RpcError::invalid_params(format!(
                    "{} is {} bytes; files over {MAX_READ_BYTES} bytes are not rewritten",
                    path.display(),
                    meta.len()
                )));
            }
            let mut old = Vec::new();
            file.read_to_end(&mut old).map_err(fail)?;
            (dir, name, old, Some(meta.permissions()))
        }
    };
    let len = old.len() as u64;
    if position > len {
        return Err(RpcError::invalid_params(format!(
            "`position` {position} is past the end of {} ({len} bytes)",
            path.display()
        )));
    }
    // `position` and `len` are at most MAX_READ_BYTES here: they fit in usize.
    let at = |n: u64| usize::try_from(n).unwrap_or(usize::MAX);
    let (head, tail): (&[u8], &[u8]) = match p.mode.unwrap_or(ResourceWriteMode::Truncate) {
        ResourceWriteMode::Truncate => (&old[..at(position)], &[]),
        ResourceWriteMode::Append => old.split_at(at(len - position)),
        ResourceWriteMode::Insert => old.split_at(at(position)),
    };
    // The new content goes to a temporary file beside the target, which then replaces it
    // (or, for a new file, is linked into place): a write that fails part-way (a full disk)
    // leaves the old file as it was, or no file, and no temporary behind.
    let tmp_name = format!(".claude-host-write-{}", uuid::Uuid::new_v4().simple());
    let mut options = OpenOptions::new();
    options.write(true).create_new(true);
    if let Some(perms) = &mode {
        // Created with the old file's mode, never wider (a new file gets what a plain create
        // would give it: 0666 less the umask).
        options.mode(perms.mode() & 0o7777);
    }
    let mut tmp = dir.open_with(&tmp_name, &options).map_err(fail)?;
    let written = (|| -> io::Result<()> {
        if let Some(perms) = mode.clone() {
            // The umask does not narrow an existing file's mode.
            tmp.set_permissions(perms)?;
        }
        tmp.write_all(head)?;
        tmp.write_all(&data)?;
        tmp.write_all(tail)?;
        tmp.sync_all()?;
        if mode.is_some() {
            dir.rename(&tmp_name, &dir, &name)
        } else {
            // Linked, not renamed: a file someone created there meanwhile is not replaced.
            dir.hard_link(&tmp_name, &dir, &name)?;
            dir.remove_file(&tmp_name)
        }
    })();
    if let Err(e) = written {
        let _ = dir.remove_file(&tmp_name);
        return Err(fail(e));
    }
    Ok(ResourceWriteResult {})
}

fn list(roots: &Roots, p: ResourceListParams) -> Result<ResourceListResult, RpcError> {
    let path = request_path(&p.uri)?;
    let (listed, _) = within(roots, &path, &path, |dir, rel| {
        if dir.metadata(rel)?.is_dir() {
            dir.open_dir(rel).map(Some)
        } else {
            Ok(None)
        }
    })?;
    let Some(listed) = listed else {
        return Err(RpcError::invalid_params(format!(
            "{} is not a directory",
            path.display()
        )));
    };
    let mut entries = Vec::new();
    for entry in listed.entries().map_err(|e| io_error(&path, &e))? {
        let entry = entry.map_err(|e| io_error(&path, &e))?;
        let name = entry.file_name();
        let kind = match entry.file_type() {
            Ok(t) if t.is_dir() => "directory",
            Ok(t) if t.is_symlink() => link_kind(roots, &path.join(&name)),
            _ => "file",
        };
        entries.push(DirectoryEntry {
            name: name.to_string_lossy().into_owned(),
            r#type: kind.to_owned(),
        });
    }
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(ResourceListResult { entries })
}

/// A symlink in a listing is described by its target only when that lies inside a root (so a
/// picker can descend into it); one leading outside, or nowhere, is a `"file"`, revealing
/// nothing of what is outside.
fn link_kind(roots: &Roots, link: &Path) -> &'static str {
    match within(roots, link, link, |dir, rel| dir.metadata(rel)) {
        Ok((meta, _)) if meta.is_dir() => "directory",
        _ => "file",
    }
}

fn resolve(roots: &Roots, p: ResourceResolveParams) -> Result<ResourceResolveResult, RpcError> {
    let path = request_path(&p.uri)?;
    let fail = |e: io::Error| io_error(&path, &e);
    let (uri, real, meta) = if p.follow_symlinks.unwrap_or(true) {
        let ((real, meta), place) = within(roots, &path, &path, |dir, rel| {
            let real = dir.canonicalize(rel)?;
            let meta = dir.metadata(&real)?;
            Ok((real, meta))
        })?;
        let real = place.absolute(&real);
        (file_uri(&real), real, meta)
    } else {
        match entry(roots, &path)? {
            Entry::Root(root) => {
                let meta = root.dir.dir_metadata().map_err(fail)?;
                (p.uri, root.path.clone(), meta)
            }
            Entry::Child(c) => {
                let meta = c.dir.symlink_metadata(&c.name).map_err(fail)?;
                (p.uri, c.real, meta)
            }
        }
    };
    let kind = if meta.file_type().is_symlink() {
        ResourceType::Symlink
    } else if meta.is_dir() {
        ResourceType::Directory
    } else {
        ResourceType::File
    };
    let is_file = meta.is_file();
    Ok(ResourceResolveResult {
        uri,
        // A link's size is the length of its target's path: meaningless, and about what may
        // lie outside.
        size: is_file.then(|| i64::try_from(meta.len()).ok()).flatten(),
        mtime: iso8601(meta.modified()),
        ctime: iso8601(meta.created()),
        content_type: is_file.then(|| content_type(&real, None)).flatten(),
        etag: Some(etag(&meta)),
        r#type: kind,
    })
}

fn mkdir(roots: &Roots, p: ResourceMkdirParams) -> Result<ResourceMkdirResult, RpcError> {
    let path = request_path(&p.uri)?;
    // cap-std makes the missing folders one level at a time beneath the root, so a folder
    // swapped for a symlink meanwhile fails the call instead of sending them outside.
    let (made, _) = within(roots, &path, &path, |dir, rel| match dir.metadata(rel) {
        Ok(meta) => Ok(meta.is_dir()),
        Err(e) if e.kind() == io::ErrorKind::NotADirectory => Ok(false),
        Err(e) if e.kind() == io::ErrorKind::NotFound => match dir.create_dir_all(rel) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::NotADirectory => Ok(false),
            Err(e) => Err(e),
        },
        Err(e) => Err(e),
    })?;
    if made {
        Ok(ResourceMkdirResult {})
    } else {
        Err(RpcError::new(
            code::ALREADY_EXISTS,
            format!(
                "{} (or a parent) exists and is not a directory",
                path.display()
            ),
        ))
    }
}

fn delete(roots: &Roots, p: ResourceDeleteParams) -> Result<ResourceDeleteResult, RpcError> {
    let path = request_path(&p.uri)?;
    let Child { dir, name, .. } = child_entry(roots, &path, "deleted")?;
    // The entry itself is never followed: a symlink is removed, its target left alone.
    let meta = dir
        .symlink_metadata(&name)
        .map_err(|e| io_error(&path, &e))?;
    let removed = if !meta.is_dir() {
        dir.remove_file(&name)
    } else if p.recursive == Some(true) {
        dir.remove_dir_all(&name)
    } else {
        dir.remove_dir(&name)
    };
    removed.map_err(|e| {
        if e.kind() == io::ErrorKind::DirectoryNotEmpty {
            RpcError::invalid_params(format!(
                "{} is a directory that is not empty; pass `recursive: true` to delete it with its contents",
                path.display()
            ))
        } else {
            io_error(&path, &e)
        }
    })?;
    Ok(ResourceDeleteResult {})
}

fn rename(roots: &Roots, p: ResourceMoveParams) -> Result<ResourceMoveResult, RpcError> {
    let (source, destination) = (request_path(&p.source)?, request_path(&p.destination)?);
    let from = child_entry(roots, &source, "moved or replaced")?;
    let to = child_entry(roots, &destination, "moved or replaced")?;
    let meta = from
        .dir
        .symlink_metadata(&from.name)
        .map_err(|e| io_error(&source, &e))?;
    check_distinct(
        &from.real,
        &to.real,
        &destination,
        p.fail_if_exists == Some(true),
    )?;
    if from.real == to.real {
        return Ok(ResourceMoveResult {});
    }
    // rename(2) replaces a file (or a link, unfollowed) atomically, which writers that save
    // through a temporary file rely on; a directory on either side has to go first.
    clear_at(
        &to.dir,
        &to.name,
        &destination,
        p.fail_if_exists == Some(true),
        meta.is_dir(),
    )?;
    match from.dir.rename(&from.name, &to.dir, &to.name) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::CrossesDevices => {
            copy_tree(&from.dir, from.name.as_ref(), &to.dir, to.name.as_ref())
                .map_err(|e| io_error(&destination, &e))?;
            let removed = if meta.is_dir() {
                from.dir.remove_dir_all(&from.name)
            } else {
                from.dir.remove_file(&from.name)
            };
            removed.map_err(|e| io_error(&source, &e))?;
        }
        Err(e) => return Err(io_error(&source, &e)),
    }
    Ok(ResourceMoveResult {})
}

fn copy(roots: &Roots, p: ResourceCopyParams) -> Result<ResourceCopyResult, RpcError> {
    let (source, destination) = (request_path(&p.source)?, request_path(&p.destination)?);
    let ((real, kind), place) = within(roots, &source, &source, |dir, rel| {
        let real = dir.canonicalize(rel)?;
        let kind = dir.symlink_metadata(&real)?.file_type();
        Ok((real, kind))
    })?;
    if !(kind.is_file() || kind.is_dir() || kind.is_symlink()) {
        return Err(RpcError::invalid_params(format!(
            "{} is a FIFO, socket or device: only files, folders and links are copied",
            source.display()
        )));
    }
    let to = child_entry(roots, &destination, "replaced")?;
    check_distinct(
        &place.absolute(&real),
        &to.real,
        &destination,
        p.fail_if_exists == Some(true),
    )?;
    if place.absolute(&real) == to.real {
        return Ok(ResourceCopyResult {});
    }
    // Always cleared: the copy is created anew, so a symlink left at the destination is
    // replaced rather than written through.
    clear_at(
        &to.dir,
        &to.name,
        &destination,
        p.fail_if_exists == Some(true),
        true,
    )?;
    copy_tree(&place.root.dir, &real, &to.dir, to.name.as_ref())
        .map_err(|e| io_error(&destination, &e))?;
    Ok(ResourceCopyResult {})
}

/// Copies `from_path` in `from` to a new `to_name` in `to`: a folder with everything in it, a
/// link as a link, a file's bytes and mode; other kinds are skipped. Every step goes through
/// the folders' handles, so nothing is read or written outside them.
fn copy_tree(from: &Dir, from_path: &Path, to: &Dir, to_name: &Path) -> io::Result<()> {
    let meta = from.symlink_metadata(from_path)?;
    let kind = meta.file_type();
    let mode = meta.permissions().mode() & 0o7777;
    if kind.is_symlink() {
        to.symlink_contents(from.read_link_contents(from_path)?, to_name)
    } else if kind.is_dir() {
        to.create_dir_with(to_name, DirBuilder::new().mode(0o700))?;
        let (src, dst) = (from.open_dir(from_path)?, to.open_dir(to_name)?);
        for entry in src.entries()? {
            let child = entry?.file_name();
            copy_tree(&src, child.as_ref(), &dst, child.as_ref())?;
        }
        // Last, so a read-only folder can still be filled.
        to.set_permissions(to_name, meta.permissions())
    } else if kind.is_file() {
        let mut src = from.open(from_path)?;
        let mut options = OpenOptions::new();
        options.write(true).create_new(true).mode(mode);
        let mut dst = to.open_with(to_name, &options)?;
        io::copy(&mut src, &mut dst)?;
        // The umask may have narrowed the mode it was created with.
        dst.set_permissions(meta.permissions())
    } else {
        tracing::debug!("resourceCopy skips a special file");
        Ok(())
    }
}

/// Refuses a move or copy whose destination is its own source's descendant or ancestor:
/// the first never ends, the second would delete the source while clearing the destination.
/// The same entry on both sides exists already, so it fails only with `failIfExists`.
fn check_distinct(
    from: &Path,
    to: &Path,
    shown: &Path,
    fail_if_exists: bool,
) -> Result<(), RpcError> {
    if from == to {
        return if fail_if_exists {
            Err(already_exists(shown))
        } else {
            Ok(())
        };
    }
    if to.starts_with(from) {
        return Err(RpcError::invalid_params(format!(
            "{} is inside the source",
            shown.display()
        )));
    }
    if from.starts_with(to) {
        return Err(RpcError::invalid_params(format!(
            "{} contains the source",
            shown.display()
        )));
    }
    Ok(())
}

/// Makes way at a destination entry: refused with `failIfExists`, else a directory is
/// removed (and, with `always`, anything else too; a symlink as the link itself).
fn clear_at(
    dir: &Dir,
    name: &std::ffi::OsStr,
    shown: &Path,
    fail_if_exists: bool,
    always: bool,
) -> Result<(), RpcError> {
    let is_dir = match dir.symlink_metadata(name) {
        Ok(meta) => meta.is_dir(),
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io_error(shown, &e)),
    };
    if fail_if_exists {
        return Err(already_exists(shown));
    }
    let removed = if is_dir {
        dir.remove_dir_all(name)
    } else if always {
        dir.remove_file(name)
    } else {
        Ok(())
    };
    removed.map_err(|e| io_error(shown, &e))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::fs::{self, File};
    use std::os::unix::fs::symlink;

    /// A temporary directory holding the root `root/` and, beside it, `outside.txt` and
    /// `outdir/` that must stay unreachable.
    struct Env {
        _dir: tempfile::TempDir,
        roots: Roots,
    }

    impl Env {
        fn new() -> Env {
            let dir = tempfile::tempdir().unwrap();
            fs::create_dir(dir.path().join("root")).unwrap();
            fs::create_dir(dir.path().join("outdir")).unwrap();
            fs::write(dir.path().join("outside.txt"), "secret").unwrap();
            fs::write(dir.path().join("outdir/inner.txt"), "inner secret").unwrap();
            let roots = Roots::new(&[dir.path().join("root")]).unwrap();
            Env { _dir: dir, roots }
        }

        /// The canonical root (the temporary directory may sit behind a symlink).
        fn root(&self) -> PathBuf {
            self.roots.dirs()[0].clone()
        }

        fn outside(&self) -> PathBuf {
            self.root().parent().unwrap().to_path_buf()
        }

        async fn call(&self, method: &str, mut params: Value) -> Result<Value, RpcError> {
            params["channel"] = json!("ahp-root://");
            handle(&self.roots, method, params).await
        }

        async fn ok(&self, method: &str, params: Value) -> Value {
            match self.call(method, params.clone()).await {
                Ok(v) => v,
                Err(e) => panic!("{method} {params}: {e:?}"),
            }
        }

        async fn code(&self, method: &str, params: Value) -> i64 {
            match self.call(method, params.clone()).await {
                Ok(v) => panic!("{method} {params} succeeded: {v}"),
                Err(e) => {
                    assert!(!e.message.is_empty());
                    e.code
                }
            }
        }

        async fn write_text(&self, path: &Path, text: &str) {
            self.ok(
                "resourceWrite",
                json!({"uri": u(path), "data": text, "encoding": "utf-8"}),
            )
            .await;
        }

        async fn read_text(&self, path: &Path) -> String {
            let r = self.ok("resourceRead", json!({"uri": u(path)})).await;
            assert_eq!(r["encoding"], "utf-8");
            r["data"].as_str().unwrap().to_owned()
        }
    }

    fn u(path: &Path) -> String {
        file_uri(path)
    }

    fn b64(bytes: &[u8]) -> String {
        base64::engine::general_purpose::STANDARD.encode(bytes)
    }

    #[test]
    fn roots_are_canonical_and_must_exist() {
        let dir = tempfile::tempdir().unwrap();
        let real = fs::canonicalize(dir.path()).unwrap();
        fs::create_dir(real.join("w")).unwrap();
        symlink(real.join("w"), real.join("alias")).unwrap();
        let roots = Roots::new(&[real.join("alias"), real.join("w")]).unwrap();
        assert_eq!(roots.dirs(), [real.join("w")]);
        let e = Roots::new(&[real.join("missing")]).unwrap_err();
        assert_eq!(e.code, code::NOT_FOUND);
        fs::write(real.join("file"), "").unwrap();
        let e = Roots::new(&[real.join("file")]).unwrap_err();
        assert_eq!(e.code, code::NOT_FOUND);
    }

    #[test]
    fn uris_are_decoded_and_normalized() {
        assert_eq!(
            request_path("file:///a/b%20c/./d/../e").unwrap(),
            Path::new("/a/b c/e")
        );
        assert_eq!(
            request_path("file://localhost/x/%2E%2E/y").unwrap(),
            Path::new("/y")
        );
        assert_eq!(
            request_path("FILE:///../../etc").unwrap(),
            Path::new("/etc")
        );
        let p = Path::new("/tmp/ä b#?%/x");
        assert_eq!(request_path(&file_uri(p)).unwrap(), p);
        for bad in [
            "https://x/y",
            "/etc/passwd",
            "file:///a%2",
            "file:///a%zz",
            "file:///a%00b",
            "file:///a?q",
            "file:///a#f",
        ] {
            assert_eq!(
                request_path(bad).unwrap_err().code,
                code::INVALID_PARAMS,
                "{bad}"
            );
        }
        for elsewhere in ["file:relative/x", "file://server/share/x", "file://x.txt"] {
            assert_eq!(
                request_path(elsewhere).unwrap_err().code,
                code::PERMISSION_DENIED,
                "{elsewhere}"
            );
        }
    }

    #[test]
    fn methods() {
        for m in METHODS {
            assert!(is_resource_method(m));
        }
        assert!(!is_resource_method("resourceRequest"));
        assert!(!is_resource_method("createSession"));
    }

    #[tokio::test]
    async fn text_and_base64_round_trip() {
        let env = Env::new();
        let f = env.root().join("a b.txt");
        env.write_text(&f, "héllo").await;
        assert_eq!(fs::read_to_string(&f).unwrap(), "héllo");
        let r = env.ok("resourceRead", json!({"uri": u(&f)})).await;
        assert_eq!(r["data"], "héllo");
        assert_eq!(r["encoding"], "utf-8");
        assert_eq!(r["contentType"], "text/plain");
        let r = env
            .ok("resourceRead", json!({"uri": u(&f), "encoding": "base64"}))
            .await;
        assert_eq!(r["encoding"], "base64");
        assert_eq!(r["data"], b64("héllo".as_bytes()));

        // Binary in, binary out: utf-8 requested, base64 given (the protocol's fallback).
        let png = png_bytes();
        let g = env.root().join("img");
        env.ok(
            "resourceWrite",
            json!({"uri": u(&g), "data": b64(&png), "encoding": "base64"}),
        )
        .await;
        assert_eq!(fs::read(&g).unwrap(), png);
        let r = env
            .ok("resourceRead", json!({"uri": u(&g), "encoding": "utf-8"}))
            .await;
        assert_eq!(r["encoding"], "base64");
        assert_eq!(r["data"], b64(&png));
        assert_eq!(r["contentType"], "image/png");

        let e = env
            .code(
                "resourceWrite",
                json!({"uri": u(&g), "data": "not base64!", "encoding": "base64"}),
            )
            .await;
        assert_eq!(e, code::INVALID_PARAMS);
    }

    fn png_bytes() -> Vec<u8> {
        let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
        png.extend([0, 0xff, 0xfe, 7]);
        png
    }

    /// A symlink race: folder `sub` in the root and `outdir` outside it (holding `inner.txt`),
    /// set up by `prepare`, then `calls` calls made by `call(sub, i)` while another thread
    /// swaps `sub` for a link to `outdir` and back; each answer that is not an error goes to
    /// `answered`. Asserts the race was exercised and that some calls succeeded; returns the
    /// environment (to inspect), `sub` and `outdir`.
    async fn race_a_swapped_folder(
        prepare: impl FnOnce(&Path, &Path),
        calls: usize,
        call: impl Fn(&Path, usize) -> (&'static str, Value),
        mut answered: impl FnMut(&'static str, Value),
    ) -> (Env, PathBuf, PathBuf) {
        let _one_at_a_time = STRESS.lock().await;
        let env = Env::new();
        let sub = env.root().join("sub");
        fs::create_dir(&sub).unwrap();
        let outdir = env.outside().join("outdir");
        prepare(&sub, &outdir);
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let swapped = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let swapper = swap_for_a_link(&sub, &outdir, &stop, &swapped);
        let mut succeeded = 0;
        // On a loaded machine the swapping thread may get little time while the calls run:
        // the calls go on (bounded) until it has swapped often enough to have raced them.
        let started = std::time::Instant::now();
        let mut i = 0;
        while i < calls
            || (swapped.load(std::sync::atomic::Ordering::Relaxed) <= 100
                && started.elapsed() < std::time::Duration::from_secs(60))
        {
            let (method, params) = call(&sub, i);
            if let Ok(answer) = env.call(method, params).await {
                answered(method, answer);
                succeeded += 1;
            }
            i += 1;
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let swaps = swapper.join().unwrap();
        assert!(swaps > 100, "the race was exercised: {swaps} swaps");
        assert!(succeeded > 0, "some calls succeeded inside");
        (env, sub, outdir)
    }

    /// The names in `dir` that start with `prefix`.
    fn names_in(dir: &Path, prefix: &str) -> Vec<String> {
        fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(prefix))
            .collect()
    }

    /// `n` files `f<i>` on each side, saying where they are.
    fn files_on_both_sides(sub: &Path, outdir: &Path, n: usize) {
        for i in 0..n {
            fs::write(sub.join(format!("f{i}")), "inside").unwrap();
            fs::write(outdir.join(format!("f{i}")), "outside").unwrap();
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_folder_swapped_for_a_link_mid_write_never_lets_a_write_out() {
        let (_env, _, outdir) = race_a_swapped_folder(
            |_, _| {},
            3_000,
            |sub, i| {
                let f = sub.join(format!("f{i}.txt"));
                let params = json!({"uri": u(&f), "data": "x", "encoding": "utf-8"});
                ("resourceWrite", params)
            },
            |_, _| {},
        )
        .await;
        let outside: Vec<String> = names_in(&outdir, "")
            .into_iter()
            .filter(|n| n != "inner.txt")
            .collect();
        assert!(outside.is_empty(), "written outside the root: {outside:?}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_folder_swapped_for_a_link_mid_mkdir_never_makes_a_folder_outside() {
        let (_env, _, outdir) = race_a_swapped_folder(
            |_, _| {},
            2_000,
            |sub, i| {
                let d = sub.join(format!("d{i}")).join("inner");
                ("resourceMkdir", json!({"uri": u(&d)}))
            },
            |_, _| {},
        )
        .await;
        let outside: Vec<String> = names_in(&outdir, "")
            .into_iter()
            .filter(|n| n != "inner.txt")
            .collect();
        assert!(outside.is_empty(), "made outside the root: {outside:?}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_folder_swapped_for_a_link_mid_delete_never_deletes_outside() {
        // The same names on both sides: a delete that escapes removes one outside.
        let (_env, _, outdir) = race_a_swapped_folder(
            |sub, outdir| {
                files_on_both_sides(sub, outdir, 1_000);
                for i in 0..1_000 {
                    fs::create_dir_all(sub.join(format!("d{i}/x"))).unwrap();
                    fs::create_dir_all(outdir.join(format!("d{i}/x"))).unwrap();
                }
            },
            2_000,
            |sub, i| {
                // A file, then a folder with something in it.
                let (name, recursive) = if i % 2 == 0 {
                    (format!("f{}", i / 2), false)
                } else {
                    (format!("d{}", i / 2), true)
                };
                let params = json!({"uri": u(&sub.join(name)), "recursive": recursive});
                ("resourceDelete", params)
            },
            |_, _| {},
        )
        .await;
        let missing: Vec<String> = (0..1_000)
            .flat_map(|i| [format!("f{i}"), format!("d{i}/x")])
            .filter(|n| !outdir.join(n).exists())
            .collect();
        assert!(missing.is_empty(), "deleted outside the root: {missing:?}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_folder_swapped_for_a_link_mid_move_never_moves_outside() {
        let (_env, _, outdir) = race_a_swapped_folder(
            |sub, outdir| files_on_both_sides(sub, outdir, 1_000),
            1_000,
            |sub, i| {
                let (from, to) = (sub.join(format!("f{i}")), sub.join(format!("g{i}")));
                let params = json!({"source": u(&from), "destination": u(&to)});
                ("resourceMove", params)
            },
            |_, _| {},
        )
        .await;
        let touched = names_in(&outdir, "g");
        let gone: Vec<String> = (0..1_000)
            .map(|i| format!("f{i}"))
            .filter(|n| !outdir.join(n).exists())
            .collect();
        assert!(
            touched.is_empty() && gone.is_empty(),
            "moved outside the root: {touched:?} {gone:?}"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_folder_swapped_for_a_link_mid_copy_never_reads_or_writes_outside() {
        let (_env, sub, outdir) = race_a_swapped_folder(
            |sub, outdir| files_on_both_sides(sub, outdir, 1_000),
            1_000,
            |sub, i| {
                let (from, to) = (sub.join(format!("f{i}")), sub.join(format!("c{i}")));
                let params = json!({"source": u(&from), "destination": u(&to)});
                ("resourceCopy", params)
            },
            |_, _| {},
        )
        .await;
        let written_outside = names_in(&outdir, "c");
        assert!(
            written_outside.is_empty(),
            "copied outside: {written_outside:?}"
        );
        let leaked: Vec<String> = (0..1_000)
            .map(|i| sub.join(format!("c{i}")))
            .filter(|p| fs::read_to_string(p).is_ok_and(|t| t != "inside"))
            .map(|p| p.display().to_string())
            .collect();
        assert!(leaked.is_empty(), "read from outside: {leaked:?}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_folder_swapped_for_a_link_mid_read_list_or_resolve_never_shows_outside() {
        let mut shown = Vec::new();
        let (env, _, _) = race_a_swapped_folder(
            |sub, outdir| files_on_both_sides(sub, outdir, 1_000),
            1_500,
            |sub, i| {
                let f = u(&sub.join(format!("f{}", i / 3)));
                match i % 3 {
                    0 => ("resourceRead", json!({"uri": f})),
                    1 => ("resourceList", json!({"uri": u(sub)})),
                    _ => ("resourceResolve", json!({"uri": f})),
                }
            },
            |method, answer| shown.push((method, answer)),
        )
        .await;
        let root = u(&env.root());
        let mut methods = std::collections::HashSet::new();
        for (method, answer) in &shown {
            methods.insert(*method);
            match *method {
                "resourceRead" => assert_eq!(answer["data"], "inside"),
                "resourceList" => {
                    let names = answer["entries"].as_array().unwrap();
                    assert!(
                        !names.iter().any(|e| e["name"] == "inner.txt"),
                        "listed outside: {answer}"
                    );
                }
                _ => assert!(
                    answer["uri"].as_str().unwrap().starts_with(&root),
                    "resolved outside: {answer}"
                ),
            }
        }
        assert_eq!(
            methods.len(),
            3,
            "each kind of call succeeded at least once"
        );
    }

    /// The symlink-race stress tests run one at a time: several at once on two cores can
    /// starve a swapping thread so that its race is hardly exercised.
    static STRESS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

    /// Swaps folder `sub` for a symlink to `outside` and back, as fast as it can, until
    /// `stop`; returns how many times. Each swap is one atomic exchange (renameat2's
    /// RENAME_EXCHANGE), so `sub` always exists: nothing the host does in between can turn the
    /// race into a plain missing folder (which `resourceMkdir` would rightly make anew).
    #[allow(unsafe_code)]
    fn swap_for_a_link(
        sub: &Path,
        outside: &Path,
        stop: &std::sync::Arc<std::sync::atomic::AtomicBool>,
        swapped: &std::sync::Arc<std::sync::atomic::AtomicU64>,
    ) -> std::thread::JoinHandle<u64> {
        use std::os::unix::ffi::OsStrExt;
        let link = sub.with_extension("link");
        symlink(outside, &link).unwrap();
        let c = |p: &Path| std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap();
        let (a, b) = (c(sub), c(&link));
        let stop = stop.clone();
        let swapped = swapped.clone();
        std::thread::spawn(move || {
            let exchange = || {
                // SAFETY: two valid C strings; the result is only counted.
                unsafe {
                    libc::renameat2(
                        libc::AT_FDCWD,
                        a.as_ptr(),
                        libc::AT_FDCWD,
                        b.as_ptr(),
                        libc::RENAME_EXCHANGE,
                    )
                }
            };
            let mut swaps = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                if exchange() == 0 {
                    std::thread::yield_now();
                    assert_eq!(exchange(), 0, "swapped back");
                    swaps += 1;
                    swapped.store(swaps, std::sync::atomic::Ordering::Relaxed);
                    // The real folder gets as long a turn as the link, so calls that need it
                    // there several times over (a move opens two folders) still get through.
                    std::thread::yield_now();
                }
            }
            swaps
        })
    }

    /// Runs the named test again in a child process of this test binary whose files may not
    /// grow past `limit` bytes (a full disk, for the writes it makes); true in that child.
    #[allow(unsafe_code)]
    fn in_child_with_file_size_limit(name: &str, limit: u64) -> bool {
        if std::env::var_os("CLAUDE_HOST_TEST_FSIZE").is_some() {
            // SAFETY: plain syscalls on this process; SIGXFSZ ignored, writes fail with EFBIG.
            unsafe {
                libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
                let lim = libc::rlimit {
                    rlim_cur: limit,
                    rlim_max: limit,
                };
                assert_eq!(libc::setrlimit(libc::RLIMIT_FSIZE, &lim), 0);
            }
            return true;
        }
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", name, "--nocapture", "--test-threads=1"])
            .env("CLAUDE_HOST_TEST_FSIZE", "1")
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "{text}");
        assert!(text.contains("1 passed"), "the child ran the test: {text}");
        false
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_write_that_fails_part_way_leaves_the_old_file_and_nothing_else() {
        if !in_child_with_file_size_limit(
            "resources::tests::a_write_that_fails_part_way_leaves_the_old_file_and_nothing_else",
            64 * 1024,
        ) {
            return;
        }
        let env = Env::new();
        let f = env.root().join("kept.txt");
        let old = "x".repeat(32 * 1024);
        fs::write(&f, &old).unwrap();
        let big = "y".repeat(100 * 1024);
        for mode in ["truncate", "append", "insert"] {
            let code = env
                .code(
                    "resourceWrite",
                    json!({"uri": u(&f), "data": big, "encoding": "utf-8", "mode": mode}),
                )
                .await;
            assert_eq!(
                code,
                code::INTERNAL_ERROR,
                "{mode}: the write failed (EFBIG)"
            );
            assert_eq!(
                fs::read_to_string(&f).unwrap(),
                old,
                "{mode}: the old file is whole"
            );
        }
        let new = env.root().join("new.txt");
        env.code(
            "resourceWrite",
            json!({"uri": u(&new), "data": big, "encoding": "utf-8"}),
        )
        .await;
        assert!(!new.exists(), "no partial new file");
        let left: Vec<String> = fs::read_dir(env.root())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(left, ["kept.txt"], "no temporary files left");
        // Within the limit, writes work as before, and keep the file's mode.
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(&f, fs::Permissions::from_mode(0o640)).unwrap();
        env.write_text(&f, "small").await;
        assert_eq!(fs::read_to_string(&f).unwrap(), "small");
        assert_eq!(
            fs::metadata(&f).unwrap().permissions().mode() & 0o777,
            0o640
        );
    }

    #[tokio::test]
    async fn write_modes_and_preconditions() {
        let env = Env::new();
        let f = env.root().join("f.txt");
        env.write_text(&f, "hello world").await;
        let w = |data: &str, extra: Value| {
            let mut p = json!({"uri": u(&f), "data": data, "encoding": "utf-8"});
            for (k, v) in extra.as_object().unwrap() {
                p[k] = v.clone();
            }
            p
        };
        env.ok("resourceWrite", w("there", json!({"position": 6})))
            .await;
        assert_eq!(env.read_text(&f).await, "hello there");
        env.ok("resourceWrite", w("!", json!({"mode": "append"})))
            .await;
        assert_eq!(env.read_text(&f).await, "hello there!");
        env.ok(
            "resourceWrite",
            w(" you", json!({"mode": "append", "position": 1})),
        )
        .await;
        assert_eq!(env.read_text(&f).await, "hello there you!");
        env.ok(
            "resourceWrite",
            w("oh, ", json!({"mode": "insert", "position": 0})),
        )
        .await;
        assert_eq!(env.read_text(&f).await, "oh, hello there you!");
        for bad in [
            json!({"position": -1}),
            json!({"position": 1000}),
            json!({"mode": "insert", "position": 1000}),
        ] {
            assert_eq!(
                env.code("resourceWrite", w("x", bad)).await,
                code::INVALID_PARAMS
            );
        }
        assert_eq!(
            env.code("resourceWrite", w("x", json!({"createOnly": true})))
                .await,
            code::ALREADY_EXISTS
        );
        let new = env.root().join("new.txt");
        env.ok(
            "resourceWrite",
            json!({"uri": u(&new), "data": "n", "encoding": "utf-8", "createOnly": true}),
        )
        .await;
        assert_eq!(env.read_text(&new).await, "n");

        // ifMatch: the etag from resourceResolve passes once, then is stale.
        let etag = env.ok("resourceResolve", json!({"uri": u(&f)})).await["etag"].clone();
        env.ok("resourceWrite", w("v2", json!({"ifMatch": etag})))
            .await;
        assert_eq!(env.read_text(&f).await, "v2");
        assert_eq!(
            env.code("resourceWrite", w("v3", json!({"ifMatch": etag})))
                .await,
            CONFLICT
        );
        assert_eq!(env.read_text(&f).await, "v2");
        let missing = env.root().join("missing.txt");
        let e = env
            .code(
                "resourceWrite",
                json!({"uri": u(&missing), "data": "x", "encoding": "utf-8", "ifMatch": "x"}),
            )
            .await;
        assert_eq!(e, CONFLICT);
        assert!(!missing.exists());

        // No implicit parents; a directory is not a file.
        let deep = env.root().join("no/such/dir.txt");
        let e = env
            .code(
                "resourceWrite",
                json!({"uri": u(&deep), "data": "x", "encoding": "utf-8"}),
            )
            .await;
        assert_eq!(e, code::NOT_FOUND);
        let e = env
            .code(
                "resourceWrite",
                json!({"uri": u(&env.root()), "data": "x", "encoding": "utf-8"}),
            )
            .await;
        assert_eq!(e, code::INVALID_PARAMS);
    }

    #[tokio::test]
    async fn list_mkdir_resolve() {
        let env = Env::new();
        let root = env.root();
        env.ok("resourceMkdir", json!({"uri": u(&root.join("d/e/f"))}))
            .await;
        assert!(root.join("d/e/f").is_dir());
        // Already there: a no-op.
        env.ok("resourceMkdir", json!({"uri": u(&root.join("d/e"))}))
            .await;
        fs::write(root.join("file.txt"), "12345").unwrap();
        assert_eq!(
            env.code("resourceMkdir", json!({"uri": u(&root.join("file.txt"))}))
                .await,
            code::ALREADY_EXISTS
        );
        assert_eq!(
            env.code(
                "resourceMkdir",
                json!({"uri": u(&root.join("file.txt/sub"))})
            )
            .await,
            code::ALREADY_EXISTS
        );
        symlink(root.join("d"), root.join("to-d")).unwrap();
        symlink(env.outside().join("outdir"), root.join("to-outdir")).unwrap();
        symlink(root.join("nowhere"), root.join("dangling")).unwrap();

        let l = env.ok("resourceList", json!({"uri": u(&root)})).await;
        assert_eq!(
            l["entries"],
            json!([
                {"name": "d", "type": "directory"},
                {"name": "dangling", "type": "file"},
                {"name": "file.txt", "type": "file"},
                {"name": "to-d", "type": "directory"},
                {"name": "to-outdir", "type": "file"},
            ])
        );
        let l = env
            .ok("resourceList", json!({"uri": u(&root.join("to-d"))}))
            .await;
        assert_eq!(l["entries"], json!([{"name": "e", "type": "directory"}]));
        assert_eq!(
            env.code("resourceList", json!({"uri": u(&root.join("file.txt"))}))
                .await,
            code::INVALID_PARAMS
        );
        assert_eq!(
            env.code("resourceList", json!({"uri": u(&root.join("nope"))}))
                .await,
            code::NOT_FOUND
        );

        let r = env
            .ok("resourceResolve", json!({"uri": u(&root.join("file.txt"))}))
            .await;
        assert_eq!(r["type"], "file");
        assert_eq!(r["size"], 5);
        assert_eq!(r["uri"], u(&root.join("file.txt")));
        assert!(r["mtime"].as_str().unwrap().ends_with('Z'));
        assert!(r["etag"].is_string());
        let r = env
            .ok("resourceResolve", json!({"uri": u(&root.join("to-d"))}))
            .await;
        assert_eq!(r["type"], "directory");
        assert_eq!(r["uri"], u(&root.join("d")));
        assert!(r.get("size").is_none());
        let lexical = format!("{}/x/../to-d", u(&root));
        let r = env
            .ok(
                "resourceResolve",
                json!({"uri": lexical, "followSymlinks": false}),
            )
            .await;
        assert_eq!(r["type"], "symlink");
        assert_eq!(r["uri"], lexical);
        // A link out may be described as a link, never followed.
        let r = env
            .ok(
                "resourceResolve",
                json!({"uri": u(&root.join("to-outdir")), "followSymlinks": false}),
            )
            .await;
        assert_eq!(r["type"], "symlink");
        assert_eq!(
            env.code(
                "resourceResolve",
                json!({"uri": u(&root.join("to-outdir"))})
            )
            .await,
            code::PERMISSION_DENIED
        );
        // The root itself, either way.
        for follow in [true, false] {
            let r = env
                .ok(
                    "resourceResolve",
                    json!({"uri": u(&root), "followSymlinks": follow}),
                )
                .await;
            assert_eq!(r["type"], "directory");
        }
        assert_eq!(
            env.code("resourceResolve", json!({"uri": u(&root.join("nope"))}))
                .await,
            code::NOT_FOUND
        );
        assert_eq!(
            env.code(
                "resourceResolve",
                json!({"uri": u(&root.join("nope/deeper")), "followSymlinks": false})
            )
            .await,
            code::NOT_FOUND
        );
    }

    #[tokio::test]
    async fn copy_move_delete() {
        let env = Env::new();
        let root = env.root();
        let f = root.join("f.txt");
        env.write_text(&f, "one").await;
        // Copy a file; onto an existing file; refused with failIfExists.
        env.ok(
            "resourceCopy",
            json!({"source": u(&f), "destination": u(&root.join("g.txt"))}),
        )
        .await;
        assert_eq!(fs::read_to_string(root.join("g.txt")).unwrap(), "one");
        env.write_text(&f, "two").await;
        env.ok(
            "resourceCopy",
            json!({"source": u(&f), "destination": u(&root.join("g.txt"))}),
        )
        .await;
        assert_eq!(fs::read_to_string(root.join("g.txt")).unwrap(), "two");
        assert_eq!(
            env.code(
                "resourceCopy",
                json!({"source": u(&f), "destination": u(&root.join("g.txt")), "failIfExists": true})
            )
            .await,
            code::ALREADY_EXISTS
        );
        // Copy a tree, its symlinks as links.
        fs::create_dir_all(root.join("d/sub")).unwrap();
        fs::write(root.join("d/sub/x"), "x").unwrap();
        symlink("sub/x", root.join("d/link")).unwrap();
        env.ok(
            "resourceCopy",
            json!({"source": u(&root.join("d")), "destination": u(&root.join("d2"))}),
        )
        .await;
        assert_eq!(fs::read_to_string(root.join("d2/sub/x")).unwrap(), "x");
        assert_eq!(
            fs::read_link(root.join("d2/link")).unwrap(),
            Path::new("sub/x")
        );
        // Into itself, over its own parent, onto itself.
        for (from, to) in [("d", "d/sub/d"), ("d/sub", "d")] {
            assert_eq!(
                env.code(
                    "resourceCopy",
                    json!({"source": u(&root.join(from)), "destination": u(&root.join(to))})
                )
                .await,
                code::INVALID_PARAMS,
                "{from} -> {to}"
            );
            assert_eq!(
                env.code(
                    "resourceMove",
                    json!({"source": u(&root.join(from)), "destination": u(&root.join(to))})
                )
                .await,
                code::INVALID_PARAMS,
                "{from} -> {to}"
            );
        }
        env.ok(
            "resourceCopy",
            json!({"source": u(&f), "destination": u(&f)}),
        )
        .await;
        env.ok(
            "resourceMove",
            json!({"source": u(&root.join("d")), "destination": u(&root.join("d"))}),
        )
        .await;
        assert_eq!(fs::read_to_string(&f).unwrap(), "two");
        assert!(root.join("d/sub/x").exists());

        // Move a file, then a directory over an existing one.
        env.ok(
            "resourceMove",
            json!({"source": u(&f), "destination": u(&root.join("m.txt"))}),
        )
        .await;
        assert!(!f.exists());
        assert_eq!(fs::read_to_string(root.join("m.txt")).unwrap(), "two");
        assert_eq!(
            env.code(
                "resourceMove",
                json!({"source": u(&root.join("m.txt")), "destination": u(&root.join("g.txt")), "failIfExists": true})
            )
            .await,
            code::ALREADY_EXISTS
        );
        env.ok(
            "resourceMove",
            json!({"source": u(&root.join("d2")), "destination": u(&root.join("d"))}),
        )
        .await;
        assert!(!root.join("d2").exists());
        assert_eq!(
            fs::read_link(root.join("d/link")).unwrap(),
            Path::new("sub/x")
        );
        assert_eq!(
            env.code(
                "resourceMove",
                json!({"source": u(&root.join("nope")), "destination": u(&root.join("n2"))})
            )
            .await,
            code::NOT_FOUND
        );
        assert_eq!(
            env.code(
                "resourceCopy",
                json!({"source": u(&root.join("nope")), "destination": u(&root.join("n2"))})
            )
            .await,
            code::NOT_FOUND
        );

        // Delete: a file, an empty directory, a non-empty one only recursively.
        env.ok("resourceDelete", json!({"uri": u(&root.join("m.txt"))}))
            .await;
        assert!(!root.join("m.txt").exists());
        fs::create_dir(root.join("empty")).unwrap();
        env.ok("resourceDelete", json!({"uri": u(&root.join("empty"))}))
            .await;
        assert!(!root.join("empty").exists());
        assert_eq!(
            env.code("resourceDelete", json!({"uri": u(&root.join("d"))}))
                .await,
            code::INVALID_PARAMS
        );
        assert!(root.join("d/sub/x").exists());
        env.ok(
            "resourceDelete",
            json!({"uri": u(&root.join("d")), "recursive": true}),
        )
        .await;
        assert!(!root.join("d").exists());
        assert_eq!(
            env.code("resourceDelete", json!({"uri": u(&root.join("d"))}))
                .await,
            code::NOT_FOUND
        );
        // The root itself, however named.
        for uri in [u(&root), format!("{}/d/..", u(&root))] {
            assert_eq!(
                env.code("resourceDelete", json!({"uri": uri, "recursive": true}))
                    .await,
                code::PERMISSION_DENIED
            );
        }
        assert_eq!(
            env.code(
                "resourceMove",
                json!({"source": u(&root), "destination": u(&root.join("x"))})
            )
            .await,
            code::PERMISSION_DENIED
        );
        assert!(root.is_dir());
    }

    #[tokio::test]
    async fn escapes_are_refused() {
        let env = Env::new();
        let (root, out) = (env.root(), env.outside());
        let secret = out.join("outside.txt");
        symlink(&secret, root.join("link")).unwrap();
        symlink(&out, root.join("dirlink")).unwrap();
        symlink(out.join("new-target"), root.join("dangling-out")).unwrap();
        let escapes = [
            format!("{}/../outside.txt", u(&root)),
            format!("{}/%2E%2E/outside.txt", u(&root)),
            format!("{}/a/../../outside.txt", u(&root)),
            u(&secret),
            "file:///etc/passwd".to_owned(),
            u(&root.join("link")),
            u(&root.join("dirlink/outside.txt")),
            // Missing outside: refused, not NotFound, so the outside cannot be probed.
            u(&out.join("no-such-file")),
            u(&root.join("dirlink/no-such-file")),
        ];
        for uri in &escapes {
            for method in ["resourceRead", "resourceResolve", "resourceList"] {
                let e = env.code(method, json!({"uri": uri})).await;
                assert_eq!(e, code::PERMISSION_DENIED, "{method} {uri}");
            }
        }
        let e = env
            .call("resourceRead", json!({"uri": u(&root.join("link"))}))
            .await
            .unwrap_err();
        assert!(
            e.message.contains(&root.join("link").display().to_string()),
            "{e:?}"
        );
        assert!(!e.message.contains("secret"));
        assert_eq!(
            env.code("resourceList", json!({"uri": u(&root.join("dirlink"))}))
                .await,
            code::PERMISSION_DENIED
        );

        // Writes through links (to a file, into a directory, via a dangling link) and up.
        for target in [
            u(&root.join("link")),
            u(&root.join("dirlink/planted.txt")),
            u(&root.join("dirlink/outside.txt")),
            u(&root.join("dangling-out")),
            format!("{}/../planted.txt", u(&root)),
            u(&out.join("planted.txt")),
        ] {
            for mode in ["truncate", "append"] {
                let e = env
                    .code(
                        "resourceWrite",
                        json!({"uri": target, "data": "x", "encoding": "utf-8", "mode": mode}),
                    )
                    .await;
                assert_eq!(e, code::PERMISSION_DENIED, "{target}");
            }
            let e = env.code("resourceMkdir", json!({"uri": target})).await;
            assert_eq!(e, code::PERMISSION_DENIED, "mkdir {target}");
        }
        assert_eq!(
            env.code(
                "resourceMkdir",
                json!({"uri": u(&root.join("dirlink/a/b"))})
            )
            .await,
            code::PERMISSION_DENIED
        );
        assert_eq!(fs::read_to_string(&secret).unwrap(), "secret");
        assert!(!out.join("planted.txt").exists());
        assert!(!out.join("new-target").exists());
        assert!(!out.join("a").exists());

        // Delete/move/copy through a link out, or from/to outside.
        let inside = root.join("in.txt");
        fs::write(&inside, "in").unwrap();
        for (method, params) in [
            (
                "resourceDelete",
                json!({"uri": u(&root.join("dirlink/outside.txt"))}),
            ),
            (
                "resourceDelete",
                json!({"uri": u(&root.join("dirlink/outdir")), "recursive": true}),
            ),
            ("resourceDelete", json!({"uri": u(&secret)})),
            (
                "resourceCopy",
                json!({"source": u(&root.join("link")), "destination": u(&root.join("stolen"))}),
            ),
            (
                "resourceCopy",
                json!({"source": u(&secret), "destination": u(&root.join("stolen"))}),
            ),
            (
                "resourceCopy",
                json!({"source": u(&inside), "destination": u(&root.join("dirlink/outside.txt"))}),
            ),
            (
                "resourceCopy",
                json!({"source": u(&inside), "destination": u(&out.join("planted.txt"))}),
            ),
            (
                "resourceMove",
                json!({"source": u(&secret), "destination": u(&root.join("stolen"))}),
            ),
            (
                "resourceMove",
                json!({"source": u(&root.join("dirlink/outside.txt")), "destination": u(&root.join("stolen"))}),
            ),
            (
                "resourceMove",
                json!({"source": u(&inside), "destination": u(&root.join("dirlink/planted.txt"))}),
            ),
            (
                "resourceMove",
                json!({"source": u(&inside), "destination": format!("{}/../planted.txt", u(&root))}),
            ),
        ] {
            assert_eq!(
                env.code(method, params.clone()).await,
                code::PERMISSION_DENIED,
                "{method} {params}"
            );
        }
        assert_eq!(fs::read_to_string(&secret).unwrap(), "secret");
        assert_eq!(
            fs::read_to_string(out.join("outdir/inner.txt")).unwrap(),
            "inner secret"
        );
        assert!(!root.join("stolen").exists());
        assert!(!out.join("planted.txt").exists());
        assert!(inside.exists());

        // A copy onto a link out replaces the link instead of writing through it.
        env.ok(
            "resourceCopy",
            json!({"source": u(&inside), "destination": u(&root.join("link"))}),
        )
        .await;
        assert_eq!(fs::read_to_string(&secret).unwrap(), "secret");
        assert!(
            !fs::symlink_metadata(root.join("link"))
                .unwrap()
                .file_type()
                .is_symlink()
        );
        assert_eq!(fs::read_to_string(root.join("link")).unwrap(), "in");
        // A move of the link itself stays a link (nothing outside is read).
        env.ok(
            "resourceMove",
            json!({"source": u(&root.join("dirlink")), "destination": u(&root.join("dirlink2"))}),
        )
        .await;
        assert_eq!(fs::read_link(root.join("dirlink2")).unwrap(), out);
    }

    #[tokio::test]
    async fn deleting_a_symlink_removes_only_the_link() {
        let env = Env::new();
        let (root, out) = (env.root(), env.outside());
        symlink(out.join("outside.txt"), root.join("link")).unwrap();
        symlink(out.join("outdir"), root.join("dirlink")).unwrap();
        fs::create_dir(root.join("d")).unwrap();
        fs::write(root.join("d/keep"), "keep").unwrap();
        symlink(root.join("d"), root.join("inlink")).unwrap();
        symlink(root.join("d"), root.join("inlink2")).unwrap();
        env.ok("resourceDelete", json!({"uri": u(&root.join("inlink2"))}))
            .await;
        env.ok("resourceDelete", json!({"uri": u(&root.join("link"))}))
            .await;
        env.ok(
            "resourceDelete",
            json!({"uri": u(&root.join("dirlink")), "recursive": true}),
        )
        .await;
        env.ok(
            "resourceDelete",
            json!({"uri": u(&root.join("inlink")), "recursive": true}),
        )
        .await;
        for link in ["link", "dirlink", "inlink", "inlink2"] {
            assert!(fs::symlink_metadata(root.join(link)).is_err(), "{link}");
        }
        assert_eq!(
            fs::read_to_string(out.join("outside.txt")).unwrap(),
            "secret"
        );
        assert_eq!(
            fs::read_to_string(out.join("outdir/inner.txt")).unwrap(),
            "inner secret"
        );
        assert_eq!(fs::read_to_string(root.join("d/keep")).unwrap(), "keep");
    }

    #[test]
    fn a_folder_swapped_for_a_link_after_it_was_opened_is_still_the_one_opened() {
        let env = Env::new();
        let (root, out) = (env.root(), env.outside());
        fs::create_dir(root.join("a")).unwrap();
        fs::write(root.join("a/f"), "inside").unwrap();
        fs::write(out.join("outdir/f"), "outside").unwrap();
        let real = root.join("a/f");
        // What a command holds once it has found the entry: its folder, opened.
        let Ok(Entry::Child(child)) = entry(&env.roots, &real) else {
            panic!("a/f is an entry in a folder")
        };
        // The folder swapped for a link out before the command acts on it.
        fs::rename(root.join("a"), root.join("a-old")).unwrap();
        symlink(out.join("outdir"), root.join("a")).unwrap();
        child.dir.remove_file(&child.name).unwrap();
        assert!(!root.join("a-old/f").exists(), "removed inside");
        assert_eq!(fs::read_to_string(out.join("outdir/f")).unwrap(), "outside");
        // Found afresh, the path is refused; the root's handle does not follow the link.
        let Err(e) = entry(&env.roots, &real) else {
            panic!("a/f leads outside now")
        };
        assert_eq!(e.code, code::PERMISSION_DENIED);
        let e = env.roots.roots[0].dir.open("a/f").unwrap_err();
        assert!(led_out(&e), "{e}");
    }

    #[tokio::test]
    async fn precise_errors() {
        let env = Env::new();
        let root = env.root();
        assert_eq!(
            env.code("resourceRead", json!({"uri": u(&root.join("nope"))}))
                .await,
            code::NOT_FOUND
        );
        assert_eq!(
            env.code("resourceRead", json!({"uri": u(&root.join("nope/deeper"))}))
                .await,
            code::NOT_FOUND
        );
        assert_eq!(
            env.code("resourceDelete", json!({"uri": u(&root.join("nope"))}))
                .await,
            code::NOT_FOUND
        );
        assert_eq!(
            env.code("resourceRead", json!({"uri": u(&root)})).await,
            code::INVALID_PARAMS
        );
        for uri in [
            "https://example.com/a",
            "untitled:Untitled-1",
            "/etc/passwd",
        ] {
            for method in METHODS {
                let params = json!({"uri": uri, "source": uri, "destination": uri, "data": "", "encoding": "utf-8"});
                assert_eq!(
                    env.code(method, params).await,
                    code::INVALID_PARAMS,
                    "{method} {uri}"
                );
            }
        }
        assert_eq!(
            env.code("resourceRead", json!({"uri": "file:relative.txt"}))
                .await,
            code::PERMISSION_DENIED
        );
        let e = env.call("resourceRead", json!({})).await.unwrap_err();
        assert_eq!(e.code, code::INVALID_PARAMS);
        assert!(e.message.contains("uri"), "{e:?}");
        let e = handle(&env.roots, "resourceFrob", json!({}))
            .await
            .unwrap_err();
        assert_eq!(e.code, code::METHOD_NOT_FOUND);
        // A FIFO is not read (opening it would block).
        let fifo = root.join("fifo");
        assert!(
            std::process::Command::new("mkfifo")
                .arg(&fifo)
                .status()
                .unwrap()
                .success()
        );
        assert_eq!(
            env.code("resourceRead", json!({"uri": u(&fifo)})).await,
            code::INVALID_PARAMS
        );
        // Nor copied (it used to answer success and create nothing).
        let copy = root.join("fifo-copy");
        assert_eq!(
            env.code(
                "resourceCopy",
                json!({"source": u(&fifo), "destination": u(&copy)})
            )
            .await,
            code::INVALID_PARAMS
        );
        assert!(!copy.exists());
        // Over the read limit (a sparse file: no 64 MiB written).
        let big = root.join("big.bin");
        File::create(&big)
            .unwrap()
            .set_len(MAX_READ_BYTES + 1)
            .unwrap();
        let e = env
            .call("resourceRead", json!({"uri": u(&big)}))
            .await
            .unwrap_err();
        assert_eq!(e.code, code::INVALID_PARAMS);
        assert!(e.message.contains("at most"), "{e:?}");
    }

    #[tokio::test]
    async fn a_root_behind_a_symlink_and_nested_roots() {
        let env = Env::new();
        let real = env.root();
        fs::create_dir(real.join("inner")).unwrap();
        symlink(&real, env.outside().join("alias")).unwrap();
        let roots = Roots::new(&[env.outside().join("alias"), real.join("inner")]).unwrap();
        let f = env.outside().join("alias/x.txt");
        handle(
            &roots,
            "resourceWrite",
            json!({"channel": "c", "uri": u(&f), "data": "x", "encoding": "utf-8"}),
        )
        .await
        .unwrap();
        assert_eq!(fs::read_to_string(real.join("x.txt")).unwrap(), "x");
        // Deleting a directory that holds another root is refused.
        let e = handle(
            &roots,
            "resourceDelete",
            json!({"channel": "c", "uri": u(&real.join("inner"))}),
        )
        .await
        .unwrap_err();
        assert_eq!(e.code, code::PERMISSION_DENIED);
        // No roots: nothing is served.
        let none = Roots::new(&[]).unwrap();
        let e = handle(
            &none,
            "resourceRead",
            json!({"channel": "c", "uri": u(&real.join("x.txt"))}),
        )
        .await
        .unwrap_err();
        assert_eq!(e.code, code::PERMISSION_DENIED);
    }
}
