//! Request routing and the non-streaming handlers.

use crate::State;
use crate::auth::{check_bearer, host_allowed};
use crate::relay::{Billing, Relay, RelayStart, RequestLog};
use bytes::Bytes;
use claude_host_protocol::adapt::{Adapted, Refusal, adapt};
use claude_host_protocol::betas::filter_betas;
use claude_host_protocol::copilot_errors::{self, CopilotRefusal};
use claude_host_protocol::count_tokens::estimate_input_tokens;
use claude_host_protocol::error::{ErrorEnvelope, ErrorKind};
use claude_host_protocol::log_safe::Safe;
use claude_host_protocol::messages::MessagesRequest;
use claude_host_protocol::model_id;
use claude_host_protocol::models::{AnthropicModel, CopilotModelInfo, ModelsPage};
use claude_host_protocol::openai::{
    Dialect, StreamTranslator, translate_request, translate_response,
};
use claude_host_protocol::request_kind::{RequestKind, strip_marker};
use claude_host_upstream::{Catalog, MessagesCall, ModelApi, UpstreamError};
use futures::StreamExt;
use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, Limited};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The response body type: whole or streamed.
pub(crate) type Body = UnsyncBoxBody<Bytes, std::io::Error>;

/// A request body the handlers read: hyper's `Incoming` when serving, an in-memory body for
/// the fuzz targets (`fuzzing` feature).
pub(crate) trait RequestBody:
    hyper::body::Body<Data = Bytes, Error: Into<Box<dyn std::error::Error + Send + Sync>>>
    + Send
    + 'static
{
}

impl<B> RequestBody for B where
    B: hyper::body::Body<Data = Bytes, Error: Into<Box<dyn std::error::Error + Send + Sync>>>
        + Send
        + 'static
{
}

pub(crate) async fn handle<B: RequestBody>(req: Request<B>, state: Arc<State>) -> Response<Body> {
    // HTTP/1.1 requires exactly one Host; an absolute-form target must name the same
    // authority. Anything else is malformed (400), not merely foreign.
    let hosts = req.headers().get_all(header::HOST).iter().count();
    let malformed = match (hosts, req.uri().authority()) {
        (0, _) => Some("the request has no Host header".to_owned()),
        (1, None) => None,
        (1, Some(a)) => req
            .headers()
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .filter(|h| h.eq_ignore_ascii_case(a.as_str()))
            .is_none()
            .then(|| "the request target's authority differs from its Host header".to_owned()),
        (n, _) => Some(format!("the request has {n} Host headers")),
    };
    if let Some(why) = malformed {
        tracing::warn!(reason = %why, "refused a malformed request");
        return error(StatusCode::BAD_REQUEST, ErrorKind::InvalidRequest, why);
    }
    let host = req.headers().get(header::HOST).map(HeaderValue::as_bytes);
    if !host_allowed(host, &state.allowed_hosts) {
        let shown = host
            .map(String::from_utf8_lossy)
            .unwrap_or_default()
            .into_owned();
        tracing::warn!(host = %Safe(&shown), "refused a request with a foreign Host header");
        return error(
            StatusCode::FORBIDDEN,
            ErrorKind::Permission,
            format!("Host header {shown:?} is not served by this proxy (DNS rebinding protection)"),
        );
    }
    let path = req.uri().path().to_owned();
    if req.method() == Method::GET && path == "/" {
        return full(
            StatusCode::OK,
            "text/plain; charset=utf-8",
            Bytes::from_static(b"ok"),
        );
    }
    let Some(session) = check_bearer(
        req.headers()
            .get(header::AUTHORIZATION)
            .map(HeaderValue::as_bytes),
        &state.nonce,
    )
    .map(str::to_owned) else {
        tracing::warn!(method = %req.method(), %path, "refused an unauthenticated request");
        return error(
            StatusCode::UNAUTHORIZED,
            ErrorKind::Authentication,
            "Invalid authentication",
        );
    };
    match (req.method().clone(), path.as_str()) {
        (Method::POST, "/v1/messages") => messages(req, state, session).await,
        (Method::POST, "/v1/messages/count_tokens") => count_tokens(req, state).await,
        (Method::GET, "/v1/models") => models(state).await,
        (method, _) => error(
            StatusCode::NOT_FOUND,
            ErrorKind::NotFound,
            format!("No route for {method} {path}"),
        ),
    }
}

