//! Finding and installing the pinned Claude Code CLI.

use std::path::{Path, PathBuf};
use std::process::Stdio;

/// The Claude Code version claude-host is built and tested against.
pub const PINNED_VERSION: &str = "2.1.330";

/// Why no usable CLI was found or installed.
#[derive(Debug, thiserror::Error)]
pub enum FindError {
    /// Nothing found and installing was not allowed.
    #[error(
        "Claude Code CLI not found (looked at the explicit path, {pinned_dir}, and PATH); run `claude-host install-cli`"
    )]
    NotFound {
        /// Where the pinned install would be.
        pinned_dir: String,
    },
    /// The binary could not be run or did not report a version.
    #[error("{path}: {message}")]
    Broken {
        /// The binary.
        path: String,
        /// What went wrong.
        message: String,
    },
    /// Installing with npm failed.
    #[error("installing Claude Code {version}: {message}")]
    Install {
        /// The version being installed.
        version: String,
        /// What went wrong.
        message: String,
    },
    /// A version to install that is not a plain published version number.
    #[error("{0:?} is not a Claude Code version: give an exact version such as {PINNED_VERSION}")]
    BadVersion(String),
}

/// How a CLI was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// An explicit path (option, flag or `CLAUDE_HOST_CLAUDE_PATH`).
    Explicit,
    /// The pinned install under the data directory.
    Pinned,
    /// `claude` on `PATH`.
    Path,
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Origin::Explicit => "explicit path",
            Origin::Pinned => "pinned install",
            Origin::Path => "PATH",
        })
    }
}

/// A located CLI.
#[derive(Debug, Clone)]
pub struct FoundCli {
    /// The executable.
    pub path: PathBuf,
    /// What `--version` reported.
    pub version: String,
    /// Where it was found.
    pub origin: Origin,
}

fn platform_package() -> Option<&'static str> {
    match (std::env::consts::OS, std::env::consts::ARCH) {
        ("linux", "x86_64") => Some("claude-code-linux-x64"),
        ("linux", "aarch64") => Some("claude-code-linux-arm64"),
        ("macos", "aarch64") => Some("claude-code-darwin-arm64"),
        ("macos", "x86_64") => Some("claude-code-darwin-x64"),
        _ => None,
    }
}

/// Where the pinned version is installed under a data directory.
pub fn install_dir(home: &Path) -> PathBuf {
    version_dir(home, PINNED_VERSION)
}

/// Where a version is installed under a data directory: `<home>/cli/<version>`, next to the
/// others.
pub fn version_dir(home: &Path, version: &str) -> PathBuf {
    home.join("cli").join(version)
}

/// The native binary inside a pinned install. The platform package's binary is used directly
/// so an install whose postinstall did not run (`--ignore-scripts`) still works.
pub fn pinned_binary(home: &Path) -> Option<PathBuf> {
    installed_binary(home, PINNED_VERSION)
}

/// The native binary of an installed version, if that version is installed.
pub fn installed_binary(home: &Path, version: &str) -> Option<PathBuf> {
    binary_under(&version_dir(home, version))
}

fn binary_under(prefix: &Path) -> Option<PathBuf> {
    let native = prefix
        .join("node_modules/@anthropic-ai")
        .join(platform_package()?)
        .join("claude");
    native.is_file().then_some(native)
}

/// The versions installed under a data directory with their binaries, oldest first.
/// Unfinished installs (hidden temporary folders) are not listed.
pub fn installed_versions(home: &Path) -> Vec<(String, PathBuf)> {
    let Ok(entries) = std::fs::read_dir(home.join("cli")) else {
        return Vec::new();
    };
    let mut found: Vec<(String, PathBuf)> = entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            check_version(&name).ok()?;
            let bin = binary_under(&e.path())?;
            Some((name, bin))
        })
        .collect();
    found.sort_by_cached_key(|(v, _)| version_key(v));
    found
}

