//! The `resource*` commands (`resourceRead`, `resourceWrite`, `resourceList`,
//! `resourceResolve`, `resourceMkdir`, `resourceDelete`, `resourceMove`, `resourceCopy`) on the
//! local filesystem, confined to a set of root directories (a session's working directories).
//!
//! How a URI is confined:
//! - only `file:` URIs for this host; the path is percent-decoded, must be absolute, and is
//!   normalized lexically (`.`, `..`) before anything touches the filesystem;
//! - an existing path must resolve (every symlink followed) inside a root;
//! - a path that does not exist yet must have its deepest existing ancestor resolve inside a
//!   root, and that ancestor may not be a dangling symlink (where it leads cannot be checked);
//! - commands that act on an entry itself (delete, move, `followSymlinks: false`, a copy's
//!   destination) resolve only its parent, so a symlink is removed, moved or replaced as a link
//!   and never followed; a root, or a directory holding one, cannot be deleted or replaced;
//! - a path outside the roots is refused the same way whether or not it exists, so the errors
//!   say nothing about the filesystem outside.
//!
//! Files are checked again after they are opened (same device and inode as the path now
//! resolves to, still inside a root), so swapping a directory for a symlink between the check
//! and the open does not lead outside. std has no `openat`-style walk, so directory operations
//! (mkdir, delete, move, copy) remain open to that race; only a process already running as
//! this user inside a root can plant such symlinks.

