//! The proxy's request handling, through the real router: authentication, Host checks,
//! routing, body parsing, model resolution against a Copilot-like catalog, fitting the body to
//! the model (`adapt`), beta filtering, the prompt marker, the quota fallback and the error
//! paths. Input: an HTTP request as text (`METHOD PATH`, header lines, a blank line, the
//! body); `$TOKEN` in a header value stands for the proxy's nonce. Two pseudo-headers pick the
//! upstream: `x-fuzz-reply: N` (its answer) and `x-fuzz-catalog: lenient`.
//!
//! Checks: every answer is a well-formed status with an Anthropic error envelope when it is an
//! error; nothing reaches the upstream without valid authentication; what reaches the upstream
//! is a Messages body that parses, names the model it is sent to, keeps the client's other
//! fields byte for byte (but for the ones fitting may change), carries no prompt marker, and
//! needs no further fitting for that model; a parsed body written back with another model
//! parses to the same request.

use bytes::Bytes;
use claude_host_protocol::adapt::adapt;
use claude_host_protocol::betas::filter_betas;
use claude_host_protocol::count_tokens::estimate_input_tokens;
use claude_host_protocol::error::ErrorEnvelope;
use claude_host_protocol::messages::MessagesRequest;
use claude_host_protocol::request_kind::PROMPT_MARKER;
use claude_host_proxy::fuzzing::{NONCE, Reply, exchange};
use claude_host_upstream::{Catalog, CatalogModel};
use indexmap::IndexMap;
use serde_json::Value;
use serde_json::value::RawValue;

fn model(upstream: &str, sdk: &str) -> CatalogModel {
    CatalogModel {
        upstream_id: upstream.into(),
        sdk_id: sdk.into(),
        display_name: sdk.into(),
        ..CatalogModel::default()
    }
}

/// A catalog shaped like Copilot's: one thinking-budget model with vision, one adaptive model
/// with effort levels and no vision, one small model (the quota fallback).
fn copilot_catalog() -> Catalog {
    let mut sonnet = model("claude-sonnet-4.5", "claude-sonnet-4-5");
    sonnet.max_output_tokens = Some(32_000);
    sonnet.supports_vision = true;
    sonnet.thinking_budget = Some((1_024, 32_000));
    sonnet.is_default = true;
    let mut opus = model("claude-opus-4.6", "claude-opus-4-6");
    opus.max_output_tokens = Some(64_000);
    opus.adaptive_thinking = true;
    opus.effort_levels = vec!["low".into(), "medium".into(), "high".into()];
    let mut haiku = model("claude-haiku-4.5", "claude-haiku-4-5");
    haiku.max_output_tokens = Some(8_192);
    Catalog {
        models: vec![sonnet, opus, haiku],
        strict: true,
    }
}

fn reply(n: u8) -> Reply {
    let full = |status: u16, ct: &str, body: &str| Reply {
        status,
        headers: vec![
            ("content-type".into(), ct.into()),
            ("request-id".into(), "req_fuzz".into()),
        ],
        chunks: vec![Bytes::from(body.to_owned())],
        fail_at_end: false,
    };
    match n % 6 {
        0 => full(
            200,
            "text/event-stream",
            "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"model\":\"x\",\"usage\":{\"input_tokens\":3,\"output_tokens\":1}}}\n\nevent: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":2}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
        ),
        1 => full(
            200,
            "application/json",
            "{\"id\":\"m\",\"type\":\"message\",\"model\":\"x\",\"content\":[{\"type\":\"text\",\"text\":\"hi\"}],\"usage\":{\"input_tokens\":3,\"output_tokens\":1}}",
        ),
        2 => full(
            400,
            "application/json",
            "{\"error\":{\"message\":\"model max_tokens exceeded\",\"code\":\"invalid_request_body\"}}",
        ),
        3 => full(
            402,
            "application/json",
            "{\"error\":{\"message\":\"You have exceeded your premium request allowance\",\"code\":\"quota_exceeded\"}}",
        ),
        4 => full(503, "text/plain", "upstream unavailable"),
        _ => full(200, "application/json", "not json"),
    }
}

/// The request the input describes, and the pseudo-header settings.
fn request(data: &[u8]) -> Option<(http::Request<Bytes>, u8, bool)> {
    let split = data.windows(2).position(|w| w == b"\n\n");
    let (head, body) = match split {
        Some(i) => (&data[..i], &data[i + 2..]),
        None => (data, &[][..]),
    };
    let head = String::from_utf8_lossy(head);
    let mut lines = head.lines();
    let (method, path) = lines.next()?.split_once(' ')?;
    let mut b = http::Request::builder()
        .method(http::Method::from_bytes(method.as_bytes()).ok()?)
        .uri(path);
    let (mut which, mut lenient) = (0, false);
    for line in lines {
        let (k, v) = line.split_once(':')?;
        let v = v.trim().replace("$TOKEN", NONCE);
        match k.to_ascii_lowercase().as_str() {
            "x-fuzz-reply" => which = v.parse().unwrap_or(0),
            "x-fuzz-catalog" => lenient = v == "lenient",
            _ => b = b.header(k, v),
        }
    }
    Some((b.body(Bytes::copy_from_slice(body)).ok()?, which, lenient))
}

