//! What Claude changed on disk: each tool call's file changes, kept per session so a client
//! can see the diff, and put back.
//!
//! - `store`: the content-addressed versions (under `<data>/edits/<session>/content`).
//! - `shadow`: snapshots of a working directory for shell commands' changes.
//! - `tracker`: the hooks' side: what a tool call changed.
//! - `book`: the session task's record, and the `fileEdit` and changeset views of it.

pub mod book;
pub mod shadow;
pub mod store;
pub mod tracker;

pub use book::{Composed, EditBook, EditRecord, FileChange, LogLine, Scope};
pub use store::{Blob, ContentStore, Limits};
pub use tracker::Tracker;

use std::io::Write;
use std::path::{Path, PathBuf};

/// Why an edit could not be recorded, shown or put back.
#[derive(Debug, thiserror::Error)]
pub enum EditError {
    /// A file operation failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The failure.
        source: std::io::Error,
    },
    /// git failed.
    #[error("{0}")]
    Git(String),
    /// The content was not kept (over a size limit) or never existed.
    #[error("content {0} is not kept (it was over the size limit, or is not this session's)")]
    NotKept(String),
    /// A folder too large to snapshot.
    #[error("{} has more than {limit} files and is not a git repository", dir.display())]
    TooManyFiles {
        /// The folder.
        dir: PathBuf,
        /// The limit.
        limit: usize,
    },
    /// The file changed on disk since the edit; putting it back would lose that change.
    #[error("{} changed on disk since Claude's edit; nothing was discarded", .0.display())]
    Changed(PathBuf),
    /// The file is outside the session's folders.
    #[error("{} is outside this session's folders", .0.display())]
    Outside(PathBuf),
}

impl EditError {
    pub(crate) fn io(path: &Path, source: std::io::Error) -> EditError {
        EditError::Io {
            path: path.to_owned(),
            source,
        }
    }
}