use crate::rpc::{RpcError, code, from_params};
use ahp_types::commands::{
    ContentEncoding, DirectoryEntry, ResourceCopyParams, ResourceCopyResult, ResourceDeleteParams,
    ResourceDeleteResult, ResourceListParams, ResourceListResult, ResourceMkdirParams,
    ResourceMkdirResult, ResourceMoveParams, ResourceMoveResult, ResourceReadParams,
    ResourceReadResult, ResourceResolveParams, ResourceResolveResult, ResourceType,
    ResourceWriteMode, ResourceWriteParams, ResourceWriteResult,
};
use base64::Engine as _;
use claude_host_protocol::uri::file_uri;
use serde_json::Value;
use std::fs::{self, File, Metadata, OpenOptions};
use std::io::{self, Read as _, Write as _};
use std::os::unix::fs::MetadataExt as _;
use std::path::{Component, Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

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

/// Directories a client may touch, canonicalized (symlinks resolved) at construction.
#[derive(Debug, Clone)]
pub struct Roots {
    dirs: Vec<PathBuf>,
}

impl Roots {
    /// Canonicalizes `dirs`; fails with `NotFound` if one does not exist or is not a
    /// directory, `PermissionDenied` if one cannot be resolved for lack of permission.
    pub fn new(dirs: &[PathBuf]) -> Result<Roots, RpcError> {
        let mut out: Vec<PathBuf> = Vec::with_capacity(dirs.len());
        for dir in dirs {
            let real = fs::canonicalize(dir).map_err(|e| {
                let code = if e.kind() == io::ErrorKind::PermissionDenied {
                    code::PERMISSION_DENIED
                } else {
                    code::NOT_FOUND
                };
                RpcError::new(code, format!("working directory {}: {e}", dir.display()))
            })?;
            if !real.is_dir() {
                return Err(RpcError::new(
                    code::NOT_FOUND,
                    format!("working directory {} is not a directory", dir.display()),
                ));
            }
            if !out.contains(&real) {
                out.push(real);
            }
        }
        Ok(Roots { dirs: out })
    }

    /// The canonical roots.
    #[cfg(test)]
    pub fn dirs(&self) -> &[PathBuf] {
        &self.dirs
    }

    /// Whether a canonical path lies inside (or is) a root.
    fn contains(&self, real: &Path) -> bool {
        self.dirs.iter().any(|r| real.starts_with(r))
    }

    /// Whether removing or replacing `entry` would take a root with it.
    fn holds_root(&self, entry: &Path) -> bool {
        self.dirs.iter().any(|r| r.starts_with(entry))
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

/// Where a request path lands on disk.
enum Place {
    /// It exists: its canonical path, inside a root.
    Existing(PathBuf),
    /// It does not exist yet.
    Missing {
        /// The canonical path of its deepest existing ancestor, inside a root.
        base: PathBuf,
        /// The missing components below `base` (plain names only).
        rest: PathBuf,
    },
}

impl Place {
    fn existing(self, shown: &Path) -> Result<PathBuf, RpcError> {
        match self {
            Place::Existing(real) => Ok(real),
            Place::Missing { .. } => Err(not_found(shown)),
        }
    }
}

/// Resolves a normalized request path, following symlinks, and confines it to the roots.
fn locate(roots: &Roots, path: &Path) -> Result<Place, RpcError> {
    match fs::canonicalize(path) {
        Ok(real) if roots.contains(&real) => return Ok(Place::Existing(real)),
        Ok(_) => return Err(denied(path)),
        Err(_) => {}
    }
    // The deepest ancestor present as an entry; `symlink_metadata` counts a dangling link as
    // present, so it is caught below rather than skipped over.
    let Some(ancestor) = path.ancestors().find(|a| fs::symlink_metadata(a).is_ok()) else {
        return Err(denied(path));
    };
    // A dangling link or a loop cannot be followed, so where it leads is unknown; any other
    // failure is refused alike, so nothing outside the roots can be probed.
    let base = fs::canonicalize(ancestor).map_err(|_| denied(path))?;
    if !roots.contains(&base) {
        return Err(denied(path));
    }
    let rest = path.strip_prefix(ancestor).map_err(|_| denied(path))?;
    if rest.as_os_str().is_empty() {
        // It appeared meanwhile.
        return Ok(Place::Existing(base));
    }
    if !rest.components().all(|c| matches!(c, Component::Normal(_))) {
        return Err(denied(path));
    }
    Ok(Place::Missing {
        base,
        rest: rest.to_path_buf(),
    })
}

/// The entry a request path names, itself rather than what it points to: the parent is
/// resolved (symlinks followed) and the last name kept. The parent must lie inside a root,
/// or the entry must be a root. Whether the entry exists is left to the caller.
fn locate_entry(roots: &Roots, path: &Path) -> Result<PathBuf, RpcError> {
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(denied(path));
    };
    let Ok(real_parent) = fs::canonicalize(parent) else {
        // `locate` refuses a missing parent outside the roots; inside, the entry is missing.
        locate(roots, parent)?;
        return Err(not_found(path));
    };
    let entry = real_parent.join(name);
    if roots.contains(&real_parent) || roots.dirs.contains(&entry) {
        Ok(entry)
    } else {
        Err(denied(path))
    }
}

/// Checks, after the fact, that `real` still resolves inside a root to the very object
/// described by `seen` (an opened handle's or a listed directory's metadata): a component
/// swapped for a symlink in between would otherwise have led outside.
fn still_inside(roots: &Roots, shown: &Path, real: &Path, seen: &Metadata) -> Result<(), RpcError> {
    let now = fs::canonicalize(real)
        .ok()
        .filter(|p| roots.contains(p))
        .and_then(|p| fs::metadata(p).ok());
    match now {
        Some(m) if m.dev() == seen.dev() && m.ino() == seen.ino() => Ok(()),
        _ => Err(denied(shown)),
    }
}

/// Opens `real` (canonical, inside a root) and checks the handle with [`still_inside`].
fn open_verified(
    roots: &Roots,
    shown: &Path,
    real: &Path,
    options: &OpenOptions,
) -> Result<File, RpcError> {
    let file = options.open(real).map_err(|e| io_error(shown, &e))?;
    let seen = file.metadata().map_err(|e| io_error(shown, &e))?;
    still_inside(roots, shown, real, &seen)?;
    Ok(file)
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

fn iso8601(time: io::Result<SystemTime>) -> Option<String> {
    let since = time.ok()?.duration_since(UNIX_EPOCH).ok()?;
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
    let real = locate(roots, &path)?.existing(&path)?;
    let meta = fs::metadata(&real).map_err(|e| io_error(&path, &e))?;
    if meta.is_dir() {
        return Err(RpcError::invalid_params(format!(
            "{} is a directory; use resourceList",
            path.display()
        )));
    }
    // Opening a FIFO blocks until a writer comes, and a device may never end.
    if !meta.is_file() {
        return Err(RpcError::invalid_params(format!(
            "{} is not a regular file",
            path.display()
        )));
    }
    if meta.len() > MAX_READ_BYTES {
        return Err(too_large(&path, meta.len()));
    }
    let file = open_verified(roots, &path, &real, OpenOptions::new().read(true))?;
    let mut bytes = Vec::new();
    // The file may have grown since it was measured.
    file.take(MAX_READ_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| io_error(&path, &e))?;
    let len = u64::try_from(bytes.len()).unwrap_or(u64::MAX);
    if len > MAX_READ_BYTES {
        return Err(too_large(&path, len));
    }
    let content_type = content_type(&real, Some(bytes.as_slice()));
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
    // The new content goes to a temporary file beside the target, which then replaces it
    // (or, for a new file, is linked into place): a write that fails part-way (a full disk)
    // leaves the old file as it was, or no file, and no temporary behind.
    let (mut file, place) = match locate(roots, &path)? {
        Place::Existing(real) => {
            if p.create_only == Some(true) {
                return Err(already_exists(&path));
            }
            let meta = fs::metadata(&real).map_err(|e| io_error(&path, &e))?;
            if meta.is_dir() {
                return Err(RpcError::invalid_params(format!(
                    "{} is a directory",
                    path.display()
                )));
            }
            if !meta.is_file() {
                return Err(RpcError::invalid_params(format!(
                    "{} is not a regular file",
                    path.display()
                )));
            }
            let file = open_verified(roots, &path, &real, OpenOptions::new().read(true))?;
            (Some(file), real)
        }
        Place::Missing { base, rest } => {
            if p.if_match.is_some() {
                return Err(RpcError::new(
                    CONFLICT,
                    format!(
                        "{} does not exist, so it cannot match `ifMatch`",
                        path.display()
                    ),
                ));
            }
            if rest.components().count() > 1 {
                let parent = path.parent().unwrap_or(&path);
                return Err(RpcError::new(
                    code::NOT_FOUND,
                    format!(
                        "the directory {} does not exist (create it with resourceMkdir)",
                        parent.display()
                    ),
                ));
            }
            (None, base.join(rest))
        }
    };
    let fail = |e: io::Error| io_error(&path, &e);
    let (old, mode) = match file.as_mut() {
        Some(f) => {
            let meta = f.metadata().map_err(fail)?;
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
            f.read_to_end(&mut old).map_err(fail)?;
            (old, Some(meta.permissions()))
        }
        None => (Vec::new(), None),
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
    let (Some(dir), Some(name)) = (place.parent(), place.file_name()) else {
        return Err(denied(&path));
    };
    // Everything below happens relative to a descriptor of the target's folder, reached
    // from its root without following a symlink: swapping a folder for a link to somewhere
    // else while this runs makes the write fail, never land outside.
    let dirfd = open_dir_beneath(roots, dir).map_err(|e| match e.kind() {
        io::ErrorKind::NotFound => io_error(&path, &e),
        _ => denied(&path),
    })?;
    let mode = match mode {
        Some(m) => {
            use std::os::unix::fs::PermissionsExt;
            m.mode() & 0o7777
        }
        // A new file gets what a plain create would give it.
        None => 0o666 & !current_umask(),
    };
    let tmp_name = format!(".claude-host-write-{}", uuid::Uuid::new_v4().simple());
    let mut tmp = at::create_new(&dirfd, &tmp_name, mode).map_err(fail)?;
    let written = (|| -> io::Result<()> {
        use std::os::unix::fs::PermissionsExt;
        // The umask does not narrow an existing file's mode.
        tmp.set_permissions(fs::Permissions::from_mode(mode))?;
        tmp.write_all(head)?;
        tmp.write_all(&data)?;
        tmp.write_all(tail)?;
        tmp.sync_all()?;
        if file.is_some() {
            at::rename(&dirfd, &tmp_name, name)
        } else {
            // Linked, not renamed: a file someone created there meanwhile is not replaced.
            at::link(&dirfd, &tmp_name, name)?;
            at::unlink(&dirfd, &tmp_name, false)
        }
    })();
    if let Err(e) = written {
        let _ = at::unlink(&dirfd, &tmp_name, false);
        return Err(fail(e));
    }
    Ok(ResourceWriteResult {})
}

/// Opens `dir` (a canonical path inside a root) as a directory descriptor, one component at
/// a time from the root, refusing to follow a symlink anywhere on the way.
fn open_dir_beneath(roots: &Roots, dir: &Path) -> io::Result<std::os::fd::OwnedFd> {
    let root = roots
        .dirs
        .iter()
        .filter(|r| dir.starts_with(r))
        .max_by_key(|r| r.as_os_str().len())
        .ok_or_else(|| io::Error::from(io::ErrorKind::PermissionDenied))?;
    let mut fd = at::open_dir(None, root.as_os_str())?;
    for c in dir.strip_prefix(root).unwrap_or(Path::new("")).components() {
        let Component::Normal(part) = c else {
            return Err(io::Error::from(io::ErrorKind::PermissionDenied));
        };
        fd = at::open_dir(Some(&fd), part)?;
    }
    Ok(fd)
}

/// The `*at` system calls on a directory descriptor, with `O_NOFOLLOW` throughout.
#[allow(unsafe_code)]
mod at {
    use std::ffi::{CString, OsStr};
    use std::fs::File;
    use std::io;
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    use std::os::unix::ffi::OsStrExt;

    fn c(name: &OsStr) -> io::Result<CString> {
        CString::new(name.as_bytes()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))
    }

    fn check(r: libc::c_int) -> io::Result<libc::c_int> {
        if r < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(r)
        }
    }

    /// A directory: `path` from the working directory (`dir` None) or `name` in `dir`.
    pub(super) fn open_dir(dir: Option<&OwnedFd>, name: &OsStr) -> io::Result<OwnedFd> {
        let name = c(name)?;
        let base = dir.map_or(libc::AT_FDCWD, AsRawFd::as_raw_fd);
        let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC;
        // SAFETY: a valid C string and descriptor; the result is checked and owned below.
        let fd = check(unsafe { libc::openat(base, name.as_ptr(), flags) })?;
        // SAFETY: `fd` was just opened and nothing else owns it.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }

    /// A new regular file `name` in `dir` (never an existing entry, never through a link).
    pub(super) fn create_new(dir: &OwnedFd, name: &str, mode: u32) -> io::Result<File> {
        let name = c(OsStr::new(name))?;
        let flags =
            libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC;
        // SAFETY: as in `open_dir`.
        let fd = check(unsafe {
            libc::openat(dir.as_raw_fd(), name.as_ptr(), flags, mode as libc::c_uint)
        })?;
        // SAFETY: as in `open_dir`.
        Ok(unsafe { File::from_raw_fd(fd) })
    }

    pub(super) fn rename(dir: &OwnedFd, from: &str, to: &OsStr) -> io::Result<()> {
        let (from, to) = (c(OsStr::new(from))?, c(to)?);
        // SAFETY: valid C strings and descriptor.
        check(unsafe {
            libc::renameat(dir.as_raw_fd(), from.as_ptr(), dir.as_raw_fd(), to.as_ptr())
        })
        .map(drop)
    }

    /// Moves `from` in `from_dir` to `to` in `to_dir` (renameat(2) follows no link at either
    /// name).
    pub(super) fn rename_between(
        from_dir: &OwnedFd,
        from: &OsStr,
        to_dir: &OwnedFd,
        to: &OsStr,
    ) -> io::Result<()> {
        let (from, to) = (c(from)?, c(to)?);
        // SAFETY: valid C strings and descriptors.
        check(unsafe {
            libc::renameat(
                from_dir.as_raw_fd(),
                from.as_ptr(),
                to_dir.as_raw_fd(),
                to.as_ptr(),
            )
        })
        .map(drop)
    }

    pub(super) fn link(dir: &OwnedFd, from: &str, to: &OsStr) -> io::Result<()> {
        let (from, to) = (c(OsStr::new(from))?, c(to)?);
        // SAFETY: valid C strings and descriptor; flags 0 does not follow a link at `from`.
        check(unsafe {
            libc::linkat(
                dir.as_raw_fd(),
                from.as_ptr(),
                dir.as_raw_fd(),
                to.as_ptr(),
                0,
            )
        })
        .map(drop)
    }

    /// A new directory `name` in `dir` (mkdirat(2) does not follow a link at `name`).
    pub(super) fn mkdir(dir: &OwnedFd, name: &OsStr, mode: u32) -> io::Result<()> {
        let name = c(name)?;
        // SAFETY: valid C string and descriptor.
        check(unsafe { libc::mkdirat(dir.as_raw_fd(), name.as_ptr(), mode as libc::mode_t) })
            .map(drop)
    }

    /// Removes `name` in `dir`: a folder (which must be empty) with `folder`, else a file or
    /// link (never what a link points to).
    pub(super) fn unlink(dir: &OwnedFd, name: impl AsRef<OsStr>, folder: bool) -> io::Result<()> {
        let name = c(name.as_ref())?;
        let flags = if folder { libc::AT_REMOVEDIR } else { 0 };
        // SAFETY: valid C string and descriptor.
        check(unsafe { libc::unlinkat(dir.as_raw_fd(), name.as_ptr(), flags) }).map(drop)
    }

    /// The mode bits of `name` in `dir`, a link's own (not its target's).
    pub(super) fn mode_nofollow(dir: &OwnedFd, name: &OsStr) -> io::Result<u32> {
        let name = c(name)?;
        // SAFETY: an all-zero `stat` is a valid value to be overwritten.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: valid C string, descriptor and out-pointer.
        check(unsafe {
            libc::fstatat(
                dir.as_raw_fd(),
                name.as_ptr(),
                &mut st,
                libc::AT_SYMLINK_NOFOLLOW,
            )
        })?;
        Ok(st.st_mode)
    }

    /// Opens file `name` in `dir` to read (never through a link).
    pub(super) fn open_read(dir: &OwnedFd, name: &OsStr) -> io::Result<File> {
        let name = c(name)?;
        let flags = libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_CLOEXEC;
        // SAFETY: as in `open_dir`.
        let fd = check(unsafe { libc::openat(dir.as_raw_fd(), name.as_ptr(), flags) })?;
        // SAFETY: as in `open_dir`.
        Ok(unsafe { File::from_raw_fd(fd) })
    }

    /// Where link `name` in `dir` points.
    pub(super) fn read_link(dir: &OwnedFd, name: &OsStr) -> io::Result<std::ffi::OsString> {
        use std::os::unix::ffi::OsStringExt;
        let name = c(name)?;
        let mut buf = vec![0u8; libc::PATH_MAX as usize];
        // SAFETY: valid C string and descriptor; the buffer's length is passed.
        let n = unsafe {
            libc::readlinkat(
                dir.as_raw_fd(),
                name.as_ptr(),
                buf.as_mut_ptr().cast(),
                buf.len(),
            )
        };
        let n = usize::try_from(n).map_err(|_| io::Error::last_os_error())?;
        buf.truncate(n);
        Ok(std::ffi::OsString::from_vec(buf))
    }

    /// A new link `name` in `dir` pointing to `target`.
    pub(super) fn symlink(target: &OsStr, dir: &OwnedFd, name: &OsStr) -> io::Result<()> {
        let (target, name) = (c(target)?, c(name)?);
        // SAFETY: valid C strings and descriptor.
        check(unsafe { libc::symlinkat(target.as_ptr(), dir.as_raw_fd(), name.as_ptr()) }).map(drop)
    }

    /// Sets the mode of folder `name` in `dir` (a link is not followed: the walk opened it as a
    /// folder without following).
    pub(super) fn chmod_dir(dir: &OwnedFd, name: &OsStr, mode: u32) -> io::Result<()> {
        let sub = open_dir(Some(dir), name)?;
        // SAFETY: a valid descriptor.
        check(unsafe { libc::fchmod(sub.as_raw_fd(), mode as libc::mode_t) }).map(drop)
    }

    /// Copies `name` in `from` to a new `to_name` in `to`: a folder with everything in it, a
    /// link as a link, a file's bytes and mode; other kinds are skipped. Every step is
    /// relative to the descriptors of the folders it is in, following no link.
    pub(super) fn copy_tree(
        from: &OwnedFd,
        name: &OsStr,
        to: &OwnedFd,
        to_name: &OsStr,
    ) -> io::Result<()> {
        let mode = mode_nofollow(from, name)?;
        match mode & libc::S_IFMT {
            libc::S_IFLNK => symlink(&read_link(from, name)?, to, to_name),
            libc::S_IFDIR => {
                mkdir(to, to_name, 0o700)?;
                let (src, dst) = (open_dir(Some(from), name)?, open_dir(Some(to), to_name)?);
                // As in `remove_tree`: the listing of the very folder opened.
                for entry in std::fs::read_dir(format!("/proc/self/fd/{}", src.as_raw_fd()))? {
                    let child = entry?.file_name();
                    copy_tree(&src, &child, &dst, &child)?;
                }
                // Last, so a read-only folder can still be filled.
                chmod_dir(to, to_name, mode & 0o7777)
            }
            libc::S_IFREG => {
                let mut src = open_read(from, name)?;
                let to_name = to_name.to_str().ok_or_else(|| {
                    io::Error::new(io::ErrorKind::InvalidInput, "a file name that is not UTF-8")
                })?;
                let mut dst = create_new(to, to_name, mode & 0o7777)?;
                io::copy(&mut src, &mut dst)?;
                use std::os::unix::fs::PermissionsExt;
                dst.set_permissions(std::fs::Permissions::from_mode(mode & 0o7777))
            }
            _ => {
                tracing::debug!("resourceCopy skips a special file");
                Ok(())
            }
        }
    }

    /// Whether `name` in `dir` is a folder itself (a link to one is not).
    pub(super) fn is_dir_nofollow(dir: &OwnedFd, name: &OsStr) -> io::Result<bool> {
        let name = c(name)?;
        // SAFETY: an all-zero `stat` is a valid value to be overwritten.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: valid C string, descriptor and out-pointer.
        check(unsafe {
            libc::fstatat(
                dir.as_raw_fd(),
                name.as_ptr(),
                &mut st,
                libc::AT_SYMLINK_NOFOLLOW,
            )
        })?;
        Ok(st.st_mode & libc::S_IFMT == libc::S_IFDIR)
    }

    /// Removes folder `name` in `dir` with everything in it, each step relative to the
    /// descriptor of the folder it is in, following no link.
    pub(super) fn remove_tree(dir: &OwnedFd, name: &OsStr) -> io::Result<()> {
        let sub = open_dir(Some(dir), name)?;
        // The listing is read through the descriptor's own /proc entry, which names the very
        // folder opened, whatever its path has become since.
        let listing = std::fs::read_dir(format!("/proc/self/fd/{}", sub.as_raw_fd()))?;
        for entry in listing {
            let entry = entry?;
            let child = entry.file_name();
            if entry.file_type()?.is_dir() {
                remove_tree(&sub, &child)?;
            } else {
                unlink(&sub, &child, false)?;
            }
        }
        unlink(dir, name, true)
    }
}

/// The process's file creation mask, as Linux reports it (022 when it cannot be read).
fn current_umask() -> u32 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Umask:"))
                .and_then(|v| u32::from_str_radix(v.trim(), 8).ok())
        })
        .unwrap_or(0o022)
}

