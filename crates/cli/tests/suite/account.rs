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
    // Other vendors' chat models follow the Claude ones; embeddings and hidden models do not.
    assert!(ids.contains(&"gpt-5.4"), "{ids:?}");
    assert!(
        !ids.iter()
            .any(|i| i.starts_with("text-embedding") || i.starts_with("claude-hidden")),
        "{ids:?}"
    );

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_cli_is_installed_from_npm_then_reused() {
    let h = Host::new().await;
    let replay = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/hello.replay.jsonl"
    );
    let path = std::env::var("PATH").unwrap();
    // PATH keeps npm and node but no `claude`.
    let path: Vec<&str> = path
        .split(':')
        .filter(|d| !std::path::Path::new(d).join("claude").exists())
        .collect();
    let cmd = |args: &[&str]| {
        let mut c = h.bare_cmd();
        c.env_remove("CLAUDE_HOST_CLAUDE_PATH")
            .env("PATH", path.join(":"))
            .args(args);
        // npm needs the machine's network settings, and its cache keeps this fast.
        for (k, v) in std::env::vars() {
            let k_lower = k.to_ascii_lowercase();
            if k_lower.starts_with("npm_config_")
                || k_lower.ends_with("_proxy")
                || matches!(
                    k.as_str(),
                    "NODE_EXTRA_CA_CERTS" | "SSL_CERT_FILE" | "SSL_CERT_DIR"
                )
            {
                c.env(k, v);
            }
        }
        if let Some(home) = std::env::home_dir() {
            c.env("npm_config_cache", home.join(".npm"));
        }
        c
    };
    let out = run(cmd(&[
        "--upstream",
        &format!("replay:{replay}"),
        "claude",
        "-p",
        "say hello",
    ]));
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("installing the pinned version 2.1.330"));
    assert!(stdout(&out).contains("Hello from the claude-host replay upstream!"));
    let bin = h
        .home()
        .join("cli/2.1.330/node_modules/@anthropic-ai/claude-code-linux-x64/claude");
    assert!(bin.is_file());

    let out = run(cmd(&["install-cli"]));
    assert!(out.status.success());
    assert_eq!(stdout(&out).trim(), bin.display().to_string());
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("Installing"),
        "reinstalled needlessly"
    );

    let out = run(cmd(&["--upstream", &format!("replay:{replay}"), "doctor"]));
    assert!(
        stdout(&out).contains("2.1.330") && stdout(&out).contains("pinned install"),
        "{}",
        stdout(&out)
    );
    // The build's optional parts, as this test binary's features have them.
    let postgres = if cfg!(feature = "postgres") {
        "PostgreSQL yes"
    } else {
        "PostgreSQL no (feature `postgres`)"
    };
    let otlp = if cfg!(feature = "otlp") {
        "OTLP metrics export yes"
    } else {
        "OTLP metrics export no (feature `otlp`)"
    };
    assert!(
        stdout(&out).contains(&format!(
            "Optional parts of this build: {postgres}, {otlp}\n"
        )),
        "{}",
        stdout(&out)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn login_refuses_a_data_folder_it_cannot_write_before_the_device_flow() {
    let h = Host::new().await;
    // A folder below a file cannot be created, whoever runs the test.
    let file = h.dir.path().join("a-file");
    std::fs::write(&file, "x").unwrap();
    let out = run({
        let mut c = h.bare_cmd();
        c.env("CLAUDE_HOST_HOME", file.join("home")).arg("login");
        c
    });
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cannot write") && err.contains("CLAUDE_HOST_HOME"),
        "{err}"
    );
    assert!(!err.contains("ABCD-1234"), "no code was shown: {err}");
    assert!(
        h.fake
            .requests()
            .iter()
            .all(|r| r.path != "/login/device/code"),
        "the device flow never started"
    );
}
