//! Writes a long session for tests that run `claude-host` as a binary (the real-VS-Code
//! suite and its long-session benchmark): `long-transcript CONFIG_DIR CWD BYTES` writes a
//! generated transcript of at least BYTES (`claude_host_testkit::long_transcript`) under
//! `CONFIG_DIR/projects/`, recorded in CWD, and prints one JSON line: `{"sessionId", "path",
//! "bytes", "lines", "copies", "subagents"}`.

use anyhow::Context;
use claude_host_testkit::long_transcript;
use std::path::PathBuf;

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let usage = "usage: long-transcript CONFIG_DIR CWD BYTES";
    let config_dir = PathBuf::from(args.next().context(usage)?);
    let cwd = args.next().context(usage)?;
    let bytes: u64 = args
        .next()
        .context(usage)?
        .parse()
        .context("BYTES is a number")?;
    let g = long_transcript::generate(&config_dir, &cwd, bytes)
        .with_context(|| format!("writing a session under {}", config_dir.display()))?;
    println!(
        "{}",
        serde_json::json!({"sessionId": g.session_id, "path": g.path, "bytes": g.bytes,
            "lines": g.lines, "copies": g.copies, "subagents": g.subagents})
    );
    Ok(())
}
