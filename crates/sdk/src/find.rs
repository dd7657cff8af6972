//! Finding and installing the pinned Claude Code CLI.

use std::os::fd::AsFd;
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
    #[error("installing Claude Code {PINNED_VERSION}: {0}")]
    Install(String),
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
    home.join("cli").join(PINNED_VERSION)
}

/// The native binary inside a pinned install. The platform package's binary is used directly
/// so an install whose postinstall did not run (`--ignore-scripts`) still works.
pub fn pinned_binary(home: &Path) -> Option<PathBuf> {
    let dir = install_dir(home).join("node_modules/@anthropic-ai");
    let native = dir.join(platform_package()?).join("claude");
    native.is_file().then_some(native)
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

/// Installs `@anthropic-ai/claude-code@<pinned>` with npm into the data directory, showing
/// npm's progress on stderr, and returns the verified native binary.
pub async fn install_pinned(home: &Path, force: bool) -> Result<PathBuf, FindError> {
    if !force
        && let Some(p) = pinned_binary(home)
        && version_of(&p).await.is_ok_and(|v| v == PINNED_VERSION)
    {
        return Ok(p);
    }
    let dir = install_dir(home);
    std::fs::create_dir_all(&dir)
        .map_err(|e| FindError::Install(format!("cannot create {}: {e}", dir.display())))?;
    let npm = which("npm").ok_or_else(|| {
        FindError::Install("npm was not found on PATH; install Node.js (which ships npm) to let claude-host install Claude Code".into())
    })?;
    eprintln!(
        "Installing @anthropic-ai/claude-code@{PINNED_VERSION} into {} …",
        dir.display()
    );
    // npm's summary goes to stdout, which is a protocol's channel under `acp` (and any
    // stdio server): all of npm's output goes to our stderr.
    let npm_out = std::io::stderr()
        .as_fd()
        .try_clone_to_owned()
        .map_err(|e| FindError::Install(format!("cannot hand npm our stderr: {e}")))?;
    let status = tokio::process::Command::new(npm)
        .args([
            "install",
            "--no-audit",
            "--no-fund",
            "--loglevel=http",
            "--prefix",
        ])
        .arg(&dir)
        .arg(format!("@anthropic-ai/claude-code@{PINNED_VERSION}"))
        .stdin(Stdio::null())
        .stdout(Stdio::from(npm_out))
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .status()
        .await
        .map_err(|e| FindError::Install(format!("cannot run npm: {e}")))?;
    if !status.success() {
        return Err(FindError::Install(format!("npm install failed ({status})")));
    }
    let bin = pinned_binary(home).ok_or_else(|| {
        FindError::Install(format!(
            "npm finished but the native binary for {}-{} is missing under {}",
            std::env::consts::OS,
            std::env::consts::ARCH,
            dir.display()
        ))
    })?;
    let version = version_of(&bin).await?;
    if version != PINNED_VERSION {
        return Err(FindError::Install(format!(
            "installed CLI reports version {version}"
        )));
    }
    eprintln!("Installed Claude Code {version} at {}", bin.display());
    Ok(bin)
}