async fn read_body<B: RequestBody>(
    req: Request<B>,
    limit: usize,
    timeout: std::time::Duration,
) -> Result<Bytes, Response<Body>> {
    let too_large = || {
        error(
            StatusCode::PAYLOAD_TOO_LARGE,
            ErrorKind::RequestTooLarge,
            format!("Request body exceeds the proxy's limit of {limit} bytes"),
        )
    };
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(too_large());
    }
    let body = tokio::time::timeout(timeout, Limited::new(req.into_body(), limit).collect());
    let Ok(read) = body.await else {
        return Err(error(
            StatusCode::REQUEST_TIMEOUT,
            ErrorKind::InvalidRequest,
            format!(
                "the request body did not arrive within {} s",
                timeout.as_secs()
            ),
        ));
    };
    match read {
        Ok(b) => Ok(unpinned(b.to_bytes())),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => Err(too_large()),
        Err(e) => Err(error(
            StatusCode::BAD_REQUEST,
            ErrorKind::InvalidRequest,
            format!("Failed to read request body: {e}"),
        )),
    }
}

/// A body that arrived in one read is a slice of the connection's read buffer, and would
/// keep that whole buffer (8 KiB or more) alive for as long as the request is handled, so
/// that the connection allocates another. A small body is copied out; a larger one arrived in
/// several reads and was joined into an allocation of its own already.
fn unpinned(body: Bytes) -> Bytes {
    if body.len() <= 64 * 1024 {
        Bytes::copy_from_slice(&body)
    } else {
        body
    }
}

