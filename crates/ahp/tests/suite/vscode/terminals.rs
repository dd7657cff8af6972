//! Terminals as VS Code's Agents window uses them: `createTerminal` on a channel of its own
//! choosing, `terminal/input` and `terminal/resized` dispatched on it, output as
//! `terminal/data`, and `disposeTerminal` leaving no process behind.

use super::*;
use pretty_assertions::assert_eq;

/// Whether process `pid` exists.
fn alive(pid: &str) -> bool {
    std::path::Path::new("/proc").join(pid).exists()
}

/// All `terminal/data` on `channel` so far, joined.
fn output(c: &VsCode, channel: &str) -> String {
    c.actions
        .iter()
        .filter(|a| a["channel"] == channel && a["action"]["type"] == "terminal/data")
        .map(|a| a["action"]["data"].as_str().unwrap_or_default())
        .collect()
}

/// Reads until the terminal's output holds `needle`.
async fn until_output(c: &mut VsCode, channel: &str, needle: &str) -> String {
    loop {
        let out = output(c, channel);
        if out.contains(needle) {
            return out;
        }
        c.read().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminal_in_the_sessions_folder_echoes_input_and_closing_it_leaves_no_process() {
    let e = env().await;
    answer_always(&e, "ok");
    let (mut c, _model, _chat) = session_ready(&e).await;
    let work = e.work().canonicalize().unwrap();
    let channel = format!("agenthost-terminal:/{}", uuid::Uuid::new_v4());
    let r = c
        .request(
            "createTerminal",
            json!({"channel": channel, "claim": {"kind": "client", "clientId": c.client_id},
                "name": "bash", "cwd": claude_host_protocol::uri::file_uri(&work),
                "cols": 120, "rows": 30}),
        )
        .await;
    assert!(r.get("error").is_none(), "{r}");
    let snap = c.ok("subscribe", json!({"channel": channel})).await;
    let state = &snap["snapshot"]["state"];
    assert_eq!(state["lifecycle"]["status"], "running", "{state}");
    assert_eq!(state["isPty"], true);
    assert_eq!(state["cols"], 120);

    // Typed input runs in the session's folder; a background job is started too.
    let seq = c
        .dispatch(
            &channel,
            json!({"type": "terminal/input",
                "data": "sleep 300 & echo \"at:$PWD pid:$$ job:$!\"\n"}),
        )
        .await;
    assert!(c.echo(seq).await.get("rejectionReason").is_none());
    let out = until_output(&mut c, &channel, &format!("at:{} pid:", work.display())).await;
    let line = out
        .lines()
        .find(|l| l.starts_with(&format!("at:{}", work.display())))
        .unwrap_or_else(|| panic!("{out}"));
    let pid = line
        .split("pid:")
        .nth(1)
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .to_owned();
    let job = line.split("job:").nth(1).unwrap().trim().to_owned();
    assert!(alive(&pid) && alive(&job), "{line}");

    let seq = c
        .dispatch(
            &channel,
            json!({"type": "terminal/resized", "cols": 100, "rows": 40}),
        )
        .await;
    assert!(c.echo(seq).await.get("rejectionReason").is_none());
    let seq = c
        .dispatch(
            &channel,
            json!({"type": "terminal/resized", "cols": 0, "rows": 40}),
        )
        .await;
    assert!(c.echo(seq).await["rejectionReason"].is_string());
    // Actions of other families are refused on a terminal.
    let seq = c
        .dispatch(
            &channel,
            json!({"type": "chat/draftChanged", "draft": {"text": "x"}}),
        )
        .await;
    assert!(c.echo(seq).await["rejectionReason"].is_string());

    // Bad input: a folder outside every session's, a channel already taken.
    let r = c
        .request(
            "createTerminal",
            json!({"channel": format!("agenthost-terminal:/{}", uuid::Uuid::new_v4()),
                "claim": {"kind": "client", "clientId": c.client_id},
                "cwd": "file:///etc"}),
        )
        .await;
    assert_eq!(r["error"]["code"], -32009, "{r}");
    let r = c
        .request(
            "createTerminal",
            json!({"channel": channel, "claim": {"kind": "client", "clientId": c.client_id},
                "cwd": claude_host_protocol::uri::file_uri(&work)}),
        )
        .await;
    assert!(r.get("error").is_some(), "{r}");

    // Closing it: the shell and its job are gone, and the channel with them.
    let r = c
        .request("disposeTerminal", json!({"channel": channel}))
        .await;
    assert!(r.get("error").is_none(), "{r}");
    let deadline = std::time::Instant::now() + WAIT;
    while (alive(&pid) || alive(&job)) && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(!alive(&pid) && !alive(&job), "no process left behind");
    let r = c.request("subscribe", json!({"channel": channel})).await;
    assert!(r.get("error").is_some(), "{r}");
}
