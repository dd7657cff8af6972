//! The CPU cost of one stream event (budget: 2 µs). Run optimized:
//! `cargo test --release -p claude-host-protocol openai::tests::perf -- --ignored --nocapture`

use super::stream_chat::chunk;
use super::*;
use std::time::Instant;

/// This thread's CPU time in µs (Linux's schedstat), so that other processes sharing the
/// machine do not count; wall time elsewhere.
fn cpu_micros(wall: Instant) -> f64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<f64>().ok())
        .map_or_else(|| wall.elapsed().as_secs_f64() * 1e6, |ns| ns / 1e3)
}

/// Runs `f` `n` times; µs of CPU per run.
fn measure(n: u32, mut f: impl FnMut()) -> f64 {
    let wall = Instant::now();
    let start = cpu_micros(wall);
    for _ in 0..n {
        f();
    }
    (cpu_micros(wall) - start) / f64::from(n)
}

/// Average time per event over `n` repetitions of `event` after `prelude`.
fn per_event(
    dialect: Dialect,
    prelude: &[(Option<&str>, String)],
    event: (Option<&str>, &str),
    n: u32,
) -> f64 {
    let mut t = StreamTranslator::new(dialect, "claude-client-model");
    let mut out = bytes::BytesMut::with_capacity(1 << 20);
    for (name, data) in prelude {
        t.push(name.map(str::as_bytes), data.as_bytes(), &mut out);
    }
    measure(n, || {
        let step = t.push(event.0.map(str::as_bytes), event.1.as_bytes(), &mut out);
        assert_eq!(step, Step::Continue);
        if out.len() > 1 << 19 {
            out.clear();
        }
    })
}

#[test]
#[ignore = "a measurement: run optimized"]
fn one_event_costs_under_two_microseconds() {
    let n = 200_000;
    let text = chunk(json!({"content": " the quick brown fox"}), Value::Null);
    let args_first = chunk(
        json!({"tool_calls": [{"index": 0, "id": "call_1", "type": "function", "function": {"name": "Bash", "arguments": ""}}]}),
        Value::Null,
    );
    let args = chunk(
        json!({"tool_calls": [{"index": 0, "function": {"arguments": "\"ls -la /tmp\""}}]}),
        Value::Null,
    );
    let second = chunk(
        json!({"tool_calls": [{"index": 1, "id": "call_2", "type": "function", "function": {"name": "Read", "arguments": ""}}]}),
        Value::Null,
    );
    let buffered = chunk(
        json!({"tool_calls": [{"index": 1, "function": {"arguments": "\"/a/b\""}}]}),
        Value::Null,
    );
    let resp_text = json!({"type": "response.output_text.delta", "sequence_number": 12, "item_id": "msg_0123456789abcdef",
        "output_index": 1, "content_index": 0, "delta": " the quick brown fox", "logprobs": [], "obfuscation": "a1b2c3"}).to_string();
    let added = json!({"type": "response.output_item.added", "sequence_number": 3, "output_index": 1,
        "item": {"id": "msg_0123456789abcdef", "type": "message", "status": "in_progress", "role": "assistant", "content": []}}).to_string();
    let cases = [
        (
            "chat text",
            per_event(Dialect::ChatCompletions, &[], (None, &text), n),
        ),
        (
            "chat arguments",
            per_event(
                Dialect::ChatCompletions,
                &[(None, args_first.clone())],
                (None, &args),
                n,
            ),
        ),
        (
            "chat buffered arguments",
            per_event(
                Dialect::ChatCompletions,
                &[(None, args_first.clone()), (None, second)],
                (None, &buffered),
                n,
            ),
        ),
        (
            "responses text",
            per_event(
                Dialect::Responses,
                &[(Some("response.output_item.added"), added)],
                (Some("response.output_text.delta"), &resp_text),
                n,
            ),
        ),
    ];
    // What reading the event costs at all, for comparison.
    let parse_only = |data: &str| {
        measure(n, || {
            let v: serde::de::IgnoredAny = serde_json::from_str(data).unwrap_or_default();
            std::hint::black_box(v);
        })
    };
    println!(
        "reference, reading the chat text chunk and skipping it: {:.3} µs",
        parse_only(&text)
    );
    println!(
        "reference, reading the responses text event and skipping it: {:.3} µs",
        parse_only(&resp_text)
    );
    for (name, us) in cases {
        println!("{name}: {us:.3} µs/event");
        if !cfg!(debug_assertions) {
            assert!(us < 2.0, "{name}: {us} µs per event");
        }
    }
}
