//! `claude-host serve` as a process: READY line, VS Code settings, token handling.

use super::*;
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader};
use tokio_tungstenite::tungstenite::Message;

/// Starts `serve`, returns the child, the port and the printed settings.
pub(crate) fn start(mut c: Command) -> (std::process::Child, u16, Value) {
    c.args(["serve", "--port", "0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    let mut child = c.spawn().unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    let port: u16 = line
        .trim()
        .strip_prefix("READY:")
        .unwrap_or_else(|| panic!("no READY line: {line:?}"))
        .parse()
        .unwrap();
    // The settings snippet follows, as pretty JSON.
    let mut json_text = String::new();
    loop {
        let mut l = String::new();
        if out.read_line(&mut l).unwrap() == 0 {
            break;
        }
        json_text.push_str(&l);
        if l.starts_with('}') {
            break;
        }
    }
    (child, port, serde_json::from_str(&json_text).unwrap())
}

pub(crate) fn stop(child: &mut std::process::Child) -> std::process::ExitStatus {
    #[allow(unsafe_code)]
    // SAFETY: signalling our own child.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGTERM);
    }
    child.wait().unwrap()
}

async fn first_response(
    ws: &mut tokio_tungstenite::WebSocketStream<
        tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>,
    >,
) -> Value {
    loop {
        let msg = ws.next().await.unwrap().unwrap();
        if let Message::Text(t) = msg {
            let v: Value = serde_json::from_str(t.as_str()).unwrap();
            if v.get("id").is_some() {
                return v;
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_prints_ready_and_settings_and_demands_the_token() {
    let h = Host::new().await;
    let mut c = h.cmd();
    c.env("CLAUDE_HOST_CONNECTION_TOKEN", "my-token_123");
    let (mut child, port, settings) = start(c);
    assert_eq!(settings["chat.remoteAgentHostsEnabled"], true);
    let entry = &settings["chat.remoteAgentHosts"][0];
    assert_eq!(entry["address"], format!("ws://127.0.0.1:{port}"));
    assert_eq!(entry["connectionToken"], "my-token_123");

    let base = format!("ws://127.0.0.1:{port}");
    assert!(tokio_tungstenite::connect_async(&base).await.is_err());
    assert!(
        tokio_tungstenite::connect_async(format!("{base}/?tkn=other"))
            .await
            .is_err()
    );
    let (mut ws, _) = tokio_tungstenite::connect_async(format!("{base}/?tkn=my-token_123"))
        .await
        .unwrap();
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "channel": "ahp-root://", "clientId": "cli-test", "protocolVersions": ["1.0.0"],
        "initialSubscriptions": ["ahp-root://"]}});
    ws.send(Message::Text(init.to_string().into()))
        .await
        .unwrap();
    let r = first_response(&mut ws).await;
    let models = &r["result"]["snapshots"][0]["state"]["agents"][0]["models"];
    assert!(
        !models.as_array().unwrap().is_empty(),
        "signed in from GH_TOKEN at start: {r}"
    );
    drop(ws);
    assert!(stop(&mut child).success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_generated_token_is_kept_private_and_reused() {
    use std::os::unix::fs::PermissionsExt;
    let h = Host::new().await;
    let (mut child, _, settings) = start(h.cmd());
    let token = settings["chat.remoteAgentHosts"][0]["connectionToken"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(token.len() >= 32);
    assert!(stop(&mut child).success());
    let file = h.home().join("connection-token");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), token);
    assert_eq!(
        std::fs::metadata(&file).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let (mut child, _, settings) = start(h.cmd());
    assert_eq!(
        settings["chat.remoteAgentHosts"][0]["connectionToken"], token,
        "the same token after a restart"
    );
    assert!(stop(&mut child).success());
}