fn list(roots: &Roots, p: ResourceListParams) -> Result<ResourceListResult, RpcError> {
    let path = request_path(&p.uri)?;
    let real = locate(roots, &path)?.existing(&path)?;
    let before = fs::metadata(&real).map_err(|e| io_error(&path, &e))?;
    if !before.is_dir() {
        return Err(RpcError::invalid_params(format!(
            "{} is not a directory",
            path.display()
        )));
    }
    let mut entries = Vec::new();
    for entry in fs::read_dir(&real).map_err(|e| io_error(&path, &e))? {
        let entry = entry.map_err(|e| io_error(&path, &e))?;
        entries.push(DirectoryEntry {
            name: entry.file_name().to_string_lossy().into_owned(),
            r#type: entry_kind(roots, &entry).to_owned(),
        });
    }
    still_inside(roots, &path, &real, &before)?;
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(ResourceListResult { entries })
}

/// `"directory"` or `"file"`. A symlink is described by its target only when that lies
/// inside a root (so a picker can descend into it); one leading outside, or nowhere, is a
/// `"file"`, revealing nothing of what is outside.
fn entry_kind(roots: &Roots, entry: &fs::DirEntry) -> &'static str {
    match entry.file_type() {
        Ok(t) if t.is_dir() => "directory",
        Ok(t) if t.is_symlink() => match fs::canonicalize(entry.path()) {
            Ok(real) if roots.contains(&real) && real.is_dir() => "directory",
            _ => "file",
        },
        _ => "file",
    }
}

