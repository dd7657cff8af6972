//! What Claude changed, as VS Code sees it: `fileEdit` results whose content URIs it reads
//! with `resourceRead`, the turn's changeset, and discarding through
//! `invokeChangesetOperation`.

use super::*;
use claude_host_testkit::git;
use pretty_assertions::assert_eq;

/// Approves every confirmation of `turn` until it ends.
async fn approve_until_end(c: &mut VsCode, chat: &str, turn: &str) -> Value {
    let mut approved: Vec<String> = Vec::new();
    loop {
        let next = c
            .action("a confirmation or the turn's end", |a| {
                turn_ended(turn)(a)
                    || (a["action"]["type"] == "chat/toolCallReady"
                        && a["action"]["confirmed"].is_null()
                        && !approved
                            .iter()
                            .any(|x| a["action"]["toolCallId"] == x.as_str()))
            })
            .await;
        if turn_ended(turn)(&next) {
            return next;
        }
        let call = next["action"]["toolCallId"].as_str().unwrap().to_owned();
        let seq = c
            .dispatch(
                chat,
                json!({"type": "chat/toolCallConfirmed", "turnId": turn, "toolCallId": call,
                    "approved": true, "confirmed": "user-action", "selectedOptionId": "allow-once"}),
            )
            .await;
        assert!(c.echo(seq).await.get("rejectionReason").is_none());
        approved.push(call);
    }
}

/// The bytes behind a content URI, read as VS Code reads them.
async fn read_content(c: &mut VsCode, uri: &Value) -> Vec<u8> {
    let r = c
        .ok(
            "resourceRead",
            json!({"channel": "ahp-root://", "uri": uri, "encoding": "base64"}),
        )
        .await;
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD
        .decode(r["data"].as_str().unwrap())
        .unwrap()
}

/// Each side of a `fileEdit` read back: (file name, before bytes, after bytes).
async fn sides(c: &mut VsCode, edit: &Value) -> (String, Option<Vec<u8>>, Option<Vec<u8>>) {
    let uri = edit["after"]["uri"]
        .as_str()
        .or(edit["before"]["uri"].as_str())
        .unwrap();
    let name = uri.rsplit('/').next().unwrap().to_owned();
    let before = match edit["before"]["content"]["uri"].is_string() {
        true => Some(read_content(c, &edit["before"]["content"]["uri"]).await),
        false => None,
    };
    let after = match edit["after"]["content"]["uri"].is_string() {
        true => Some(read_content(c, &edit["after"]["content"]["uri"]).await),
        false => None,
    };
    (name, before, after)
}