/// Removes what a session's edit records hold (`<edits_dir>/<session id>`), with the session.
pub fn delete_session(edits_dir: &Path, session_id: &str) -> std::io::Result<()> {
    // Session ids are UUIDs: nothing else may become a path.
    if uuid::Uuid::parse_str(session_id).is_err() {
        return Ok(());
    }
    match std::fs::remove_dir_all(edits_dir.join(session_id)) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// Puts `files` back to their `before` content, all or none: every file must still hold its
/// `after` content, lie inside one of `roots`, and have its `before` content kept, or nothing
/// is written.
pub fn put_back(
    store: &ContentStore,
    files: &[Composed],
    roots: &[PathBuf],
) -> Result<(), EditError> {
    let roots: Vec<PathBuf> = roots.iter().filter_map(|r| r.canonicalize().ok()).collect();
    let mut plan = Vec::with_capacity(files.len());
    for f in files {
        for p in std::iter::once(&f.path).chain(f.from.iter()) {
            if !inside(p, &roots) {
                return Err(EditError::Outside(p.clone()));
            }
        }
        // A moved file goes back where it was, which must be free.
        if let Some(from) = &f.from
            && std::fs::symlink_metadata(from).is_ok()
        {
            return Err(EditError::Changed(from.clone()));
        }
        let now = match std::fs::symlink_metadata(&f.path) {
            Ok(m) if m.is_file() => Some(Blob::of(
                &std::fs::read(&f.path).map_err(|e| EditError::io(&f.path, e))?,
            )),
            Ok(_) => return Err(EditError::Changed(f.path.clone())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(EditError::io(&f.path, e)),
        };
        if now.as_ref().map(|b| &b.hash) != f.after.as_ref().map(|b| &b.hash) {
            return Err(EditError::Changed(f.path.clone()));
        }
        let bytes = match &f.before {
            Some(b) => Some(store.get(&b.hash).map_err(|_| {
                EditError::NotKept(format!("{} before the edit", f.path.display()))
            })?),
            None => None,
        };
        plan.push((f, bytes));
    }
    let remove = |path: &Path| match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(EditError::io(path, e)),
        _ => Ok(()),
    };
    for (f, bytes) in plan {
        match (bytes, &f.from) {
            (None, _) => remove(&f.path)?,
            (Some(bytes), None) => write_replacing(&f.path, &bytes)?,
            (Some(bytes), Some(from)) => {
                write_replacing(from, &bytes)?;
                remove(&f.path)?;
            }
        }
    }
    Ok(())
}

/// Whether `path`'s folder, with links resolved, is inside one of `roots` (resolved).
fn inside(path: &Path, roots: &[PathBuf]) -> bool {
    let mut dir = path.parent();
    // The folder may be gone (a deleted tree being put back): judge by its nearest ancestor.
    while let Some(d) = dir {
        if let Ok(real) = d.canonicalize() {
            let rest = path.strip_prefix(d).unwrap_or(path);
            if rest
                .components()
                .any(|c| !matches!(c, std::path::Component::Normal(_)))
            {
                return false;
            }
            return roots.iter().any(|r| real.starts_with(r));
        }
        dir = d.parent();
    }
    false
}

/// Writes `bytes` to `path` through a temporary file beside it, keeping an existing file's
/// permissions.
fn write_replacing(path: &Path, bytes: &[u8]) -> Result<(), EditError> {
    let dir = path.parent().unwrap_or(Path::new("/"));
    std::fs::create_dir_all(dir).map_err(|e| EditError::io(dir, e))?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(
        ".{name}.claude-host-{}",
        uuid::Uuid::new_v4().simple()
    ));
    let result = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)?;
        f.write_all(bytes)?;
        if let Ok(meta) = std::fs::metadata(path) {
            f.set_permissions(meta.permissions())?;
        }
        std::fs::rename(&tmp, path)
    })();
    result.map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        EditError::io(path, e)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn put_back_restores_every_file_or_none() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("w");
        std::fs::create_dir_all(&root).unwrap();
        let store = ContentStore::open(tmp.path().join("c"), Limits::default()).unwrap();
        let put = |s: &str| store.put(s.as_bytes()).unwrap();
        let (a, b, c) = (root.join("a"), root.join("b"), root.join("sub/c"));
        std::fs::write(&a, "a2").unwrap();
        std::fs::write(&b, "b-new").unwrap();
        let files = vec![
            Composed {
                path: a.clone(),
                before: Some(put("a1")),
                after: Some(put("a2")),
                added: 1,
                removed: 1,
                from: None,
                calls: vec![],
            },
            Composed {
                path: b.clone(),
                before: None,
                after: Some(put("b-new")),
                added: 1,
                removed: 0,
                from: None,
                calls: vec![],
            },
            Composed {
                path: c.clone(),
                before: Some(put("c1")),
                after: None,
                added: 0,
                removed: 1,
                from: None,
                calls: vec![],
            },
        ];
        // A later change to one file: nothing is touched.
        std::fs::write(&b, "b-user").unwrap();
        let err = put_back(&store, &files, std::slice::from_ref(&root)).unwrap_err();
        assert!(matches!(&err, EditError::Changed(p) if *p == b), "{err}");
        assert_eq!(std::fs::read_to_string(&a).unwrap(), "a2");
        std::fs::write(&b, "b-new").unwrap();
        let outside = tmp.path().join("elsewhere");
        let err = put_back(&store, &files, std::slice::from_ref(&outside)).unwrap_err();
        assert!(matches!(err, EditError::Outside(_)), "{err}");
        put_back(&store, &files, std::slice::from_ref(&root)).unwrap();
        assert_eq!(std::fs::read_to_string(&a).unwrap(), "a1");
        assert!(!b.exists());
        assert_eq!(std::fs::read_to_string(&c).unwrap(), "c1");

        // A moved file goes back where it was, and only if that place is free.
        let (old, new) = (root.join("old.txt"), root.join("new.txt"));
        std::fs::write(&new, "moved").unwrap();
        let moved = vec![Composed {
            path: new.clone(),
            before: Some(put("moved")),
            after: Some(put("moved")),
            added: 0,
            removed: 0,
            from: Some(old.clone()),
            calls: vec![],
        }];
        std::fs::write(&old, "in the way").unwrap();
        let err = put_back(&store, &moved, std::slice::from_ref(&root)).unwrap_err();
        assert!(matches!(&err, EditError::Changed(p) if *p == old), "{err}");
        std::fs::remove_file(&old).unwrap();
        put_back(&store, &moved, std::slice::from_ref(&root)).unwrap();
        assert_eq!(std::fs::read_to_string(&old).unwrap(), "moved");
        assert!(!new.exists());
    }
}
