//! Agent Host Protocol client messages (JSON-RPC 2.0 over WebSocket text frames) and the
//! actions they dispatch: the server's message reader, command params as the host reads them,
//! `dispatchAction` decoding, the root channel (reduce + publish + snapshot), the session and
//! chat reducers, and the session-config checks a `session/configChanged` goes through.
//! Input: one client text frame a line.
//!
//! Checks: an error is answered under a number, string or null id (JSON-RPC 2.0 §5); a
//! request keeps its id; a decoded action survives the JSON trip; reducing never panics and
//! the states stay serializable and read back equal.

use crate::input;
use crate::targets::stream_json::empty_chat;
use ahp::reducers::{apply_action_to_chat, apply_action_to_session};
use ahp_types::actions::StateAction;
use ahp_types::state::{RootState, SessionState};
use claude_host_agent::{Sequence, config};
use claude_host_ahp::ROOT;
use claude_host_ahp::fuzzing::{
    ClientMessage, RootChannel, from_params, is_resource_method, read_dispatch, read_message,
};
use serde_json::{Value, json};

fn session_state() -> Option<SessionState> {
    serde_json::from_value(json!({
        "provider": "claude",
        "title": "fuzz",
        "status": 0,
        "lifecycle": "ready",
        "modifiedAt": "2026-01-01T00:00:00Z",
        "createdAt": "2026-01-01T00:00:00Z",
        "resource": "ahp-session://fuzz",
        "chats": []
    }))
    .ok()
}

fn params_for(method: &str, params: Value) {
    use ahp_types::commands as c;
    match method {
        "initialize" => drop(from_params::<c::InitializeParams>(params)),
        "reconnect" => drop(from_params::<c::ReconnectParams>(params)),
        "createSession" => drop(from_params::<c::CreateSessionParams>(params)),
        "authenticate" => drop(from_params::<c::AuthenticateParams>(params)),
        "completions" => drop(from_params::<c::CompletionsParams>(params)),
        "fetchTurns" => drop(from_params::<c::FetchTurnsParams>(params)),
        "listSessions" => drop(from_params::<c::ListSessionsParams>(params)),
        m if is_resource_method(m) => drop(from_params::<c::ResourceReadParams>(params)),
        _ => {}
    }
}

/// Runs one input.
pub fn run(data: &[u8]) {
    let state = RootState {
        agents: Vec::new(),
        active_sessions: Some(0),
        terminals: None,
        config: None,
        meta: None,
    };
    let root = RootChannel::new(state, Sequence::default(), 64);
    let mut session = session_state();
    let mut chat = empty_chat();
    let schema = config::schema(&[], false);
    for line in input::lines(data) {
        let (method, params) = match read_message(&line) {
            Err(refused) => {
                let (id, e) = *refused;
                assert!(
                    id.is_null() || id.is_number() || id.is_string(),
                    "an error answered under the id {id} ({})",
                    e.message
                );
                let _ = e.to_json();
                continue;
            }
            Ok(ClientMessage::Response(_)) => continue,
            Ok(ClientMessage::Request { id, method, params }) => {
                assert!(
                    id.is_number() || id.is_string(),
                    "a request with the id {id}"
                );
                params_for(&method, params.clone());
                (method, params)
            }
            Ok(ClientMessage::Notification { method, params }) => (method, params),
        };
        assert!(
            params.is_object(),
            "params that are not an object got through"
        );
        if method != "dispatchAction" {
            continue;
        }
        let (channel, origin, action) = read_dispatch("fuzz-client", &params);
        if !matches!(action, StateAction::Unknown(_)) {
            input::assert_json_round_trip(&action, "a dispatched action");
        }
        if channel == ROOT {
            let rejected = (!matches!(action, StateAction::RootConfigChanged(_)))
                .then(|| "not on the root".to_owned());
            let _ = root.publish(action, Some(origin), rejected);
            continue;
        }
        if let StateAction::SessionConfigChanged(a) = &action {
            let mut values = a.config.clone();
            if config::map_client_keys(&mut values).is_ok() {
                let _ = config::check(&schema, &values);
                let _ = config::with_defaults(&schema, values);
            }
        }
        if let Some(s) = session.as_mut() {
            apply_action_to_session(s, &action);
        }
        apply_action_to_chat(&mut chat, &action);
    }
    input::assert_json_round_trip(&root.state(), "the root state");
    if let Some(s) = &session {
        input::assert_json_round_trip(s, "the session state");
    }
    input::assert_json_round_trip(&chat, "the chat state");
}
