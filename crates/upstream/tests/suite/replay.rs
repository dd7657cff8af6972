use claude_host_protocol::messages::Initiator;
use claude_host_testkit::fake::{FakeUpstream, Match, Reply, Rule};
use claude_host_upstream::copilot::{
    ClientIdentity, CopilotEndpoints, CopilotOptions, CopilotUpstream,
};
use claude_host_upstream::record::RecordingUpstream;
use claude_host_upstream::replay::{ReplayUpstream, parse_entries};
use claude_host_upstream::{MessagesCall, Upstream, UpstreamError, http_client};
use futures::StreamExt;
use serde_json::{Value, json};
use std::sync::Arc;

fn call(prompt: &str, stream: bool) -> MessagesCall {
    let body = json!({"model": "claude-opus-5.5", "messages": [{"role": "user", "content": prompt}], "stream": stream});
    MessagesCall {
        body: body.to_string().into(),
        model: "claude-opus-5.5".into(),
        api: claude_host_upstream::ModelApi::Messages,
        stream,
        initiator: Initiator::User,
        kind: claude_host_protocol::request_kind::RequestKind::Prompt,
        vision: false,
        anthropic_version: Some("2023-06-01".into()),
        anthropic_beta: None,
        client_user_agent: None,
        session_id: "s".into(),
    }
}

async fn body_of(up: &dyn Upstream, c: MessagesCall) -> (u16, String) {
    let resp = up.messages(c).await.unwrap();
    let status = resp.status;
    let mut out = Vec::new();
    let mut body = resp.body;
    while let Some(chunk) = body.next().await {
        out.extend_from_slice(&chunk.unwrap());
    }
    (status, String::from_utf8(out).unwrap())
}

#[tokio::test]
async fn entries_answer_in_order_or_by_match_once_or_repeatedly() {
    let text = r#"
# a comment
{"match":"second","body":{"type":"message","content":[{"type":"text","text":"B"}]}}
{"body":{"type":"message","content":[{"type":"text","text":"A"}]}}
{"status":429,"headers":{"retry-after":"2"},"body":{"type":"error","error":{"type":"rate_limit_error","message":"x"}},"match":"limit"}
{"body":{"type":"message","content":[{"type":"text","text":"R"}]},"repeat":true}
"#;
    let up = ReplayUpstream::from_entries(parse_entries(text, "t").unwrap());
    assert!(body_of(&up, call("first", false)).await.1.contains("\"A\""));
    assert!(
        body_of(&up, call("the second one", false))
            .await
            .1
            .contains("\"B\"")
    );
    let resp = up.messages(call("limit", false)).await.unwrap();
    assert_eq!((resp.status, resp.header("retry-after")), (429, Some("2")));
    assert!(body_of(&up, call("x", false)).await.1.contains("\"R\""));
    assert!(body_of(&up, call("y", false)).await.1.contains("\"R\""));
}

#[tokio::test]
async fn exhaustion_and_bad_files_are_clear_errors() {
    let up = ReplayUpstream::from_entries(vec![]);
    let err = up.messages(call("anything", true)).await.unwrap_err();
    assert!(matches!(err, UpstreamError::Replay(_)));
    assert!(err.to_string().contains("anything"));
    let err = parse_entries("{\"status\":200}\n", "f.jsonl")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("f.jsonl, line 1") && err.contains("events"),
        "{err}"
    );
    let err = parse_entries("\n\nnot json\n", "f.jsonl")
        .unwrap_err()
        .to_string();
    assert!(err.contains("line 3"), "{err}");
}

