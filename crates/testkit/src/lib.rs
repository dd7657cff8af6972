//! Test support for claude-host: a scripted fake GitHub + Copilot server that speaks the real
//! wire formats ([`fake`]; its OpenAI endpoints' side in [`openai`]), and a helper that provides the pinned real Claude Code CLI
//! ([`cli`]). The model is the only fake: everything else in the tests is real.

pub mod cli;
pub mod copilot_rules;
pub mod fake;
pub mod fake_cli;
pub mod long_transcript;
pub mod openai;
mod openai_check;
mod openai_render;
pub mod pg;
mod replies;

pub use replies::{Block, Gate, Match, Reply, Rule};

/// Runs git in `dir` with a fixed identity (so commits work on a machine with no git config);
/// panics if it fails.
pub fn git(dir: &std::path::Path, args: &[&str]) {
    let ok = std::process::Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_AUTHOR_NAME", "claude-host tests")
        .env("GIT_AUTHOR_EMAIL", "tests@claude-host.invalid")
        .env("GIT_COMMITTER_NAME", "claude-host tests")
        .env("GIT_COMMITTER_EMAIL", "tests@claude-host.invalid")
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "git {args:?} failed in {}", dir.display());
}

/// The tiny stdio MCP server the tests ship (Node, one tool `shout`; `--crash` exits at start).
pub fn tiny_mcp_server() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/tiny-mcp.js")
}

/// The text of a chat turn (AHP `Turn` as JSON): its markdown response parts, joined.
pub fn turn_markdown(turn: &serde_json::Value) -> String {
    turn["responseParts"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["kind"] == "markdown")
        .filter_map(|p| p["content"].as_str())
        .collect()
}

/// An HTTP client for tests: no system proxy (tests talk to 127.0.0.1), TLS from rustls's
/// *ring* provider, which reqwest needs installed before it builds a client.
pub fn http_client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    // A panic here is the calling test's failure, which is what a test helper should give.
    #[allow(clippy::expect_used)]
    reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("a client with no TLS settings of its own builds once a provider is installed")
}