async fn messages<B: RequestBody>(
    req: Request<B>,
    state: Arc<State>,
    session: String,
) -> Response<Body> {
    let started = Instant::now();
    let header_str = |name: &str| {
        req.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let anthropic_version = header_str("anthropic-version");
    // Claude Code names a subagent's requests with this header (the body says so too).
    let subagent_header = req.headers().contains_key("x-claude-code-agent-id");
    let beta = header_str("anthropic-beta");
    let user_agent = header_str("user-agent");
    let body = match read_body(req, state.config.body_limit, state.config.body_timeout).await {
        Ok(b) => b,
        Err(resp) => return resp,
    };
    claude_host_trace::mark(claude_host_trace::PROXY_REQUEST, &session);
    let parsed = match MessagesRequest::parse(&body) {
        Ok(p) => p,
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                ErrorKind::InvalidRequest,
                e.to_string(),
            );
        }
    };
    if parsed.classified.kind == RequestKind::WarmUp && !subagent_header {
        // The session's first real call follows: have the upstream ready for it (a token,
        // the catalog, a connection), as part of the warm-up rather than of that call.
        let prepared = tokio::time::timeout(WARM_UP_PREPARE, state.upstream().prepare()).await;
        tracing::debug!(session = %Safe(&session), prepared = prepared.is_ok(), "answered a warm-up turn locally");
        return warm_up_answer(&parsed.model, parsed.stream);
    }
    let upstream = state.upstream();
    let catalog = match upstream.catalog().await {
        Ok(c) => c,
        Err(e) => return upstream_error(&e),
    };
    let upstream_model = if catalog.strict {
        let ids = catalog.upstream_ids();
        match model_id::resolve(&parsed.model, &ids) {
            Some(id) => id.to_owned(),
            None => {
                let available: Vec<&str> =
                    catalog.models.iter().map(|m| m.sdk_id.as_str()).collect();
                tracing::warn!(session = %Safe(&session), model = %Safe(&parsed.model), "unknown model");
                return error(
                    StatusCode::NOT_FOUND,
                    ErrorKind::NotFound,
                    format!(
                        "Unknown model: {}. Available models: {}",
                        parsed.model,
                        if available.is_empty() {
                            "(none)".to_owned()
                        } else {
                            available.join(", ")
                        }
                    ),
                );
            }
        }
    } else {
        parsed.model.clone()
    };
    let fallback = state
        .config
        .quota_fallback_model
        .as_deref()
        .filter(|_| catalog.strict)
        .and_then(|m| model_id::resolve(m, &catalog.upstream_ids()).map(str::to_owned));
    // Once premium requests are used up, requests go to the fallback model straight away.
    let first_model = match &fallback {
        Some(f) if state.quota_exhausted() => f.clone(),
        _ => upstream_model.clone(),
    };
    let mut prepared = match prepare(&parsed, &body, &catalog, &first_model) {
        Ok(p) => p,
        Err(refusal) => {
            tracing::warn!(session = %Safe(&session), model = %Safe(&first_model), reason = %Safe(&refusal.to_string()), "refused before the upstream");
            return error(
                StatusCode::BAD_REQUEST,
                ErrorKind::InvalidRequest,
                refusal.to_string(),
            );
        }
    };
    let decision = state
        .ledger
        .decide(&session, &parsed.classified, subagent_header);
    let kind = if subagent_header {
        RequestKind::Subagent
    } else {
        parsed.classified.kind
    };
    let anthropic_beta = match beta {
        Some(b) if upstream.filters_betas() => filter_betas(&b, &state.config.beta_families),
        other => other,
    };
    let mut log = RequestLog::new(
        crate::ActiveRequest::new(&state),
        session.clone(),
        parsed.model.clone(),
        prepared.model.clone(),
        started,
        Billing {
            initiator: decision.initiator,
            kind,
            counts: decision.counts,
            adapted: prepared.rules.clone(),
            multiplier: multiplier_of(&catalog, &prepared.model),
        },
    );
    let mut call = MessagesCall {
        body: prepared.body.clone(),
        model: prepared.model.clone(),
        api: prepared.api,
        stream: parsed.stream,
        initiator: decision.initiator,
        kind,
        vision: parsed.has_images,
        anthropic_version,
        anthropic_beta,
        client_user_agent: user_agent,
        session_id: session.clone(),
    };
    let (resp, passthrough) = loop {
        let resp = match upstream.messages(call.clone()).await {
            Ok(r) => r,
            Err(e) => {
                let resp = upstream_error(&e);
                log.finish(resp.status().as_u16(), &format!("upstream error: {e}"));
                return resp;
            }
        };
        let passthrough: Vec<(String, String)> = resp
            .headers
            .iter()
            .filter(|(k, _)| matches!(k.as_str(), "retry-after" | "request-id" | "x-request-id"))
            .cloned()
            .collect();
        if (200..300).contains(&resp.status) {
            break (resp, passthrough);
        }
        let status = resp.status;
        let (err_body, fault) = match collect_body(resp.body, ERROR_BODY_CAP).await {
            Ok(b) => (b, None),
            // An error body's message comes first; its start is enough.
            Err((BodyFault::TooLarge, head)) => (head, None),
            Err((BodyFault::Cut(e), partial)) => (Bytes::new(), Some((e, partial.len()))),
        };
        let refusal = catalog
            .strict
            .then(|| copilot_errors::classify(status, &err_body))
            .flatten();
        if refusal == Some(CopilotRefusal::QuotaExhausted) {
            state.mark_quota_exhausted();
            if let Some(f) = &fallback
                && *f != prepared.model
                && let Ok(p) = prepare(&parsed, &body, &catalog, f)
            {
                tracing::warn!(session = %Safe(&session), from = %prepared.model, to = %f, "premium requests used up; answering with the fallback model");
                prepared = p;
                log.set_upstream_model(&prepared.model, multiplier_of(&catalog, &prepared.model));
                call.body = prepared.body.clone();
                call.model = prepared.model.clone();
                call.api = prepared.api;
                continue;
            }
        }
        let (status, env) = match (refusal, fault) {
            (Some(r), _) => {
                let reset = if r == CopilotRefusal::QuotaExhausted {
                    upstream.quota_reset().await
                } else {
                    None
                };
                r.restate(reset.as_deref())
            }
            (None, None) => (status, ErrorEnvelope::from_upstream_body(status, &err_body)),
            // The status alone still tells the client what happened (a 429 stays retryable),
            // so it is kept; the partial body is not a message worth showing.
            (None, Some((e, read))) => {
                let mut env = ErrorEnvelope::from_upstream_body(status, b"");
                env.error.message = format!(
                    "upstream returned HTTP {status}, and its error body was cut off after {read} bytes: {}",
                    transport_detail(&e)
                );
                (status, env)
            }
        };
        log.set_error(&env.error.kind);
        log.finish(
            status,
            &format!("upstream {}: {}", env.error.kind, env.error.message),
        );
        return with_headers(json(status_code(status), env.to_json()), &passthrough);
    };
    // A prompt is spent once the upstream takes the request; a refusal gives it back so
    // that the client's retry is the billed one.
    if let Some(claim) = decision.claim {
        claim.keep();
    }
    // The model that answered: the client's own id, unless the fallback stood in (then its
    // usage shows where the answer came from).
    let answered_by = if prepared.model == upstream_model {
        parsed.model.clone()
    } else {
        catalog
            .models
            .iter()
            .find(|m| m.upstream_id == prepared.model)
            .map_or_else(|| prepared.model.clone(), |m| m.sdk_id.clone())
    };
    if !parsed.stream {
        // A 2xx status promises a whole message. Partial or unparseable bytes passed on as a
        // success would fail in the client's JSON parser, where nothing retries; a 502
        // `api_error` is what the client's retry logic is built for.
        let fail = |log: &mut RequestLog, message: String| {
            log.finish(StatusCode::BAD_GATEWAY.as_u16(), &message);
            with_headers(
                error(StatusCode::BAD_GATEWAY, ErrorKind::Api, message),
                &passthrough,
            )
        };
        let body = match collect_body(resp.body, MESSAGE_BODY_CAP).await {
            Ok(b) => b,
            Err((BodyFault::Cut(e), partial)) => {
                return fail(
                    &mut log,
                    format!(
                        "upstream response was cut off after {} bytes: {}",
                        partial.len(),
                        transport_detail(&e)
                    ),
                );
            }
            Err((BodyFault::TooLarge, _)) => {
                return fail(
                    &mut log,
                    format!("upstream response exceeds {MESSAGE_BODY_CAP} bytes"),
                );
            }
        };
        let body = match prepared.dialect {
            None => body,
            Some(dialect) => match translate_response(dialect, &body, &answered_by) {
                Ok(message) => Bytes::from(message),
                Err(env) => {
                    log.set_error(&env.error.kind);
                    let status =
                        claude_host_protocol::error::status_for_error_type(&env.error.kind);
                    log.finish(status, &env.error.message);
                    return with_headers(json(status_code(status), env.to_json()), &passthrough);
                }
            },
        };
        let mut message = match serde_json::from_slice::<serde_json::Value>(&body) {
            Ok(v @ serde_json::Value::Object(_)) => v,
            Ok(_) => {
                return fail(
                    &mut log,
                    format!(
                        "upstream answered HTTP {} with JSON that is not a message object",
                        resp.status
                    ),
                );
            }
            Err(e) => {
                return fail(
                    &mut log,
                    format!(
                        "upstream answered HTTP {} with a body that is not valid JSON: {e}",
                        resp.status
                    ),
                );
            }
        };
        if message.get("model").is_some() {
            message["model"] = serde_json::Value::String(answered_by);
        }
        log.set_usage_from_message(&message);
        log.finish(resp.status, "ok");
        // Re-serialising a value that was just parsed cannot fail.
        let out = serde_json::to_vec(&message).unwrap_or_default();
        return with_headers(json(status_code(resp.status), out), &passthrough);
    }
    let translator = prepared
        .dialect
        .map(|dialect| StreamTranslator::new(dialect, &answered_by));
    let mut relay = Relay::new(
        resp.body,
        answered_by,
        &state.config,
        log,
        state.background.clone(),
    );
    if let Some(translator) = translator {
        relay = relay.translating(translator);
    }
    match relay.start().await {
        RelayStart::Stream(relay) => {
            let mut r = Response::builder()
                .status(StatusCode::OK)
                .header(header::CONTENT_TYPE, "text/event-stream")
                .header(header::CACHE_CONTROL, "no-cache");
            for (k, v) in &passthrough {
                r = r.header(k.as_str(), v.as_str());
            }
            r.body(BodyExt::boxed_unsync(relay.into_body()))
                .unwrap_or_else(|_| internal_error())
        }
        RelayStart::Error { status, envelope } => {
            with_headers(json(status_code(status), envelope.to_json()), &passthrough)
        }
    }
}

