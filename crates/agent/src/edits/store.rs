//! A session's content-addressed store: every version of a file Claude changed, by SHA-256,
//! once however often it recurs.

use super::EditError;
use sha2::{Digest, Sha256};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// A version of a file, named by its content's SHA-256 (hex).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Blob {
    /// SHA-256 of the content, lower-case hex.
    pub hash: String,
    /// Length in bytes.
    pub size: u64,
}

impl Blob {
    /// The blob's name for `bytes`.
    pub fn of(bytes: &[u8]) -> Blob {
        Blob {
            hash: hex(&Sha256::digest(bytes)),
            size: bytes.len() as u64,
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// Whether `hash` has the shape of a blob name (so a client-supplied one cannot name a path).
pub fn is_hash(hash: &str) -> bool {
    hash.len() == 64 && hash.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// How much a session may keep. A version over `per_file` is listed but not kept (its diff
/// cannot be shown or undone); once the session holds `per_session` bytes, new versions are
/// not kept either. Both are logged when they happen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest single version kept.
    pub per_file: u64,
    /// Most bytes one session keeps in all.
    pub per_session: u64,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            per_file: 16 << 20,
            per_session: 512 << 20,
        }
    }
}

/// The store of one session: `<dir>/<hash>` files, 0600, in a 0700 folder.
#[derive(Debug)]
pub struct ContentStore {
    dir: PathBuf,
    limits: Limits,
    used: AtomicU64,
}

impl ContentStore {
    /// Opens (or creates) the store in `dir`, counting what it already holds.
    pub fn open(dir: PathBuf, limits: Limits) -> Result<ContentStore, EditError> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .map_err(|e| EditError::io(&dir, e))?;
        let mut used = 0;
        if let Ok(entries) = std::fs::read_dir(&dir) {
            for e in entries.flatten() {
                if is_hash(&e.file_name().to_string_lossy()) {
                    used += e.metadata().map(|m| m.len()).unwrap_or(0);
                }
            }
        }
        Ok(ContentStore {
            dir,
            limits,
            used: AtomicU64::new(used),
        })
    }

    /// Keeps `bytes` (unless a limit says no) and names them. Writing the same content twice
    /// keeps one copy.
    pub fn put(&self, bytes: &[u8]) -> Result<Blob, EditError> {
        let blob = Blob::of(bytes);
        let path = self.dir.join(&blob.hash);
        if path.exists() {
            return Ok(blob);
        }
        if blob.size > self.limits.per_file {
            tracing::info!(
                size = blob.size,
                limit = self.limits.per_file,
                "a changed file is over the per-file limit; its content is not kept"
            );
            return Ok(blob);
        }
        let total = self.used.load(Ordering::Relaxed) + blob.size;
        if total > self.limits.per_session {
            tracing::warn!(
                limit = self.limits.per_session,
                "this session's edit history is full; new file versions are not kept"
            );
            return Ok(blob);
        }
        // Written beside its final name and renamed, so a reader never sees half a version.
        let tmp = self
            .dir
            .join(format!(".{}.{}", blob.hash, uuid::Uuid::new_v4().simple()));
        let write = || -> std::io::Result<()> {
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&tmp)?;
            f.write_all(bytes)?;
            std::fs::rename(&tmp, &path)
        };
        if let Err(e) = write() {
            let _ = std::fs::remove_file(&tmp);
            return Err(EditError::io(&path, e));
        }
        self.used.fetch_add(blob.size, Ordering::Relaxed);
        Ok(blob)
    }

    /// Whether the content named `hash` is kept.
    pub fn has(&self, hash: &str) -> bool {
        is_hash(hash) && self.dir.join(hash).is_file()
    }

    /// The content named `hash`.
    pub fn get(&self, hash: &str) -> Result<Vec<u8>, EditError> {
        if !is_hash(hash) {
            return Err(EditError::NotKept(hash.to_owned()));
        }
        let path = self.dir.join(hash);
        std::fs::read(&path).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => EditError::NotKept(hash.to_owned()),
            _ => EditError::io(&path, e),
        })
    }

    /// Bytes held now.
    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    /// The folder it keeps its files in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_copy_per_content_and_limits_keep_nothing_over_them() {
        let dir = tempfile::tempdir().unwrap();
        let store = ContentStore::open(
            dir.path().join("c"),
            Limits {
                per_file: 8,
                per_session: 12,
            },
        )
        .unwrap();
        let a = store.put(b"hello").unwrap();
        assert_eq!(store.put(b"hello").unwrap(), a);
        assert_eq!(store.used(), 5);
        assert_eq!(store.get(&a.hash).unwrap(), b"hello");
        let big = store.put(b"123456789").unwrap();
        assert!(!store.has(&big.hash), "over the per-file limit");
        store.put(b"1234567").unwrap();
        let full = store.put(b"abc").unwrap();
        assert!(!store.has(&full.hash), "over the per-session limit");
        assert!(matches!(store.get(&full.hash), Err(EditError::NotKept(_))));
        assert!(matches!(store.get("../x"), Err(EditError::NotKept(_))));
        let mode = std::fs::metadata(dir.path().join("c").join(&a.hash))
            .unwrap()
            .permissions();
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(mode.mode() & 0o777, 0o600);
        let reopened = ContentStore::open(dir.path().join("c"), Limits::default()).unwrap();
        assert_eq!(reopened.used(), 12);
    }
}
