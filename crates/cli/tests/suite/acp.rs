//! `claude-host acp` as an editor runs it: a subprocess on pipes, driven by the official
//! `agent-client-protocol` crate's client side (and by raw lines where a real client could not
//! send what is tested), with the real CLI and the fake upstream.

use super::*;
use agent_client_protocol::schema::ProtocolVersion;
use agent_client_protocol::v1::schema::{
    CancelNotification, ClientCapabilities, CloseSessionRequest, ContentBlock,
    CreateElicitationRequest, CreateElicitationResponse, ElicitationAcceptAction,
    ElicitationAction, ElicitationCapabilities, ElicitationContentValue,
    ElicitationFormCapabilities, ElicitationUrlCapabilities, InitializeRequest,
    ListSessionsRequest, LoadSessionRequest, NewSessionRequest, PermissionOptionKind,
    PromptRequest, RequestPermissionOutcome, RequestPermissionRequest, RequestPermissionResponse,
    SelectedPermissionOutcome, SessionNotification, SessionUpdate, StopReason, TextContent,
};
use agent_client_protocol::v1::{ConnectionTo, Responder};
use agent_client_protocol::{Agent, ByteStreams, Client};
use claude_host_testkit::fake::{Match, Reply, Rule};
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio_util::compat::{TokioAsyncReadCompatExt, TokioAsyncWriteCompatExt};

const WAIT: Duration = Duration::from_secs(60);

fn rule(when: Match, reply: Reply) -> Rule {
    Rule {
        when,
        reply,
        times: None,
    }
}

/// `claude-host acp` on pipes (stderr shows in the test's output).
fn spawn_acp(c: Command) -> tokio::process::Child {
    let mut c = tokio::process::Command::from(c);
    c.arg("acp")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true);
    c.spawn().unwrap()
}

/// Every `session/update` the client received, and the permission requests it answered.
#[derive(Clone, Default)]
struct Seen {
    updates: Arc<Mutex<Vec<SessionNotification>>>,
    permissions: Arc<Mutex<Vec<RequestPermissionRequest>>>,
    elicitations: Arc<Mutex<Vec<CreateElicitationRequest>>>,
    changed: Arc<tokio::sync::Notify>,
}

impl Seen {
    fn updates(&self) -> Vec<SessionUpdate> {
        self.updates
            .lock()
            .unwrap()
            .iter()
            .map(|n| n.update.clone())
            .collect()
    }

    fn clear(&self) {
        self.updates.lock().unwrap().clear();
    }

    /// Waits until some update satisfies `pred`.
    async fn wait_for(&self, what: &str, pred: impl Fn(&SessionUpdate) -> bool) {
        let found = tokio::time::timeout(WAIT, async {
            loop {
                let notified = self.changed.notified();
                if self.updates().iter().any(&pred) {
                    return;
                }
                notified.await;
            }
        })
        .await;
        assert!(found.is_ok(), "no {what}; got {:#?}", self.updates());
    }
}