fn b(s: &str) -> Option<Vec<u8>> {
    Some(s.as_bytes().to_vec())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vs_code_sees_each_edit_reads_both_sides_and_discards_from_the_turns_changeset() {
    let e = env().await;
    let work = e.work();
    std::fs::write(work.join("a.txt"), "one\ntwo\n").unwrap();
    std::fs::write(work.join("b.txt"), "keep\n").unwrap();
    git(&work, &["init", "-q"]);
    git(&work, &["add", "-A"]);
    git(&work, &["commit", "-q", "-m", "start"]);
    let path = |n: &str| work.join(n).to_str().unwrap().to_owned();
    let once = |when: Match, reply: Reply| Rule {
        when,
        reply,
        times: Some(1),
    };
    e.fake.push(once(
        Match::LastUserContains("edit the files".into()),
        Reply::tool_use(
            "Write",
            json!({"file_path": path("new.txt"), "content": "fresh\n"}),
        ),
    ));
    e.fake.push(once(
        Match::LastUserContains("File created".into()),
        Reply::tool_use(
            "Edit",
            json!({"file_path": path("a.txt"), "old_string": "two", "new_string": "TWO"}),
        ),
    ));
    e.fake.push(once(
        Match::LastUserContains("has been updated".into()),
        Reply::tool_use(
            "Bash",
            json!({"command": "sed -i s/one/ONE/ a.txt && printf 'bee\\n' > b.txt",
                "description": "Edit with sed"}),
        ),
    ));
    e.fake
        .push(once(Match::HasToolResult, Reply::text("Done.")));
    answer_always(&e, "ok");
    let (mut c, model, chat) = session_ready(&e).await;
    let session = claude_host_protocol::uri::session_of_default_chat(&chat).unwrap();
    let turn = start_turn(&mut c, &chat, "Please edit the files", &model).await;
    let end = approve_until_end(&mut c, &chat, &turn).await;
    assert_eq!(end["action"]["type"], "chat/turnComplete", "{end}");
    assert_eq!(
        std::fs::read_to_string(work.join("a.txt")).unwrap(),
        "ONE\nTWO\n"
    );

    // Every call's result carries its edits, and both sides read back as they were.
    let snap = c.ok("subscribe", json!({"channel": chat})).await;
    let parts = snap["snapshot"]["state"]["turns"][0]["responseParts"].clone();
    let mut seen = Vec::new();
    for p in parts
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["kind"] == "toolCall")
    {
        let call = &p["toolCall"];
        assert_eq!(call["status"], "completed", "{call}");
        let mut edits = Vec::new();
        for content in call["content"].as_array().unwrap() {
            if content["type"] == "fileEdit" {
                edits.push(sides(&mut c, content).await);
            }
        }
        edits.sort();
        seen.push((call["toolName"].as_str().unwrap().to_owned(), edits));
    }
    assert_eq!(
        seen,
        vec![
            (
                "Write".to_owned(),
                vec![("new.txt".to_owned(), None, b("fresh\n"))]
            ),
            (
                "Edit".to_owned(),
                vec![("a.txt".to_owned(), b("one\ntwo\n"), b("one\nTWO\n"))]
            ),
            (
                "Bash".to_owned(),
                vec![
                    ("a.txt".to_owned(), b("one\nTWO\n"), b("ONE\nTWO\n")),
                    ("b.txt".to_owned(), b("keep\n"), b("bee\n")),
                ]
            ),
        ]
    );

    // The Edit's confirmation showed its diff before it was approved.
    let ready = c
        .actions
        .iter()
        .find(|a| {
            a["action"]["type"] == "chat/toolCallReady"
                && a["action"]["confirmed"].is_null()
                && a["action"]["edits"]["items"][0]["before"].is_object()
        })
        .unwrap_or_else(|| panic!("a confirmation with edits"))
        .clone();
    let before_approval = sides(&mut c, &ready["action"]["edits"]["items"][0]).await;
    assert_eq!(
        before_approval,
        ("a.txt".to_owned(), b("one\ntwo\n"), b("one\nTWO\n"))
    );

    // The Bash call also has its output as a terminal VS Code can follow.
    let bash = parts
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["toolCall"]["toolName"] == "Bash")
        .unwrap();
    let term = bash["toolCall"]["content"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "terminal")
        .unwrap_or_else(|| panic!("a terminal result: {bash}"))
        .clone();
    assert_eq!(term["result"]["exitCode"], 0, "{term}");
    assert_eq!(term["isPty"], false);
    let t = c
        .ok("subscribe", json!({"channel": term["resource"]}))
        .await;
    assert_eq!(
        t["snapshot"]["state"]["lifecycle"]["status"], "exited",
        "{t}"
    );
    let seq = c
        .dispatch(
            term["resource"].as_str().unwrap(),
            json!({"type": "terminal/input", "data": "ls\n"}),
        )
        .await;
    assert!(
        c.echo(seq).await["rejectionReason"].is_string(),
        "read-only"
    );

    // The session lists a per-turn changeset; the turn's holds exactly its three files, two
    // edits of a.txt composed.
    let state = c.ok("subscribe", json!({"channel": session})).await;
    let catalogue = state["snapshot"]["state"]["changesets"]
        .as_array()
        .unwrap()
        .clone();
    let template = catalogue
        .iter()
        .find(|x| x["changeKind"] == "turn")
        .unwrap()["uriTemplate"]
        .as_str()
        .unwrap()
        .to_owned();
    let channel = template.replace("{turnId}", &turn);
    let cs = c.ok("subscribe", json!({"channel": channel})).await;
    let cs = &cs["snapshot"]["state"];
    assert_eq!(cs["status"], "ready", "{cs}");
    let mut files = Vec::new();
    for f in cs["files"].as_array().unwrap() {
        files.push(sides(&mut c, &f["edit"]).await);
    }
    files.sort();
    assert_eq!(
        files,
        vec![
            ("a.txt".to_owned(), b("one\ntwo\n"), b("ONE\nTWO\n")),
            ("b.txt".to_owned(), b("keep\n"), b("bee\n")),
            ("new.txt".to_owned(), None, b("fresh\n")),
        ]
    );
    let ops: Vec<&str> = cs["operations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["id"].as_str().unwrap())
        .collect();
    assert_eq!(ops, ["discard-file", "discard-all"]);

    // Discarding one file puts back exactly its bytes and leaves the others.
    let b_uri = claude_host_protocol::uri::file_uri(&work.join("b.txt"));
    let r = c
        .request(
            "invokeChangesetOperation",
            json!({"channel": channel, "operationId": "discard-file",
                "target": {"kind": "resource", "resource": b_uri}}),
        )
        .await;
    assert!(r.get("error").is_none(), "{r}");
    assert_eq!(
        std::fs::read_to_string(work.join("b.txt")).unwrap(),
        "keep\n"
    );
    assert_eq!(
        std::fs::read_to_string(work.join("a.txt")).unwrap(),
        "ONE\nTWO\n"
    );
    assert!(work.join("new.txt").exists());
    c.action("the file leaving the changeset", |a| {
        a["channel"] == channel.as_str()
            && a["action"]["type"] == "changeset/fileRemoved"
            && a["action"]["fileId"] == b_uri.as_str()
    })
    .await;

    // A later change by the user: discarding refuses, naming the file, and touches nothing.
    std::fs::write(work.join("a.txt"), "mine\n").unwrap();
    let a_uri = claude_host_protocol::uri::file_uri(&work.join("a.txt"));
    for (op, target) in [
        (
            "discard-file",
            json!({"kind": "resource", "resource": a_uri}),
        ),
        ("discard-all", Value::Null),
    ] {
        let r = c
            .request(
                "invokeChangesetOperation",
                json!({"channel": channel, "operationId": op, "target": target}),
            )
            .await;
        let msg = r["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert!(
            msg.contains("a.txt") && msg.contains("changed on disk"),
            "{r}"
        );
        assert_eq!(
            std::fs::read_to_string(work.join("a.txt")).unwrap(),
            "mine\n"
        );
        assert_eq!(
            std::fs::read_to_string(work.join("new.txt")).unwrap(),
            "fresh\n"
        );
    }

    // Bad input: an unknown operation, a file not in the changeset, a turn that does not
    // exist, another session's content.
    for (params, expect) in [
        (
            json!({"channel": channel, "operationId": "explode"}),
            "no operation explode",
        ),
        (
            json!({"channel": channel, "operationId": "discard-file",
                "target": {"kind": "resource", "resource": "file:///etc/passwd"}}),
            "not in this changeset",
        ),
        (
            json!({"channel": format!("{session}/changeset/turn/request_nope"),
                "operationId": "discard-all"}),
            "no turn request_nope",
        ),
    ] {
        let r = c.request("invokeChangesetOperation", params).await;
        let msg = r["error"]["message"].as_str().unwrap_or_default();
        assert!(msg.contains(expect), "{expect}: {r}");
    }
    let theirs = cs["files"][0]["edit"]["after"]["content"]["uri"]
        .as_str()
        .unwrap()
        .replace(
            claude_host_protocol::uri::session_uri_id(&session).unwrap(),
            &uuid::Uuid::new_v4().to_string(),
        );
    let r = c
        .request(
            "resourceRead",
            json!({"channel": "ahp-root://", "uri": theirs}),
        )
        .await;
    assert!(
        r["error"]["message"].as_str().unwrap().contains("not kept"),
        "{r}"
    );

    // Back as Claude left it, the rest of the turn is discarded: the created file goes.
    std::fs::write(work.join("a.txt"), "ONE\nTWO\n").unwrap();
    let r = c
        .request(
            "invokeChangesetOperation",
            json!({"channel": channel, "operationId": "discard-all"}),
        )
        .await;
    assert!(r.get("error").is_none(), "{r}");
    assert_eq!(
        std::fs::read_to_string(work.join("a.txt")).unwrap(),
        "one\ntwo\n"
    );
    assert!(!work.join("new.txt").exists());
    let cs = c.ok("subscribe", json!({"channel": channel})).await;
    assert_eq!(cs["snapshot"]["state"]["files"], json!([]), "{cs}");
    // The user's repository gained nothing from the tracking.
    let status = std::process::Command::new("git")
        .args(["status", "--porcelain"])
        .current_dir(&work)
        .output()
        .unwrap();
    assert_eq!(String::from_utf8(status.stdout).unwrap(), "");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_host_restart_the_edits_diffs_and_changeset_are_still_there() {
    let mut e = env_with_store().await;
    let file = e.work().join("kept.txt");
    e.fake.push(Rule {
        when: Match::LastUserContains("write it".into()),
        reply: Reply::tool_use(
            "Write",
            json!({"file_path": file.to_str().unwrap(), "content": "kept\n"}),
        ),
        times: Some(1),
    });
    answer_always(&e, "Written.");
    let client_id = uuid::Uuid::new_v4().to_string();
    let (mut c, _) = vs_code(&e, &client_id).await;
    let model = a_model(&mut c).await;
    let session = format!("claude:/{}", uuid::Uuid::new_v4());
    create(&mut c, &e, &session).await;
    let chat = claude_host_protocol::uri::default_chat_uri(&session);
    let turn = start_turn(&mut c, &chat, "Please write it", &model).await;
    approve_until_end(&mut c, &chat, &turn).await;
    drop(c);

    e.restart().await;

    let (mut c, _) = vs_code(&e, &client_id).await;
    let snap = c.ok("subscribe", json!({"channel": chat})).await;
    let restored = &snap["snapshot"]["state"]["turns"][0];
    let call = restored["responseParts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["kind"] == "toolCall")
        .unwrap();
    let edit = call["toolCall"]["content"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "fileEdit")
        .unwrap_or_else(|| panic!("the restored call keeps its edit: {call}"))
        .clone();
    assert_eq!(
        sides(&mut c, &edit).await,
        ("kept.txt".to_owned(), None, b("kept\n"))
    );
    let channel = format!(
        "{session}/changeset/turn/{}",
        restored["id"].as_str().unwrap()
    );
    let cs = c.ok("subscribe", json!({"channel": channel})).await;
    assert_eq!(
        cs["snapshot"]["state"]["files"].as_array().map(Vec::len),
        Some(1),
        "{cs}"
    );
}
