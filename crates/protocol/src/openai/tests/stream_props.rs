//! Properties over many splits and orders of valid streams.

use super::stream_chat::chunk;
use super::stream_responses::Builder;
use super::*;
use proptest::prelude::*;
use std::collections::BTreeMap;

/// `s` cut at the char positions `cuts` (taken modulo its length), in order.
fn split(s: &str, cuts: &[usize]) -> Vec<String> {
    let chars: Vec<char> = s.chars().collect();
    let mut at: Vec<usize> = cuts.iter().map(|c| c % (chars.len() + 1)).collect();
    at.push(0);
    at.push(chars.len());
    at.sort_unstable();
    at.dedup();
    at.windows(2)
        .map(|w| chars[w[0]..w[1]].iter().collect())
        .collect()
}

/// Merges `a` and `b` keeping each one's order, taking from `a` where `pick` says so.
fn interleave<T>(a: Vec<T>, b: Vec<T>, pick: &[bool]) -> Vec<T> {
    let (mut a, mut b) = (a.into_iter().peekable(), b.into_iter().peekable());
    let mut out = Vec::new();
    let mut picks = pick.iter().cycle();
    while a.peek().is_some() || b.peek().is_some() {
        let from_a = b.peek().is_none() || (a.peek().is_some() && *picks.next().unwrap_or(&true));
        out.extend(if from_a { a.next() } else { b.next() });
    }
    out
}

fn arguments() -> impl Strategy<Value = String> {
    prop::collection::btree_map(
        "[a-z_]{1,6}",
        prop_oneof![
            ".{0,12}".prop_map(Value::from),
            any::<i32>().prop_map(Value::from),
            Just(json!({"nested": [1, "two\n", null]})),
        ],
        0..4,
    )
    .prop_map(|m: BTreeMap<String, Value>| serde_json::to_string(&m).unwrap())
}

fn well_formed_tools(events: &[Value], want: &[(&str, &str, &str)]) -> Result<(), TestCaseError> {
    let tools = check_well_formed(events);
    prop_assert_eq!(tools.len(), want.len());
    for ((id, name, partial), (want_id, want_name, want_args)) in tools.iter().zip(want) {
        prop_assert_eq!(id, want_id);
        prop_assert_eq!(name, want_name);
        let got: Value = serde_json::from_str(partial)
            .map_err(|e| TestCaseError::fail(format!("{partial:?} does not parse: {e}")))?;
        prop_assert_eq!(got, serde_json::from_str::<Value>(want_args).unwrap());
    }
    Ok(())
}

