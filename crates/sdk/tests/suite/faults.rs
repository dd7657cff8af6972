//! Failure cases, driven by scripted fake CLIs (shell scripts speaking stream-json).

use super::*;
use claude_host_sdk::{ControlError, SessionError};
use serde_json::json;
use std::os::unix::fs::PermissionsExt;

fn fake_cli(dir: &std::path::Path, body: &str) -> PathBuf {
    let path = dir.join(format!("fake-claude-{}", uuid::Uuid::new_v4().simple()));
    std::fs::write(&path, format!("#!/bin/bash\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

fn opts_for(cli: PathBuf, dir: &std::path::Path) -> SessionOptions {
    let mut o = SessionOptions::new(
        cli,
        dir.to_owned(),
        "http://127.0.0.1:9".into(),
        "n.s".into(),
    );
    o.control_timeout = Duration::from_millis(500);
    o.max_line_bytes = 1024;
    o
}

const RESULT: &str =
    r#"{"type":"result","subtype":"success","is_error":false,"result":"ok","session_id":"s"}"#;

#[tokio::test]
async fn garbage_and_oversize_lines_are_per_frame_errors() {
    let dir = tempfile::tempdir().unwrap();
    let big = "x".repeat(5000);
    let cli = fake_cli(
        dir.path(),
        &format!(
            "read line\necho 'not json at all'\necho '{{\"type\":\"assistant\",\"pad\":\"{big}\"}}'\necho '[1,2]'\necho '{RESULT}'\nread line"
        ),
    );
    let mut s = ClaudeSession::spawn(opts_for(cli, dir.path()), Recorder::with(vec![])).unwrap();
    s.send_user(json!("hi"), None, None).await.unwrap();
    let mut seen = Vec::new();
    for _ in 0..3 {
        seen.push(s.next_frame().await);
    }
    assert!(
        matches!(seen[0], Some(Err(SessionError::BadFrame { .. }))),
        "{seen:?}"
    );
    assert!(
        matches!(
            seen[1],
            Some(Err(SessionError::OversizeFrame { limit: 1024 }))
        ),
        "{seen:?}"
    );
    assert!(
        matches!(seen[2], Some(Err(SessionError::BadFrame { .. }))),
        "{seen:?}"
    );
    let f = s.next_frame().await.unwrap().unwrap();
    assert_eq!(f.result_text(), Some("ok"));
}

#[tokio::test]
async fn a_crash_mid_turn_reports_the_status_and_stderr() {
    let dir = tempfile::tempdir().unwrap();
    let cli = fake_cli(
        dir.path(),
        r#"read line
echo '{"type":"system","subtype":"init","session_id":"s"}'
echo 'fatal: out of cheese' >&2
kill -SEGV $$"#,
    );
    let mut s = ClaudeSession::spawn(opts_for(cli, dir.path()), Recorder::with(vec![])).unwrap();
    s.send_user(json!("hi"), None, None).await.unwrap();
    let err = s.collect_turn().await.unwrap_err();
    match &err {
        SessionError::Exited {
            status,
            success,
            stderr_tail,
        } => {
            assert_eq!(status, "signal 11");
            assert!(!success);
            assert_eq!(
                stderr_tail.last().map(String::as_str),
                Some("fatal: out of cheese")
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(err.to_string().contains("out of cheese"));
}

#[tokio::test]
async fn exit_code_one_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let cli = fake_cli(dir.path(), "echo 'bad flag' >&2\nexit 1");
    let mut s = ClaudeSession::spawn(opts_for(cli, dir.path()), Recorder::with(vec![])).unwrap();
    match s.next_frame().await {
        Some(Err(SessionError::Exited {
            status,
            success: false,
            stderr_tail,
        })) => {
            assert_eq!(status, "exit code 1");
            assert_eq!(stderr_tail, ["bad flag"]);
        }
        other => panic!("{other:?}"),
    }
    let err = s.initialize(None, json!({})).await.unwrap_err();
    assert!(matches!(err, ControlError::Closed { .. }), "{err}");
}

#[tokio::test]
async fn a_cli_that_never_answers_initialize_times_out() {
    let dir = tempfile::tempdir().unwrap();
    let cli = fake_cli(dir.path(), "while read line; do :; done");
    let s = ClaudeSession::spawn(opts_for(cli, dir.path()), Recorder::with(vec![])).unwrap();
    let pgid = s.pgid().unwrap();
    let err = s.initialize(None, json!({})).await.unwrap_err();
    assert!(matches!(err, ControlError::Timeout { .. }), "{err}");
    drop(s);
    assert!(group_gone(pgid).await, "hung CLI survived the drop");
}

#[tokio::test]
async fn control_requests_from_the_cli_get_answers_and_errors() {
    let dir = tempfile::tempdir().unwrap();
    // Asks for a permission and sends an unknown request, then echoes our answers to stderr
    // and exits once both answers arrived.
    let cli = fake_cli(
        dir.path(),
        r#"echo '{"type":"control_request","request_id":"c1","request":{"subtype":"can_use_tool","tool_name":"Bash","input":{"command":"ls"},"tool_use_id":"toolu_1"}}'
echo '{"type":"control_request","request_id":"c2","request":{"subtype":"brand_new_thing"}}'
read a; read b
echo "{\"type\":\"result\",\"subtype\":\"success\",\"result\":$(printf '%s' "[$a,$b]" | sed 's/"/\\"/g; s/^/"/; s/$/"/')}""#,
    );
    let cb = Recorder::with(vec![Decision::Deny("nope")]);
    let mut s = ClaudeSession::spawn(opts_for(cli, dir.path()), cb.clone()).unwrap();
    let f = s.next_frame().await.unwrap().unwrap();
    let answers: Value = serde_json::from_str(f.result_text().unwrap()).unwrap();
    let by_id = |id: &str| {
        answers
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["response"]["request_id"] == id)
            .unwrap()
            .clone()
    };
    let c1 = by_id("c1");
    assert_eq!(c1["response"]["subtype"], "success");
    assert_eq!(
        c1["response"]["response"],
        json!({"behavior": "deny", "message": "nope", "interrupt": false, "toolUseID": "toolu_1"})
    );
    let c2 = by_id("c2");
    assert_eq!(c2["response"]["subtype"], "error");
    assert_eq!(
        c2["response"]["error"],
        "Unsupported control request subtype: brand_new_thing"
    );
}
