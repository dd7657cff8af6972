//! Failure cases, driven by the testkit's scripted fake CLIs.

use super::*;
use claude_host_sdk::{ControlError, SessionError};
use claude_host_testkit::fake_cli::{Scenario, write};
use serde_json::json;

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

#[tokio::test]
async fn garbage_and_oversize_lines_are_per_frame_errors() {
    let dir = tempfile::tempdir().unwrap();
    let cli = write(dir.path(), &Scenario::BadLines { oversize: 5000 }).unwrap();
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
    let pgid = s.pgid().unwrap();
    let exit = s.close().await;
    assert!(
        matches!(exit, SessionError::Exited { success: true, .. }),
        "{exit}"
    );
    assert!(group_gone(pgid).await);
}

#[tokio::test]
async fn a_crash_mid_turn_reports_the_status_and_stderr() {
    let dir = tempfile::tempdir().unwrap();
    let cli = write(
        dir.path(),
        &Scenario::CrashMidTurn {
            stderr: "fatal: out of cheese".into(),
        },
    )
    .unwrap();
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
    // Later requests fail with the same cause instead of hanging.
    let e2 = s.interrupt().await.unwrap_err();
    assert!(e2.to_string().contains("signal 11"), "{e2}");
}

#[tokio::test]
async fn exit_code_one_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let cli = write(
        dir.path(),
        &Scenario::Exit {
            code: 1,
            stderr: "bad flag".into(),
        },
    )
    .unwrap();
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
    let cli = write(dir.path(), &Scenario::Hang).unwrap();
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
    let cli = write(
        dir.path(),
        &Scenario::AskAndEcho {
            requests: vec![
                r#"{"type":"control_request","request_id":"c1","request":{"subtype":"can_use_tool","tool_name":"Bash","input":{"command":"ls"},"tool_use_id":"toolu_1"}}"#.into(),
                r#"{"type":"control_request","request_id":"c2","request":{"subtype":"brand_new_thing"}}"#.into(),
                r#"{"type":"control_request","request_id":"c3","request":{"subtype":"mcp_message","server_name":"nope","message":{"jsonrpc":"2.0","id":0,"method":"initialize"}}}"#.into(),
            ],
        },
    )
    .unwrap();
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
    let c3 = by_id("c3");
    assert_eq!(c3["response"]["subtype"], "error");
    assert!(
        c3["response"]["error"]
            .as_str()
            .unwrap()
            .contains("no in-process MCP server")
    );
}

#[tokio::test]
async fn another_cli_version_is_used_with_its_version_reported() {
    let dir = tempfile::tempdir().unwrap();
    let cli = write(
        dir.path(),
        &Scenario::Custom("echo '9.9.9 (Claude Code)'".into()),
    )
    .unwrap();
    let found = claude_host_sdk::find::locate(Some(&cli), dir.path(), false)
        .await
        .unwrap();
    assert_eq!(found.version, "9.9.9");
    assert_eq!(found.origin, claude_host_sdk::find::Origin::Explicit);
    let broken = write(
        dir.path(),
        &Scenario::Exit {
            code: 2,
            stderr: "no".into(),
        },
    )
    .unwrap();
    let err = claude_host_sdk::find::locate(Some(&broken), dir.path(), false)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("--version failed"), "{err}");
}

#[tokio::test]
async fn control_answers_arrive_while_nobody_reads_frames() {
    let dir = tempfile::tempdir().unwrap();
    let cli = write(dir.path(), &Scenario::FloodThenAnswer { frames: 3000 }).unwrap();
    let s = ClaudeSession::spawn(opts_for(cli, dir.path()), Recorder::with(vec![])).unwrap();
    let pgid = s.pgid().unwrap();
    // The CLI answers only after printing 3000 frames, which nobody reads meanwhile: the
    // answer reaches us only if the reader gets past all of them.
    let answer = s
        .request_with_timeout("mcp_status", json!({}), Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(answer, json!({"frames_before": 3000}));
    // None of the frames was lost on the way, and none is out of order.
    for n in 1..=3000 {
        let f = s.recv_frame().await.unwrap().unwrap();
        assert_eq!(f.get("n"), Some(&json!(n)));
    }
    assert!(s.try_recv_frame().is_none());
    drop(s);
    assert!(group_gone(pgid).await);
}