fn resolve(roots: &Roots, p: ResourceResolveParams) -> Result<ResourceResolveResult, RpcError> {
    let path = request_path(&p.uri)?;
    let (uri, real, meta) = if p.follow_symlinks.unwrap_or(true) {
        let real = locate(roots, &path)?.existing(&path)?;
        let meta = fs::metadata(&real).map_err(|e| io_error(&path, &e))?;
        (file_uri(&real), real, meta)
    } else {
        let entry = locate_entry(roots, &path)?;
        let meta = fs::symlink_metadata(&entry).map_err(|e| io_error(&path, &e))?;
        (p.uri, entry, meta)
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
    let (base, rest) = match locate(roots, &path)? {
        Place::Existing(real) if real.is_dir() => return Ok(ResourceMkdirResult {}),
        Place::Existing(_) => {
            return Err(RpcError::new(
                code::ALREADY_EXISTS,
                format!("{} exists and is not a directory", path.display()),
            ));
        }
        Place::Missing { base, rest } => (base, rest),
    };
    if !base.is_dir() {
        return Err(RpcError::new(
            code::ALREADY_EXISTS,
            format!("{} exists and is not a directory", base.display()),
        ));
    }
    // One level at a time, each relative to the descriptor of the one before, reached from
    // the root without following a link: a folder swapped for a symlink meanwhile fails the
    // call instead of sending the new folders outside the root (mkdir(2) itself never follows
    // a link planted at the name).
    let mut fd = open_dir_beneath(roots, &base).map_err(|e| io_error(&path, &e))?;
    let mut dir = base;
    for name in rest.components() {
        let Component::Normal(name) = name else {
            return Err(RpcError::new(
                code::PERMISSION_DENIED,
                format!("{} is outside the working directories", path.display()),
            ));
        };
        dir.push(name);
        match at::mkdir(&fd, name, 0o777) {
            Ok(()) => {}
            // Made meanwhile by someone else: fine if it is a real directory (checked by the
            // no-follow open below).
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(io_error(&path, &e)),
        }
        fd = at::open_dir(Some(&fd), name).map_err(|e| match e.raw_os_error() {
            Some(libc::ENOTDIR | libc::ELOOP) => RpcError::new(
                code::ALREADY_EXISTS,
                format!("{} exists and is not a directory", dir.display()),
            ),
            _ => io_error(&path, &e),
        })?;
    }
    Ok(ResourceMkdirResult {})
}

fn delete(roots: &Roots, p: ResourceDeleteParams) -> Result<ResourceDeleteResult, RpcError> {
    let path = request_path(&p.uri)?;
    let entry = locate_entry(roots, &path)?;
    if roots.holds_root(&entry) {
        return Err(RpcError::new(
            code::PERMISSION_DENIED,
            format!(
                "{} is a working directory of the session (or holds one) and cannot be deleted",
                path.display()
            ),
        ));
    }
    // Removed relative to its folder's descriptor, reached from the root without following a
    // link: a folder on the way swapped for a symlink meanwhile fails the call instead of
    // deleting outside the root. The entry itself is never followed either (a symlink is
    // removed, its target left alone).
    let (Some(parent), Some(name)) = (entry.parent(), entry.file_name()) else {
        return Err(denied(&path));
    };
    let dir = open_dir_beneath(roots, parent).map_err(|e| io_error(&path, &e))?;
    let is_dir = at::is_dir_nofollow(&dir, name).map_err(|e| io_error(&path, &e))?;
    let removed = if !is_dir {
        at::unlink(&dir, name, false)
    } else if p.recursive == Some(true) {
        at::remove_tree(&dir, name)
    } else {
        at::unlink(&dir, name, true)
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
    let from = locate_entry(roots, &source)?;
    let to = locate_entry(roots, &destination)?;
    for (entry, shown) in [(&from, &source), (&to, &destination)] {
        if roots.holds_root(entry) {
            return Err(RpcError::new(
                code::PERMISSION_DENIED,
                format!(
                    "{} is a working directory of the session (or holds one) and cannot be moved or replaced",
                    shown.display()
                ),
            ));
        }
    }
    let meta = fs::symlink_metadata(&from).map_err(|e| io_error(&source, &e))?;
    check_distinct(&from, &to, &destination, p.fail_if_exists == Some(true))?;
    if from == to {
        return Ok(ResourceMoveResult {});
    }
    // Both sides are reached from their root without following a link, and everything below
    // is relative to those descriptors: a folder swapped for a symlink meanwhile fails the
    // call instead of moving, replacing or removing anything outside the root.
    let (Some(from_parent), Some(from_name), Some(to_parent), Some(to_name)) =
        (from.parent(), from.file_name(), to.parent(), to.file_name())
    else {
        return Err(denied(&source));
    };
    let from_dir = open_dir_beneath(roots, from_parent).map_err(|e| io_error(&source, &e))?;
    let to_dir = open_dir_beneath(roots, to_parent).map_err(|e| io_error(&destination, &e))?;
    // rename(2) replaces a file (or a link, unfollowed) atomically, which writers that save
    // through a temporary file rely on; a directory on either side has to go first.
    clear_at(
        &to_dir,
        to_name,
        &destination,
        p.fail_if_exists == Some(true),
        meta.is_dir(),
    )?;
    match at::rename_between(&from_dir, from_name, &to_dir, to_name) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::CrossesDevices => {
            at::copy_tree(&from_dir, from_name, &to_dir, to_name)
                .map_err(|e| io_error(&destination, &e))?;
            let removed = if meta.is_dir() {
                at::remove_tree(&from_dir, from_name)
            } else {
                at::unlink(&from_dir, from_name, false)
            };
            removed.map_err(|e| io_error(&source, &e))?;
        }
        Err(e) => return Err(io_error(&source, &e)),
    }
    Ok(ResourceMoveResult {})
}

fn copy(roots: &Roots, p: ResourceCopyParams) -> Result<ResourceCopyResult, RpcError> {
    let (source, destination) = (request_path(&p.source)?, request_path(&p.destination)?);
    let from = locate(roots, &source)?.existing(&source)?;
    let kind = fs::symlink_metadata(&from)
        .map_err(|e| io_error(&source, &e))?
        .file_type();
    if !(kind.is_file() || kind.is_dir() || kind.is_symlink()) {
        return Err(RpcError::invalid_params(format!(
            "{} is a FIFO, socket or device: only files, folders and links are copied",
            source.display()
        )));
    }
    let to = locate_entry(roots, &destination)?;
    if roots.holds_root(&to) {
        return Err(RpcError::new(
            code::PERMISSION_DENIED,
            format!(
                "{} is a working directory of the session (or holds one) and cannot be replaced",
                destination.display()
            ),
        ));
    }
    check_distinct(&from, &to, &destination, p.fail_if_exists == Some(true))?;
    if from == to {
        return Ok(ResourceCopyResult {});
    }
    // Both sides are reached from their root without following a link and copied relative
    // to those descriptors (see `at::copy_tree`): a folder swapped for a symlink meanwhile
    // fails the call instead of reading or writing outside the root.
    let (Some(from_parent), Some(from_name), Some(to_parent), Some(to_name)) =
        (from.parent(), from.file_name(), to.parent(), to.file_name())
    else {
        return Err(denied(&source));
    };
    let from_dir = open_dir_beneath(roots, from_parent).map_err(|e| io_error(&source, &e))?;
    let to_dir = open_dir_beneath(roots, to_parent).map_err(|e| io_error(&destination, &e))?;
    // Always cleared: the copy is created with O_EXCL, so a symlink left at the destination
    // is replaced rather than written through.
    clear_at(
        &to_dir,
        to_name,
        &destination,
        p.fail_if_exists == Some(true),
        true,
    )?;
    at::copy_tree(&from_dir, from_name, &to_dir, to_name)
        .map_err(|e| io_error(&destination, &e))?;
    Ok(ResourceCopyResult {})
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
    dir: &std::os::fd::OwnedFd,
    name: &std::ffi::OsStr,
    shown: &Path,
    fail_if_exists: bool,
    always: bool,
) -> Result<(), RpcError> {
    let is_dir = match at::is_dir_nofollow(dir, name) {
        Ok(d) => d,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io_error(shown, &e)),
    };
    if fail_if_exists {
        return Err(already_exists(shown));
    }
    let removed = if is_dir {
        at::remove_tree(dir, name)
    } else if always {
        at::unlink(dir, name, false)
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
    /// swaps `sub` for a link to `outdir` and back. Asserts the race was exercised and that some
    /// calls succeeded; returns the environment (to inspect), `sub` and `outdir`.
    async fn race_a_swapped_folder(
        prepare: impl FnOnce(&Path, &Path),
        calls: usize,
        call: impl Fn(&Path, usize) -> (&'static str, Value),
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
            if env.call(method, params).await.is_ok() {
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
    fn a_path_swapped_after_the_open_is_caught() {
        let env = Env::new();
        let (root, out) = (env.root(), env.outside());
        fs::create_dir(root.join("a")).unwrap();
        fs::write(root.join("a/f"), "inside").unwrap();
        fs::write(out.join("outdir/f"), "outside").unwrap();
        let real = root.join("a/f");
        // What an open that lost the race would hold: the file outside.
        let opened = File::open(out.join("outdir/f")).unwrap();
        let seen = opened.metadata().unwrap();
        let e = still_inside(&env.roots, &real, &real, &seen).unwrap_err();
        assert_eq!(e.code, code::PERMISSION_DENIED);
        // The directory swapped for a link out after an honest open.
        let opened =
            open_verified(&env.roots, &real, &real, OpenOptions::new().read(true)).unwrap();
        let seen = opened.metadata().unwrap();
        fs::rename(root.join("a"), root.join("a-old")).unwrap();
        symlink(out.join("outdir"), root.join("a")).unwrap();
        let e = still_inside(&env.roots, &real, &real, &seen).unwrap_err();
        assert_eq!(e.code, code::PERMISSION_DENIED);
        let e = open_verified(&env.roots, &real, &real, OpenOptions::new().read(true)).unwrap_err();
        assert_eq!(e.code, code::PERMISSION_DENIED);
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
