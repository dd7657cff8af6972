//! What the proxy counts of its model calls: per UTC day, for `claude-host status`, and as
//! OpenTelemetry counters when the host was given a meter (it exports them over OTLP).

use opentelemetry::KeyValue;
use opentelemetry::metrics::{Counter, Meter};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Mutex;

/// One UTC day's model calls through the proxy.
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
pub struct DayUsage {
    /// Every `POST /v1/messages` that ended, however it ended.
    pub requests: u64,
    /// Those sent with `X-Initiator: user` that did not fail: the ones Copilot bills as
    /// premium requests (times the model's multiplier).
    pub premium_requests: u64,
    /// What those count as against the plan's premium quota: each one times its model's
    /// multiplier (0 for a model the plan includes; 1 when the catalog does not say).
    #[serde(default)]
    pub premium_cost: f64,
    /// Those sent with `X-Initiator: agent` (not billed).
    pub agent_requests: u64,
    /// Prompt tokens (cache reads and writes included) and output tokens, as the upstream
    /// reported them.
    pub input_tokens: u64,
    /// See `input_tokens`.
    pub output_tokens: u64,
    /// Failed requests by Anthropic error type (`rate_limit_error`, `api_error`, …).
    #[serde(default)]
    pub errors: BTreeMap<String, u64>,
}

impl DayUsage {
    /// Adds `other` to this day.
    pub fn add(&mut self, other: &DayUsage) {
        self.requests += other.requests;
        self.premium_requests += other.premium_requests;
        self.premium_cost += other.premium_cost;
        self.agent_requests += other.agent_requests;
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
        for (kind, n) in &other.errors {
            *self.errors.entry(kind.clone()).or_default() += n;
        }
    }
}

/// One ended request, as the proxy records it.
pub(crate) struct Ended<'a> {
    pub(crate) model: &'a str,
    pub(crate) premium: bool,
    /// The model's premium multiplier, when the catalog gives one.
    pub(crate) multiplier: Option<f64>,
    pub(crate) kind: &'a str,
    pub(crate) status: u16,
    pub(crate) error: Option<&'a str>,
    pub(crate) input_tokens: u64,
    pub(crate) output_tokens: u64,
}

struct Instruments {
    requests: Counter<u64>,
    premium: Counter<u64>,
    tokens: Counter<u64>,
    errors: Counter<u64>,
}

/// The proxy's counts. Days older than [`KEEP_DAYS`] are dropped as new ones start.
pub(crate) struct Telemetry {
    instruments: Option<Instruments>,
    days: Mutex<BTreeMap<String, DayUsage>>,
    changes: tokio::sync::watch::Sender<u64>,
}

/// Days kept in memory (the usage files keep what `status` shows).
const KEEP_DAYS: usize = 31;

impl Telemetry {
    pub(crate) fn new(meter: Option<&Meter>) -> Telemetry {
        let instruments = meter.map(|m| Instruments {
            requests: m
                .u64_counter("claude_host.proxy.requests")
                .with_description("Model calls through the proxy, by initiator, kind, model and status")
                .build(),
            premium: m
                .u64_counter("claude_host.proxy.premium_requests")
                .with_description("Model calls sent as the user's (X-Initiator: user) that did not fail: what Copilot bills")
                .build(),
            tokens: m
                .u64_counter("claude_host.proxy.tokens")
                .with_unit("{token}")
                .with_description("Tokens the upstream reported, by direction and model")
                .build(),
            errors: m
                .u64_counter("claude_host.proxy.errors")
                .with_description("Failed model calls, by Anthropic error type")
                .build(),
        });
        Telemetry {
            instruments,
            days: Mutex::new(BTreeMap::new()),
            changes: tokio::sync::watch::channel(0).0,
        }
    }

    pub(crate) fn record(&self, r: &Ended<'_>) {
        let billed = r.premium && r.error.is_none();
        if let Some(i) = &self.instruments {
            let initiator = if r.premium { "user" } else { "agent" };
            i.requests.add(
                1,
                &[
                    KeyValue::new("initiator", initiator),
                    KeyValue::new("kind", r.kind.to_owned()),
                    KeyValue::new("model", r.model.to_owned()),
                    KeyValue::new("status", i64::from(r.status)),
                ],
            );
            if billed {
                i.premium
                    .add(1, &[KeyValue::new("model", r.model.to_owned())]);
            }
            for (direction, n) in [("input", r.input_tokens), ("output", r.output_tokens)] {
                if n > 0 {
                    i.tokens.add(
                        n,
                        &[
                            KeyValue::new("direction", direction),
                            KeyValue::new("model", r.model.to_owned()),
                        ],
                    );
                }
            }
            if let Some(kind) = r.error {
                i.errors.add(1, &[KeyValue::new("kind", kind.to_owned())]);
            }
        }
        let day = today();
        {
            let mut days = self
                .days
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let d = days.entry(day).or_default();
            d.requests += 1;
            if billed {
                d.premium_requests += 1;
                d.premium_cost += r.multiplier.unwrap_or(1.0);
            }
            if !r.premium {
                d.agent_requests += 1;
            }
            d.input_tokens += r.input_tokens;
            d.output_tokens += r.output_tokens;
            if let Some(kind) = r.error {
                *d.errors.entry(kind.to_owned()).or_default() += 1;
            }
            while days.len() > KEEP_DAYS {
                days.pop_first();
            }
        }
        self.changes.send_modify(|n| *n += 1);
    }

    pub(crate) fn days(&self) -> BTreeMap<String, DayUsage> {
        self.days
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    pub(crate) fn changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changes.subscribe()
    }
}

/// Today's UTC date, `YYYY-MM-DD`.
pub fn today() -> String {
    let stamp =
        claude_host_protocol::time::rfc3339_from_millis(claude_host_protocol::time::now_millis());
    stamp.get(..10).unwrap_or(&stamp).to_owned()
}
