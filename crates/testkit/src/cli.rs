//! The pinned, real Claude Code CLI for tests.

use anyhow::{Context, bail};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The Claude Code version the tests run.
pub const PINNED_CLI_VERSION: &str = "2.1.330";

fn platform_package() -> anyhow::Result<&'static str> {
    Ok(match (std::env::consts::OS, std::env::consts::ARCH) {
        ("linux", "x86_64") => "claude-code-linux-x64",
        ("linux", "aarch64") => "claude-code-linux-arm64",
        ("macos", "aarch64") => "claude-code-darwin-arm64",
        ("macos", "x86_64") => "claude-code-darwin-x64",
        (os, arch) => bail!("no Claude Code build for {os}-{arch}"),
    })
}

/// Where tests keep the pinned install (shared by every test process on the machine).
pub fn install_dir() -> anyhow::Result<PathBuf> {
    let home = std::env::home_dir().context("no home directory")?;
    Ok(home
        .join(".cache/claude-host-test/cli")
        .join(PINNED_CLI_VERSION))
}

/// Path to the pinned real Claude Code CLI, installing it once per machine if needed:
/// `CLAUDE_HOST_TEST_CLI` if set, else the install under `~/.cache/claude-host-test`, which is
/// created with npm under an exclusive lock so concurrent test processes install once.
pub fn pinned_cli() -> anyhow::Result<PathBuf> {
    if let Some(p) = std::env::var_os("CLAUDE_HOST_TEST_CLI").filter(|p| !p.is_empty()) {
        let p = PathBuf::from(p);
        check_version(&p)?;
        return Ok(p);
    }
    let dir = install_dir()?;
    let bin = dir
        .join("node_modules/@anthropic-ai")
        .join(platform_package()?)
        .join("claude");
    if check_version(&bin).is_ok() {
        return Ok(bin);
    }
    std::fs::create_dir_all(&dir)?;
    let _lock = FileLock::acquire(&dir.with_extension("lock"))?;
    if check_version(&bin).is_ok() {
        return Ok(bin);
    }
    let status = Command::new("npm")
        .args(["install", "--no-audit", "--no-fund", "--prefix"])
        .arg(&dir)
        .arg(format!("@anthropic-ai/claude-code@{PINNED_CLI_VERSION}"))
        .status()
        .context("cannot run npm (needed to install the pinned Claude Code CLI)")?;
    if !status.success() {
        bail!("npm install of Claude Code {PINNED_CLI_VERSION} failed: {status}");
    }
    check_version(&bin)?;
    Ok(bin)
}

fn check_version(bin: &Path) -> anyhow::Result<()> {
    let out = Command::new(bin)
        .arg("--version")
        .output()
        .with_context(|| format!("cannot run {}", bin.display()))?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !text.starts_with(PINNED_CLI_VERSION) {
        bail!(
            "{} reports {text:?}, expected {PINNED_CLI_VERSION}",
            bin.display()
        );
    }
    Ok(())
}

struct FileLock(std::fs::File);

impl FileLock {
    #[allow(unsafe_code)]
    fn acquire(path: &Path) -> anyhow::Result<FileLock> {
        use std::os::fd::AsRawFd;
        let f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)?;
        // SAFETY: flock on a descriptor we own for the lifetime of the returned guard.
        let rc = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) };
        if rc != 0 {
            bail!(
                "cannot lock {}: {}",
                path.display(),
                std::io::Error::last_os_error()
            );
        }
        Ok(FileLock(f))
    }
}

impl Drop for FileLock {
    #[allow(unsafe_code)]
    fn drop(&mut self) {
        use std::os::fd::AsRawFd;
        // SAFETY: unlocking the descriptor this guard owns.
        unsafe {
            libc::flock(self.0.as_raw_fd(), libc::LOCK_UN);
        }
    }
}

/// The minimal environment to run the CLI hermetically against a proxy.
pub fn cli_env(base_url: &str, auth_token: &str, home: &Path) -> Vec<(String, String)> {
    vec![
        ("HOME".into(), home.display().to_string()),
        (
            "CLAUDE_CONFIG_DIR".into(),
            home.join(".claude").display().to_string(),
        ),
        ("PATH".into(), std::env::var("PATH").unwrap_or_default()),
        ("ANTHROPIC_BASE_URL".into(), base_url.into()),
        ("ANTHROPIC_AUTH_TOKEN".into(), auth_token.into()),
        (
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC".into(),
            "1".into(),
        ),
        ("LANG".into(), "C.UTF-8".into()),
    ]
}

/// Runs the user's own `claude -p PROMPT --output-format json` (the pinned CLI) through a
/// proxy, with a hermetic environment (`HOME` = `home`, transcripts under `config_dir`), and
/// returns the session id it reports. Panics with the CLI's stderr if it fails.
pub fn plain_claude_p(
    prompt: &str,
    extra_args: &[&str],
    home: &std::path::Path,
    config_dir: &std::path::Path,
    cwd: &std::path::Path,
    base_url: &str,
    auth_token: &str,
) -> anyhow::Result<String> {
    let out = std::process::Command::new(pinned_cli()?)
        .args(["-p", prompt, "--output-format", "json"])
        .args(extra_args)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("CLAUDE_CONFIG_DIR", config_dir)
        .env("ANTHROPIC_BASE_URL", base_url)
        .env("ANTHROPIC_AUTH_TOKEN", auth_token)
        .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
        .current_dir(cwd)
        .stdin(std::process::Stdio::null())
        .output()?;
    anyhow::ensure!(
        out.status.success(),
        "claude -p failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    v["session_id"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| anyhow::anyhow!("no session_id in {v}"))
}

/// Whether a process group has exited, waiting up to 5 s (polled: the kernel offers no
/// event for another process's group).
pub async fn group_gone(pgid: i32) -> bool {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        #[allow(unsafe_code)]
        // SAFETY: signal 0 only checks for existence.
        let alive = unsafe { libc::kill(-pgid, 0) } == 0;
        if !alive {
            return true;
        }
        if tokio::time::Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}
