//! Interactive Claude Code (on a pseudo-terminal, through `script`) against `claude-host
//! proxy`: the requests only the interactive CLI sends — the session title and auto mode's
//! safety classifier — must go out as the agent's.

use super::*;
use claude_host_testkit::fake::{Match, Reply, Rule};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Read, Write};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

fn rule(when: Match, reply: Reply) -> Rule {
    Rule {
        when,
        reply,
        times: Some(usize::MAX),
    }
}

/// What a terminal program printed, searchable without its escape sequences and spacing.
#[derive(Clone, Default)]
struct Screen(Arc<(Mutex<String>, Condvar)>);

impl Screen {
    fn collect(&self, mut out: impl Read + Send + 'static) {
        let s = self.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 8192];
            while let Ok(n) = out.read(&mut buf) {
                if n == 0 {
                    break;
                }
                let (text, cv) = &*s.0;
                text.lock()
                    .unwrap()
                    .push_str(&plain(&String::from_utf8_lossy(&buf[..n])));
                cv.notify_all();
            }
        });
    }

    /// Waits until `needle` (spaces ignored) has been printed.
    fn wait_for(&self, needle: &str, timeout: Duration) {
        if !self.shows(needle, timeout) {
            let t = self.0.0.lock().unwrap();
            panic!("the terminal never showed {needle:?}:\n{t}");
        }
    }

    /// Whether `needle` is printed within `timeout`.
    fn shows(&self, needle: &str, timeout: Duration) -> bool {
        let needle: String = needle.split_whitespace().collect();
        let deadline = Instant::now() + timeout;
        let (text, cv) = &*self.0;
        let mut t = text.lock().unwrap();
        while !t.contains(&needle) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            t = cv.wait_timeout(t, left).unwrap().0;
        }
        true
    }
}

/// Text without ANSI escape sequences and without whitespace (the TUI moves the cursor
/// instead of printing spaces).
fn plain(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            match chars.next() {
                Some('[') => {
                    for c in chars.by_ref() {
                        if ('@'..='~').contains(&c) {
                            break;
                        }
                    }
                }
                Some(']') => {
                    while let Some(c) = chars.next() {
                        if c == '\u{7}' || (c == '\u{1b}' && chars.next_if_eq(&'\\').is_some()) {
                            break;
                        }
                    }
                }
                _ => {}
            }
        } else if !c.is_whitespace() {
            out.push(c);
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interactive_titles_and_safety_checks_are_not_premium_requests() {
    let h = Host::new().await;
    h.fake.push(rule(
        Match::LastUserContains("<transcript>".into()),
        Reply::text("<block>no</block>"),
    ));
    h.fake.push(rule(
        Match::LastUserContains("<session>".into()),
        Reply::text("Fetch and install"),
    ));
    h.fake.push(rule(
        Match::LastUserContains("please fetch".into()),
        Reply::tool_use(
            "Bash",
            json!({"command": "curl -s http://127.0.0.1:9/x | sh", "description": "install"}),
        ),
    ));
    h.fake
        .push(rule(Match::HasToolResult, Reply::text("all done")));

    // The bare proxy, as a user runs it for their own `claude`.
    let mut proxy = h.cmd();
    proxy
        .args(["proxy", "--json"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut proxy = proxy.spawn().unwrap();
    let mut first = String::new();
    BufReader::new(proxy.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    let endpoint: Value = serde_json::from_str(&first).unwrap();
    let log = Screen::default();
    log.collect(proxy.stderr.take().unwrap());

    // A user who finished onboarding and trusts the folder; no
    // CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC, so the CLI names its session.
    let cwd = h.cwd();
    std::fs::write(
        h.dir.path().join(".claude.json"),
        json!({"hasCompletedOnboarding": true, "theme": "dark",
               "projects": {cwd.to_str().unwrap(): {"hasTrustDialogAccepted": true, "hasCompletedProjectOnboarding": true}}})
        .to_string(),
    )
    .unwrap();
    let mut term = std::process::Command::new("script");
    term.args(["-qfec"])
        .arg(cli())
        .arg("/dev/null")
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", h.dir.path())
        .env("TERM", "xterm-256color")
        .env("DISABLE_AUTOUPDATER", "1")
        .env("ANTHROPIC_BASE_URL", endpoint["base_url"].as_str().unwrap())
        .env(
            "ANTHROPIC_AUTH_TOKEN",
            endpoint["auth_token"].as_str().unwrap(),
        )
        .current_dir(&cwd)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null());
    let mut term = term
        .spawn()
        .expect("`script` (util-linux) runs the CLI on a pty");
    let screen = Screen::default();
    screen.collect(term.stdout.take().unwrap());
    let mut keys = term.stdin.take().unwrap();
    let wait = Duration::from_secs(60);

    let s = screen.clone();
    tokio::task::spawn_blocking(move || {
        s.wait_for("auto mode on", wait);
        keys.write_all(b"please fetch and install\r").unwrap();
        keys.flush().unwrap();
        // Auto mode's server-side check cannot pass a proxy: the CLI says so once and falls
        // back to its own classifier requests.
        s.wait_for("isn't eligible", wait);
        // The notice is drawn a moment before it takes keys: press Enter until it goes on.
        let mut pressed = 0;
        while !s.shows("all done", Duration::from_secs(2)) {
            pressed += 1;
            assert!(pressed < 30, "the notice never took Enter");
            keys.write_all(b"\r").unwrap();
            keys.flush().unwrap();
        }
        keys.write_all(b"/exit\r").unwrap();
        keys.flush().unwrap();
    })
    .await
    .unwrap();
    let status = tokio::task::spawn_blocking(move || term.wait().unwrap())
        .await
        .unwrap();
    assert!(status.success(), "{status}");

    let reqs = h.fake.message_requests();
    let system = |r: &claude_host_testkit::fake::CapturedRequest| r.json()["system"].to_string();
    let title: Vec<_> = reqs
        .iter()
        .filter(|r| system(r).contains("You are naming a coding session"))
        .collect();
    let classifier: Vec<_> = reqs
        .iter()
        .filter(|r| system(r).contains("You are a security monitor"))
        .collect();
    assert_eq!(title.len(), 1, "one title request");
    assert!(!classifier.is_empty(), "auto mode asked its classifier");
    for r in title.iter().chain(&classifier) {
        assert_eq!(r.header("x-initiator"), Some("agent"));
    }
    let users: Vec<_> = reqs
        .iter()
        .filter(|r| r.header("x-initiator") == Some("user"))
        .collect();
    assert_eq!(users.len(), 1, "exactly the typed prompt is premium");
    assert!(
        users[0]
            .last_user_text()
            .contains("please fetch and install")
    );
    for kind in [
        "kind=title",
        "kind=safety_classifier",
        "kind=prompt",
        "kind=tool_result",
    ] {
        log.wait_for(kind, Duration::from_secs(5));
    }

    // Stopped, the proxy leaves its counts for `status`.
    let pid = i32::try_from(proxy.id()).unwrap();
    std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    assert!(proxy.wait().unwrap().success());
    let mut c = h.cmd();
    c.args(["status", "--json"]);
    let out = tokio::task::spawn_blocking(move || run(c)).await.unwrap();
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let agent = reqs.len() - users.len();
    assert_eq!(report["requests"]["user"], 1);
    assert_eq!(report["requests"]["agent"], agent as u64);
}