/// Orders `2.1.9` before `2.1.10`: numeric fields as numbers, anything else as text.
fn version_key(v: &str) -> Vec<(u64, String)> {
    v.split(['.', '-', '+'])
        .map(|part| match part.parse::<u64>() {
            Ok(n) => (n, String::new()),
            Err(_) => (u64::MAX, part.to_owned()),
        })
        .collect()
}

/// Accepts an exact version (`2.1.330`, `2.2.0-beta.1`): it names a folder and an npm
/// package spec, so nothing else (tags, ranges, paths, URLs) may pass.
pub fn check_version(version: &str) -> Result<(), FindError> {
    let ok = version.len() <= 64
        && version.starts_with(|c: char| c.is_ascii_digit())
        && version
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '+'))
        && version.split(['-', '+']).next().is_some_and(|core| {
            let parts: Vec<&str> = core.split('.').collect();
            parts.len() == 3
                && parts
                    .iter()
                    .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
        });
    if ok {
        Ok(())
    } else {
        Err(FindError::BadVersion(version.to_owned()))
    }
}

/// `<path> --version`, first word (`2.1.330 (Claude Code)` → `2.1.330`).
pub async fn version_of(path: &Path) -> Result<String, FindError> {
    let broken = |message: String| FindError::Broken {
        path: path.display().to_string(),
        message,
    };
    let out = tokio::process::Command::new(path)
        .arg("--version")
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .map_err(|e| broken(format!("cannot run: {e}")))?;
    if !out.status.success() {
        return Err(broken(format!(
            "--version failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .map(str::to_owned)
        .ok_or_else(|| broken("--version printed nothing".into()))
}

/// Finds the CLI: explicit path, then the pinned install, then `claude` on PATH. With
/// `install`, installs the pinned version when none is found. A version other than the pin
/// is used with a warning.
pub async fn locate(
    explicit: Option<&Path>,
    home: &Path,
    install: bool,
) -> Result<FoundCli, FindError> {
    let (path, origin) = locate_path(explicit, home, install).await?;
    let version = version_of(&path).await?;
    if version != PINNED_VERSION {
        tracing::warn!(path = %path.display(), %version, pinned = PINNED_VERSION, "using a Claude Code version other than the pinned one");
    }
    Ok(FoundCli {
        path,
        version,
        origin,
    })
}

/// The version of an npm-installed CLI from the `package.json` beside its binary (no process
/// started); `None` when the binary is not in a Claude Code package.
pub fn packaged_version(path: &Path) -> Option<String> {
    let real = std::fs::canonicalize(path).ok()?;
    let text = std::fs::read_to_string(real.parent()?.join("package.json")).ok()?;
    let manifest: serde_json::Value = serde_json::from_str(&text).ok()?;
    let name = manifest.get("name")?.as_str()?;
    if !name.starts_with("@anthropic-ai/claude-code") {
        return None;
    }
    manifest.get("version")?.as_str().map(str::to_owned)
}

/// As [`locate`], without running the CLI to ask its version (about 30 ms): for servers that
/// answer their first client before any CLI is needed. A broken CLI then shows when a session
/// starts one.
pub async fn locate_path(
    explicit: Option<&Path>,
    home: &Path,
    install: bool,
) -> Result<(PathBuf, Origin), FindError> {
    let candidate = if let Some(p) = explicit {
        Some((p.to_owned(), Origin::Explicit))
    } else if let Some(p) = pinned_binary(home) {
        Some((p, Origin::Pinned))
    } else {
        which("claude").map(|p| (p, Origin::Path))
    };
    match candidate {
        Some(c) => Ok(c),
        None if install => {
            eprintln!("Claude Code CLI not found; installing the pinned version {PINNED_VERSION}…");
            Ok((install_pinned(home, false).await?, Origin::Pinned))
        }
        None => Err(FindError::NotFound {
            pinned_dir: install_dir(home).display().to_string(),
        }),
    }
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    p.metadata()
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| is_executable(p))
}

/// Installs the pinned `@anthropic-ai/claude-code` with npm into the data directory (see
/// [`install_version`]).
pub async fn install_pinned(home: &Path, force: bool) -> Result<PathBuf, FindError> {
    install_version(home, PINNED_VERSION, force).await
}

/// Installs `@anthropic-ai/claude-code@<version>` with npm into `<home>/cli/<version>` and
/// returns its verified native binary.
///
/// Concurrent first runs on one data directory wait for one install: the install holds an
/// exclusive lock on `<home>/cli/.<version>.lock`, and whoever waited for it finds the
/// version installed. npm installs into a hidden temporary folder, renamed into place once the
/// binary answers with the right version, so a half-written install is never seen (a binary
/// being run is never written over). npm's own output goes to `<home>/cli/.<version>.log`;
/// stderr gets one progress line, and the whole log when npm fails.
pub async fn install_version(
    home: &Path,
    version: &str,
    force: bool,
) -> Result<PathBuf, FindError> {
    check_version(version)?;
    let fail = |message: String| FindError::Install {
        version: version.to_owned(),
        message,
    };
    if !force && let Some(bin) = verified(home, version).await {
        return Ok(bin);
    }
    let root = home.join("cli");
    std::fs::create_dir_all(&root)
        .map_err(|e| fail(format!("cannot create {}: {e}", root.display())))?;
    let _lock = InstallLock::acquire(&root.join(format!(".{version}.lock")), version)
        .await
        .map_err(|e| fail(format!("cannot lock {}: {e}", root.display())))?;
    if !force && let Some(bin) = verified(home, version).await {
        // Another process installed it while this one waited.
        return Ok(bin);
    }
    let npm = which("npm").ok_or_else(|| {
        fail("npm was not found on PATH; install Node.js (which ships npm) to let claude-host install Claude Code".into())
    })?;
    // Left behind by an install that was killed; no one else writes them while we hold the lock.
    let tmp_prefix = format!(".tmp-{version}-");
    let old_prefix = format!(".old-{version}-");
    for e in std::fs::read_dir(&root).into_iter().flatten().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with(&tmp_prefix) || name.starts_with(&old_prefix) {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
    let tmp = root.join(format!("{tmp_prefix}{}", std::process::id()));
    std::fs::create_dir_all(&tmp)
        .map_err(|e| fail(format!("cannot create {}: {e}", tmp.display())))?;
    let result = npm_install(&npm, &root, &tmp, version).await;
    let outcome = match result {
        Ok(()) => place(home, &root, &tmp, version).await,
        Err(message) => Err(message),
    };
    if tmp.exists() {
        let _ = std::fs::remove_dir_all(&tmp);
    }
    match &outcome {
        Ok(bin) => tracing::debug!(version, path = %bin.display(), "installed Claude Code"),
        Err(why) => tracing::warn!(version, error = %why, "installing Claude Code failed"),
    }
    outcome.map_err(fail)
}

/// The installed binary of `version`, if it runs and says it is that version.
async fn verified(home: &Path, version: &str) -> Option<PathBuf> {
    let bin = installed_binary(home, version)?;
    version_of(&bin)
        .await
        .is_ok_and(|v| v == version)
        .then_some(bin)
}

/// Runs `npm install` into `prefix`, its output into a log file, with one progress line on
/// stderr; on failure the log is copied to stderr and the error names it.
async fn npm_install(npm: &Path, root: &Path, prefix: &Path, version: &str) -> Result<(), String> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let log_path = root.join(format!(".{version}.log"));
    let log = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .mode(0o600)
        .open(&log_path)
        .map_err(|e| format!("cannot create {}: {e}", log_path.display()))?;
    let log_err = log
        .try_clone()
        .map_err(|e| format!("cannot open {}: {e}", log_path.display()))?;
    let started = std::time::Instant::now();
    // npm's output would go to stdout, which is a protocol's channel under `acp` (and any
    // stdio server); it all goes to the log instead.
    let mut child = tokio::process::Command::new(npm)
        .args([
            "install",
            "--no-audit",
            "--no-fund",
            "--no-progress",
            "--no-update-notifier",
            "--prefix",
        ])
        .arg(prefix)
        .arg(format!("@anthropic-ai/claude-code@{version}"))
        .stdin(Stdio::null())
        .stdout(Stdio::from(log))
        .stderr(Stdio::from(log_err))
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot run npm: {e}"))?;
    let line = format!("Installing Claude Code {version} with npm…");
    let tty = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let mut stderr = std::io::stderr();
    let _ = write!(stderr, "{line}");
    let _ = stderr.flush();
    let status = loop {
        tokio::select! {
            status = child.wait() => break status,
            () = tokio::time::sleep(std::time::Duration::from_secs(1)), if tty => {
                // The one line, rewritten in place with the time so far.
                let _ = write!(stderr, "\r{line} {} s", started.elapsed().as_secs());
                let _ = stderr.flush();
            }
        }
    };
    let took = started.elapsed().as_secs_f64();
    let status = status.map_err(|e| {
        let _ = writeln!(stderr);
        format!("waiting for npm: {e}")
    })?;
    if status.success() {
        if tty {
            let _ = writeln!(stderr, "\r{line} done in {took:.1} s");
        } else {
            let _ = writeln!(stderr, " done in {took:.1} s");
        }
        return Ok(());
    }
    let text = std::fs::read_to_string(&log_path).unwrap_or_default();
    let _ = writeln!(
        stderr,
        " failed after {took:.1} s; npm's output:\n{}",
        text.trim_end()
    );
    Err(format!(
        "npm install failed ({status}); its output is above and in {}",
        log_path.display()
    ))
}

/// Verifies the fresh install in `tmp` and renames it to `<home>/cli/<version>`. A previous
/// install there (with `--force`) is moved aside first and removed after: a process still
/// running its binary keeps it.
async fn place(home: &Path, root: &Path, tmp: &Path, version: &str) -> Result<PathBuf, String> {
    let bin = binary_under(tmp).ok_or_else(|| {
        format!(
            "npm finished but the native binary for {}-{} is missing under {}",
            std::env::consts::OS,
            std::env::consts::ARCH,
            tmp.display()
        )
    })?;
    let reported = version_of(&bin).await.map_err(|e| e.to_string())?;
    if reported != version {
        return Err(format!("the installed CLI reports version {reported}"));
    }
    let dest = version_dir(home, version);
    let old = root.join(format!(".old-{version}-{}", std::process::id()));
    let had_old = match std::fs::rename(&dest, &old) {
        Ok(()) => true,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
        Err(e) => return Err(format!("cannot move {} aside: {e}", dest.display())),
    };
    std::fs::rename(tmp, &dest)
        .map_err(|e| format!("cannot rename {} to {}: {e}", tmp.display(), dest.display()))?;
    if had_old {
        let _ = std::fs::remove_dir_all(&old);
    }
    let bin = binary_under(&dest).ok_or_else(|| {
        format!(
            "the binary is missing under {} after the rename",
            dest.display()
        )
    })?;
    Ok(bin)
}

/// An exclusive lock on a file, held until dropped (the descriptor's close releases it, also
/// when the process dies).
struct InstallLock {
    _file: std::fs::File,
}

impl InstallLock {
    async fn acquire(path: &Path, version: &str) -> std::io::Result<InstallLock> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)?;
        match file.try_lock() {
            Ok(()) => return Ok(InstallLock { _file: file }),
            Err(std::fs::TryLockError::WouldBlock) => {}
            Err(std::fs::TryLockError::Error(e)) => return Err(e),
        }
        eprintln!("Another claude-host is installing Claude Code {version}; waiting for it…");
        let file = tokio::task::spawn_blocking(move || file.lock().map(|()| file))
            .await
            .map_err(std::io::Error::other)??;
        Ok(InstallLock { _file: file })
    }
}
