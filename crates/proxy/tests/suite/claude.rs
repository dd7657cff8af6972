//! The real, pinned Claude Code CLI pointed at the proxy under test.

use super::*;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

/// The real CLI, hermetic, pointed at the proxy as session `session`.
pub(crate) fn cli(e: &Env, home: &std::path::Path, session: &str) -> Command {
    let mut c = Command::new(claude_host_testkit::cli::pinned_cli().unwrap());
    std::fs::create_dir_all(home.join("work")).unwrap();
    c.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("ANTHROPIC_BASE_URL", e.proxy.base_url())
        .env("ANTHROPIC_AUTH_TOKEN", e.proxy.auth_token(session))
        .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
        .current_dir(home.join("work"))
        .stdin(Stdio::null());
    c
}

pub(crate) async fn output(mut c: Command) -> std::process::Output {
    let out = tokio::task::spawn_blocking(move || c.output().unwrap())
        .await
        .unwrap();
    eprintln!(
        "--- stdout\n{}\n--- stderr\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// A CLI in stream-json mode, as claude-host drives it.
pub(crate) struct StreamJson {
    child: std::process::Child,
    lines: std::sync::mpsc::Receiver<Value>,
}

impl StreamJson {
    pub(crate) fn start(mut c: Command) -> StreamJson {
        c.args([
            "--input-format",
            "stream-json",
            "--output-format",
            "stream-json",
            "--verbose",
            "--permission-mode",
            "acceptEdits",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
        let mut child = c.spawn().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Ok(v) = serde_json::from_str::<Value>(&line)
                    && tx.send(v).is_err()
                {
                    return;
                }
            }
        });
        StreamJson { child, lines }
    }

    pub(crate) fn send(&mut self, v: Value) {
        let stdin = self.child.stdin.as_mut().unwrap();
        writeln!(stdin, "{v}").unwrap();
        stdin.flush().unwrap();
    }

    /// Waits (off the runtime) for a frame `pred` accepts.
    pub(crate) async fn wait(
        &mut self,
        what: &str,
        pred: impl Fn(&Value) -> bool + Send + 'static,
    ) -> Value {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match tokio::task::block_in_place(|| self.lines.recv_timeout(left)) {
                Ok(v) if pred(&v) => return v,
                Ok(_) => {}
                Err(e) => panic!("no {what} frame: {e}"),
            }
        }
    }
}

impl Drop for StreamJson {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub(crate) fn user_line(text: &str) -> Value {
    json!({"type": "user", "message": {"role": "user", "content": text}, "parent_tool_use_id": null, "session_id": ""})
}
