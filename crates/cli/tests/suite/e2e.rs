use super::*;
use claude_host_testkit::fake::{Match, Reply, Rule};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader};
use std::time::Duration;

fn rule(when: Match, reply: Reply) -> Rule {
    Rule {
        when,
        reply,
        times: None,
    }
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_text_turn_through_claude_host_claude() {
    let h = Host::new().await;
    h.fake.push(rule(
        Match::LastUserContains("say hi".into()),
        Reply::text("Hi from the fake Copilot!"),
    ));
    let mut c = h.cmd();
    c.env("CLAUDE_HOST_COPILOT_EDITOR_VERSION", "vscode/9.9.9")
        .args(["claude", "-p", "say hi"]);
    let out = blocking(move || run(c)).await;
    assert!(out.status.success());
    assert_eq!(stdout(&out).trim(), "Hi from the fake Copilot!");
    let reqs = h.fake.message_requests();
    assert_eq!(reqs.len(), 1);
    assert_eq!(reqs[0].json()["model"], "claude-opus-5.5");
    assert_eq!(reqs[0].header("x-initiator"), Some("user"));
    assert_eq!(reqs[0].header("editor-version"), Some("vscode/9.9.9"));
    assert_eq!(h.fake.header_violations(), Vec::<String>::new());
    let log = log_of(&h.home());
    assert!(
        log.contains("POST /v1/messages") && log.contains("status=200"),
        "{log}"
    );
    assert!(!log.contains("gho_fake"), "secret in the log");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accept_edits_write_then_bash_makes_three_copilot_requests() {
    let h = Host::new().await;
    let file = h.cwd().join("hello.txt");
    h.fake.push(rule(
        Match::LastUserContains("create hello".into()),
        Reply::tool_use(
            "Write",
            json!({"file_path": file.to_str().unwrap(), "content": "hi\n"}),
        ),
    ));
    h.fake.push(rule(
        Match::LastUserContains("File created".into()),
        Reply::tool_use(
            "Bash",
            json!({"command": "echo hi", "description": "say hi"}),
        ),
    ));
    h.fake.push(rule(Match::HasToolResult, Reply::text("done")));
    let mut c = h.cmd();
    c.args([
        "claude",
        "-p",
        "create hello.txt then echo",
        "--permission-mode",
        "acceptEdits",
    ]);
    let out = blocking(move || run(c)).await;
    assert!(out.status.success());
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "hi\n");
    assert_eq!(stdout(&out).trim(), "done");
    let reqs = h.fake.message_requests();
    assert_eq!(reqs.len(), 3);
    let initiators: Vec<_> = reqs
        .iter()
        .map(|r| r.header("x-initiator").unwrap().to_owned())
        .collect();
    assert_eq!(initiators, ["user", "agent", "agent"]);
    for r in &reqs {
        assert_eq!(r.json()["model"], "claude-opus-5.5");
        assert_eq!(r.header("openai-intent"), Some("messages-proxy"));
        assert!(
            r.header("authorization")
                .unwrap()
                .starts_with("Bearer tid=")
        );
    }
    let last = reqs[2].json();
    let text = last.to_string();
    assert!(
        text.contains("tool_result") && text.contains("hi"),
        "the Bash result reached the model"
    );
    assert_eq!(h.fake.header_violations(), Vec::<String>::new());
    assert_eq!(h.fake.mint_count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_sends_the_history() {
    let h = Host::new().await;
    h.fake.push(rule(
        Match::LastUserContains("banana".into()),
        Reply::text("Noted: banana."),
    ));
    h.fake.push(rule(
        Match::LastUserContains("which fruit".into()),
        Reply::text("You said banana."),
    ));
    let mut c = h.cmd();
    c.args([
        "claude",
        "-p",
        "remember the word banana",
        "--output-format",
        "json",
    ]);
    let out = blocking(move || run(c)).await;
    assert!(out.status.success());
    let result: Value = serde_json::from_slice(&out.stdout).unwrap();
    let session = result["session_id"].as_str().unwrap().to_owned();
    let mut c = h.cmd();
    c.args([
        "claude",
        "--resume",
        &session,
        "-p",
        "which fruit did I name?",
    ]);
    let out = blocking(move || run(c)).await;
    assert!(out.status.success());
    assert_eq!(stdout(&out).trim(), "You said banana.");
    let reqs = h.fake.message_requests();
    assert_eq!(reqs.len(), 2);
    let second = reqs[1].json().to_string();
    assert!(
        second.contains("remember the word banana"),
        "history missing from the resumed request"
    );
    assert!(
        second.contains("Noted: banana."),
        "assistant history missing"
    );
}

/// Starts `claude-host proxy --json` and returns the child and its announced settings.
fn start_proxy(h: &Host) -> (std::process::Child, Value) {
    let mut c = h.cmd();
    c.stderr(Stdio::inherit());
    spawn_proxy(c)
}

/// Starts `c` with `proxy --json` and returns the child and its announced settings.
fn spawn_proxy(mut c: Command) -> (std::process::Child, Value) {
    c.arg("proxy").arg("--json").stdout(Stdio::piped());
    let mut child = c.spawn().unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let info: Value =
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("bad line {line:?}: {e}"));
    (child, info)
}

fn cli_through(h: &Host, info: &Value, args: &[&str]) -> Command {
    let mut c = Command::new(cli());
    c.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", h.dir.path())
        .env("ANTHROPIC_BASE_URL", info["base_url"].as_str().unwrap())
        .env("ANTHROPIC_AUTH_TOKEN", info["auth_token"].as_str().unwrap())
        .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
        .current_dir(h.cwd())
        .stdin(Stdio::null())
        .args(args);
    c
}

fn terminate(mut child: std::process::Child) -> std::process::ExitStatus {
    let pid = child.id() as i32;
    // SAFETY: signalling our own child, which has not been reaped.
    #[allow(unsafe_code)]
    unsafe {
        libc::kill(pid, libc::SIGTERM);
    }
    child.wait().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bare_proxy_serves_the_users_own_claude() {
    let h = Host::new().await;
    h.fake
        .push(rule(Match::Always, Reply::text("proxied answer")));
    let (proxy, info) = start_proxy(&h);
    assert!(
        info["base_url"]
            .as_str()
            .unwrap()
            .starts_with("http://127.0.0.1:")
    );
    assert_eq!(info["pid"], proxy.id());
    let token = info["auth_token"].as_str().unwrap();
    let (nonce, session) = token.split_once('.').unwrap();
    assert_eq!(nonce.len(), 64);
    assert!(!session.is_empty());
    let c = cli_through(&h, &info, &["-p", "hello there"]);
    let out = blocking(move || run(c)).await;
    assert!(out.status.success());
    assert_eq!(stdout(&out).trim(), "proxied answer");
    assert_eq!(
        h.fake.message_requests()[0].json()["model"],
        "claude-opus-5.5"
    );
    let status = blocking(move || terminate(proxy)).await;
    assert!(status.success(), "proxy exit on SIGTERM: {status:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bare_proxy_marks_its_requests_for_the_benchmarks_when_asked() {
    let h = Host::new().await;
    h.fake
        .push(rule(Match::Always, Reply::text("marked answer")));
    let trace = h.dir.path().join("latency.trace");
    let mut c = h.cmd();
    c.env("CLAUDE_HOST_LATENCY_TRACE", &trace)
        .stderr(Stdio::inherit());
    let (proxy, info) = spawn_proxy(c);
    let token = info["auth_token"].as_str().unwrap().to_owned();
    let session = token.split_once('.').unwrap().1.to_owned();
    let resp = claude_host_testkit::http_client()
        .post(format!(
            "{}/v1/messages",
            info["base_url"].as_str().unwrap()
        ))
        .bearer_auth(&token)
        .header("anthropic-version", "2023-06-01")
        .json(
            &json!({"model": "claude-sonnet-4-5", "max_tokens": 16, "stream": true,
                      "messages": [{"role": "user", "content": "mark this"}]}),
        )
        .send()
        .await
        .unwrap();
    let status = resp.status();
    let body = resp.bytes().await;
    assert!(blocking(move || terminate(proxy)).await.success());
    assert_eq!(status, 200);
    let body = String::from_utf8_lossy(&body.unwrap()).into_owned();
    assert!(body.contains("message_stop"), "a whole answer: {body}");
    let marks: Vec<(String, String, u64)> = std::fs::read_to_string(&trace)
        .unwrap()
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            (f[0].to_owned(), f[1].to_owned(), f[2].parse().unwrap())
        })
        .collect();
    let steps: Vec<(&str, &str)> = marks
        .iter()
        .map(|(s, k, _)| (s.as_str(), k.as_str()))
        .collect();
    assert_eq!(
        steps,
        [
            ("proxy.request", session.as_str()),
            ("proxy.first", session.as_str())
        ],
        "one request, marked where it came in and where its answer began"
    );
    assert!(marks[0].2 <= marks[1].2, "{marks:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_cli_mid_stream_cancels_the_upstream_request() {
    let h = Host::new().await;
    let (reply, _gate) = Reply::gated("this answer never ends", 3);
    h.fake.push(rule(Match::Always, reply));
    let (proxy, info) = start_proxy(&h);
    let mut cli = cli_through(&h, &info, &["-p", "stream forever"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    h.fake
        .wait_message_requests(1, Duration::from_secs(20))
        .await
        .expect("the CLI never called the upstream");
    cli.kill().unwrap();
    cli.wait().unwrap();
    h.fake
        .wait_disconnects(1, Duration::from_secs(2))
        .await
        .unwrap();
    blocking(move || terminate(proxy)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offline_demo_with_the_shipped_replay_file() {
    let h = Host::new().await;
    let replay = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/hello.replay.jsonl"
    );
    let mut c = h.bare_cmd();
    c.args([
        "--upstream",
        &format!("replay:{replay}"),
        "claude",
        "-p",
        "say hello",
    ]);
    let out = blocking(move || run(c)).await;
    assert!(out.status.success());
    assert_eq!(
        stdout(&out).trim(),
        "Hello from the claude-host replay upstream! No network was used for this answer."
    );
    assert!(
        h.fake.requests().is_empty(),
        "the replay upstream touched the network"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn record_a_session_then_replay_it_offline() {
    let h = Host::new().await;
    h.fake
        .push(rule(Match::Always, Reply::text("recorded words")));
    let rec = h.dir.path().join("session.jsonl");
    let mut c = h.cmd();
    c.args([
        "--record",
        rec.to_str().unwrap(),
        "claude",
        "-p",
        "record me",
    ]);
    let out = blocking(move || run(c)).await;
    assert!(out.status.success());
    let text = std::fs::read_to_string(&rec).unwrap();
    assert!(
        !text.contains("gho_fake") && !text.contains("tid="),
        "secret in recording"
    );
    let mut c = h.bare_cmd();
    c.args([
        "--upstream",
        &format!("replay:{}", rec.display()),
        "claude",
        "-p",
        "record me",
    ]);
    let out = blocking(move || run(c)).await;
    assert!(out.status.success());
    assert_eq!(stdout(&out).trim(), "recorded words");
    assert_eq!(h.fake.message_requests().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anthropic_upstream_with_the_users_key_never_shows_the_key_to_the_cli() {
    use claude_host_testkit::fake::FAKE_ANTHROPIC_KEY;
    let h = Host::new().await;
    h.fake
        .push(rule(Match::Always, Reply::text("via anthropic")));
    let mut c = h.bare_cmd();
    c.env("ANTHROPIC_API_KEY", FAKE_ANTHROPIC_KEY)
        .env("CLAUDE_HOST_ANTHROPIC_BASE_URL", h.fake.url())
        .args(["--upstream", "anthropic", "claude", "-p", "hi"]);
    let out = blocking(move || run(c)).await;
    assert!(out.status.success());
    assert_eq!(stdout(&out).trim(), "via anthropic");
    let req = h.fake.message_requests().pop().unwrap();
    // The dashed id the CLI sent reaches Anthropic as is; the key comes from the proxy only.
    assert_eq!(req.json()["model"], "claude-opus-5-5");
    assert_eq!(req.header("x-api-key"), Some(FAKE_ANTHROPIC_KEY));
    assert_eq!(req.header("authorization"), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_list_show_fork_rm() {
    let h = Host::new().await;
    h.fake.push(rule(
        Match::LastUserContains("mango".into()),
        Reply::text("Mango noted."),
    ));
    let mut c = h.cmd();
    c.args(["claude", "-p", "remember mango", "--output-format", "json"]);
    let out = blocking(move || run(c)).await;
    assert!(out.status.success());
    let id = serde_json::from_slice::<Value>(&out.stdout).unwrap()["session_id"]
        .as_str()
        .unwrap()
        .to_owned();

    let sessions = |args: &[&str]| {
        let mut c = h.bare_cmd();
        c.arg("sessions").args(args);
        run(c)
    };
    let out = sessions(&["list", "--json"]);
    assert!(out.status.success());
    let list: Value = serde_json::from_slice(&out.stdout).unwrap();
    let first = &list["sessions"][0];
    assert_eq!(first["id"], id.as_str());
    assert_eq!(first["summary"], "remember mango");
    assert!(first["messages"].as_u64().unwrap() >= 2);
    let out = sessions(&["list", "--cwd", h.cwd().to_str().unwrap()]);
    assert!(stdout(&out).contains(&id));

    let out = sessions(&["show", &id]);
    assert!(out.status.success());
    let text = stdout(&out);
    assert!(
        text.contains("> remember mango") && text.contains("Mango noted."),
        "{text}"
    );

    let out = sessions(&["fork", &id, "--json"]);
    assert!(out.status.success());
    let fork = serde_json::from_slice::<Value>(&out.stdout).unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_ne!(fork, id);
    let out = sessions(&["rm", &fork]);
    assert!(out.status.success());
    let out = sessions(&["show", &fork]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no transcript"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_streams_text_and_json_and_denies_tools_without_a_terminal() {
    let h = Host::new().await;
    h.fake.push(Rule {
        when: Match::LastUserContains("hello run".into()),
        reply: Reply::text_deltas(vec!["Stre".into(), "amed ".into(), "reply".into()]),
        times: Some(2),
    });
    let file = h.cwd().join("blocked.txt");
    h.fake.push(rule(
        Match::LastUserContains("write it".into()),
        Reply::tool_use(
            "Write",
            json!({"file_path": file.to_str().unwrap(), "content": "x"}),
        ),
    ));
    h.fake
        .push(rule(Match::HasToolResult, Reply::text("could not write")));
    let mut c = h.cmd();
    c.args(["run", "hello run"]);
    let out = blocking(move || run(c)).await;
    assert!(out.status.success());
    assert_eq!(stdout(&out).trim(), "Streamed reply");

    let mut c = h.cmd();
    c.args(["run", "--json", "hello run"]);
    let out = blocking(move || run(c)).await;
    assert!(out.status.success());
    let lines: Vec<Value> = stdout(&out)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .collect();
    // The first line names the session, so a script can resume it.
    let intro = &lines[0];
    assert_eq!(intro["type"], "session");
    assert!(
        uuid::Uuid::parse_str(intro["id"].as_str().unwrap()).is_ok(),
        "{intro}"
    );
    assert_eq!(intro["cwd"], h.cwd().display().to_string());
    assert!(
        intro["model"].as_str().unwrap().starts_with("claude-"),
        "{intro}"
    );
    let types: Vec<String> = lines[1..]
        .iter()
        .map(|v| v["type"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(types.first().map(String::as_str), Some("chat/turnStarted"));
    assert_eq!(types.last().map(String::as_str), Some("chat/turnComplete"));
    assert_eq!(types.iter().filter(|t| *t == "chat/delta").count(), 3);

    let mut c = h.cmd();
    c.args(["run", "write it"]);
    let out = blocking(move || run(c)).await;
    assert!(out.status.success());
    assert!(!file.exists());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no terminal to ask on"));
    assert!(stdout(&out).contains("could not write"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_shows_a_subagents_tool_calls_indented_under_its_call() {
    let h = Host::new().await;
    std::fs::write(h.cwd().join("a.txt"), "hello").unwrap();
    h.fake.script_subagent_tool(
        "ask a helper",
        "SUBPROMPT list the files",
        (
            "Bash",
            json!({"command": "ls", "description": "List files"}),
        ),
        "Found a.txt.",
        "The helper found a.txt.",
    );
    let mut c = h.cmd();
    c.args(["run", "please ask a helper"]);
    let out = blocking(move || run(c)).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    let call = lines
        .iter()
        .position(|l| l.starts_with("[Agent "))
        .unwrap_or_else(|| panic!("the Agent call: {text}"));
    let inner = lines
        .iter()
        .position(|l| *l == "    [Bash ls]")
        .unwrap_or_else(|| panic!("the subagent's call, indented: {text}"));
    let result = lines
        .iter()
        .position(|l| *l == "      → a.txt")
        .unwrap_or_else(|| panic!("its result, indented: {text}"));
    assert!(call < inner && inner < result, "{text}");
    assert!(
        text.trim_end().ends_with("The helper found a.txt."),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_under_a_pseudo_terminal_asks_and_a_yes_runs_the_tool() {
    let h = Host::new().await;
    let file = h.cwd().join("approved.txt");
    h.fake.push(rule(
        Match::LastUserContains("make the file".into()),
        Reply::tool_use(
            "Write",
            json!({"file_path": file.to_str().unwrap(), "content": "ok\n"}),
        ),
    ));
    h.fake
        .push(rule(Match::HasToolResult, Reply::text("file made")));
    // `script` gives the command a pseudo-terminal; our stdin (the answer) is typed into it.
    let inner = format!("{} run 'make the file'", env!("CARGO_BIN_EXE_claude-host"));
    let mut c = h.cmd();
    c.env("TERM", "dumb");
    let mut c = {
        let mut s = Command::new("script");
        s.args(["-qec", &inner, "/dev/null"]);
        for (k, v) in c.get_envs() {
            if let Some(v) = v {
                s.env(k, v);
            }
        }
        s.env_remove("CLAUDE_HOST_LOG")
            .current_dir(h.cwd())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        s
    };
    let mut child = c.spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    // Answer once the model's first request (the tool call) is done; the terminal buffers
    // the line until the prompt reads it.
    h.fake
        .wait_message_requests(1, Duration::from_secs(30))
        .await
        .unwrap();
    use std::io::Write as _;
    stdin.write_all(b"y\n").unwrap();
    let out = blocking(move || child.wait_with_output().unwrap()).await;
    let screen = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{screen}");
    assert!(screen.contains("Allow Write"), "{screen}");
    assert!(screen.contains("file made"), "{screen}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "ok\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_keeps_the_session_overlay_and_resumes_with_history() {
    let h = Host::new().await;
    h.fake.push(rule(
        Match::LastUserContains("remember mango".into()),
        Reply::text("Mango noted."),
    ));
    h.fake.push(rule(
        Match::LastUserContains("which fruit".into()),
        Reply::text("Mango."),
    ));
    let mut c = h.cmd();
    c.args(["run", "--model", "claude-sonnet-4-5", "remember mango"]);
    let out = blocking(move || run(c)).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Everything under the data directory is the user's alone (titles are first prompts).
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        let home = h.home();
        assert_eq!(mode(&home), 0o700);
        assert_eq!(mode(&home.join("logs")), 0o700);
        assert_eq!(mode(&home.join("logs/claude-host.log")), 0o600);
        for f in [
            "sessions.sqlite",
            "sessions.sqlite-wal",
            "sessions.sqlite-shm",
        ] {
            let p = home.join(f);
            if f == "sessions.sqlite" || p.exists() {
                assert_eq!(mode(&p), 0o600, "{f}");
            }
        }
    }

    let mut c = h.cmd();
    c.args(["sessions", "list", "--json"]);
    let out = blocking(move || run(c)).await;
    let list: Value = serde_json::from_str(&stdout(&out)).unwrap();
    let s = &list["sessions"][0];
    assert_eq!(s["summary"], "remember mango", "the host's title");
    assert_eq!(s["host"]["model"], "claude-sonnet-4.5", "the catalog's id");
    let id = s["id"].as_str().unwrap().to_owned();

    let mut c = h.cmd();
    c.args(["run", "--resume", &id, "which fruit did I say?"]);
    let out = blocking(move || run(c)).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(stdout(&out).trim(), "Mango.");
    let last = h.fake.message_requests().pop().unwrap().json();
    assert!(
        last.to_string().contains("remember mango"),
        "history resumed"
    );
    assert_eq!(
        last["model"], "claude-sonnet-4.5",
        "the session's model kept"
    );
}

/// The text of the newest turn in a chat state (as `run --json` prints it on a resync).
fn turn_text(chat: &Value) -> String {
    let turn = if chat["activeTurn"].is_object() {
        &chat["activeTurn"]
    } else {
        chat["turns"].as_array().unwrap().last().unwrap()
    };
    claude_host_testkit::turn_markdown(turn)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_output_nobody_reads_for_a_whole_turn_stalls_nothing_and_loses_nothing() {
    let h = Host::new().await;
    let words: Vec<String> = (0..10_000).map(|i| format!("w{i} ")).collect();
    let expected = words.concat();
    h.fake.push(rule(Match::Always, Reply::text_deltas(words)));
    let mut c = h.cmd();
    c.args(["run", "--json", "a long answer"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut child = c.spawn().unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let (out, intro) = blocking(move || {
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        (out, serde_json::from_str::<Value>(&line).unwrap())
    })
    .await;
    let id = intro["id"].as_str().unwrap().to_owned();
    // Nobody reads the output while the whole turn runs (the pipe fills after a few hundred
    // lines): the turn still ends, which the host marks by saving the session.
    let db = h.home().join("sessions.sqlite");
    tokio::time::timeout(Duration::from_secs(120), async {
        loop {
            if db.exists()
                && let Ok(store) = claude_host_store::SqliteStore::open(&db).await
                && claude_host_store::Store::get(&store, &id)
                    .await
                    .is_ok_and(|r| r.is_some())
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("the turn ended on the host");
    let (lines, status) = blocking(move || {
        let lines: Vec<Value> = out
            .lines()
            .map(|l| serde_json::from_str(&l.unwrap()).unwrap())
            .collect();
        (lines, child.wait().unwrap())
    })
    .await;
    assert!(status.success());
    // What was printed late is whole: caught up from the replay buffer, or resynchronised
    // from a snapshot (the `resync` line) if it fell further behind than that.
    let mut text = String::new();
    for l in &lines {
        match l["type"].as_str().unwrap() {
            "resync" => text = turn_text(&l["chat"]),
            "chat/delta" => text.push_str(l["content"].as_str().unwrap()),
            "chat/responsePart" if l["part"]["kind"] == "markdown" => {
                text.push_str(l["part"]["content"].as_str().unwrap());
            }
            _ => {}
        }
    }
    // The output ends with the turn's end: its action, or a resync to a state showing it.
    let last = lines.last().unwrap();
    match last["type"].as_str().unwrap() {
        "resync" => {
            assert!(last["chat"]["activeTurn"].is_null(), "{last}");
            let turns = last["chat"]["turns"].as_array().unwrap();
            assert_eq!(turns.last().unwrap()["state"], "complete");
        }
        other => assert_eq!(other, "chat/turnComplete"),
    }
    assert!(
        text == expected,
        "{} of {} bytes",
        text.len(),
        expected.len()
    );
}

/// Three human prompts — one runs a tool, one hands work to a subagent, one is plain — and
/// everything Claude Code sends on its own: what the fake saw, by initiator, with the last
/// line of each request's last user text.
fn three_prompts_script(h: &Host) {
    let file = h.cwd().join("notes.txt");
    h.fake.push(rule(
        Match::LastUserContains("write the notes".into()),
        Reply::tool_use(
            "Write",
            json!({"file_path": file.to_str().unwrap(), "content": "notes\n"}),
        ),
    ));
    h.fake.push(rule(
        Match::LastUserContains("File created".into()),
        Reply::tool_use(
            "Bash",
            json!({"command": "echo listed", "description": "list"}),
        ),
    ));
    h.fake
        .push(rule(Match::HasToolResult, Reply::text("Notes written.")));
    h.fake.push(rule(
        Match::LastUserContains("ask a helper".into()),
        Reply::subagent_call("SUBPROMPT list the files"),
    ));
    h.fake.push(rule(
        Match::LastUserContains("SUBPROMPT".into()),
        Reply::text("Nothing here."),
    ));
    h.fake.push(rule(
        Match::HasToolResult,
        Reply::text("The helper found nothing."),
    ));
    h.fake.push(rule(
        Match::LastUserContains("thanks".into()),
        Reply::text("You're welcome."),
    ));
}

const THREE_PROMPTS: [&str; 3] = ["please write the notes", "now ask a helper", "thanks"];

/// Asserts the fake saw exactly the three prompts as the user's, and that `status` counts
/// what the fake counted.
async fn assert_three_premium_requests(h: &Host) {
    let reqs = h.fake.message_requests();
    let by: Vec<(String, String)> = reqs
        .iter()
        .map(|r| {
            (
                r.header("x-initiator").unwrap().to_owned(),
                r.last_user_text()
                    .lines()
                    .last()
                    .unwrap_or_default()
                    .to_owned(),
            )
        })
        .collect();
    let users: Vec<&str> = by
        .iter()
        .filter(|(i, _)| i == "user")
        .map(|(_, t)| t.as_str())
        .collect();
    assert_eq!(users, THREE_PROMPTS, "{by:#?}");
    assert!(
        by.iter()
            .any(|(i, t)| i == "agent" && t.contains("SUBPROMPT")),
        "{by:#?}"
    );
    let marker = claude_host_protocol::request_kind::PROMPT_MARKER.as_bytes();
    assert!(
        reqs.iter()
            .all(|r| !r.body.windows(marker.len()).any(|w| w == marker)),
        "the prompt hook's marker never reaches Copilot"
    );
    let mut c = h.cmd();
    c.args(["status", "--json"]);
    let out = blocking(move || run(c)).await;
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["requests"]["user"], 3, "{report}");
    assert_eq!(
        report["requests"]["agent"],
        (reqs.len() - 3) as u64,
        "{report}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_bills_exactly_its_three_prompts() {
    let h = Host::new().await;
    three_prompts_script(&h);
    let mut c = h.cmd();
    c.args(["run", "--permission-mode", "acceptEdits"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = c.spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let out = blocking(move || {
        use std::io::Write;
        for p in THREE_PROMPTS {
            writeln!(stdin, "{p}").unwrap();
        }
        drop(stdin);
        child.wait_with_output().unwrap()
    })
    .await;
    eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success());
    assert!(stdout(&out).contains("You're welcome."), "{}", stdout(&out));
    assert_three_premium_requests(&h).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_print_mode_bills_exactly_its_three_prompts_in_auto_mode() {
    let h = Host::new().await;
    three_prompts_script(&h);
    let mut session: Option<String> = None;
    for p in THREE_PROMPTS {
        let mut c = h.cmd();
        // Auto mode refuses subagents in `-p` behind any proxy (its safety check runs on
        // Anthropic's servers); that prompt runs in acceptEdits.
        let mode = if p.contains("helper") {
            "acceptEdits"
        } else {
            "auto"
        };
        c.args(["claude", "-p", p, "--output-format", "json"])
            .args(["--permission-mode", mode, "--allowedTools", "Write"]);
        if let Some(id) = &session {
            c.args(["--resume", id]);
        }
        let out = blocking(move || run(c)).await;
        assert!(out.status.success());
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        session = v["session_id"].as_str().map(str::to_owned);
    }
    assert!(h.cwd().join("notes.txt").exists());
    // The prompt hook ran (its marker was cut out of what it left in the conversation).
    let hooked = h
        .fake
        .message_requests()
        .iter()
        .any(|r| String::from_utf8_lossy(&r.body).contains("UserPromptSubmit hook success: "));
    assert!(hooked, "claude-host claude installs its prompt hook");
    assert_three_premium_requests(&h).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn used_up_premium_requests_are_said_plainly_in_claude_and_run() {
    let h = Host::new().await;
    h.fake.push(rule(Match::Always, Reply::text("Answered.")));
    h.fake.exhaust_premium(true);
    let mut c = h.cmd();
    c.args(["claude", "-p", "hello"]);
    let out = blocking(move || run(c)).await;
    assert!(!out.status.success());
    let said = format!("{}{}", stdout(&out), String::from_utf8_lossy(&out.stderr));
    assert!(said.contains("premium requests are used up"), "{said}");
    assert!(said.contains("2026-12-01"), "the reset date: {said}");
    let mut c = h.cmd();
    c.args(["run", "hello"]);
    let out = blocking(move || run(c)).await;
    assert!(!out.status.success());
    let said = format!("{}{}", stdout(&out), String::from_utf8_lossy(&out.stderr));
    assert!(said.contains("premium requests are used up"), "{said}");
    assert!(said.contains("2026-12-01"), "the reset date: {said}");
    // Claude Code does not retry a billing error: one refused request each.
    assert_eq!(h.fake.message_requests().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_fallback_model_the_turn_completes_on_it_and_says_so() {
    let h = Host::new().await;
    h.fake.push(rule(
        Match::Always,
        Reply::text("Answered by the fallback."),
    ));
    h.fake.exhaust_premium(true);
    let mut c = h.cmd();
    c.args([
        "--quota-fallback-model",
        "claude-haiku-5-5",
        "run",
        "--json",
        "hello",
    ]);
    let out = blocking(move || run(c)).await;
    assert!(out.status.success());
    let usage: Value = stdout(&out)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|v| v["type"] == "chat/usage")
        .unwrap();
    assert_eq!(usage["usage"]["model"], "claude-haiku-5-5", "{usage}");
    let models: Vec<String> = h
        .fake
        .message_requests()
        .iter()
        .map(|r| r.json()["model"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(models, ["claude-opus-5.5", "claude-haiku-5.5"]);
}

/// Four prompts of about 30,000 tokens each, Copilot's prompt limit 110,000 tokens (far below
/// the million Claude Code assumes for the model); `window` overrides the compaction window
/// claude-host sets. Every prompt must succeed; returns each request's prompt tokens.
async fn grow_past_the_limit(window: Option<&str>) -> (Vec<u64>, bool) {
    let mut config = claude_host_testkit::fake::FakeConfig::default();
    for m in &mut config.models {
        if m["capabilities"]["limits"].is_object() {
            m["capabilities"]["limits"]["max_prompt_tokens"] = json!(110_000);
        }
    }
    let h = Host::on(
        claude_host_testkit::fake::FakeUpstream::start_with(config)
            .await
            .unwrap(),
    );
    h.fake.push(Rule {
        when: Match::LastUserContains("detailed summary of the conversation".into()),
        reply: Reply::text(
            "<analysis>Long logs.</analysis>\n<summary>The user pasted four logs.</summary>",
        ),
        times: Some(usize::MAX),
    });
    h.fake.push(Rule {
        when: Match::Always,
        reply: Reply::text("Noted."),
        times: Some(usize::MAX),
    });
    let mut seed: u64 = 7;
    let mut log = |n: usize| -> String {
        (0..n)
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                char::from_digit((seed % 16) as u32, 16).unwrap()
            })
            .collect()
    };
    let mut session: Option<String> = None;
    for i in 0..4 {
        let prompt = format!("log {i}: {}", log(52_000));
        let mut c = h.cmd();
        c.args(["claude", "-p", &prompt, "--output-format", "json"]);
        if let Some(w) = window {
            c.env("CLAUDE_CODE_AUTO_COMPACT_WINDOW", w);
        }
        if let Some(id) = &session {
            c.args(["--resume", id]);
        }
        let out = blocking(move || c.output().unwrap()).await;
        let v: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|_| panic!("{}", String::from_utf8_lossy(&out.stderr)));
        assert_eq!(v["is_error"], false, "prompt {i}: {v}");
        session = v["session_id"].as_str().map(str::to_owned);
    }
    let reqs = h.fake.message_requests();
    let compacted = reqs.iter().any(|r| {
        r.last_user_text()
            .contains("detailed summary of the conversation")
    });
    let tokens = reqs
        .iter()
        .map(|r| claude_host_testkit::copilot_rules::prompt_tokens(&r.json()))
        .collect();
    (tokens, compacted)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_growing_past_copilots_prompt_limit_compacts_before_it() {
    let (tokens, compacted) = grow_past_the_limit(None).await;
    assert!(compacted, "Claude Code compacted: {tokens:?}");
    assert!(
        tokens.iter().all(|t| *t <= 110_000),
        "never over the limit: {tokens:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copilots_prompt_limit_error_makes_claude_code_compact_and_retry() {
    // The user's own window, far too large: the prompt goes over, Copilot refuses it, and
    // the refusal restated as "prompt is too long" makes Claude Code compact and retry.
    let (tokens, compacted) = grow_past_the_limit(Some("1000000")).await;
    assert!(tokens.iter().any(|t| *t > 110_000), "{tokens:?}");
    assert!(compacted, "{tokens:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_claude_host_drives_have_no_web_search_behind_copilot() {
    let h = Host::new().await;
    h.fake.push(Rule {
        when: Match::Always,
        reply: Reply::text("ok"),
        times: Some(usize::MAX),
    });
    // Claude Code offers WebSearch (a server tool Copilot refuses) when nobody stops it…
    let mut c = h.cmd();
    c.args(["claude", "-p", "hello"]);
    assert!(blocking(move || run(c)).await.status.success());
    // …and a session claude-host runs does not offer it.
    let mut c = h.cmd();
    c.args(["run", "hello"]);
    assert!(blocking(move || run(c)).await.status.success());
    let reqs = h.fake.message_requests();
    assert_eq!(reqs.len(), 2);
    // The deferred tools Claude Code lists for ToolSearch, one per line.
    let listed = |r: &claude_host_testkit::fake::CapturedRequest| {
        String::from_utf8_lossy(&r.body).contains(r"\nWebSearch\n")
    };
    assert!(listed(&reqs[0]));
    assert!(!listed(&reqs[1]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_supplied_values_cannot_forge_log_lines() {
    let h = Host::new().await;
    let mut c = h.cmd();
    c.stderr(Stdio::piped());
    let (mut child, info) = spawn_proxy(c);
    let nonce = info["auth_token"]
        .as_str()
        .unwrap()
        .split_once('.')
        .unwrap()
        .0
        .to_owned();
    let forged = "x\n2026-11-25T00:00:00Z  INFO FORGED line\u{1b}[2J";
    let long = "m".repeat(100_000);
    let http = claude_host_testkit::http_client();
    for (session, model) in [("s\nFORGED session", forged), ("s", long.as_str())] {
        let resp = http
            .post(format!("{}/v1/messages", info["base_url"].as_str().unwrap()))
            .header("authorization", format!("Bearer {nonce}.{}", session.replace('\n', "%0A")))
            .json(&json!({"model": model, "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 404, "an unknown model");
    }
    let mut stderr = child.stderr.take().unwrap();
    assert!(terminate(child).success());
    let mut err = String::new();
    std::io::Read::read_to_string(&mut stderr, &mut err).unwrap();
    assert!(
        err.lines().all(|l| !l.starts_with("2026-11-25T00:00:00Z")),
        "a forged line: {err}"
    );
    assert!(
        !err.contains('\u{1b}'),
        "an escape sequence reached the log"
    );
    assert!(
        err.contains("FORGED line\\u{1b}[2J"),
        "logged escaped: {err}"
    );
    assert!(
        err.len() < 20_000,
        "a 100 KB model name is cut: {} bytes",
        err.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_summarises_each_edit_and_json_carries_both_sides() {
    let h = Host::new().await;
    let a = h.cwd().join("a.txt");
    std::fs::write(&a, "one\ntwo\nthree\n").unwrap();
    h.fake.push(rule(
        Match::LastUserContains("tidy up".into()),
        Reply::tool_use(
            "Write",
            json!({"file_path": h.cwd().join("notes.md").to_str().unwrap(), "content": "# Notes\n- a\n"}),
        ),
    ));
    h.fake.push(rule(
        Match::LastUserContains("File created".into()),
        Reply::tool_use(
            "Edit",
            json!({"file_path": a.to_str().unwrap(), "old_string": "two\n", "new_string": "2\n2b\n"}),
        ),
    ));
    h.fake
        .push(rule(Match::HasToolResult, Reply::text("Tidied.")));
    let mut c = h.cmd();
    c.current_dir(h.cwd());
    c.args(["run", "--permission-mode", "acceptEdits", "please tidy up"]);
    let out = blocking(move || run(c)).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines.contains(&"    +2 −0 notes.md (new)"), "{text}");
    assert!(lines.contains(&"    +2 −1 a.txt"), "{text}");

    // The JSON lines carry the edits with content URIs.
    std::fs::write(&a, "one\ntwo\nthree\n").unwrap();
    h.fake.push(rule(
        Match::LastUserContains("once more".into()),
        Reply::tool_use(
            "Edit",
            json!({"file_path": a.to_str().unwrap(), "old_string": "three", "new_string": "3"}),
        ),
    ));
    h.fake
        .push(rule(Match::HasToolResult, Reply::text("Again.")));
    let mut c = h.cmd();
    c.args([
        "run",
        "--json",
        "--permission-mode",
        "acceptEdits",
        "once more",
    ]);
    let out = blocking(move || run(c)).await;
    assert!(out.status.success());
    let edit = stdout(&out)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|v| v["type"] == "chat/toolCallComplete")
        .flat_map(|v| {
            v["result"]["content"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .find(|c| c["type"] == "fileEdit")
        .expect("a fileEdit in the JSON output");
    assert_eq!(edit["diff"], json!({"added": 1, "removed": 1}));
    assert!(
        edit["before"]["content"]["uri"]
            .as_str()
            .unwrap()
            .starts_with("claude-host-content:/"),
        "{edit}"
    );
}

/// Every file under `dir` (not `.claude`) with its bytes.
fn tree(dir: &std::path::Path) -> std::collections::BTreeMap<String, Vec<u8>> {
    let mut out = std::collections::BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                let rel = p.strip_prefix(dir).unwrap().display().to_string();
                out.insert(rel, std::fs::read(&p).unwrap());
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_rewind_puts_the_tree_back_as_it_was_after_turn_one_and_cuts_the_rest() {
    let h = Host::new().await;
    let cwd = h.cwd();
    std::fs::write(cwd.join("gone.txt"), "doomed\n").unwrap();
    let path = |n: &str| cwd.join(n).to_str().unwrap().to_owned();
    let once = |when: Match, reply: Reply| Rule {
        when,
        reply,
        times: Some(1),
    };
    h.fake.push(once(
        Match::LastUserContains("turn one".into()),
        Reply::tool_use(
            "Write",
            json!({"file_path": path("keep.txt"), "content": "k1\n"}),
        ),
    ));
    h.fake.push(once(
        Match::LastUserContains("turn two".into()),
        Reply::tool_use(
            "Bash",
            json!({"command": "sed -i s/k1/k2/ keep.txt && printf 'new\\n' > made.txt && rm gone.txt",
                "description": "Shuffle files"}),
        ),
    ));
    h.fake.push(once(
        Match::LastUserContains("turn three".into()),
        Reply::tool_use(
            "Edit",
            json!({"file_path": path("made.txt"), "old_string": "new", "new_string": "newer"}),
        ),
    ));
    h.fake.push(rule(Match::HasToolResult, Reply::text("done")));
    let turn = |args: Vec<String>| {
        let mut c = h.cmd();
        c.arg("run")
            .arg("--permission-mode")
            .arg("bypassPermissions")
            .args(args);
        async move {
            let out = blocking(move || run(c)).await;
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            out
        }
    };
    let out = turn(vec!["--json".into(), "turn one".into()]).await;
    let first: Value = serde_json::from_str(stdout(&out).lines().next().unwrap()).unwrap();
    let id = first["id"].as_str().unwrap().to_owned();
    let after_one = tree(&cwd);
    assert_eq!(
        after_one.get("keep.txt").map(Vec::as_slice),
        Some(b"k1\n".as_slice())
    );
    let resume = |text: &str| vec!["--resume".to_owned(), id.clone(), text.to_owned()];
    turn(resume("turn two")).await;
    turn(resume("turn three")).await;
    let after_three = tree(&cwd);
    assert_eq!(
        after_three.get("made.txt").map(Vec::as_slice),
        Some(b"newer\n".as_slice())
    );
    assert!(!after_three.contains_key("gone.txt"));

    // A change made since: refused, nothing touched.
    std::fs::write(cwd.join("made.txt"), "mine\n").unwrap();
    let mut c = h.cmd();
    c.args(["sessions", "rewind", &id, "--to", "2"]);
    let out = blocking(move || run(c)).await;
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("made.txt changed on disk"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(std::fs::read(cwd.join("made.txt")).unwrap(), b"mine\n");
    std::fs::write(cwd.join("made.txt"), "newer\n").unwrap();

    let mut c = h.cmd();
    c.args(["sessions", "rewind", &id, "--to", "2"]);
    let out = blocking(move || run(c)).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(tree(&cwd), after_one, "byte for byte as after turn one");

    // The conversation goes on from turn one: the cut outlived the process that made it.
    h.fake.push(Rule {
        when: Match::LastUserContains("turn four".into()),
        reply: Reply::text("four"),
        times: Some(1),
    });
    turn(resume("turn four")).await;
    let last = h.fake.message_requests().pop().unwrap().json().to_string();
    assert!(
        last.contains("turn one") && last.contains("turn four"),
        "{last}"
    );
    assert!(
        !last.contains("turn two") && !last.contains("turn three"),
        "{last}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_expands_a_projects_slash_command_and_show_lists_what_was_active() {
    let h = Host::new().await;
    h.fake.set_default_reply(Reply::text("Released."));
    let cwd = h.cwd();
    std::fs::create_dir_all(cwd.join(".claude/commands")).unwrap();
    std::fs::write(
        cwd.join(".claude/commands/release.md"),
        "---\ndescription: Cut a release\n---\nMake release $ARGUMENTS with RELEASE-STEPS.\n",
    )
    .unwrap();
    let mut c = h.cmd();
    c.args(["run", "/release 1.4.2"]);
    let out = blocking(move || run(c)).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(stdout(&out).trim(), "Released.");
    let sent = h.fake.message_requests().pop().unwrap().json().to_string();
    assert!(
        sent.contains("Make release 1.4.2 with RELEASE-STEPS."),
        "the command's text with its argument: {sent}"
    );

    let mut c = h.cmd();
    c.args(["sessions", "list", "--json"]);
    let out = blocking(move || run(c)).await;
    let list: Value = serde_json::from_str(&stdout(&out)).unwrap();
    let id = list["sessions"][0]["id"].as_str().unwrap().to_owned();
    let mut c = h.cmd();
    c.args(["sessions", "show", &id]);
    let out = blocking(move || run(c)).await;
    let shown = stdout(&out);
    assert!(
        shown.contains("Customizations when it last ran:"),
        "{shown}"
    );
    assert!(shown.contains("command release"), "{shown}");
}

/// Whether process `pid` is alive (not gone, not a zombie).
fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, r)| r.split_whitespace().next() != Some("Z"))
        })
        .unwrap_or(false)
}

/// The pid a Bash tool call wrote to `file`, once it has.
async fn pid_in(file: &std::path::Path) -> i32 {
    let read = || {
        std::fs::read_to_string(file)
            .ok()
            .and_then(|t| t.trim().parse().ok())
    };
    until("the Bash tool ran", || read().is_some()).await;
    read().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_background_job_of_a_tool_ends_with_its_session() {
    let h = Host::new().await;
    let pidfile = h.cwd().join("job.pid");
    h.fake.push(rule(
        Match::LastUserContains("leave a job".into()),
        Reply::tool_use(
            "Bash",
            json!({"command": format!("tail -f /dev/null & echo $! > {}; echo started", pidfile.display()),
                "description": "start a background job"}),
        ),
    ));
    h.fake
        .push(rule(Match::HasToolResult, Reply::text("Left it running.")));
    let mut c = h.cmd();
    c.args([
        "run",
        "--permission-mode",
        "bypassPermissions",
        "leave a job",
    ]);
    let out = blocking(move || run(c)).await;
    assert!(out.status.success());
    assert_eq!(stdout(&out).trim().lines().last(), Some("Left it running."));
    let job = pid_in(&pidfile).await;
    // `run` has exited: its session ended, and the job with it (it was init's child already).
    until(&format!("job {job} to end with its session"), || {
        !alive(job)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_killed_with_sigkill_leaves_no_tool_process_running() {
    let h = Host::new().await;
    let pidfile = h.cwd().join("sleeper.pid");
    h.fake.push(rule(
        Match::LastUserContains("start a sleeper".into()),
        Reply::tool_use(
            "Bash",
            json!({"command": format!("tail -f /dev/null & echo $! > {}; echo started", pidfile.display()),
                "description": "start a background sleeper"}),
        ),
    ));
    // The turn stays open after the tool ran: the host is killed mid-turn.
    let (held, _gate) = Reply::gated("Still thinking about it.", 1);
    h.fake.push(Rule {
        when: Match::HasToolResult,
        reply: held,
        times: None,
    });
    let mut c = h.cmd();
    c.args([
        "run",
        "--permission-mode",
        "bypassPermissions",
        "start a sleeper",
    ])
    .stdout(std::process::Stdio::null())
    .stderr(std::process::Stdio::null());
    let mut host = c.spawn().unwrap();
    let sleeper = pid_in(&pidfile).await;
    // The tool's result went back: the turn is in its held reply.
    h.fake
        .wait_message_requests(2, Duration::from_secs(60))
        .await
        .unwrap();
    assert!(alive(sleeper), "the tool's background job runs");
    let cli_pids: Vec<i32> = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|p| {
            std::fs::read_to_string(format!("/proc/{p}/stat")).is_ok_and(|s| {
                s.rsplit_once(')').is_some_and(|(_, r)| {
                    r.split_whitespace().nth(1) == Some(&host.id().to_string())
                })
            })
        })
        .collect();
    assert!(!cli_pids.is_empty(), "the host has children");

    // SIGKILL: nothing of the host runs after it.
    host.kill().unwrap();
    let _ = host.wait();
    until(
        &format!("the sleeper {sleeper} and the host's children {cli_pids:?} to end"),
        || !alive(sleeper) && cli_pids.iter().all(|p| !alive(*p)),
    )
    .await;
}

/// A stand-in OTLP/HTTP collector on loopback: it answers 200 to every request and keeps
/// each one's path, content type and body.
#[cfg(feature = "otlp")]
struct Collector {
    url: String,
    got: std::sync::Arc<std::sync::Mutex<Vec<Exported>>>,
}

/// A request the collector received: path, content type and body.
#[cfg(feature = "otlp")]
type Exported = (String, String, Vec<u8>);

#[cfg(feature = "otlp")]
impl Collector {
    async fn start() -> Collector {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let got = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let keep = got.clone();
        tokio::spawn(async move {
            while let Ok((mut sock, _)) = listener.accept().await {
                let keep = keep.clone();
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 8192];
                    loop {
                        // One request: its head, then Content-Length bytes of body.
                        let head_end = loop {
                            if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                                break i + 4;
                            }
                            match sock.read(&mut chunk).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => buf.extend_from_slice(&chunk[..n]),
                            }
                        };
                        let head = String::from_utf8_lossy(&buf[..head_end]).to_lowercase();
                        let header = |name: &str| {
                            head.lines()
                                .find_map(|l| l.strip_prefix(&format!("{name}:")))
                                .map(|v| v.trim().to_owned())
                                .unwrap_or_default()
                        };
                        let len: usize = header("content-length").parse().unwrap_or(0);
                        while buf.len() < head_end + len {
                            match sock.read(&mut chunk).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => buf.extend_from_slice(&chunk[..n]),
                            }
                        }
                        let path = head.split_whitespace().nth(1).unwrap_or("").to_owned();
                        let body = buf[head_end..head_end + len].to_vec();
                        keep.lock()
                            .unwrap()
                            .push((path, header("content-type"), body));
                        buf.drain(..head_end + len);
                        let ok = b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n";
                        if sock.write_all(ok).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        Collector { url, got }
    }

    /// Whether an export to `/v1/metrics` has carried every one of `names`.
    fn has_metrics(&self, names: &[&str]) -> bool {
        let got = self.got.lock().unwrap();
        names.iter().all(|n| {
            got.iter().any(|(path, ctype, body)| {
                path == "/v1/metrics"
                    && ctype == "application/x-protobuf"
                    && body.windows(n.len()).any(|w| w == n.as_bytes())
            })
        })
    }
}

#[cfg(feature = "otlp")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn model_calls_are_exported_over_otlp_and_status_shows_todays_usage() {
    let h = Host::new().await;
    h.fake.push(rule(
        Match::LastUserContains("limit me".into()),
        Reply::error_before_stream(429, "rate_limit_error", "slow down"),
    ));
    let collector = Collector::start().await;
    let mut c = h.cmd();
    c.env("OTEL_EXPORTER_OTLP_ENDPOINT", &collector.url)
        .env("OTEL_METRIC_EXPORT_INTERVAL", "200")
        .stderr(Stdio::inherit());
    let (child, info) = spawn_proxy(c);
    let http = claude_host_testkit::http_client();
    for (prompt, status) in [("hello", 200), ("limit me", 429)] {
        let resp = http
            .post(format!(
                "{}/v1/messages",
                info["base_url"].as_str().unwrap()
            ))
            .header(
                "authorization",
                format!("Bearer {}", info["auth_token"].as_str().unwrap()),
            )
            .json(&json!({"model": "claude-opus-5.5", "max_tokens": 50,
                "messages": [{"role": "user", "content": prompt}]}))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), status, "{prompt}");
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let wanted = [
        "claude_host.proxy.requests",
        "claude_host.proxy.premium_requests",
        "claude_host.proxy.tokens",
        "claude_host.proxy.errors",
        "rate_limit_error",
        "claude-host",
    ];
    while !collector.has_metrics(&wanted) {
        assert!(
            std::time::Instant::now() < deadline,
            "no OTLP export with the proxy's counters reached the collector"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(terminate(child).success());
    let mut c = h.cmd();
    c.args(["status", "--json"]);
    let out = blocking(move || run(c)).await;
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let today = &report["today"];
    assert_eq!(today["requests"], 2, "{report}");
    assert_eq!(today["premium_requests"], 1, "the failed one is not billed");
    assert_eq!(
        today["premium_cost"], 1.0,
        "the model's multiplier is 1: {today}"
    );
    assert_eq!(today["agent_requests"], 0);
    assert!(today["input_tokens"].as_u64().unwrap() > 0, "{today}");
    assert!(today["output_tokens"].as_u64().unwrap() > 0, "{today}");
    assert_eq!(today["errors"], json!({"rate_limit_error": 1}));
    let mut c = h.cmd();
    c.arg("status");
    let text = String::from_utf8(blocking(move || run(c)).await.stdout).unwrap();
    assert!(
        text.contains("2 model calls, 1 premium (by you, counting as 1 at the models' multipliers) and 0 by the agent")
            && text.contains("errors: 1 rate_limit_error"),
        "{text}"
    );
}

/// A desktop session's default soft limit of 1,024 descriptors would refuse the proxy's
/// clients long before its own connection cap: the binary raises it to the hard limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(unsafe_code)]
async fn the_open_file_limit_is_raised_at_start() {
    use std::os::unix::process::CommandExt;
    let h = Host::new().await;
    let mut c = h.cmd();
    c.stderr(Stdio::inherit());
    // SAFETY: between fork and exec only setrlimit runs, which is async-signal-safe.
    unsafe {
        c.pre_exec(|| {
            let mut l = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            libc::getrlimit(libc::RLIMIT_NOFILE, &raw mut l);
            l.rlim_cur = 256;
            libc::setrlimit(libc::RLIMIT_NOFILE, &raw const l);
            Ok(())
        });
    }
    let mut hard = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct it is given.
    unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &raw mut hard) };
    let (proxy, info) = spawn_proxy(c);
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", info["pid"])).unwrap();
    let soft: u64 = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .and_then(|l| l.split_whitespace().nth(3))
        .and_then(|v| v.parse().ok())
        .unwrap();
    assert_eq!(soft, hard.rlim_max.min(65_536));
    assert!(soft > 256 || hard.rlim_max <= 256);
    terminate(proxy);
}
