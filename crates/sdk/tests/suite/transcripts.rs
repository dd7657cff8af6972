use super::*;
use claude_host_protocol::stream_json::FrameKind;
use claude_host_sdk::transcripts::{
    delete_session, fork_session, list_sessions, read_file, read_session,
};
use claude_host_testkit::fake::{Match, Reply, Rule};
use pretty_assertions::assert_eq;
use serde_json::json;

fn rule(trigger: &str, reply: Reply) -> Rule {
    Rule {
        when: Match::LastUserContains(trigger.into()),
        reply,
        times: None,
    }
}

async fn turn(s: &mut ClaudeSession, prompt: &str) -> claude_host_protocol::stream_json::Frame {
    s.send_user(json!(prompt), None, None).await.unwrap();
    let frames = s.collect_turn().await.unwrap();
    let last = frames.last().unwrap().clone();
    assert_eq!(last.kind, FrameKind::Result);
    last
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_read_fork_resume_delete() {
    let e = env().await;
    e.fake.push(rule("alpha", Reply::text("A")));
    e.fake.push(rule("beta", Reply::text("B")));
    e.fake.push(Rule {
        when: Match::LastUserContains("what came".into()),
        reply: Reply::text("recalled"),
        times: Some(1),
    });
    let config = e.dir.path().join(".claude");
    let mut s = e.spawn(e.opts(), Recorder::with(vec![]));
    let r = turn(&mut s, "first prompt alpha").await;
    turn(&mut s, "second prompt beta").await;
    let id = r.session_id().unwrap().to_owned();
    s.close().await;

    let listed = list_sessions(&config, Some(&e.cwd())).unwrap();
    assert_eq!(listed.len(), 1);
    let info = &listed[0];
    assert_eq!(info.session_id, id);
    assert_eq!(info.summary, "first prompt alpha");
    assert_eq!(
        info.cwd.as_deref(),
        Some(std::fs::canonicalize(e.cwd()).unwrap().to_str().unwrap())
    );
    assert!(info.message_count >= 4, "{info:?}");
    assert_eq!(list_sessions(&config, None).unwrap().len(), 1);

    let t = read_session(&config, &id).unwrap();
    assert_eq!(t.skipped, 0);
    let chain = t.main_chain();
    let user_texts: Vec<String> = chain
        .iter()
        .filter(|e| e["type"] == "user")
        .filter_map(|e| e["message"]["content"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(user_texts, ["first prompt alpha", "second prompt beta"]);
    // Fork right after the first answer, then resume the fork: it knows alpha, not beta.
    let first_answer = chain
        .iter()
        .find(|e| e["type"] == "assistant")
        .and_then(|e| e["uuid"].as_str())
        .unwrap()
        .to_owned();
    let fork = fork_session(&config, &id, Some(&first_answer)).unwrap();
    assert_ne!(fork, id);
    let mut opts = e.opts();
    opts.resume = Some(fork.clone());
    let mut s = e.spawn(opts, Recorder::with(vec![]));
    let r = turn(&mut s, "what came before?").await;
    assert_eq!(r.result_text(), Some("recalled"));
    s.close().await;
    let sent = e.fake.message_requests().pop().unwrap().json().to_string();
    assert!(sent.contains("first prompt alpha"), "fork lost its prefix");
    assert!(
        !sent.contains("second prompt beta"),
        "fork kept messages after the fork point"
    );

    assert_eq!(list_sessions(&config, Some(&e.cwd())).unwrap().len(), 2);
    delete_session(&config, &fork).unwrap();
    assert!(read_session(&config, &fork).is_err());
    assert_eq!(list_sessions(&config, Some(&e.cwd())).unwrap().len(), 1);
}

#[test]
fn bad_lines_are_skipped_and_unknown_entries_kept() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("s.jsonl");
    std::fs::write(
        &p,
        concat!(
            r#"{"type":"user","uuid":"u1","parentUuid":null,"message":{"role":"user","content":"hi"}}"#, "\n",
            "{not json\n",
            r#"{"type":"brand-new-record","x":1}"#, "\n",
            r#"{"type":"assistant","uuid":"a1","parentUuid":"u1","message":{"role":"assistant","content":[{"type":"text","text":"yo"}]}}"#, "\n",
        ),
    )
    .unwrap();
    let t = read_file(&p).unwrap();
    assert_eq!(t.skipped, 1);
    assert_eq!(t.entries.len(), 3);
    assert_eq!(t.entries[1]["type"], "brand-new-record");
    let chain: Vec<&str> = t
        .main_chain()
        .iter()
        .map(|e| e["uuid"].as_str().unwrap())
        .collect();
    assert_eq!(chain, ["u1", "a1"]);
}

#[test]
fn titles_from_the_tail_win_over_the_first_prompt() {
    let dir = tempfile::tempdir().unwrap();
    let proj = dir.path().join("projects/-p");
    std::fs::create_dir_all(&proj).unwrap();
    std::fs::write(
        proj.join("11111111-1111-4111-8111-111111111111.jsonl"),
        concat!(
            r#"{"type":"user","uuid":"u1","cwd":"/p","gitBranch":"main","message":{"role":"user","content":[{"type":"text","text":"<system-reminder>r</system-reminder>"},{"type":"text","text":"fix the bug"}]}}"#, "\n",
            r#"{"type":"ai-title","aiTitle":"Bug fixing","sessionId":"x"}"#, "\n",
            r#"{"type":"custom-title","customTitle":"My session","sessionId":"x"}"#, "\n",
        ),
    )
    .unwrap();
    std::fs::write(
        proj.join("22222222-2222-4222-8222-222222222222.jsonl"),
        r#"{"type":"user","uuid":"u1","message":{"role":"user","content":"plain prompt"}}"#,
    )
    .unwrap();
    std::fs::write(
        proj.join("33333333-3333-4333-8333-333333333333.jsonl"),
        concat!(
            r#"{"type":"summary","summary":"Summarised work","leafUuid":"u1"}"#,
            "\n",
            r#"{"type":"user","uuid":"u1","message":{"role":"user","content":"plain prompt"}}"#,
            "\n",
        ),
    )
    .unwrap();
    let listed = list_sessions(dir.path(), None).unwrap();
    let by_id = |id: &str| {
        listed
            .iter()
            .find(|s| s.session_id.starts_with(id))
            .unwrap()
    };
    let a = by_id("1111");
    assert_eq!(a.summary, "My session");
    assert_eq!(a.first_prompt.as_deref(), Some("fix the bug"));
    assert_eq!(a.git_branch.as_deref(), Some("main"));
    assert_eq!(a.message_count, 1);
    assert_eq!(by_id("2222").summary, "plain prompt");
    // With no title record, an older CLI's `summary` record names the session.
    assert_eq!(by_id("3333").summary, "Summarised work");
    assert_eq!(by_id("3333").first_prompt.as_deref(), Some("plain prompt"));
}

#[test]
fn listing_reads_only_the_head_and_tail_of_a_long_transcript() {
    const WINDOW: usize = 64 * 1024;
    let dir = tempfile::tempdir().unwrap();
    let proj = dir.path().join("projects/-p");
    std::fs::create_dir_all(&proj).unwrap();
    // Filler entries that are neither messages nor titles.
    let fill = |out: &mut Vec<u8>, until: usize| {
        while out.len() < until {
            out.extend_from_slice(
                br#"{"type":"progress","data":"........................................"}"#,
            );
            out.push(b'\n');
        }
    };
    let mut head = Vec::new();
    for line in [
        r#"{"type":"summary","summary":"An old summary","leafUuid":"u0"}"#,
        r#"{"type":"user","uuid":"u1","cwd":"/p","gitBranch":"feature","message":{"role":"user","content":"the first prompt"}}"#,
        r#"{"type":"assistant","uuid":"a1","parentUuid":"u1","message":{"role":"assistant","content":[{"type":"text","text":"hi"}]}}"#,
    ] {
        head.extend_from_slice(line.as_bytes());
        head.push(b'\n');
    }
    fill(&mut head, WINDOW + 100);
    let mut tail = Vec::new();
    fill(&mut tail, WINDOW + 100);
    for line in [
        r#"{"type":"ai-title","aiTitle":"A generated title","sessionId":"x"}"#,
        r#"{"type":"custom-title","customTitle":"The user's title","sessionId":"x"}"#,
        r#"{"type":"assistant","uuid":"a2","parentUuid":"a1","message":{"role":"assistant","content":[{"type":"text","text":"bye"}]}}"#,
    ] {
        tail.extend_from_slice(line.as_bytes());
        tail.push(b'\n');
    }
    // Two transcripts alike but for their middles: thousands of messages mixed with bytes
    // that are not JSON (nor UTF-8), or filler of the same length. Listing must not tell
    // them apart: anything that read the middle would count those messages.
    let mut garbage = Vec::new();
    while garbage.len() < 2 * 1024 * 1024 {
        garbage.extend_from_slice(
            br#"{"type":"user","message":{"role":"user","content":"from the middle"}}"#,
        );
        garbage.extend_from_slice(b"\n\xff\xfe\x00 not json {\"type\":\"assistant\"\n");
    }
    let mut filler = Vec::new();
    fill(&mut filler, garbage.len() - 200);
    // A blank line evens the length out.
    filler.resize(garbage.len() - 1, b' ');
    filler.push(b'\n');
    let write = |id: &str, middle: &[u8]| {
        let path = proj.join(format!("{id}.jsonl"));
        std::fs::write(&path, [head.as_slice(), middle, tail.as_slice()].concat()).unwrap();
        path
    };
    let noisy = write("11111111-1111-4111-8111-111111111111", &garbage);
    let quiet = write("22222222-2222-4222-8222-222222222222", &filler);
    // The garbage is real: reading the whole file notices it.
    assert!(read_file(&noisy).unwrap().skipped > 1000);
    assert_eq!(read_file(&quiet).unwrap().skipped, 0);

    let listed = list_sessions(dir.path(), None).unwrap();
    assert_eq!(listed.len(), 2);
    let by_id = |id: &str| {
        listed
            .iter()
            .find(|s| s.session_id.starts_with(id))
            .unwrap()
    };
    let (a, b) = (by_id("1111"), by_id("2222"));
    assert_eq!(a.summary, "The user's title");
    assert_eq!(a.first_prompt.as_deref(), Some("the first prompt"));
    assert_eq!(a.cwd.as_deref(), Some("/p"));
    assert_eq!(a.git_branch.as_deref(), Some("feature"));
    assert_eq!(a.size, std::fs::metadata(&noisy).unwrap().len());
    assert_eq!(b.size, a.size);
    assert_eq!(
        (&b.summary, &b.first_prompt, &b.cwd, &b.git_branch),
        (&a.summary, &a.first_prompt, &a.cwd, &a.git_branch)
    );
    assert_eq!(a.message_count, b.message_count);
}

#[test]
fn a_fork_at_an_unknown_message_is_refused_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let proj = dir.path().join("projects/-p");
    std::fs::create_dir_all(&proj).unwrap();
    let id = "33333333-3333-4333-8333-333333333333";
    std::fs::write(
        proj.join(format!("{id}.jsonl")),
        concat!(
            r#"{"type":"user","uuid":"u1","parentUuid":null,"sessionId":"s","message":{"role":"user","content":"hi"}}"#, "\n",
            r#"{"type":"assistant","uuid":"a1","parentUuid":"u1","sessionId":"s","message":{"role":"assistant","content":[{"type":"text","text":"yo"}]}}"#, "\n",
            r#"{"type":"user","uuid":"u2","parentUuid":"a1","sessionId":"s","message":{"role":"user","content":"more"}}"#, "\n",
        ),
    )
    .unwrap();
    assert!(matches!(
        fork_session(dir.path(), id, Some("nope")),
        Err(claude_host_sdk::transcripts::TranscriptError::NoSuchMessage(_))
    ));
    assert_eq!(
        std::fs::read_dir(&proj).unwrap().count(),
        1,
        "a partial fork was left"
    );
    // Up to a message: the entries before it and it, remapped, then the leaf and the origin.
    let fork = fork_session(dir.path(), id, Some("a1")).unwrap();
    let t = read_session(dir.path(), &fork).unwrap();
    let types: Vec<&str> = t
        .entries
        .iter()
        .map(|e| e["type"].as_str().unwrap())
        .collect();
    assert_eq!(types, ["user", "assistant", "last-prompt", "forked-from"]);
    assert_eq!(t.entries[1]["parentUuid"], t.entries[0]["uuid"]);
    assert_eq!(t.entries[2]["leafUuid"], t.entries[1]["uuid"]);
    assert_eq!(t.entries[0]["sessionId"], fork.as_str());
    assert_eq!(t.main_chain().len(), 2);
}