/// Top-level fields that fitting a request to a model may change (the prompt marker is cut
/// out of `messages` and `system`).
const MAY_CHANGE: [&str; 6] = [
    "model",
    "max_tokens",
    "thinking",
    "output_config",
    "messages",
    "system",
];

fn check_forwarded(
    client_body: &[u8],
    call: &claude_host_upstream::MessagesCall,
    catalog: &Catalog,
) {
    let Ok(sent) = MessagesRequest::parse(&call.body) else {
        panic!(
            "the upstream got a body that does not parse: {:?}",
            String::from_utf8_lossy(&call.body)
        );
    };
    assert_eq!(
        sent.model, call.model,
        "the body names another model than the call"
    );
    assert!(
        !String::from_utf8_lossy(&call.body).contains(PROMPT_MARKER),
        "the prompt marker reached the upstream"
    );
    let Ok(client) = MessagesRequest::parse(client_body) else {
        panic!("a body the proxy refused reached the upstream");
    };
    // Keys as the proxy reads them (raw values: a lone surrogate escape, say, is valid JSON
    // text that a `Value` refuses).
    let Ok(sent_fields) = serde_json::from_slice::<IndexMap<String, Box<RawValue>>>(&call.body)
    else {
        panic!("the forwarded body is not an object");
    };
    for key in sent_fields.keys() {
        let Some(raw) = client.field(key) else {
            panic!("the proxy added the field {key:?}");
        };
        if !MAY_CHANGE.contains(&key.as_str()) {
            let Some(sent_raw) = sent.field(key) else {
                panic!("{key:?} vanished on re-parse");
            };
            // The prompt marker is cut out wherever it stands.
            let client_raw = raw.get().replace(PROMPT_MARKER, "");
            assert_eq!(
                sent_raw.get(),
                client_raw,
                "{key:?} changed on the way upstream"
            );
        }
    }
    if let Some(m) = catalog
        .models
        .iter()
        .find(|m| catalog.strict && m.upstream_id == call.model)
    {
        match adapt(&sent, &m.rules()) {
            Ok(again) => assert!(
                again.is_empty(),
                "a fitted request still needs fitting for {}: {:?}",
                m.upstream_id,
                again
            ),
            Err(r) => panic!("a fitted request is refused by its own model: {r}"),
        }
    }
}

/// Runs one input.
pub fn run(data: &[u8]) {
    let Some((req, which, lenient)) = request(data) else {
        return;
    };
    let body = req.body().clone();
    let authorized = req
        .headers()
        .get("authorization")
        .and_then(|v| std::str::from_utf8(v.as_bytes()).ok())
        .is_some_and(|v| v.contains(NONCE));
    if let Some(beta) = req
        .headers()
        .get("anthropic-beta")
        .and_then(|v| v.to_str().ok())
    {
        let families = ["context-management", "interleaved-thinking"];
        if let Some(kept) = filter_betas(beta, &families) {
            for b in kept.split(',') {
                assert!(beta.contains(b.trim()), "filter_betas made up {b:?}");
            }
        }
    }

    // The body parser on its own: parse -> write back with another model -> parse.
    if let Ok(parsed) = MessagesRequest::parse(&body) {
        let again = MessagesRequest::parse(&parsed.body_with_model("claude-other"));
        let Ok(again) = again else {
            panic!("a parsed body written back does not parse");
        };
        assert_eq!(again.model, "claude-other");
        assert_eq!(again.stream, parsed.stream);
        assert_eq!(again.message_count, parsed.message_count);
        assert_eq!(again.has_images, parsed.has_images);
        if let Ok(v) = serde_json::from_slice::<Value>(&body) {
            let _ = estimate_input_tokens(&v);
        }
    }

    let catalog = if lenient {
        Catalog::default()
    } else {
        copilot_catalog()
    };
    let fallback = (which % 6 == 3).then(|| "claude-haiku-4-5".to_owned());
    let got = exchange(req, catalog.clone(), reply(which), fallback);
    assert!((100..600).contains(&got.status), "status {}", got.status);
    if got.status >= 400 {
        assert!(
            ErrorEnvelope::parse(&got.body).is_some(),
            "an error answer without an error envelope: {} {:?}",
            got.status,
            String::from_utf8_lossy(&got.body)
        );
    }
    if !authorized {
        assert!(
            got.calls.is_empty(),
            "an unauthenticated request reached the upstream"
        );
    }
    for call in &got.calls {
        check_forwarded(&body, call, &catalog);
    }
}
