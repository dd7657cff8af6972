//! Customizations as VS Code sees them: the project's `CLAUDE.md`, agents, skills, commands,
//! hooks and MCP servers in `SessionState.customizations` with live MCP states; plugins the
//! window publishes, copied through `resourceList` / `resourceRead`; toggles that take effect
//! on the next turn; `/` and `@` completions; a custom agent picked for a turn.

use super::*;
use claude_host_protocol::uri::file_uri;
use pretty_assertions::assert_eq;

/// A project with one of everything, and a stdio MCP server that works and one that crashes.
fn project(work: &std::path::Path) {
    let w = |rel: &str, text: &str| {
        let p = work.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    };
    w(
        "CLAUDE.md",
        "# Rules\nAlways answer in PROJECT-RULE-TEXT style.\n",
    );
    w(
        ".claude/agents/reviewer.md",
        "---\nname: reviewer\ndescription: Reviews code for bugs\ntools: Read, Grep\n---\nYou are REVIEWER-AGENT-PROMPT.\n",
    );
    w(
        ".claude/skills/deploy/SKILL.md",
        "---\nname: deploy\ndescription: Deploys the app\n---\nRun the deploy.\n",
    );
    w(
        ".claude/commands/release.md",
        "---\ndescription: Cut a release\nargument-hint: [version]\n---\nMake release $ARGUMENTS\n",
    );
    w("src/lib.rs", "pub fn f() {}\n");
    w("src/main.rs", "fn main() {}\n");
    let server = claude_host_testkit::tiny_mcp_server();
    let server = server.to_str().unwrap();
    w(
        ".mcp.json",
        &json!({"mcpServers": {
            "tiny": {"command": "node", "args": [server]},
            "crashy": {"command": "node", "args": [server, "--crash"]}}})
        .to_string(),
    );
    w(
        ".claude/settings.json",
        &json!({"enableAllProjectMcpServers": true,
            "hooks": {"PostToolUse": [{"matcher": "Write",
                "hooks": [{"type": "command", "command": "echo written"}]}]}})
        .to_string(),
    );
}

const GOOD: &str = "file:///home/me/.vscode/plugins/good";
const BAD: &str = "file:///home/me/.vscode/plugins/bad";
const HALF: &str = "file:///home/me/.vscode/plugins/half";

/// The window's plugins: a good one with a skill, one with a malformed manifest, and one with
/// a file it cannot read.
fn plugins(c: &mut VsCode) -> Value {
    let mut put = |uri: String, text: &str| {
        c.files.insert(uri, text.as_bytes().to_vec());
    };
    put(
        format!("{GOOD}/.claude-plugin/plugin.json"),
        r#"{"name": "goodplug", "version": "1.2.0"}"#,
    );
    put(
        format!("{GOOD}/skills/greet/SKILL.md"),
        "---\nname: greet\ndescription: Greets warmly\n---\nSay hello.\n",
    );
    put(
        format!("{BAD}/.claude-plugin/plugin.json"),
        r#"{"name": "badplug", "#,
    );
    put(format!("{HALF}/README.md"), "half\n");
    c.unreadable.push(format!("{HALF}/secret.md"));
    json!([
        {"type": "plugin", "id": "p-good", "uri": GOOD, "name": "Good", "enabled": true, "nonce": "n1"},
        {"type": "plugin", "id": "p-bad", "uri": BAD, "name": "Bad", "enabled": true, "nonce": "n1"},
        {"type": "plugin", "id": "p-half", "uri": HALF, "name": "Half", "enabled": true, "nonce": "n1"}])
}

