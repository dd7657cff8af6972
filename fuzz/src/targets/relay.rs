//! The proxy's SSE relay, driven through the real router: a streaming request whose upstream
//! answers 200 with the input's bytes. Input = 1 flag byte (bit 0: the connection fails after
//! the last byte) + 4 chunk-size bytes + the upstream's stream.
//!
//! Checks, against a model of the relay's contract computed from the upstream's events: the
//! client gets every upstream event in order up to the first `message_stop` or `error` and
//! nothing after it; `message_start` has its model rewritten and nothing else changed; `[DONE]`
//! is dropped; an upstream `error` event reaches the client as an Anthropic error envelope; a
//! stream that ends early ends with exactly one `error` event; a failure before the first
//! event is a JSON error response with the right status.

use crate::input;
use bytes::Bytes;
use claude_host_protocol::error::{ErrorEnvelope, ErrorKind, status_for_error_type};
use claude_host_protocol::sse::{Event, EventParser, event_data, event_name, find_event_end};
use claude_host_proxy::fuzzing::{HOST, NONCE, Reply, exchange};
use claude_host_upstream::Catalog;
use indexmap::IndexMap;
use serde_json::value::RawValue;

const MODEL: &str = "claude-fuzz-model";

/// How the upstream stream ends, as the relay should see it.
enum End {
    /// `message_stop`.
    Stop,
    /// An `error` event with this envelope.
    Error(ErrorEnvelope),
    /// The upstream ended (or failed) before either.
    Cut,
}

/// What the client should get: the events the relay forwards (before its own closing error,
/// if any), how the stream ends, and whether any event went out before an error.
fn expected(stream: &[u8]) -> (Vec<(Event, Vec<u8>)>, End, usize) {
    let mut out = Vec::new();
    let mut counted = 0;
    let mut rest = stream;
    while let Ok(end) = find_event_end(rest, 0) {
        let raw = &rest[..end];
        rest = &rest[end..];
        let name = event_name(raw).map(|n| String::from_utf8_lossy(n).into_owned());
        let data = event_data(raw);
        let event = |name: &str, data: &[u8]| {
            let e = Event {
                name: name.to_owned(),
                data: String::from_utf8_lossy(data).into_owned(),
            };
            (e, data.to_vec())
        };
        match name.as_deref() {
            Some("message_start") => {
                out.push(event("message_start", &data));
                counted += 1;
            }
            // Named events the relay handles pass before the `[DONE]` check.
            Some("message_delta") => {
                out.push(event("message_delta", &data));
                counted += 1;
            }
            Some("message_stop") => {
                out.push(event("message_stop", &data));
                return (out, End::Stop, counted + 1);
            }
            Some("error") => {
                let env = ErrorEnvelope::parse(&data).unwrap_or_else(|| {
                    ErrorEnvelope::new(ErrorKind::Api, String::from_utf8_lossy(&data).into_owned())
                });
                return (out, End::Error(env), counted);
            }
            _ if data.as_ref() == b"[DONE]" => {}
            n => {
                out.push(event(n.unwrap_or(""), &data));
                counted += 1;
            }
        }
    }
    (out, End::Cut, counted)
}

/// Top-level or `message` fields of a JSON object, raw.
type Fields = IndexMap<String, Box<RawValue>>;

/// The client's view of a forwarded `message_start` must be the upstream's, byte for byte but
/// for `message.model` (the client's id) and line breaks between tokens; one without a
/// `message` object is untouched. `raw` is the data as sent (the events hold lossy text).
fn check_message_start(got: &str, sent: &str, raw: &[u8]) {
    let sent_fields = serde_json::from_slice::<Fields>(raw).ok();
    let sent_message = sent_fields
        .as_ref()
        .and_then(|t| t.get("message"))
        .and_then(|m| serde_json::from_str::<Fields>(m.get()).ok());
    let (Some(sent_fields), Some(sent_message)) = (sent_fields, sent_message) else {
        assert_eq!(
            got, sent,
            "a message_start without a message object changed"
        );
        return;
    };
    let flat = |s: &str| s.replace(['\n', '\r'], "");
    let Ok(got_fields) = serde_json::from_str::<Fields>(got) else {
        panic!("a rewritten message_start is not a JSON object: {got:?}");
    };
    let keys = |f: &Fields| f.keys().cloned().collect::<Vec<_>>();
    assert_eq!(
        keys(&got_fields),
        keys(&sent_fields),
        "message_start's fields changed"
    );
    for (k, v) in &sent_fields {
        if k != "message" {
            assert_eq!(
                got_fields[k].get(),
                flat(v.get()),
                "message_start.{k} changed"
            );
        }
    }
    let Ok(got_message) = serde_json::from_str::<Fields>(got_fields["message"].get()) else {
        panic!("the rewritten message is not an object");
    };
    let mut want = keys(&sent_message);
    if !want.iter().any(|k| k == "model") {
        want.push("model".into());
    }
    assert_eq!(
        keys(&got_message),
        want,
        "message_start.message's fields changed"
    );
    for (k, v) in &sent_message {
        if k != "model" {
            assert_eq!(
                got_message[k].get(),
                flat(v.get()),
                "message_start.message.{k} changed"
            );
        }
    }
    assert_eq!(
        got_message["model"].get(),
        format!("\"{MODEL}\""),
        "the model was not rewritten"
    );
}