/// The premium multiplier of the catalog's `model` (an upstream id), when known.
fn multiplier_of(catalog: &Catalog, model: &str) -> Option<f64> {
    catalog
        .models
        .iter()
        .find(|m| m.upstream_id == model)
        .and_then(|m| m.multiplier)
}

/// A request fitted to one upstream model.
struct Prepared {
    model: String,
    /// The API the body is for.
    api: ModelApi,
    /// Set when the body was translated to an OpenAI API (and the reply must be translated back).
    dialect: Option<Dialect>,
    body: Bytes,
    rules: Vec<&'static str>,
}

/// `parsed` for `model`: its id, fitted to the model's catalog entry when the catalog is
/// Copilot's (`original` is the client's body, forwarded untouched when nothing changes), or
/// translated for a model served on an OpenAI API; with the prompt hook's marker cut out.
fn prepare(
    parsed: &MessagesRequest,
    original: &Bytes,
    catalog: &Catalog,
    model: &str,
) -> Result<Prepared, Refusal> {
    let entry = catalog
        .models
        .iter()
        .find(|m| catalog.strict && m.upstream_id == model);
    if let Some((entry, target)) = entry.and_then(|m| Some((m, m.openai_target()?))) {
        let translated = translate_request(parsed, &target)?;
        let body = if parsed.classified.has_marker {
            strip_marker(&translated.body)
        } else {
            translated.body
        };
        return Ok(Prepared {
            model: model.to_owned(),
            api: entry.api,
            dialect: Some(target.dialect),
            body: Bytes::from(body),
            rules: translated.rules,
        });
    }
    let adapted = match entry {
        Some(m) => adapt(parsed, &m.rules())?,
        None => Adapted::default(),
    };
    let mut body = if model == parsed.model && adapted.is_empty() {
        original.clone()
    } else {
        Bytes::from(parsed.body_with(model, &adapted.fields))
    };
    if parsed.classified.has_marker {
        body = Bytes::from(strip_marker(&body));
    }
    Ok(Prepared {
        model: model.to_owned(),
        api: ModelApi::Messages,
        dialect: None,
        body,
        rules: adapted.rules.iter().map(|r| r.as_str()).collect(),
    })
}

