//! Files only the user may read: everything claude-host keeps under its data directory
//! (credentials, usage records) is written with these.

use std::io::Write;
use std::path::Path;

/// Creates `dir` and its missing parents with mode 0700.
pub fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
    }
    #[cfg(not(unix))]
    {
        std::fs::create_dir_all(dir)
    }
}

/// Sets mode 0600.
pub fn set_mode_0600(path: &Path) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        Ok(())
    }
}

/// Replaces `path` with `bytes` atomically: a temporary file in the same directory (mode
/// 0600), fsync, rename. A reader sees the old file or the new one, never a part; nothing is
/// left behind on failure. The directory is created (mode 0700) when missing.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    create_private_dir(dir)?;
    // NamedTempFile is created with mode 0600 on Unix and removed when dropped unpersisted.
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    set_mode_0600(tmp.path())?;
    tmp.write_all(bytes)?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}
