use super::*;
use claude_host_testkit::fake::{FakeConfig, FakeUpstream};
use pretty_assertions::assert_eq;
use serde_json::Value;
use std::os::unix::fs::PermissionsExt;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn login_status_models_logout() {
    let fake = FakeUpstream::start_with(FakeConfig {
        device_flow_pending_polls: 1,
        ..FakeConfig::default()
    })
    .await
    .unwrap();
    let h = Host::on(fake);
    let out = run({
        let mut c = h.bare_cmd();
        c.arg("login");
        c
    });
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("ABCD-1234") || err.contains("enter the code"),
        "{err}"
    );
    assert!(stdout(&out).contains("Signed in as octocat"));
    let cred = h.home().join("credentials.json");
    assert_eq!(
        std::fs::metadata(&cred).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("gho_"),
        "token printed"
    );

    let out = run({
        let mut c = h.bare_cmd();
        c.args(["status", "--json"]);
        c
    });
    assert!(out.status.success());
    let s: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(s["signed_in"], true);
    assert_eq!(s["login"], "octocat");
    assert_eq!(s["copilot_plan"], "business");
    assert_eq!(s["copilot_token"]["valid"], true);
    assert!(s["copilot_token"]["expires_in_secs"].as_i64().unwrap() > 0);
    assert!(s["quota_snapshots"]["premium_interactions"].is_object());
    assert!(!s.to_string().contains("gho_"));

    let out = run({
        let mut c = h.bare_cmd();
        c.args(["models", "--json"]);
        c
    });
    assert!(out.status.success());
    let m: Value = serde_json::from_slice(&out.stdout).unwrap();
    let ids: Vec<&str> = m["models"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids[0], "claude-opus-5-5");
    assert_eq!(m["models"][0]["default"], true);
    assert!(!ids.iter().any(|i| i.starts_with("gpt")));

    let out = run({
        let mut c = h.bare_cmd();
        c.arg("doctor");
        c
    });
    assert!(out.status.success());
    let text = stdout(&out);
    assert!(text.contains("ok   Claude Code CLI: 2.1.330"), "{text}");
    assert!(!text.contains("FAIL"), "{text}");

    let out = run({
        let mut c = h.bare_cmd();
        c.arg("logout");
        c
    });
    assert!(out.status.success());
    assert!(!cred.exists());
    let out = run({
        let mut c = h.bare_cmd();
        c.arg("status");
        c
    });
    assert_eq!(out.status.code(), Some(1));
    assert!(stdout(&out).contains("Not signed in"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_that_need_credentials_say_how_to_get_them() {
    let h = Host::new().await;
    let out = run({
        let mut c = h.bare_cmd();
        c.args(["claude", "-p", "hi"]);
        c
    });
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("claude-host login"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_cli_and_no_install_names_install_cli() {
    let h = Host::new().await;
    let out = run({
        let mut c = h.cmd();
        c.env_remove("CLAUDE_HOST_CLAUDE_PATH")
            .env("PATH", "/usr/bin:/bin")
            .args(["--no-install", "claude", "-p", "hi"]);
        c
    });
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("claude-host install-cli"), "{err}");
}