async fn count_tokens<B: RequestBody>(req: Request<B>, state: Arc<State>) -> Response<Body> {
    let body = match read_body(req, state.config.body_limit, state.config.body_timeout).await {
        Ok(b) => b,
        Err(resp) => return resp,
    };
    if let Err(e) = MessagesRequest::parse(&body) {
        return error(
            StatusCode::BAD_REQUEST,
            ErrorKind::InvalidRequest,
            e.to_string(),
        );
    }
    let value: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
    let tokens = estimate_input_tokens(&value);
    let mut resp = json(
        StatusCode::OK,
        format!("{{\"input_tokens\":{tokens}}}").into_bytes(),
    );
    resp.headers_mut()
        .insert("x-claude-host-estimate", HeaderValue::from_static("true"));
    resp
}

async fn models(state: Arc<State>) -> Response<Body> {
    let catalog = match state.upstream().catalog().await {
        Ok(c) => c,
        Err(e) => return upstream_error(&e),
    };
    let page = ModelsPage::new(
        catalog
            .models
            .iter()
            .map(|m| AnthropicModel {
                id: m.sdk_id.clone(),
                kind: "model".to_owned(),
                display_name: m.display_name.clone(),
                created_at: "1970-01-01T00:00:00Z".to_owned(),
                max_input_tokens: m.max_prompt_tokens,
                max_tokens: m.max_output_tokens,
                copilot: catalog.strict.then(|| CopilotModelInfo {
                    endpoint: m.api,
                    vendor: m.vendor.clone(),
                    context_window: m.max_context_window,
                    vision: m.supports_vision,
                    reasoning: m.reasoning,
                    effort_levels: m.effort_levels.clone(),
                    premium_multiplier: m.multiplier,
                }),
            })
            .collect(),
    );
    json(
        StatusCode::OK,
        serde_json::to_vec(&page).unwrap_or_default(),
    )
}

