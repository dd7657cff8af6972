mod account;
mod acp;
mod completions;
mod config;
#[cfg(feature = "postgres")]
mod durable;
mod e2e;
mod install;
mod interactive;
mod long_sessions;
mod models;
#[cfg(feature = "postgres")]
mod partition;
#[cfg(feature = "postgres")]
mod relay;
mod serve;
mod ws;

use claude_host_testkit::fake::FakeUpstream;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

pub(crate) struct Host {
    pub fake: FakeUpstream,
    pub dir: tempfile::TempDir,
}

impl Host {
    pub async fn new() -> Host {
        Host::on(FakeUpstream::start().await.unwrap())
    }

    pub fn on(fake: FakeUpstream) -> Host {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("work")).unwrap();
        Host { fake, dir }
    }

    pub fn home(&self) -> PathBuf {
        self.dir.path().join("claude-host-home")
    }

    pub fn cwd(&self) -> PathBuf {
        self.dir.path().join("work")
    }

    /// `claude-host` with a hermetic environment pointed at the fake, signed in via GH_TOKEN.
    pub fn cmd(&self) -> Command {
        let mut c = self.bare_cmd();
        c.env("GH_TOKEN", "gho_fake_github_token");
        c
    }

    /// As `cmd`, without any credential.
    pub fn bare_cmd(&self) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_claude-host"));
        c.env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", self.dir.path())
            .env("LANG", "C.UTF-8")
            .env("CLAUDE_HOST_HOME", self.home())
            .env("CLAUDE_HOST_GITHUB_URL", self.fake.url())
            .env("CLAUDE_HOST_GITHUB_API_URL", self.fake.url())
            .env("CLAUDE_HOST_CLAUDE_PATH", cli())
            .env("CLAUDE_HOST_LOG", "info")
            .current_dir(self.cwd())
            .stdin(Stdio::null());
        c
    }
}

pub(crate) fn cli() -> PathBuf {
    claude_host_testkit::cli::pinned_cli().unwrap()
}

pub(crate) fn run(mut c: Command) -> Output {
    let out = c.output().unwrap();
    eprintln!(
        "--- stdout\n{}\n--- stderr\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

pub(crate) fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub(crate) fn log_of(home: &Path) -> String {
    std::fs::read_to_string(home.join("logs/claude-host.log")).unwrap_or_default()
}

/// Polls `f` until it holds (every 50 ms, up to a minute).
pub(crate) async fn until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !f() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting: {what}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}