/// `createSession` with the window's plugins, then its subscriptions.
async fn create_with_plugins(c: &mut VsCode, e: &Env, session: &str, plugins: Value) {
    let work = file_uri(&e.work());
    c.ok(
        "createSession",
        json!({"channel": session, "provider": "claude", "workingDirectories": [work],
            "config": {"isolation": "folder", "autoApprove": "default"},
            "activeClient": {"clientId": c.client_id, "tools": [], "customizations": plugins}}),
    )
    .await;
    c.ok("subscribe", json!({"channel": session})).await;
    let chat = claude_host_protocol::uri::default_chat_uri(session);
    c.ok("subscribe", json!({"channel": chat})).await;
}

/// The entry `id` of the session's customizations (top level or child), from the server's
/// state.
async fn entry(e: &Env, session: &str, id: &str) -> Value {
    let state = serde_json::to_value(e.server_session_state(session).await).unwrap();
    for c in state["customizations"].as_array().unwrap() {
        if c["id"] == id {
            return c.clone();
        }
        for ch in c["children"].as_array().into_iter().flatten() {
            if ch["id"] == id {
                return ch.clone();
            }
        }
    }
    panic!("no customization {id} in {state:#}");
}

/// Waits for an action on the session that satisfies `pred` about the entry `id` (a
/// `customizationsChanged` listing it, or a state change of it).
async fn until_entry(c: &mut VsCode, what: &str, id: &str, pred: impl Fn(&Value) -> bool) {
    c.action(what, |a| {
        let act = &a["action"];
        match act["type"].as_str() {
            Some("session/customizationsChanged") => act["customizations"]
                .as_array()
                .into_iter()
                .flatten()
                .flat_map(|c| {
                    std::iter::once(c).chain(c["children"].as_array().into_iter().flatten())
                })
                .any(|c| c["id"] == id && pred(c)),
            Some("session/mcpServerStateChanged") => {
                act["id"] == id && pred(&json!({"id": id, "state": act["state"]}))
            }
            _ => false,
        }
    })
    .await;
}

fn state_is(kind: &'static str) -> impl Fn(&Value) -> bool {
    move |c| c["state"]["kind"] == kind
}

/// The text of the last model request (everything Claude Code sent).
fn last_request(e: &Env) -> String {
    e.fake.message_requests().pop().unwrap().json().to_string()
}