/// Largest upstream error body read; a longer one is cut to this (its message comes first).
const ERROR_BODY_CAP: usize = 1024 * 1024;

/// Largest non-streaming message accepted from the upstream: far above any real reply (output
/// is bounded by `max_tokens`), it only stops a broken upstream from exhausting memory.
const MESSAGE_BODY_CAP: usize = 64 * 1024 * 1024;

/// Why an upstream body could not be read whole.
enum BodyFault {
    /// The upstream connection failed before the body ended.
    Cut(UpstreamError),
    /// The body is longer than the cap.
    TooLarge,
}

/// Reads a whole upstream body of at most `cap` bytes. On failure, the bytes read so far
/// (at most `cap`) come with the fault.
async fn collect_body(
    mut body: futures::stream::BoxStream<'static, Result<Bytes, UpstreamError>>,
    cap: usize,
) -> Result<Bytes, (BodyFault, Bytes)> {
    let mut out = bytes::BytesMut::new();
    while let Some(chunk) = body.next().await {
        match chunk {
            Ok(c) if out.len() + c.len() <= cap => out.extend_from_slice(&c),
            Ok(c) => {
                out.extend_from_slice(&c[..cap - out.len()]);
                return Err((BodyFault::TooLarge, out.freeze()));
            }
            Err(e) => return Err((BodyFault::Cut(e), out.freeze())),
        }
    }
    Ok(out.freeze())
}

/// The cause of a mid-body failure, without the "upstream unreachable" prefix that
/// [`UpstreamError::Transport`] carries for failures before any reply.
fn transport_detail(e: &UpstreamError) -> String {
    match e {
        UpstreamError::Transport(detail) => detail.clone(),
        other => other.to_string(),
    }
}

/// Maps a failure with no upstream HTTP reply to the client-facing error.
pub(crate) fn upstream_error(e: &UpstreamError) -> Response<Body> {
    let (status, kind) = match e {
        UpstreamError::NotSignedIn | UpstreamError::CredentialRejected(_) => {
            (StatusCode::UNAUTHORIZED, ErrorKind::Authentication)
        }
        UpstreamError::NoCopilotAccess(_) => (StatusCode::FORBIDDEN, ErrorKind::Permission),
        UpstreamError::Replay(_) => (StatusCode::NOT_FOUND, ErrorKind::NotFound),
        UpstreamError::Transport(_) | UpstreamError::Http { .. } | UpstreamError::Protocol(_) => {
            (StatusCode::BAD_GATEWAY, ErrorKind::Api)
        }
    };
    tracing::warn!(error = %e, "upstream failure");
    error(status, kind, e.to_string())
}