#[tokio::test]
async fn record_then_replay_reproduces_the_stream() {
    let fake = FakeUpstream::start().await.unwrap();
    fake.push(Rule {
        when: Match::Always,
        reply: Reply::tool_use("Bash", json!({"command": "echo hi"})),
        times: None,
    });
    let copilot: Arc<dyn Upstream> = Arc::new(CopilotUpstream::new(
        http_client().unwrap(),
        "gho_fake_github_token".into(),
        CopilotEndpoints::single_host(&fake.url()),
        ClientIdentity::default(),
        CopilotOptions::default(),
    ));
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("rec.jsonl");
    let rec = RecordingUpstream::new(copilot, &file).unwrap();
    let (status, live) = body_of(&rec, call("run it", true)).await;
    assert_eq!(status, 200);
    let recorded = std::fs::read_to_string(&file).unwrap();
    assert!(
        !recorded.contains("gho_") && !recorded.to_lowercase().contains("bearer"),
        "secret in recording"
    );
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&file).unwrap().permissions().mode() & 0o777,
        0o600
    );

    let replay = ReplayUpstream::load(&file).unwrap();
    let (status, replayed) = body_of(&replay, call("run it", true)).await;
    assert_eq!(status, 200);
    let events = |s: &str| -> Vec<(String, Value)> {
        let mut p = claude_host_protocol::sse::EventParser::new();
        p.push(s.as_bytes());
        std::iter::from_fn(|| p.next_event())
            .map(|e| (e.name, serde_json::from_str(&e.data).unwrap()))
            .collect()
    };
    assert_eq!(events(&live), events(&replayed));

    // The same recording answers a non-streaming request with the assembled message.
    let replay = ReplayUpstream::load(&file).unwrap();
    let (_, json_body) = body_of(&replay, call("run it", false)).await;
    let msg: Value = serde_json::from_str(&json_body).unwrap();
    assert_eq!(msg["content"][0]["type"], "tool_use");
    assert_eq!(msg["content"][0]["input"], json!({"command": "echo hi"}));
    assert_eq!(msg["stop_reason"], "tool_use");
}

#[tokio::test]
async fn anthropic_upstream_passes_the_key_and_the_ids_through() {
    use claude_host_testkit::fake::FAKE_ANTHROPIC_KEY;
    use claude_host_upstream::anthropic::AnthropicUpstream;
    let fake = FakeUpstream::start().await.unwrap();
    fake.push(Rule {
        when: Match::Always,
        reply: Reply::text("from anthropic"),
        times: None,
    });
    let up = AnthropicUpstream::new(
        http_client().unwrap(),
        &format!("{}/", fake.url()),
        FAKE_ANTHROPIC_KEY.into(),
    );
    let catalog = up.catalog().await.unwrap();
    assert!(!catalog.strict, "Anthropic ids are forwarded as sent");
    assert_eq!(catalog.models[0].sdk_id, "claude-opus-5-5-20261101");
    let mut c = call("hello", true);
    c.model = "claude-opus-5-5".into();
    c.anthropic_beta = Some("claude-code-20250219,effort-2025-11-24".into());
    let (status, body) = body_of(&up, c).await;
    assert_eq!(status, 200);
    assert!(body.contains("event: message_stop"));
    let req = fake.message_requests().pop().unwrap();
    assert_eq!(req.header("x-api-key"), Some(FAKE_ANTHROPIC_KEY));
    assert_eq!(req.header("authorization"), None);
    assert_eq!(
        req.header("anthropic-beta"),
        Some("claude-code-20250219,effort-2025-11-24"),
        "no filtering for Anthropic"
    );
    assert_eq!(req.header("anthropic-version"), Some("2023-06-01"));
    // The model list is asked for once, not before every request (each resolves its model
    // against it).
    let again = up.catalog().await.unwrap();
    assert!(std::sync::Arc::ptr_eq(&catalog, &again));
    let model_lists = fake
        .requests()
        .iter()
        .filter(|r| r.method == "GET" && r.path.starts_with("/v1/models"))
        .count();
    assert_eq!(model_lists, 1);
    // A wrong key is the upstream's 401, passed through.
    let bad = AnthropicUpstream::new(http_client().unwrap(), &fake.url(), "sk-wrong".into());
    assert_eq!(bad.messages(call("x", true)).await.unwrap().status, 401);
    assert!(matches!(
        bad.catalog().await,
        Err(UpstreamError::CredentialRejected(_))
    ));
}