/// Runs `body` as an ACP client of `child`; permission requests are answered with `answer`
/// (an option id), elicitations accepted.
async fn as_client<T: Send + 'static>(
    child: &mut tokio::process::Child,
    seen: Seen,
    answer: &'static str,
    body: impl AsyncFnOnce(ConnectionTo<Agent>) -> T,
) -> T {
    let stdin = child.stdin.take().unwrap();
    let stdout = child.stdout.take().unwrap();
    let transport = ByteStreams::new(stdin.compat_write(), stdout.compat());
    let (s1, s2, s3) = (seen.clone(), seen.clone(), seen.clone());
    Client
        .v1()
        .on_receive_notification(
            async move |n: SessionNotification, _cx: ConnectionTo<Agent>| {
                s1.updates.lock().unwrap().push(n);
                s1.changed.notify_waiters();
                Ok(())
            },
            agent_client_protocol::on_receive_notification!(),
        )
        .on_receive_request(
            async move |r: RequestPermissionRequest,
                        responder: Responder<RequestPermissionResponse>,
                        _cx: ConnectionTo<Agent>| {
                // The option asked for, else the first "allow once" (a question's first choice).
                let pick = r
                    .options
                    .iter()
                    .find(|o| &*o.option_id.0 == answer)
                    .or_else(|| {
                        r.options
                            .iter()
                            .find(|o| o.kind == PermissionOptionKind::AllowOnce)
                    })
                    .map(|o| o.option_id.clone())
                    .unwrap();
                s2.permissions.lock().unwrap().push(r);
                s2.changed.notify_waiters();
                responder.respond(RequestPermissionResponse::new(
                    RequestPermissionOutcome::Selected(SelectedPermissionOutcome::new(pick)),
                ))
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |r: CreateElicitationRequest,
                        responder: Responder<CreateElicitationResponse>,
                        _cx: ConnectionTo<Agent>| {
                let content = form_answers(&r);
                s3.elicitations.lock().unwrap().push(r);
                responder.respond(CreateElicitationResponse::new(ElicitationAction::Accept(
                    ElicitationAcceptAction::new().content(content),
                )))
            },
            agent_client_protocol::on_receive_request!(),
        )
        .connect_with(transport, async move |cx: ConnectionTo<Agent>| {
            Ok(body(cx).await)
        })
        .await
        .unwrap()
}

/// What this client fills into a form: the last choice of a one-pick field, every choice of a
/// many-pick field, nothing in a free-text field (none for a URL elicitation).
fn form_answers(
    r: &CreateElicitationRequest,
) -> Option<std::collections::BTreeMap<String, ElicitationContentValue>> {
    let r = serde_json::to_value(r).unwrap();
    let props = r["requestedSchema"]["properties"].as_object()?;
    let consts = |v: &Value| -> Vec<String> {
        v.as_array()
            .into_iter()
            .flatten()
            .map(|o| o["const"].as_str().unwrap().to_owned())
            .collect()
    };
    let mut content = std::collections::BTreeMap::new();
    for (key, field) in props {
        if let Some(last) = consts(&field["oneOf"]).pop() {
            content.insert(key.clone(), ElicitationContentValue::String(last));
        } else if field["type"] == "array" {
            let all = consts(&field["items"]["anyOf"]);
            content.insert(key.clone(), ElicitationContentValue::StringArray(all));
        }
    }
    Some(content)
}

/// The last message of the newest model request, as JSON text.
fn last_message_sent(fake: &claude_host_testkit::fake::FakeUpstream) -> String {
    let sent = fake.message_requests().last().unwrap().json();
    sent["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .to_string()
}

fn text(s: &str) -> Vec<ContentBlock> {
    vec![ContentBlock::Text(TextContent::new(s))]
}

/// `initialize` from a client that can open a link for the user (URL elicitation).
async fn initialize(cx: &ConnectionTo<Agent>) -> Value {
    initialize_with(
        cx,
        ElicitationCapabilities::new().url(ElicitationUrlCapabilities::new()),
    )
    .await
}

/// `initialize` from a client with these elicitation capabilities.
async fn initialize_with(cx: &ConnectionTo<Agent>, elicitation: ElicitationCapabilities) -> Value {
    let caps = ClientCapabilities::new().elicitation(elicitation);
    let r = cx
        .send_request(InitializeRequest::new(ProtocolVersion::V1).client_capabilities(caps))
        .block_task()
        .await
        .unwrap();
    serde_json::to_value(r).unwrap()
}

/// A new session in `cwd`.
async fn new_session(
    cx: &ConnectionTo<Agent>,
    cwd: &std::path::Path,
) -> agent_client_protocol::v1::schema::SessionId {
    timed(
        "session/new",
        cx.send_request(NewSessionRequest::new(cwd.to_path_buf()))
            .block_task(),
    )
    .await
    .unwrap()
    .session_id
}

/// A prompt's answer.
async fn ask(
    cx: &ConnectionTo<Agent>,
    id: &agent_client_protocol::v1::schema::SessionId,
    prompt: &str,
) -> agent_client_protocol::v1::schema::PromptResponse {
    timed(
        prompt,
        cx.send_request(PromptRequest::new(id.clone(), text(prompt)))
            .block_task(),
    )
    .await
    .unwrap()
}

/// Closes session `id`, forgets what the client was shown, and loads the session again: what
/// `seen` then holds is the replay.
async fn close_and_load(
    cx: &ConnectionTo<Agent>,
    seen: &Seen,
    id: &agent_client_protocol::v1::schema::SessionId,
    cwd: &std::path::Path,
) {
    timed(
        "session/close",
        cx.send_request(CloseSessionRequest::new(id.clone()))
            .block_task(),
    )
    .await
    .unwrap();
    seen.clear();
    timed(
        "session/load",
        cx.send_request(LoadSessionRequest::new(id.clone(), cwd.to_path_buf()))
            .block_task(),
    )
    .await
    .unwrap();
}

async fn timed<F: std::future::Future>(what: &str, f: F) -> F::Output {
    tokio::time::timeout(WAIT, f)
        .await
        .unwrap_or_else(|_| panic!("timed out: {what}"))
}

/// What an editor shows from a stream of updates: the conversation's entries in order, text
/// merged, each tool call with every field its updates set.
fn shown(updates: &[SessionUpdate]) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::new();
    let mut calls: std::collections::HashMap<String, usize> = Default::default();
    for u in updates {
        let v = serde_json::to_value(u).unwrap();
        let kind = v["sessionUpdate"].as_str().unwrap().to_owned();
        match kind.as_str() {
            "agent_message_chunk" | "agent_thought_chunk" => {
                let t = v["content"]["text"].as_str().unwrap_or_default();
                match out.last_mut() {
                    Some(last) if last["entry"] == kind => {
                        let merged = format!("{}{t}", last["text"].as_str().unwrap());
                        last["text"] = json!(merged);
                    }
                    _ => out.push(json!({"entry": kind, "text": t})),
                }
            }
            "tool_call" | "tool_call_update" => {
                let id = v["toolCallId"].as_str().unwrap().to_owned();
                let i = *calls.entry(id.clone()).or_insert_with(|| {
                    out.push(json!({"entry": "tool", "toolCallId": id}));
                    out.len() - 1
                });
                for (k, val) in v.as_object().unwrap() {
                    if k != "sessionUpdate" {
                        out[i][k] = val.clone();
                    }
                }
            }
            "plan" => out.push(v),
            "usage_update" => out.push(json!({"entry": "usage", "used": v["used"]})),
            _ => {}
        }
    }
    out
}

fn has_text(updates: &[SessionUpdate], needle: &str) -> bool {
    shown(updates).iter().any(|e| {
        e["entry"] == "agent_message_chunk" && e["text"].as_str().unwrap_or("").contains(needle)
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_editor_creates_prompts_approves_sees_the_diff_and_loads_the_same_history() {
    let h = Host::new().await;
    let file = h.cwd().join("greeting.txt");
    h.fake.push(rule(
        Match::LastUserContains("write the greeting".into()),
        Reply::tool_use(
            "Write",
            json!({"file_path": file.display().to_string(), "content": "hello from acp\n"}),
        ),
    ));
    h.fake.push(rule(
        Match::HasToolResult,
        Reply::text("Wrote the greeting."),
    ));
    let mut child = spawn_acp(h.cmd());
    let seen = Seen::default();
    let cwd = h.cwd();
    let s = seen.clone();
    let fake = &h.fake;
    as_client(&mut child, seen.clone(), "allow", async move |cx| {
        let init = timed("initialize", initialize(&cx)).await;
        assert_eq!(init["agentInfo"]["name"], "claude-host");
        assert_eq!(init["agentCapabilities"]["loadSession"], true);
        assert_eq!(init["authMethods"][0]["id"], "github");
        assert!(
            init["authMethods"][0]["description"]
                .as_str()
                .unwrap()
                .contains("Already signed in"),
            "{init}"
        );
        let new = timed(
            "session/new",
            cx.send_request(NewSessionRequest::new(cwd.clone()))
                .block_task(),
        )
        .await
        .unwrap();
        let id = new.session_id.clone();
        let new_json = serde_json::to_value(&new).unwrap();
        assert_eq!(new_json["modes"]["currentModeId"], "default", "{new_json}");
        let options = new_json["configOptions"].as_array().unwrap();
        assert!(
            options.iter().any(|o| o["category"] == "model"),
            "{new_json}"
        );
        // The CLI was started at session/new: its commands arrive without a prompt.
        s.wait_for("available commands", |u| {
            matches!(u, SessionUpdate::AvailableCommandsUpdate(c) if !c.available_commands.is_empty())
        })
        .await;

        let r = ask(&cx, &id, "please write the greeting").await;
        assert_eq!(r.stop_reason, StopReason::EndTurn);
        assert_eq!(
            std::fs::read_to_string(&file).unwrap(),
            "hello from acp\n",
            "the approved Write ran"
        );
        // The permission request showed the diff before the user chose.
        let asked = s.permissions.lock().unwrap().clone();
        assert_eq!(asked.len(), 1, "{asked:#?}");
        let call = serde_json::to_value(&asked[0].tool_call).unwrap();
        assert_eq!(call["kind"], "edit", "{call}");
        assert_eq!(call["content"][0]["type"], "diff", "{call}");
        assert_eq!(call["content"][0]["newText"], "hello from acp\n");
        assert_eq!(call["content"][0]["path"], file.display().to_string());
        let option_ids: Vec<String> = asked[0]
            .options
            .iter()
            .map(|o| o.option_id.0.to_string())
            .collect();
        assert_eq!(option_ids, ["allow_always", "allow", "reject"]);
        // The model got the tool's result.
        let reqs = fake.message_requests();
        assert!(
            String::from_utf8_lossy(&reqs.last().unwrap().body).contains("tool_result"),
            "the last upstream request carries the tool result"
        );

        let live = seen_session(&s, &id.0);
        let view = shown(&live);
        let tool = view
            .iter()
            .find(|e| e["entry"] == "tool")
            .unwrap_or_else(|| panic!("no tool call: {view:#?}"));
        assert_eq!(tool["status"], "completed", "{view:#?}");
        assert_eq!(tool["content"][0]["type"], "diff", "the diff stays: {view:#?}");
        assert_eq!(tool["locations"][0]["path"], file.display().to_string());
        assert!(has_text(&live, "Wrote the greeting."), "{view:#?}");
        assert!(
            view.iter().any(|e| e["entry"] == "usage" && e["used"].as_u64() > Some(0)),
            "{view:#?}"
        );

        // Closed, then loaded: the history replays as the same entries.
        close_and_load(&cx, &s, &id, &cwd).await;
        let loaded = seen_session(&s, &id.0);
        assert_eq!(shown(&loaded), view, "load shows what the live client saw");
        assert!(
            matches!(&loaded[0], SessionUpdate::UserMessageChunk(c)
                if serde_json::to_string(&c.content).unwrap().contains("please write the greeting")),
            "{loaded:#?}"
        );

        let list = timed(
            "session/list",
            cx.send_request(ListSessionsRequest::new()).block_task(),
        )
        .await
        .unwrap();
        let listed = list
            .sessions
            .iter()
            .find(|x| x.session_id == id)
            .expect("the session is listed");
        assert_eq!(listed.cwd, cwd);
    })
    .await;
    drop(child);
}

fn seen_session(s: &Seen, id: &str) -> Vec<SessionUpdate> {
    s.updates
        .lock()
        .unwrap()
        .iter()
        .filter(|n| &*n.session_id.0 == id)
        .map(|n| n.update.clone())
        .collect()
}

/// Every process below `pid` (children, grandchildren, …).
fn descendants(pid: u32) -> Vec<u32> {
    let mut parents: std::collections::HashMap<u32, Vec<u32>> = Default::default();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(p) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat")) else {
            continue;
        };
        // The parent is the second field after the command, which is in parentheses.
        let Some(rest) = stat.rsplit(')').next() else {
            continue;
        };
        if let Some(ppid) = rest.split_whitespace().nth(1).and_then(|s| s.parse().ok()) {
            parents.entry(ppid).or_default().push(p);
        }
    }
    let mut out = Vec::new();
    let mut todo = vec![pid];
    while let Some(p) = todo.pop() {
        for c in parents.get(&p).cloned().unwrap_or_default() {
            out.push(c);
            todo.push(c);
        }
    }
    out
}

fn alive(pid: u32) -> bool {
    // A zombie has exited; only its parent's wait is missing.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            !s.rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('Z')
        })
        .unwrap_or(false)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_ends_the_turn_cancelled_and_nothing_outlives_the_editor() {
    let h = Host::new().await;
    let (slow, gate) = Reply::gated("once upon a time there was a very long story", 4);
    h.fake
        .push(rule(Match::LastUserContains("slow story".into()), slow));
    h.fake.push(rule(
        Match::LastUserContains("say hi".into()),
        Reply::text("hi again"),
    ));
    let mut child = spawn_acp(h.cmd());
    let pid = child.id().unwrap();
    let seen = Seen::default();
    let s = seen.clone();
    let cwd = h.cwd();
    let below = as_client(&mut child, seen.clone(), "allow", async move |cx| {
        timed("initialize", initialize(&cx)).await;
        let id = new_session(&cx, &cwd).await;
        let running = tokio::spawn(
            cx.send_request(PromptRequest::new(id.clone(), text("tell a slow story")))
                .block_task(),
        );
        s.wait_for("the first words", |u| {
            matches!(u, SessionUpdate::AgentMessageChunk(_))
        })
        .await;
        cx.send_notification(CancelNotification::new(id.clone()))
            .unwrap();
        let r = timed("the cancelled prompt's answer", running)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(r.stop_reason, StopReason::Cancelled);
        gate.open();
        // The session goes on.
        let r = ask(&cx, &id, "now say hi").await;
        assert_eq!(r.stop_reason, StopReason::EndTurn);
        assert!(has_text(&seen_session(&s, &id.0), "hi again"));
        let below = descendants(pid);
        assert!(!below.is_empty(), "the session's CLI runs under the host");
        below
    })
    .await;
    // The editor closed the pipes: the host ends, and with it every process it started.
    let status = timed("the host's exit", child.wait()).await.unwrap();
    assert!(status.success(), "{status:?}");
    let deadline = std::time::Instant::now() + WAIT;
    while below.iter().any(|p| alive(*p)) {
        assert!(
            std::time::Instant::now() < deadline,
            "left running: {:?}",
            below.iter().filter(|p| alive(**p)).collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Raw JSON-RPC lines, for what the official client cannot send.
struct Lines {
    stdin: tokio::process::ChildStdin,
    stdout: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
    seen: Vec<Value>,
}

impl Lines {
    fn of(child: &mut tokio::process::Child) -> Lines {
        Lines {
            stdin: child.stdin.take().unwrap(),
            stdout: BufReader::new(child.stdout.take().unwrap()).lines(),
            seen: Vec::new(),
        }
    }

    async fn send(&mut self, line: &str) {
        self.stdin.write_all(line.as_bytes()).await.unwrap();
        self.stdin.write_all(b"\n").await.unwrap();
        self.stdin.flush().await.unwrap();
    }

    async fn request(&mut self, id: i64, method: &str, params: Value) {
        let l = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        self.send(&l.to_string()).await;
    }

    /// The message matching `pred` (earlier ones are kept for later calls).
    async fn wait(&mut self, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        if let Some(i) = self.seen.iter().position(&pred) {
            return self.seen.remove(i);
        }
        let found = tokio::time::timeout(WAIT, async {
            loop {
                let line = self.stdout.next_line().await.unwrap().expect("output open");
                let v: Value = serde_json::from_str(&line)
                    .unwrap_or_else(|e| panic!("stdout holds only JSON-RPC: {line:?}: {e}"));
                if pred(&v) {
                    return v;
                }
                self.seen.push(v);
            }
        })
        .await;
        found.unwrap_or_else(|_| panic!("no {what}; got {:#?}", self.seen))
    }

    async fn response(&mut self, id: i64) -> Value {
        self.wait(&format!("response {id}"), |v| {
            v["id"] == id && v.get("method").is_none()
        })
        .await
    }

    /// `initialize` as request 0, answered with protocol version 1.
    async fn initialize(&mut self) {
        self.request(
            0,
            "initialize",
            json!({"protocolVersion": 1, "clientCapabilities": {}}),
        )
        .await;
        let init = self.response(0).await;
        assert_eq!(init["result"]["protocolVersion"], 1, "{init}");
    }

    /// `session/new` in `cwd` as request `id`; the new session's id.
    async fn new_session(&mut self, id: i64, cwd: &std::path::Path) -> String {
        self.request(id, "session/new", json!({"cwd": cwd, "mcpServers": []}))
            .await;
        let created = self.response(id).await;
        created["result"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no session: {created}"))
            .to_owned()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_json_rpc_errors_and_the_connection_stays_up() {
    let h = Host::new().await;
    let (slow, gate) = Reply::gated("a long answer that waits for the test", 4);
    h.fake
        .push(rule(Match::LastUserContains("first prompt".into()), slow));
    let mut child = spawn_acp(h.cmd());
    let mut l = Lines::of(&mut child);
    l.initialize().await;

    l.send("{this is not json").await;
    let e = l
        .wait("a parse error", |v| v["error"]["code"] == -32700)
        .await;
    assert_eq!(e["id"], Value::Null, "{e}");

    l.request(2, "session/frobnicate", json!({})).await;
    assert_eq!(l.response(2).await["error"]["code"], -32601);

    l.request(
        3,
        "session/prompt",
        json!({"sessionId": "no-such-session", "prompt": [{"type": "text", "text": "hi"}]}),
    )
    .await;
    let e = l.response(3).await;
    assert_eq!(e["error"]["code"], -32602, "{e}");
    assert!(
        e["error"]["data"]
            .as_str()
            .unwrap()
            .contains("unknown session")
    );

    l.request(
        4,
        "session/new",
        json!({"cwd": "not/absolute", "mcpServers": []}),
    )
    .await;
    assert_eq!(l.response(4).await["error"]["code"], -32602);

    let id = l.new_session(5, &h.cwd()).await;
    l.request(
        6,
        "session/prompt",
        json!({"sessionId": id, "prompt": [{"type": "text", "text": "the first prompt"}]}),
    )
    .await;
    l.wait("the first answer's words", |v| {
        v["params"]["update"]["sessionUpdate"] == "agent_message_chunk"
    })
    .await;
    l.request(
        7,
        "session/prompt",
        json!({"sessionId": id, "prompt": [{"type": "text", "text": "a second prompt"}]}),
    )
    .await;
    let e = l.response(7).await;
    assert_eq!(e["error"]["code"], -32602, "{e}");
    assert!(
        e["error"]["data"]
            .as_str()
            .unwrap()
            .contains("already running"),
        "{e}"
    );
    l.request(
        8,
        "session/prompt",
        json!({"sessionId": id, "prompt": [{"type": "audio", "mimeType": "audio/wav", "data": "AAAA"}]}),
    )
    .await;
    assert_eq!(l.response(8).await["error"]["code"], -32602);
    // The running prompt was not disturbed by any of it.
    gate.open();
    let done = l.response(6).await;
    assert_eq!(done["result"]["stopReason"], "end_turn", "{done}");
    l.request(9, "session/list", json!({})).await;
    let list = l.response(9).await;
    assert!(
        list["result"]["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["sessionId"] == id.as_str()),
        "{list}"
    );
    drop(l);
    let status = timed("the host's exit", child.wait()).await.unwrap();
    assert!(status.success());
}

/// The embedded database is opened at its first use (an editor starts `acp` per window):
/// nothing opens it before a request needs it. A broken one does not stop the editor: it is
/// a store that fails (logged, sessions listed from their transcripts, as when it fails later
/// on), and it is tried again by the next use.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_session_database_is_opened_at_its_first_use() {
    let h = Host::new().await;
    std::fs::create_dir_all(h.home()).unwrap();
    let db = h.home().join("sessions.sqlite");
    let mut child = spawn_acp(h.cmd());
    let mut l = Lines::of(&mut child);
    l.initialize().await;
    assert!(!db.exists(), "not opened by initialize");
    // Broken before its first use.
    std::fs::write(&db, vec![0x5a_u8; 8192]).unwrap();
    l.request(1, "session/list", json!({})).await;
    let list = l.response(1).await;
    assert_eq!(list["result"]["sessions"], json!([]), "{list}");
    // Mended: the next use opens it, and the session's record is kept.
    std::fs::remove_file(&db).unwrap();
    let id = l.new_session(2, &h.cwd()).await;
    // A session is kept from its first prompt.
    l.request(
        3,
        "session/prompt",
        json!({"sessionId": id, "prompt": [{"type": "text", "text": "hello"}]}),
    )
    .await;
    assert_eq!(l.response(3).await["result"]["stopReason"], "end_turn");
    drop(l);
    let status = timed("the host's exit", child.wait()).await.unwrap();
    assert!(status.success());
    let store = claude_host_store::SqliteStore::open(&db).await.unwrap();
    let record = claude_host_store::Store::get(&store, &id).await.unwrap();
    assert!(record.is_some(), "the session's record is in the database");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_started_in_vs_code_are_listed_and_loaded_in_the_editor() {
    let h = Host::new().await;
    h.fake.push(rule(
        Match::LastUserContains("hello from vs code".into()),
        Reply::text("Hello, VS Code user."),
    ));
    let mut c = h.cmd();
    c.env("CLAUDE_HOST_CONNECTION_TOKEN", "acp-test-token");
    let (mut serve, port, _) = super::serve::start(c);
    let mut ws = super::ws::Ws::connect(port, "acp-test-token").await;
    let id = super::ws::uuid();
    let session = format!("claude:/{id}");
    let work = claude_host_protocol::uri::file_uri(&h.cwd());
    ws.ok(
        "createSession",
        json!({"channel": session, "provider": "claude", "workingDirectories": [work]}),
    )
    .await;
    ws.ok("subscribe", json!({"channel": session})).await;
    let chat = claude_host_protocol::uri::default_chat_uri(&session);
    ws.ok("subscribe", json!({"channel": chat})).await;
    let turn = ws.turn(&chat, "hello from vs code").await;
    let end = ws.turn_end(&turn).await;
    assert_eq!(end["action"]["type"], "chat/turnComplete", "{end}");
    super::serve::stop(&mut serve);

    let mut child = spawn_acp(h.cmd());
    let mut l = Lines::of(&mut child);
    l.initialize().await;
    l.request(1, "session/list", json!({})).await;
    let list = l.response(1).await;
    let entry = list["result"]["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["sessionId"] == id.as_str())
        .cloned()
        .unwrap_or_else(|| panic!("not listed: {list}"));
    assert_eq!(entry["cwd"], h.cwd().display().to_string());
    assert!(
        entry["title"]
            .as_str()
            .unwrap()
            .contains("hello from vs code"),
        "{entry}"
    );
    l.request(
        2,
        "session/load",
        json!({"sessionId": id, "cwd": h.cwd(), "mcpServers": []}),
    )
    .await;
    let loaded = l.response(2).await;
    assert!(loaded.get("error").is_none(), "{loaded}");
    // The replay came before the answer.
    let replay: Vec<Value> = std::mem::take(&mut l.seen);
    let kinds: Vec<&str> = replay
        .iter()
        .filter_map(|v| v["params"]["update"]["sessionUpdate"].as_str())
        .collect();
    assert_eq!(kinds[0], "user_message_chunk", "{replay:#?}");
    assert!(replay.iter().any(|v| {
        v["params"]["update"]["content"]["text"]
            .as_str()
            .is_some_and(|t| t.contains("Hello, VS Code user."))
    }));
    drop(l);
    timed("the host's exit", child.wait()).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn authenticate_runs_the_github_device_flow_through_the_editor() {
    let h = Host::new().await;
    h.fake.push(rule(
        Match::LastUserContains("signed in?".into()),
        Reply::text("Yes."),
    ));
    // No credential at all: the editor signs in.
    let mut child = spawn_acp(h.bare_cmd());
    let seen = Seen::default();
    let s = seen.clone();
    let cwd = h.cwd();
    let home = h.home();
    as_client(&mut child, seen, "allow", async move |cx| {
        let init = timed("initialize", initialize(&cx)).await;
        assert!(
            init["authMethods"][0]["description"]
                .as_str()
                .unwrap()
                .contains("Sign in with GitHub"),
            "{init}"
        );
        let early = cx
            .send_request(NewSessionRequest::new(cwd.clone()))
            .block_task()
            .await
            .unwrap_err();
        assert_eq!(
            i32::from(early.code),
            -32000,
            "a session before sign-in asks for it: {early:?}"
        );
        let bad = cx
            .send_request(agent_client_protocol::v1::schema::AuthenticateRequest::new(
                "nope",
            ))
            .block_task()
            .await;
        assert!(bad.is_err(), "an unknown method is refused");
        timed(
            "authenticate",
            cx.send_request(agent_client_protocol::v1::schema::AuthenticateRequest::new(
                "github",
            ))
            .block_task(),
        )
        .await
        .unwrap();
        let shown = s.elicitations.lock().unwrap().clone();
        assert_eq!(shown.len(), 1, "the code was shown through the editor");
        let e = serde_json::to_value(&shown[0]).unwrap();
        assert_eq!(e["mode"], "url", "{e}");
        assert!(e["url"].as_str().unwrap().ends_with("/login/device"), "{e}");
        assert!(e["message"].as_str().unwrap().contains("ABCD-1234"), "{e}");
        use std::os::unix::fs::PermissionsExt;
        let cred = std::fs::metadata(home.join("credentials.json")).unwrap();
        assert_eq!(cred.permissions().mode() & 0o777, 0o600);
        // Signed in: a prompt reaches the model.
        let id = new_session(&cx, &cwd).await;
        let r = ask(&cx, &id, "are we signed in?").await;
        assert_eq!(r.stop_reason, StopReason::EndTurn);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn modes_options_plans_questions_fork_and_delete() {
    use agent_client_protocol::v1::schema::{
        DeleteSessionRequest, ForkSessionRequest, SessionConfigOptionValue,
        SetSessionConfigOptionRequest, SetSessionModeRequest,
    };
    let h = Host::new().await;
    let file = h.cwd().join("quiet.txt");
    h.fake.push(rule(
        Match::LastUserContains("plan it".into()),
        Reply::tool_use(
            "TodoWrite",
            json!({"todos": [
                {"content": "read the code", "status": "completed", "activeForm": "Reading"},
                {"content": "fix the bug", "status": "in_progress", "activeForm": "Fixing"}]}),
        ),
    ));
    h.fake.push(rule(
        Match::LastUserContains("write quietly".into()),
        Reply::tool_use(
            "Write",
            json!({"file_path": file.display().to_string(), "content": "no questions asked\n"}),
        ),
    ));
    h.fake.push(rule(
        Match::LastUserContains("ask me".into()),
        Reply::tool_use(
            "AskUserQuestion",
            json!({"questions": [{
                "question": "Which fruit?", "header": "Fruit", "multiSelect": false,
                "options": [{"label": "Apple", "description": "red"},
                            {"label": "Banana", "description": "yellow"}]}]}),
        ),
    ));
    h.fake
        .push(rule(Match::HasToolResult, Reply::text("Done.")));
    let mut child = spawn_acp(h.cmd());
    let seen = Seen::default();
    let s = seen.clone();
    let cwd = h.cwd();
    let fake = &h.fake;
    as_client(&mut child, seen, "allow", async move |cx| {
        timed("initialize", initialize(&cx)).await;
        let id = new_session(&cx, &cwd).await;
        // Edits accepted without asking, set as a config option.
        let r = timed(
            "set_config_option",
            cx.send_request(SetSessionConfigOptionRequest::new(
                id.clone(),
                "mode",
                SessionConfigOptionValue::value_id("acceptEdits"),
            ))
            .block_task(),
        )
        .await
        .unwrap();
        let options = serde_json::to_value(&r.config_options).unwrap();
        let mode = options
            .as_array()
            .unwrap()
            .iter()
            .find(|o| o["id"] == "mode")
            .unwrap();
        assert_eq!(mode["currentValue"], "acceptEdits", "{options}");
        s.wait_for("the mode's update", |u| {
            matches!(u, SessionUpdate::CurrentModeUpdate(m) if &*m.current_mode_id.0 == "acceptEdits")
        })
        .await;
        let bad = cx
            .send_request(SetSessionConfigOptionRequest::new(
                id.clone(),
                "mode",
                SessionConfigOptionValue::value_id("yolo"),
            ))
            .block_task()
            .await;
        assert!(bad.is_err(), "an unknown mode is refused");
        let r = ask(&cx, &id, "write quietly").await;
        assert_eq!(r.stop_reason, StopReason::EndTurn);
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "no questions asked\n");
        assert!(s.permissions.lock().unwrap().is_empty(), "nothing was asked");

        // A to-do list is the plan.
        ask(&cx, &id, "plan it").await;
        let plans: Vec<Value> = seen_session(&s, &id.0)
            .iter()
            .filter(|u| matches!(u, SessionUpdate::Plan(_)))
            .map(|u| serde_json::to_value(u).unwrap())
            .collect();
        assert_eq!(plans.len(), 1, "{plans:#?}");
        assert_eq!(plans[0]["entries"][1]["content"], "fix the bug");
        assert_eq!(plans[0]["entries"][1]["status"], "in_progress");
        assert!(
            !shown(&seen_session(&s, &id.0))
                .iter()
                .any(|e| e["title"].as_str().is_some_and(|t| t.contains("Todo"))),
            "no tool call for the list"
        );

        // Back to asking, through set_mode; a question comes through the same prompt.
        timed(
            "set_mode",
            cx.send_request(SetSessionModeRequest::new(id.clone(), "default"))
                .block_task(),
        )
        .await
        .unwrap();
        ask(&cx, &id, "ask me something").await;
        let asked = s.permissions.lock().unwrap().clone();
        assert_eq!(asked.len(), 1, "{asked:#?}");
        let names: Vec<&str> = asked[0].options.iter().map(|o| o.name.as_str()).collect();
        assert_eq!(names, ["Apple", "Banana", "Skip"]);
        // The last message the model got is the tool's result, with the chosen answer.
        let result = last_message_sent(fake);
        assert!(
            result.contains("tool_result") && result.contains("Apple") && !result.contains("Banana"),
            "the answer did not reach the model: {result}"
        );

        // Forked: a new session with the same conversation; deleted: gone from the list.
        let fork = timed(
            "session/fork",
            cx.send_request(ForkSessionRequest::new(id.clone(), cwd.clone()))
                .block_task(),
        )
        .await
        .unwrap()
        .session_id;
        assert_ne!(fork, id);
        let listed = |l: &agent_client_protocol::v1::schema::ListSessionsResponse, x: &str| {
            l.sessions.iter().any(|e| &*e.session_id.0 == x)
        };
        let l = cx
            .send_request(ListSessionsRequest::new())
            .block_task()
            .await
            .unwrap();
        assert!(listed(&l, &fork.0) && listed(&l, &id.0));
        timed(
            "session/delete",
            cx.send_request(DeleteSessionRequest::new(fork.clone()))
                .block_task(),
        )
        .await
        .unwrap();
        let l = cx
            .send_request(ListSessionsRequest::new())
            .block_task()
            .await
            .unwrap();
        assert!(!listed(&l, &fork.0), "the fork is gone");
        assert!(listed(&l, &id.0), "its source stays");
        let again = cx
            .send_request(DeleteSessionRequest::new(fork.clone()))
            .block_task()
            .await;
        assert!(again.is_err(), "deleting it twice is an error");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn questions_go_to_an_editor_that_shows_forms_as_one_form() {
    let h = Host::new().await;
    h.fake.push(rule(
        Match::LastUserContains("ask me twice".into()),
        Reply::tool_use(
            "AskUserQuestion",
            json!({"questions": [
                {"question": "Which fruit?", "header": "Fruit", "multiSelect": false,
                 "options": [{"label": "Apple", "description": "red"},
                             {"label": "Banana", "description": "yellow"}]},
                {"question": "Which toppings?", "header": "Toppings", "multiSelect": true,
                 "options": [{"label": "Cream", "description": "whipped"},
                             {"label": "Nuts", "description": "chopped"}]}]}),
        ),
    ));
    h.fake
        .push(rule(Match::HasToolResult, Reply::text("Noted.")));
    let mut child = spawn_acp(h.cmd());
    let seen = Seen::default();
    let s = seen.clone();
    let cwd = h.cwd();
    let fake = &h.fake;
    as_client(&mut child, seen, "allow", async move |cx| {
        let forms = ElicitationCapabilities::new()
            .form(ElicitationFormCapabilities::new())
            .url(ElicitationUrlCapabilities::new());
        timed("initialize", initialize_with(&cx, forms)).await;
        let id = new_session(&cx, &cwd).await;
        let r = ask(&cx, &id, "ask me twice").await;
        assert_eq!(r.stop_reason, StopReason::EndTurn);
        assert!(
            s.permissions.lock().unwrap().is_empty(),
            "no question went through a permission request"
        );
        let forms = s.elicitations.lock().unwrap().clone();
        assert_eq!(forms.len(), 1, "both questions in one form: {forms:#?}");
        let form = serde_json::to_value(&forms[0]).unwrap();
        assert_eq!(form["mode"], "form", "{form}");
        assert_eq!(form["sessionId"], json!(id.0), "{form}");
        let fields: Vec<&String> = form["requestedSchema"]["properties"]
            .as_object()
            .unwrap()
            .keys()
            .collect();
        assert_eq!(fields, ["0", "0_other", "1", "1_other"], "{form}");
        // The model got the answers of the form: the last fruit, every topping.
        let result = last_message_sent(fake);
        assert!(
            result.contains("tool_result")
                && result.contains("Banana")
                && !result.contains("Apple")
                && result.contains("Cream, Nuts"),
            "the answers did not reach the model: {result}"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn always_allow_stops_asking_for_calls_like_it() {
    let h = Host::new().await;
    // The same command twice: the CLI's suggested rule for it is the command itself.
    for (i, cmd) in [
        (1, "python3 -c 'print(2+2)'"),
        (2, "python3 -c 'print(2+2)'"),
    ] {
        h.fake.push(rule(
            Match::LastUserContains(format!("run command {i}")),
            Reply::tool_use(
                "Bash",
                json!({"command": cmd, "description": "write a file"}),
            ),
        ));
    }
    h.fake
        .push(rule(Match::HasToolResult, Reply::text("Ran it.")));
    let mut child = spawn_acp(h.cmd());
    let seen = Seen::default();
    let s = seen.clone();
    let cwd = h.cwd();
    as_client(&mut child, seen, "allow_always", async move |cx| {
        timed("initialize", initialize(&cx)).await;
        let id = new_session(&cx, &cwd).await;
        for i in [1, 2] {
            let r = timed(
                "a Bash prompt",
                cx.send_request(PromptRequest::new(
                    id.clone(),
                    text(&format!("run command {i}")),
                ))
                .block_task(),
            )
            .await
            .unwrap();
            assert_eq!(r.stop_reason, StopReason::EndTurn);
        }
        assert_eq!(s.permissions.lock().unwrap().len(), 1, "asked once only");
        let results: Vec<Value> = shown(&seen_session(&s, &id.0))
            .into_iter()
            .filter(|e| e["entry"] == "tool")
            .collect();
        assert_eq!(results.len(), 2, "{results:#?}");
        for r in &results {
            assert_eq!(r["status"], "completed", "{r}");
            assert_eq!(r["rawOutput"], "4", "{r}");
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subagents_tool_calls_show_under_its_call_and_ask_the_editor() {
    let h = Host::new().await;
    h.fake.script_subagent_tool(
        "ask a helper",
        "SUBPROMPT make a file",
        (
            "Bash",
            json!({"command": "touch made-by-helper.txt", "description": "Make a file"}),
        ),
        "Made it.",
        "The helper made it.",
    );
    let mut child = spawn_acp(h.cmd());
    let seen = Seen::default();
    let s = seen.clone();
    let cwd = h.cwd();
    as_client(&mut child, seen, "allow", async move |cx| {
        timed("initialize", initialize(&cx)).await;
        let id = new_session(&cx, &cwd).await;
        let r = ask(&cx, &id, "please ask a helper").await;
        assert_eq!(r.stop_reason, StopReason::EndTurn);
        assert!(
            cwd.join("made-by-helper.txt").exists(),
            "the subagent's Bash ran once the editor allowed it"
        );
        let asked = s.permissions.lock().unwrap().clone();
        assert_eq!(asked.len(), 1, "{asked:#?}");
        assert_eq!(
            serde_json::to_value(&asked[0].tool_call).unwrap()["kind"],
            "execute"
        );
        let live = seen_session(&s, &id.0);
        let view = shown(&live);
        let tools: Vec<&Value> = view.iter().filter(|e| e["entry"] == "tool").collect();
        assert_eq!(
            tools.len(),
            2,
            "the Agent call and the subagent's Bash: {view:#?}"
        );
        let parent = tools[0]["toolCallId"].as_str().unwrap();
        assert_eq!(tools[0]["kind"], "think");
        assert_eq!(tools[1]["title"], "touch made-by-helper.txt");
        assert_eq!(tools[1]["status"], "completed");
        assert_eq!(
            tools[1]["_meta"]["claudeCode"]["parentToolUseId"], parent,
            "{view:#?}"
        );
        assert!(has_text(&live, "The helper made it."));
        assert!(
            !has_text(&live, "Made it."),
            "the subagent's own text stays in its chat"
        );
        // Loaded again: the subagent's call comes back under its parent.
        close_and_load(&cx, &s, &id, &cwd).await;
        let loaded: Vec<Value> = shown(&seen_session(&s, &id.0))
            .into_iter()
            .filter(|e| e["entry"] == "tool")
            .collect();
        assert_eq!(loaded.len(), 2, "{loaded:#?}");
        assert_eq!(loaded[1]["_meta"], tools[1]["_meta"]);
        assert_eq!(loaded[1]["title"], tools[1]["title"]);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn initialize_does_not_wait_for_the_stored_credentials_check_and_sessions_do() {
    let h = Host::new().await;
    h.fake.push(rule(
        Match::LastUserContains("checked".into()),
        Reply::text("Fine."),
    ));
    // GitHub takes its time to mint the Copilot token for the stored credential.
    let gate = h.fake.hold_mints();
    let mut child = spawn_acp(h.cmd());
    let cwd = h.cwd();
    let fake = &h.fake;
    as_client(&mut child, Seen::default(), "allow", async move |cx| {
        // The check is under way and held: initialize is answered all the same.
        fake.wait_mints(1, WAIT).await.unwrap();
        timed("initialize while the token is held", initialize(&cx)).await;
        let pending = tokio::spawn(
            cx.send_request(NewSessionRequest::new(cwd.clone()))
                .block_task(),
        );
        // session/new waits for the check; once GitHub answers, it goes on.
        gate.open();
        let id = timed("session/new after the check", pending)
            .await
            .unwrap()
            .unwrap()
            .session_id;
        let r = ask(&cx, &id, "all checked?").await;
        assert_eq!(r.stop_reason, StopReason::EndTurn);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn installing_claude_code_prints_nothing_on_the_editors_channel() {
    use std::os::unix::fs::PermissionsExt;
    let h = Host::new().await;
    // An `npm` that says what the real one says on stdout and lays out the package, with the
    // pinned CLI as its binary.
    let bin = h.dir.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let npm = bin.join("npm");
    std::fs::write(
        &npm,
        format!(
            r#"#!/bin/sh
while [ "$1" != "--prefix" ]; do shift; done
pkg="$2/node_modules/@anthropic-ai/claude-code-linux-x64"
mkdir -p "$pkg" && ln -s '{}' "$pkg/claude"
echo 'added 2 packages in 1s'
"#,
            cli().display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&npm, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut c = h.cmd();
    c.env_remove("CLAUDE_HOST_CLAUDE_PATH")
        .env("PATH", format!("{}:/usr/bin:/bin", bin.display()));
    let mut child = spawn_acp(c);
    let mut lines = Lines::of(&mut child);
    lines
        .request(
            1,
            "initialize",
            json!({"protocolVersion": 1, "clientCapabilities": {}}),
        )
        .await;
    // Every line on stdout is JSON-RPC (`wait` panics on anything else).
    let init = lines.response(1).await;
    assert_eq!(init["result"]["protocolVersion"], 1);
    lines
        .request(2, "session/new", json!({"cwd": h.cwd(), "mcpServers": []}))
        .await;
    let created = lines.response(2).await;
    assert!(created["result"]["sessionId"].is_string(), "{created}");
    assert!(
        claude_host_sdk::find::pinned_binary(&h.home()).is_some(),
        "installed through npm"
    );
    assert!(lines.seen.iter().all(|v| v["jsonrpc"] == "2.0"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_editor_switches_a_session_between_gpt_claude_and_a_chat_model() {
    use agent_client_protocol::v1::schema::{
        SessionConfigOptionValue, SetSessionConfigOptionRequest,
    };
    let h = Host::new().await;
    for (trigger, answer) in [
        ("first question", "GPT-ANSWER"),
        ("second question", "CLAUDE-ANSWER"),
        ("third question", "CHAT-ANSWER"),
    ] {
        h.fake.push(rule(
            Match::LastUserContains(trigger.into()),
            Reply::text(answer),
        ));
    }
    let mut child = spawn_acp(h.cmd());
    let seen = Seen::default();
    let cwd = h.cwd();
    let fake = &h.fake;
    as_client(&mut child, seen, "allow", async move |cx| {
        timed("initialize", initialize(&cx)).await;
        let id = new_session(&cx, &cwd).await;
        let set_model = |model: &'static str| {
            cx.send_request(SetSessionConfigOptionRequest::new(
                id.clone(),
                "model",
                SessionConfigOptionValue::value_id(model),
            ))
            .block_task()
        };
        let r = timed("set the model", set_model("gpt-5.4")).await.unwrap();
        let options = serde_json::to_value(&r.config_options).unwrap();
        let model = options
            .as_array()
            .unwrap()
            .iter()
            .find(|o| o["id"] == "model")
            .unwrap()
            .clone();
        assert_eq!(model["currentValue"], "gpt-5.4", "{options}");
        let values = model["options"].to_string();
        for id in ["claude-opus-5.5", "gpt-5.4", "gpt-4.1", "gemini-3.1-pro"] {
            assert!(values.contains(id), "{id} offered: {values}");
        }
        let r = ask(&cx, &id, "the first question").await;
        assert_eq!(r.stop_reason, StopReason::EndTurn);
        timed("to Claude", set_model("claude-opus-5.5"))
            .await
            .unwrap();
        ask(&cx, &id, "the second question").await;
        timed("to a chat model", set_model("gpt-4.1"))
            .await
            .unwrap();
        ask(&cx, &id, "the third question").await;
        let calls: Vec<(String, String, String)> = fake
            .model_requests()
            .into_iter()
            .map(|r| {
                (
                    r.path.split('?').next().unwrap_or_default().to_owned(),
                    r.json()["model"].as_str().unwrap_or_default().to_owned(),
                    String::from_utf8_lossy(&r.body).into_owned(),
                )
            })
            .collect();
        let by = |q: &str| {
            // The first call that carries the question is its own turn's (later ones carry it
            // as history).
            calls
                .iter()
                .find(|(_, _, body)| body.contains(q))
                .unwrap_or_else(|| panic!("a call with {q:?}: {calls:?}"))
                .clone()
        };
        let (path, model, _) = by("the first question");
        assert_eq!((path.as_str(), model.as_str()), ("/responses", "gpt-5.4"));
        let (path, model, body) = by("the second question");
        assert_eq!(
            (path.as_str(), model.as_str()),
            ("/v1/messages", "claude-opus-5.5")
        );
        assert!(body.contains("GPT-ANSWER"), "{body}");
        let (path, model, body) = by("the third question");
        assert_eq!(
            (path.as_str(), model.as_str()),
            ("/chat/completions", "gpt-4.1")
        );
        assert!(
            body.contains("GPT-ANSWER") && body.contains("CLAUDE-ANSWER"),
            "{body}"
        );
        assert_eq!(fake.header_violations(), Vec::<String>::new());
    })
    .await;
}