/// How long a warm-up turn waits for the upstream to get ready before it is answered anyway.
const WARM_UP_PREPARE: Duration = Duration::from_secs(3);

/// The answer to the host's warm-up turn, made here: the turn exists only to run the CLI's
/// first-turn code ahead of a real prompt, and is cut from the conversation right after, so
/// no model needs to see it and no premium request is spent on it.
fn warm_up_answer(model: &str, stream: bool) -> Response<Body> {
    const TEXT: &str = "ok";
    let id = format!("msg_warm_up_{:016x}", rand::random::<u64>());
    let usage = serde_json::json!({"input_tokens": 0, "output_tokens": 0});
    if !stream {
        let message = serde_json::json!({
            "id": id, "type": "message", "role": "assistant", "model": model,
            "content": [{"type": "text", "text": TEXT}],
            "stop_reason": "end_turn", "stop_sequence": null, "usage": usage,
        });
        return json(StatusCode::OK, message.to_string().into_bytes());
    }
    let events = [
        (
            "message_start",
            serde_json::json!({"type": "message_start", "message": {
            "id": id, "type": "message", "role": "assistant", "model": model, "content": [],
            "stop_reason": null, "stop_sequence": null, "usage": usage}}),
        ),
        (
            "content_block_start",
            serde_json::json!({"type": "content_block_start", "index": 0,
            "content_block": {"type": "text", "text": ""}}),
        ),
        (
            "content_block_delta",
            serde_json::json!({"type": "content_block_delta", "index": 0,
            "delta": {"type": "text_delta", "text": TEXT}}),
        ),
        (
            "content_block_stop",
            serde_json::json!({"type": "content_block_stop", "index": 0}),
        ),
        (
            "message_delta",
            serde_json::json!({"type": "message_delta",
            "delta": {"stop_reason": "end_turn", "stop_sequence": null},
            "usage": {"output_tokens": 0}}),
        ),
        ("message_stop", serde_json::json!({"type": "message_stop"})),
    ];
    let mut body = String::new();
    for (name, data) in events {
        body.push_str(&format!("event: {name}\ndata: {data}\n\n"));
    }
    full(StatusCode::OK, "text/event-stream", Bytes::from(body))
}

fn status_code(status: u16) -> StatusCode {
    StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY)
}

pub(crate) fn error(
    status: StatusCode,
    kind: ErrorKind,
    message: impl Into<String>,
) -> Response<Body> {
    json(status, ErrorEnvelope::new(kind, message).to_json())
}

fn json(status: StatusCode, body: Vec<u8>) -> Response<Body> {
    full(status, "application/json", Bytes::from(body))
}

fn full(status: StatusCode, content_type: &'static str, body: Bytes) -> Response<Body> {
    let mut resp = Response::new(BodyExt::boxed_unsync(
        Full::new(body).map_err(|never| match never {}),
    ));
    *resp.status_mut() = status;
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    resp
}

fn with_headers(mut resp: Response<Body>, headers: &[(String, String)]) -> Response<Body> {
    for (k, v) in headers {
        if let (Ok(k), Ok(v)) = (
            http::HeaderName::from_bytes(k.as_bytes()),
            HeaderValue::from_str(v),
        ) {
            resp.headers_mut().insert(k, v);
        }
    }
    resp
}

fn internal_error() -> Response<Body> {
    error(
        StatusCode::INTERNAL_SERVER_ERROR,
        ErrorKind::Api,
        "Internal proxy error",
    )
}