/// The last model request: its tool names, and the text of the messages it added to the
/// conversation since the request before it.
fn last_turn_news(e: &Env) -> (Vec<String>, String) {
    let all = e.fake.message_requests();
    let [.., before, last] = all.as_slice() else {
        panic!("two requests");
    };
    let (before, last) = (before.json(), last.json());
    let seen = before["messages"].as_array().unwrap().len();
    let tools = last["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap_or_default().to_owned())
        .collect();
    let news = Value::Array(last["messages"].as_array().unwrap()[seen..].to_vec()).to_string();
    (tools, news)
}

async fn run_turn(c: &mut VsCode, chat: &str, model: &str, message: Value) {
    let mut message = message;
    message["model"] = json!({"id": model});
    message["origin"] = json!({"kind": "user"});
    let turn = start_turn_with(c, chat, message).await;
    let end = c.action("the turn's end", turn_ended(&turn)).await;
    assert_eq!(end["action"]["type"], "chat/turnComplete", "{end}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_projects_customizations_and_the_windows_plugins_show_toggle_and_complete() {
    let e = env().await;
    answer_always(&e, "Done.");
    project(&e.work());
    // The user's own agent: every session has it, so the agent lists it too.
    let user_agent = e.dir.path().join(".claude/agents/helper.md");
    std::fs::create_dir_all(user_agent.parent().unwrap()).unwrap();
    std::fs::write(&user_agent, "---\ndescription: Helps\n---\nHelp.\n").unwrap();
    let (mut c, _) = vs_code(&e, &uuid::Uuid::new_v4().to_string()).await;
    let model = a_model(&mut c).await;
    let root = c.ok("subscribe", json!({"channel": "ahp-root://"})).await;
    let listed = &root["snapshot"]["state"]["agents"][0]["customizations"];
    assert_eq!(listed[0]["id"], "user:agents", "{listed}");
    assert_eq!(listed[0]["children"][0]["name"], "helper");
    let session = format!("claude:/{}", uuid::Uuid::new_v4());
    let chat = claude_host_protocol::uri::default_chat_uri(&session);
    let published = plugins(&mut c);
    create_with_plugins(&mut c, &e, &session, published).await;

    // The window's plugins are copied: the good one loads, the others fail, each with why.
    until_entry(&mut c, "the good plugin loaded", "p-good", |p| {
        p["load"]["kind"] == "loaded"
    })
    .await;
    until_entry(&mut c, "the bad plugin failed", "p-bad", |p| {
        p["load"]["kind"] == "error"
    })
    .await;
    until_entry(&mut c, "the half plugin failed", "p-half", |p| {
        p["load"]["kind"] == "error"
    })
    .await;
    let good = entry(&e, &session, "p-good").await;
    assert_eq!(good["clientId"], c.client_id.as_str());
    assert_eq!(good["version"], "1.2.0");
    assert_eq!(good["children"][0]["type"], "skill");
    assert_eq!(good["children"][0]["name"], "goodplug:greet");
    let bad = entry(&e, &session, "p-bad").await;
    assert!(
        bad["load"]["message"]
            .as_str()
            .unwrap()
            .contains("not valid JSON"),
        "{bad}"
    );
    let half = entry(&e, &session, "p-half").await;
    let why = half["load"]["message"].as_str().unwrap();
    assert!(
        why.contains("secret.md") && why.contains("permission denied"),
        "{half}"
    );
    // Every file of the good one was asked for, through the window.
    assert!(
        c.notes
            .iter()
            .any(|n| n["method"] == "resourceList" && n["params"]["uri"] == GOOD)
    );

    // The project's own, each in its container.
    assert_eq!(
        entry(&e, &session, "project:agent:reviewer").await["description"],
        "Reviews code for bugs"
    );
    assert_eq!(
        entry(&e, &session, "project:skill:deploy").await["type"],
        "skill"
    );
    assert_eq!(
        entry(&e, &session, "project:command:release").await["type"],
        "prompt"
    );
    let rule = format!("rule:{}", e.work().join("CLAUDE.md").display());
    assert_eq!(entry(&e, &session, &rule).await["type"], "rule");
    let state = serde_json::to_value(e.server_session_state(&session).await).unwrap();
    let hooks = state["customizations"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == "project:hooks")
        .expect("the project's hooks");
    assert!(
        hooks["children"][0]["name"]
            .as_str()
            .unwrap()
            .contains("PostToolUse (Write): echo written"),
        "{hooks}"
    );

    // `/` asks the CLI (started with the plugin); skills carry their file, commands their
    // hint.
    let complete = |text: &str| {
        json!({"kind": "userMessage", "channel": session, "text": text,
            "offset": text.chars().count()})
    };
    let found = c.ok("completions", complete("/goodplug:gr")).await;
    let greet = &found["items"][0];
    assert_eq!(greet["insertText"], "/goodplug:greet ", "{found}");
    let uri = greet["attachment"]["_meta"]["uri"].as_str().unwrap();
    assert!(uri.ends_with("/skills/greet/SKILL.md"), "{greet}");
    let re = c.ok("completions", complete("/re")).await;
    let release = re["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["insertText"] == "/release ")
        .unwrap_or_else(|| panic!("release among {re}"));
    assert_eq!(release["attachment"]["_meta"]["command"], "release");
    assert_eq!(release["attachment"]["_meta"]["argumentHint"], "version");
    assert!(
        re["items"]
            .as_array()
            .unwrap()
            .iter()
            .all(|i| i["insertText"].as_str().unwrap().starts_with("/re"))
    );
    let at = c.ok("completions", complete("see @src/")).await;
    let files: Vec<&str> = at["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["insertText"].as_str().unwrap())
        .collect();
    assert!(
        files.contains(&"@src/lib.rs") && files.contains(&"@src/main.rs"),
        "{at}"
    );

    // The MCP servers come up: one ready, the crashing one in error.
    until_entry(&mut c, "tiny ready", "mcp:tiny", state_is("ready")).await;
    until_entry(&mut c, "crashy failed", "mcp:crashy", state_is("error")).await;
    let crashy = entry(&e, &session, "mcp:crashy").await;
    assert!(
        !crashy["state"]["error"]["message"]
            .as_str()
            .unwrap()
            .is_empty()
    );

    // A turn: Claude Code has the plugin's skill, the project's rule and the server's tool.
    run_turn(&mut c, &chat, &model, json!({"text": "hello"})).await;
    let sent = last_request(&e);
    for expected in ["goodplug:greet", "PROJECT-RULE-TEXT", "mcp__tiny__shout"] {
        assert!(sent.contains(expected), "{expected} in {sent}");
    }

    // Turned off for this session: the next request has none of its tools.
    let echo = c
        .dispatch_echo(
            &session,
            json!({"type": "session/customizationToggled", "id": "mcp:tiny",
                "enablement": [{"kind": "session", "enabled": false}]}),
        )
        .await;
    assert!(echo.get("rejectionReason").is_none(), "{echo}");
    until_entry(&mut c, "tiny stopped", "mcp:tiny", state_is("stopped")).await;
    run_turn(&mut c, &chat, &model, json!({"text": "again"})).await;
    // Its tool is withdrawn: not among the tools, and Claude Code tells the model so.
    let (tools, news) = last_turn_news(&e);
    assert!(
        tools.iter().all(|t| !t.starts_with("mcp__tiny")),
        "{tools:?}"
    );
    let withdrawn = news
        .split("no longer available")
        .nth(1)
        .unwrap_or_else(|| panic!("a withdrawal in {news}"));
    assert!(withdrawn.contains("mcp__tiny__shout"), "{news}");
    assert_eq!(
        entry(&e, &session, "mcp:tiny").await["enablement"],
        json!([{"kind": "session", "enabled": false}])
    );

    // And on again.
    let echo = c
        .dispatch_echo(
            &session,
            json!({"type": "session/customizationToggled", "id": "mcp:tiny", "enablement": []}),
        )
        .await;
    assert!(echo.get("rejectionReason").is_none(), "{echo}");
    c.actions.clear();
    until_entry(&mut c, "tiny ready again", "mcp:tiny", state_is("ready")).await;
    run_turn(&mut c, &chat, &model, json!({"text": "once more"})).await;
    let (_, news) = last_turn_news(&e);
    assert!(
        news.contains("mcp__tiny__shout") && !news.contains("no longer available"),
        "offered again: {news}"
    );

    // The window changes its plugin (a new nonce): copied again, with what it has now.
    c.files.insert(
        format!("{GOOD}/skills/wave/SKILL.md"),
        b"---\nname: wave\ndescription: Waves\n---\nWave.\n".to_vec(),
    );
    let republished = json!({"clientId": c.client_id, "tools": [], "customizations": [
        {"type": "plugin", "id": "p-good", "uri": GOOD, "name": "Good", "enabled": true, "nonce": "n2"}]});
    let echo = c
        .dispatch_echo(
            &session,
            json!({"type": "session/activeClientSet", "activeClient": republished}),
        )
        .await;
    assert!(echo.get("rejectionReason").is_none(), "{echo}");
    until_entry(&mut c, "the plugin copied again", "p-good", |p| {
        p["children"]
            .as_array()
            .is_some_and(|ch| ch.iter().any(|x| x["name"] == "goodplug:wave"))
    })
    .await;
    run_turn(&mut c, &chat, &model, json!({"text": "wave?"})).await;
    assert!(last_request(&e).contains("goodplug:wave"));
    // The plugins it no longer publishes are gone.
    let state = serde_json::to_value(e.server_session_state(&session).await).unwrap();
    let ids: Vec<&str> = state["customizations"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["id"].as_str())
        .collect();
    assert!(
        ids.contains(&"p-good") && !ids.contains(&"p-bad") && !ids.contains(&"p-half"),
        "{ids:?}"
    );

    // Stopped and started from the window: the same, without a decision kept.
    c.actions.clear();
    let echo = c
        .dispatch_echo(
            &session,
            json!({"type": "session/mcpServerStopRequested", "id": "mcp:tiny"}),
        )
        .await;
    assert!(echo.get("rejectionReason").is_none(), "{echo}");
    run_turn(&mut c, &chat, &model, json!({"text": "stopped?"})).await;
    let (_, news) = last_turn_news(&e);
    assert!(news.contains("no longer available"), "{news}");
    assert_eq!(
        entry(&e, &session, "mcp:tiny").await["state"]["kind"],
        "stopped"
    );
    let echo = c
        .dispatch_echo(
            &session,
            json!({"type": "session/mcpServerStartRequested", "id": "mcp:tiny"}),
        )
        .await;
    assert!(echo.get("rejectionReason").is_none(), "{echo}");
    until_entry(
        &mut c,
        "tiny ready after a start",
        "mcp:tiny",
        state_is("ready"),
    )
    .await;
    let echo = c
        .dispatch_echo(
            &session,
            json!({"type": "session/mcpServerStopRequested", "id": "mcp:nothing"}),
        )
        .await;
    assert!(echo["rejectionReason"].is_string(), "{echo}");

    // One hook cannot be turned off alone: refused with the reason, nothing changes.
    let hook = hooks["children"][0]["id"].as_str().unwrap().to_owned();
    let echo = c
        .dispatch_echo(
            &session,
            json!({"type": "session/customizationToggled", "id": hook,
                "enablement": [{"kind": "session", "enabled": false}]}),
        )
        .await;
    assert!(
        echo["rejectionReason"]
            .as_str()
            .is_some_and(|r| r.contains("hooks")),
        "{echo}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_custom_agent_picked_in_the_window_runs_the_turn() {
    let e = env().await;
    answer_always(&e, "Reviewed.");
    project(&e.work());
    let (mut c, model, chat) = session_ready(&e).await;
    let agent = file_uri(&e.work().join(".claude/agents/reviewer.md"));
    run_turn(
        &mut c,
        &chat,
        &model,
        json!({"text": "look at this", "agent": {"uri": agent}}),
    )
    .await;
    let request = e.fake.message_requests().pop().unwrap().json();
    let system = request["system"].to_string();
    assert!(system.contains("REVIEWER-AGENT-PROMPT"), "{system}");
    let names = |r: &Value| -> Vec<String> {
        r["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_owned())
            .collect()
    };
    let tools = names(&request);
    assert!(
        tools.contains(&"Read".to_owned()) && !tools.contains(&"Bash".to_owned()),
        "the agent's tools only: {tools:?}"
    );
    // The next turn without one has Claude Code's own tools again.
    run_turn(&mut c, &chat, &model, json!({"text": "and now?"})).await;
    let request = e.fake.message_requests().pop().unwrap().json();
    assert!(names(&request).contains(&"Bash".to_owned()), "{request}");
    // An agent the session does not have is refused.
    let echo = c
        .dispatch_echo(
            &chat,
            json!({"type": "chat/turnStarted", "turnId": request_id(),
                "startedAt": "2026-05-01T10:01:00.000Z", "message": {"text": "x", "origin": {"kind": "user"},
                    "agent": {"uri": "file:///nowhere/agent.md"}, "model": {"id": model}}}),
        )
        .await;
    assert!(
        echo["rejectionReason"]
            .as_str()
            .is_some_and(|r| r.contains("no agent")),
        "{echo}"
    );
}