/// Runs one input.
pub fn run(data: &[u8]) {
    let (ctl, stream) = input::split(data, 5);
    let fail_at_end = ctl.first().is_some_and(|b| b & 1 == 1);
    let sizes = ctl.get(1..).unwrap_or(&[]);
    let chunks = input::chunks(stream, sizes)
        .into_iter()
        .map(Bytes::copy_from_slice)
        .collect();
    let body = format!(
        r#"{{"model":"{MODEL}","max_tokens":64,"stream":true,"messages":[{{"role":"user","content":"hi"}}]}}"#
    );
    let Ok(request) = http::Request::post("/v1/messages")
        .header("host", HOST)
        .header("authorization", format!("Bearer {NONCE}.fuzz-session"))
        .header("content-type", "application/json")
        .body(Bytes::from(body))
    else {
        return;
    };
    let reply = Reply {
        status: 200,
        headers: vec![("content-type".into(), "text/event-stream".into())],
        chunks,
        fail_at_end,
    };
    let got = exchange(request, Catalog::default(), reply, None);
    let (events, end, counted) = expected(stream);

    let json_error = |status: u16| {
        assert_eq!(got.status, status, "status of an error before the stream");
        assert!(
            ErrorEnvelope::parse(&got.body).is_some(),
            "an error before the stream is not an error envelope: {:?}",
            String::from_utf8_lossy(&got.body)
        );
    };
    match &end {
        End::Error(env) if counted == 0 => {
            return json_error(status_for_error_type(&env.error.kind));
        }
        End::Cut if counted == 0 => return json_error(502),
        _ => {}
    }
    assert_eq!(got.status, 200, "a started stream answers 200");

    let mut p = EventParser::new();
    p.push(&got.body);
    let mut client = Vec::new();
    while let Some(e) = p.next_event() {
        client.push(e);
    }
    assert!(
        p.pending().is_empty(),
        "the client got a partial event at the end"
    );
    // Events with neither name nor data are invisible to a client's parser; so are they here.
    let visible: Vec<&(Event, Vec<u8>)> = events
        .iter()
        .filter(|(e, _)| !(e.name.is_empty() && e.data.is_empty()))
        .collect();
    let (forwarded, closing) = match end {
        End::Stop => (&client[..], None),
        _ => match client.split_last() {
            Some((last, rest)) => (rest, Some(last)),
            None => panic!("a stream without message_stop did not end with an error event"),
        },
    };
    assert_eq!(
        forwarded.len(),
        visible.len(),
        "the client got other events than the upstream sent: {client:?}"
    );
    for (g, (e, raw)) in forwarded.iter().zip(&visible) {
        assert_eq!(g.name, e.name, "event names differ");
        if e.name == "message_start" {
            check_message_start(&g.data, &e.data, raw);
        } else {
            assert_eq!(g.data, e.data, "event data changed");
        }
    }
    if let Some(last) = closing {
        assert_eq!(
            last.name, "error",
            "a stream without message_stop must end with an error"
        );
        let Some(env) = ErrorEnvelope::parse(last.data.as_bytes()) else {
            panic!("the closing error is not an envelope: {:?}", last.data);
        };
        if let End::Error(sent) = end {
            assert_eq!(env, sent, "the upstream's error changed on the way");
        }
    }
}
