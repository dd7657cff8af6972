//! Finding and installing the pinned Claude Code CLI.

use anyhow::{Context as _, bail};
use std::path::{Path, PathBuf};
use std::process::Stdio;

/// The Claude Code version claude-host is built and tested against.
pub(crate) const PINNED_VERSION: &str = "2.1.330";

/// How a CLI was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Origin {
    Explicit,
    Pinned,
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
pub(crate) struct FoundCli {
    pub path: PathBuf,
    pub version: String,
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

/// Where `install-cli` puts the pinned version.
pub(crate) fn install_dir(home: &Path) -> PathBuf {
    home.join("cli").join(PINNED_VERSION)
}

/// The native binary inside a pinned install. The platform package's binary is used directly
/// so an install whose postinstall did not run (`--ignore-scripts`) still works.
pub(crate) fn pinned_binary(home: &Path) -> Option<PathBuf> {
    let dir = install_dir(home).join("node_modules/@anthropic-ai");
    let native = dir.join(platform_package()?).join("claude");
    native.is_file().then_some(native)
}

/// `<path> --version`, first word (`2.1.330 (Claude Code)` → `2.1.330`).
pub(crate) async fn version_of(path: &Path) -> anyhow::Result<String> {
    let out = tokio::process::Command::new(path)
        .arg("--version")
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .with_context(|| format!("cannot run {}", path.display()))?;
    if !out.status.success() {
        bail!(
            "{} --version failed ({}): {}",
            path.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let text = String::from_utf8_lossy(&out.stdout);
    text.split_whitespace()
        .next()
        .map(str::to_owned)
        .with_context(|| format!("{} --version printed nothing", path.display()))
}

/// Finds the CLI: explicit path, then the pinned install, then `claude` on PATH. With
/// `install`, installs the pinned version when none is found.
pub(crate) async fn locate(
    explicit: Option<&Path>,
    home: &Path,
    install: bool,
) -> anyhow::Result<FoundCli> {
    let candidate = if let Some(p) = explicit {
        Some((p.to_owned(), Origin::Explicit))
    } else if let Some(p) = pinned_binary(home) {
        Some((p, Origin::Pinned))
    } else {
        which("claude").map(|p| (p, Origin::Path))
    };
    let (path, origin) = match candidate {
        Some(c) => c,
        None if install => {
            eprintln!("Claude Code CLI not found; installing the pinned version {PINNED_VERSION}…");
            (install_pinned(home, false).await?, Origin::Pinned)
        }
        None => bail!(
            "Claude Code CLI not found (looked at --claude-path, {}, and PATH); run `claude-host install-cli`",
            install_dir(home).display()
        ),
    };
    let version = version_of(&path).await?;
    if version != PINNED_VERSION {
        tracing::warn!(
            path = %path.display(),
            %version,
            pinned = PINNED_VERSION,
            "using a Claude Code version other than the pinned one"
        );
    }
    Ok(FoundCli {
        path,
        version,
        origin,
    })
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    p.metadata()
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// Installs `@anthropic-ai/claude-code@<pinned>` with npm into the data directory, showing
/// npm's progress on stderr, and returns the verified native binary.
pub(crate) async fn install_pinned(home: &Path, force: bool) -> anyhow::Result<PathBuf> {
    if !force
        && let Some(p) = pinned_binary(home)
        && version_of(&p).await.is_ok_and(|v| v == PINNED_VERSION)
    {
        return Ok(p);
    }
    let dir = install_dir(home);
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let npm = which("npm").context(
        "npm was not found on PATH; install Node.js (which ships npm) to let claude-host install Claude Code",
    )?;
    eprintln!(
        "Installing @anthropic-ai/claude-code@{PINNED_VERSION} into {} …",
        dir.display()
    );
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
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .status()
        .await
        .context("cannot run npm")?;
    if !status.success() {
        bail!("npm install failed ({status})");
    }
    let bin = pinned_binary(home).with_context(|| {
        format!(
            "npm finished but the native binary for this platform ({}-{}) is missing under {}",
            std::env::consts::OS,
            std::env::consts::ARCH,
            dir.display()
        )
    })?;
    let version = version_of(&bin).await?;
    if version != PINNED_VERSION {
        bail!("installed CLI reports version {version}, expected {PINNED_VERSION}");
    }
    eprintln!("Installed Claude Code {version} at {}", bin.display());
    Ok(bin)
}

fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| is_executable(p))
}