proptest! {
    #[test]
    fn chat_interleaved_tool_calls_stay_whole(
        args_a in arguments(),
        args_b in arguments(),
        cuts_a in prop::collection::vec(any::<usize>(), 0..12),
        cuts_b in prop::collection::vec(any::<usize>(), 0..12),
        pick in prop::collection::vec(any::<bool>(), 1..24),
        lead_text in prop::option::of(".{1,10}"),
        usage_in_finish in any::<bool>(),
    ) {
        let pieces = |id: &str, name: &str, index: u64, args: &str, cuts: &[usize]| {
            split(args, cuts).into_iter().enumerate().map(|(i, piece)| {
                let mut call = json!({"index": index, "function": {"arguments": piece}});
                if i == 0 {
                    call["id"] = json!(id);
                    call["type"] = json!("function");
                    call["function"]["name"] = json!(name);
                }
                chunk(json!({"tool_calls": [call]}), Value::Null)
            }).collect::<Vec<_>>()
        };
        let a = pieces("call_a", "Read", 0, &args_a, &cuts_a);
        let b = pieces("call_b", "Grep", 1, &args_b, &cuts_b);
        let mut chunks: Vec<String> = lead_text.iter().map(|t| chunk(json!({"content": t}), Value::Null)).collect();
        let first_is_a = pick[0];
        chunks.extend(interleave(a, b, &pick));
        let mut finish: Value = serde_json::from_str(&chunk(json!({}), json!("tool_calls"))).unwrap();
        if usage_in_finish {
            finish["usage"] = json!({"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7});
            chunks.push(finish.to_string());
        } else {
            chunks.push(finish.to_string());
            chunks.push(json!({"id": "chatcmpl-1", "choices": [],
                "usage": {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}}).to_string());
        }
        chunks.push("[DONE]".into());
        let events: Vec<(Option<&str>, &str)> = chunks.iter().map(|c| (None, c.as_str())).collect();
        let (out, step) = run(Dialect::ChatCompletions, &events);
        prop_assert_eq!(step, Step::Done);
        let (first, second) = if first_is_a {
            (("call_a", "Read", args_a.as_str()), ("call_b", "Grep", args_b.as_str()))
        } else {
            (("call_b", "Grep", args_b.as_str()), ("call_a", "Read", args_a.as_str()))
        };
        well_formed_tools(&out, &[first, second])?;
        prop_assert_eq!(out.last(), Some(&message_end("tool_use", 3, 4, 0)[1]));
    }

    #[test]
    fn responses_interleaved_function_calls_stay_whole(
        args_a in arguments(),
        args_b in arguments(),
        cuts_a in prop::collection::vec(any::<usize>(), 0..12),
        cuts_b in prop::collection::vec(any::<usize>(), 0..12),
        pick in prop::collection::vec(any::<bool>(), 1..24),
    ) {
        let calls = |index: u64, call_id: &str, name: &str, args: &str, cuts: &[usize]| {
            let mut b = Builder { events: Vec::new() };
            b.call_added(index, call_id, name);
            for piece in split(args, cuts) {
                b.call_delta(index, &piece);
            }
            b.call_done(index, call_id, name, args);
            b.events
        };
        let a = calls(0, "call_a", "Read", &args_a, &cuts_a);
        let b = calls(1, "call_b", "Grep", &args_b, &cuts_b);
        let mut stream = Builder::new();
        stream.events.extend(interleave(a, b, &pick));
        stream.completed(1, 0, 1);
        let (out, step) = stream.run();
        prop_assert_eq!(step, Step::Done);
        let (a, b) = (("call_a", "Read", args_a.as_str()), ("call_b", "Grep", args_b.as_str()));
        // In order of first appearance.
        well_formed_tools(&out, &if pick[0] { [a, b] } else { [b, a] })?;
    }

    #[test]
    fn chat_events_in_any_order_give_well_formed_output(
        order in Just((0..12).collect::<Vec<usize>>()).prop_shuffle(),
        keep in prop::collection::vec(any::<bool>(), 12),
    ) {
        let all = [
            chunk(json!({"role": "assistant", "reasoning_text": "think"}), Value::Null),
            chunk(json!({"reasoning_opaque": "OP"}), Value::Null),
            chunk(json!({"content": "text"}), Value::Null),
            chunk(json!({"refusal": "no"}), Value::Null),
            chunk(json!({"tool_calls": [{"index": 0, "id": "c0", "type": "function", "function": {"name": "A", "arguments": "{\"a\""}}]}), Value::Null),
            chunk(json!({"tool_calls": [{"index": 0, "function": {"arguments": ":1}"}}]}), Value::Null),
            chunk(json!({"tool_calls": [{"index": 1, "id": "c1", "type": "function", "function": {"name": "B", "arguments": "{}"}}]}), Value::Null),
            chunk(json!({"tool_calls": [{"function": {"arguments": ""}}]}), Value::Null),
            chunk(json!({}), json!("tool_calls")),
            json!({"id": "x", "choices": [], "usage": {"prompt_tokens": 1}}).to_string(),
            json!({"error": {"message": "m", "code": "server_error"}}).to_string(),
            "[DONE]".into(),
        ];
        let chunks: Vec<&str> = order.iter().filter(|i| keep[**i]).map(|i| all[*i].as_str()).collect();
        let events: Vec<(Option<&str>, &str)> = chunks.iter().map(|c| (None, *c)).collect();
        let (out, _) = run(Dialect::ChatCompletions, &events);
        check_well_formed(&out);
    }

    #[test]
    fn responses_events_in_any_order_give_well_formed_output(
        order in Just((0..25).collect::<Vec<usize>>()).prop_shuffle(),
        keep in prop::collection::vec(any::<bool>(), 25),
    ) {
        let mut b = Builder::new();
        b.reasoning(0, &[&["a"], &["b"]], Some("E"))
            .message(1, &["x", "y"])
            .call_added(2, "c", "Bash")
            .call_delta(2, "{}")
            .call_done(2, "c", "Bash", "{}");
        b.push("error", json!({"code": "server_error", "message": "m"}));
        b.completed(1, 0, 1);
        let all = b.events;
        prop_assert_eq!(all.len(), 25);
        let events: Vec<(Option<&str>, &str)> = order
            .iter()
            .filter(|i| keep[**i])
            .map(|i| (Some(all[*i].0.as_str()), all[*i].1.as_str()))
            .collect();
        let (out, _) = run(Dialect::Responses, &events);
        check_well_formed(&out);
    }
}
