//! Responses streams, as the API sends them (`event:` names, `sequence_number`s).

use super::*;
use pretty_assertions::assert_eq;

/// Builds a Responses stream: each event gets its `type` and a `sequence_number`.
pub(crate) struct Builder {
    pub events: Vec<(String, String)>,
}

impl Builder {
    pub fn new() -> Self {
        let mut b = Builder { events: Vec::new() };
        let response = json!({"id": "resp_1", "object": "response", "created_at": 1767225600,
            "status": "in_progress", "model": "gpt-5.4", "output": [], "usage": null,
            "error": null, "incomplete_details": null, "instructions": "You are Claude Code.",
            "tools": [{"type": "function", "name": "Bash", "parameters": {"type": "object"}, "strict": false}]});
        b.push("response.created", json!({"response": response}));
        b.push("response.in_progress", json!({"response": response}));
        b
    }

    pub fn push(&mut self, kind: &str, mut data: Value) -> &mut Self {
        data["type"] = json!(kind);
        data["sequence_number"] = json!(self.events.len());
        self.events.push((kind.to_owned(), data.to_string()));
        self
    }

    pub fn reasoning(
        &mut self,
        index: u64,
        parts: &[&[&str]],
        encrypted: Option<&str>,
    ) -> &mut Self {
        let id = format!("rs_{index}");
        self.push(
            "response.output_item.added",
            json!({"output_index": index,
            "item": {"id": id, "type": "reasoning", "summary": []}}),
        );
        let mut summary = Vec::new();
        for (si, deltas) in parts.iter().enumerate() {
            self.push(
                "response.reasoning_summary_part.added",
                json!({"item_id": id, "output_index": index,
                "summary_index": si, "part": {"type": "summary_text", "text": ""}}),
            );
            for d in *deltas {
                self.push(
                    "response.reasoning_summary_text.delta",
                    json!({"item_id": id,
                    "output_index": index, "summary_index": si, "delta": d, "obfuscation": "x1"}),
                );
            }
            let whole: String = deltas.concat();
            self.push(
                "response.reasoning_summary_text.done",
                json!({"item_id": id, "output_index": index,
                "summary_index": si, "text": whole}),
            );
            self.push(
                "response.reasoning_summary_part.done",
                json!({"item_id": id, "output_index": index,
                "summary_index": si, "part": {"type": "summary_text", "text": whole}}),
            );
            summary.push(json!({"type": "summary_text", "text": whole}));
        }
        let mut item = json!({"id": id, "type": "reasoning", "summary": summary});
        if let Some(e) = encrypted {
            item["encrypted_content"] = json!(e);
        }
        self.push(
            "response.output_item.done",
            json!({"output_index": index, "item": item}),
        )
    }

    pub fn message(&mut self, index: u64, deltas: &[&str]) -> &mut Self {
        let id = format!("msg_{index}");
        self.push("response.output_item.added", json!({"output_index": index,
            "item": {"id": id, "type": "message", "status": "in_progress", "role": "assistant", "content": []}}));
        self.push(
            "response.content_part.added",
            json!({"item_id": id, "output_index": index,
            "content_index": 0, "part": {"type": "output_text", "text": "", "annotations": []}}),
        );
        for d in deltas {
            self.push(
                "response.output_text.delta",
                json!({"item_id": id, "output_index": index,
                "content_index": 0, "delta": d, "logprobs": []}),
            );
        }
        let whole: String = deltas.concat();
        self.push(
            "response.output_text.done",
            json!({"item_id": id, "output_index": index,
            "content_index": 0, "text": whole, "logprobs": []}),
        );
        self.push(
            "response.content_part.done",
            json!({"item_id": id, "output_index": index,
            "content_index": 0, "part": {"type": "output_text", "text": whole, "annotations": []}}),
        );
        self.push(
            "response.output_item.done",
            json!({"output_index": index, "item": {"id": id,
            "type": "message", "status": "completed", "role": "assistant",
            "content": [{"type": "output_text", "text": whole, "annotations": []}]}}),
        )
    }

    pub fn call_added(&mut self, index: u64, call_id: &str, name: &str) -> &mut Self {
        self.push("response.output_item.added", json!({"output_index": index, "item": {"id": format!("fc_{index}"),
            "type": "function_call", "status": "in_progress", "arguments": "", "call_id": call_id, "name": name}}))
    }

    pub fn call_delta(&mut self, index: u64, delta: &str) -> &mut Self {
        self.push(
            "response.function_call_arguments.delta",
            json!({"item_id": format!("fc_{index}"),
            "output_index": index, "delta": delta}),
        )
    }

    pub fn call_done(
        &mut self,
        index: u64,
        call_id: &str,
        name: &str,
        arguments: &str,
    ) -> &mut Self {
        self.push(
            "response.function_call_arguments.done",
            json!({"item_id": format!("fc_{index}"),
            "output_index": index, "arguments": arguments}),
        );
        self.push("response.output_item.done", json!({"output_index": index, "item": {"id": format!("fc_{index}"),
            "type": "function_call", "status": "completed", "arguments": arguments, "call_id": call_id, "name": name}}))
    }

    pub fn completed(&mut self, input: u64, cached: u64, output: u64) -> &mut Self {
        self.push(
            "response.completed",
            json!({"response": {"id": "resp_1", "object": "response",
            "status": "completed", "output": [], "usage": {"input_tokens": input,
            "input_tokens_details": {"cached_tokens": cached}, "output_tokens": output,
            "output_tokens_details": {"reasoning_tokens": 5}, "total_tokens": input + output}}}),
        )
    }

    pub fn run(&self) -> (Vec<Value>, Step) {
        let events: Vec<(Option<&str>, &str)> = self
            .events
            .iter()
            .map(|(n, d)| (Some(n.as_str()), d.as_str()))
            .collect();
        run(Dialect::Responses, &events)
    }
}

#[test]
fn text_with_usage() {
    let (events, step) = Builder::new()
        .message(0, &["Hel", "lo\n", "\u{1F600}"])
        .completed(1500, 1200, 9)
        .run();
    assert_eq!(step, Step::Done);
    let mut want = vec![
        message_start("msg_resp_1"),
        text_start(0),
        text(0, "Hel"),
        text(0, "lo\n"),
        text(0, "\u{1F600}"),
        block_stop(0),
    ];
    want.extend(message_end("end_turn", 300, 9, 1200));
    assert_eq!(events, want);
}

#[test]
fn reasoning_summary_parts_then_a_tool_call() {
    let (events, step) = Builder::new()
        .reasoning(
            0,
            &[&["**Plan**", " the fix"], &["Then ", "run tests"]],
            Some("gAAAAB-enc=="),
        )
        .call_added(1, "call_1", "Bash")
        .call_delta(1, "{\"command\":")
        .call_delta(1, "\"cargo test\"}")
        .call_done(1, "call_1", "Bash", "{\"command\":\"cargo test\"}")
        .completed(10, 0, 30)
        .run();
    assert_eq!(step, Step::Done);
    let mut want = vec![
        message_start("msg_resp_1"),
        thinking_start(0),
        thinking(0, "**Plan**"),
        thinking(0, " the fix"),
        thinking(0, "\n\n"),
        thinking(0, "Then "),
        thinking(0, "run tests"),
        signature(0, "claude-host:responses:gAAAAB-enc=="),
        block_stop(0),
        tool_start(1, "call_1", "Bash"),
        json_part(1, "{\"command\":"),
        json_part(1, "\"cargo test\"}"),
        block_stop(1),
    ];
    want.extend(message_end("tool_use", 10, 30, 0));
    assert_eq!(events, want);
}

#[test]
fn an_empty_reasoning_item_makes_no_block_and_encrypted_only_one_without_text() {
    let (events, _) = Builder::new()
        .reasoning(0, &[], None)
        .reasoning(1, &[], Some("E"))
        .message(2, &["ok"])
        .completed(1, 0, 1)
        .run();
    let mut want = vec![
        message_start("msg_resp_1"),
        thinking_start(0),
        signature(0, "claude-host:responses:E"),
        block_stop(0),
        text_start(1),
        text(1, "ok"),
        block_stop(1),
    ];
    want.extend(message_end("end_turn", 1, 1, 0));
    assert_eq!(events, want);
}

#[test]
fn two_function_calls_interleaved() {
    let (events, _) = Builder::new()
        .call_added(0, "call_a", "Read")
        .call_added(1, "call_b", "Grep")
        .call_delta(1, "{\"pattern\":")
        .call_delta(0, "{\"file_path\":")
        .call_delta(1, "\"fn main\"}")
        .call_delta(0, "\"/a\"}")
        .call_done(1, "call_b", "Grep", "{\"pattern\":\"fn main\"}")
        .call_done(0, "call_a", "Read", "{\"file_path\":\"/a\"}")
        .completed(0, 0, 0)
        .run();
    let mut want = vec![
        message_start("msg_resp_1"),
        tool_start(0, "call_a", "Read"),
        json_part(0, "{\"file_path\":"),
        json_part(0, "\"/a\"}"),
        block_stop(0),
        tool_start(1, "call_b", "Grep"),
        json_part(1, "{\"pattern\":\"fn main\"}"),
        block_stop(1),
    ];
    want.extend(message_end("tool_use", 0, 0, 0));
    assert_eq!(events, want);
}

#[test]
fn refusal() {
    let mut b = Builder::new();
    b.push(
        "response.output_item.added",
        json!({"output_index": 0,
        "item": {"id": "msg_0", "type": "message", "role": "assistant", "content": []}}),
    )
    .push(
        "response.content_part.added",
        json!({"output_index": 0, "content_index": 0,
            "part": {"type": "refusal", "refusal": ""}}),
    )
    .push(
        "response.refusal.delta",
        json!({"item_id": "msg_0", "output_index": 0, "content_index": 0, "delta": "I can't"}),
    )
    .push(
        "response.refusal.done",
        json!({"item_id": "msg_0", "output_index": 0, "content_index": 0, "refusal": "I can't"}),
    )
    .push(
        "response.output_item.done",
        json!({"output_index": 0, "item": {"id": "msg_0", "type": "message",
            "role": "assistant", "content": [{"type": "refusal", "refusal": "I can't"}]}}),
    )
    .completed(1, 0, 1);
    let (events, _) = b.run();
    assert_eq!(events[2], text(0, "I can't"));
    assert_eq!(events[events.len() - 2], message_end("refusal", 1, 1, 0)[0]);
}

#[test]
fn incomplete_for_length_and_content_filter() {
    for (reason, stop) in [
        ("max_output_tokens", "max_tokens"),
        ("content_filter", "refusal"),
    ] {
        let mut b = Builder::new();
        b.message(0, &["partial"]).push(
            "response.incomplete",
            json!({"response": {"id": "resp_1", "status": "incomplete",
                "incomplete_details": {"reason": reason},
                "usage": {"input_tokens": 5, "output_tokens": 16}}}),
        );
        let (events, step) = b.run();
        assert_eq!(step, Step::Done);
        assert_eq!(events[events.len() - 2], message_end(stop, 5, 16, 0)[0]);
    }
}

#[test]
fn an_error_event_mid_stream() {
    let mut b = Builder::new();
    b.message(0, &["Hi"]).push(
        "error",
        json!({"code": "server_is_overloaded", "message": "The server is overloaded", "param": null}),
    );
    let (events, step) = b.run();
    let Step::Failed(env) = step else {
        panic!("{step:?}")
    };
    assert_eq!(env.error.kind, "overloaded_error");
    assert_eq!(events.last(), Some(&block_stop(0)));
}

#[test]
fn a_failure_before_anything_writes_nothing() {
    let failed = json!({"type": "response.failed", "sequence_number": 0, "response": {"id": "resp_1",
        "status": "failed", "error": {"code": "insufficient_quota", "message": "quota"}}});
    let (events, step) = run(
        Dialect::Responses,
        &[(Some("response.failed"), &failed.to_string())],
    );
    assert!(events.is_empty());
    let Step::Failed(env) = step else {
        panic!("{step:?}")
    };
    assert_eq!(env.error.kind, "billing_error");
    let error = json!({"type": "error", "sequence_number": 0, "code": "context_length_exceeded",
        "message": "Your input exceeds the context window of this model.", "param": "input"});
    let (events, step) = run(Dialect::Responses, &[(Some("error"), &error.to_string())]);
    assert!(events.is_empty());
    let Step::Failed(env) = step else {
        panic!("{step:?}")
    };
    assert_eq!(env.error.kind, "invalid_request_error");
    assert!(
        env.error.message.starts_with("prompt is too long"),
        "{}",
        env.error.message
    );
}

#[test]
fn the_end_without_completion_fails() {
    let (events, step) = Builder::new().message(0, &["Hi"]).run();
    assert!(
        matches!(step, Step::Failed(ref e) if e.error.kind == "api_error"),
        "{step:?}"
    );
    assert_eq!(events.last(), Some(&block_stop(0)));
}

#[test]
fn unknown_event_types_are_ignored() {
    let mut b = Builder::new();
    b.push(
        "response.output_item.added",
        json!({"output_index": 0,
        "item": {"id": "ws_0", "type": "web_search_call", "status": "in_progress"}}),
    )
    .push(
        "response.web_search_call.searching",
        json!({"output_index": 0, "item_id": "ws_0"}),
    )
    .push(
        "response.brand_new_thing",
        json!({"delta": {"nested": [1, 2]}, "output_index": "zero", "item": 7}),
    )
    .message(1, &["ok"])
    .push(
        "response.output_text.annotation.added",
        json!({"output_index": 1, "annotation": {"type": "url_citation"}}),
    )
    .completed(1, 0, 1);
    let (events, step) = b.run();
    assert_eq!(step, Step::Done);
    let mut want = vec![
        message_start("msg_resp_1"),
        text_start(0),
        text(0, "ok"),
        block_stop(0),
    ];
    want.extend(message_end("end_turn", 1, 1, 0));
    assert_eq!(events, want);
}

#[test]
fn events_without_a_name_are_read_by_their_type() {
    let b = Builder::new()
        .message(0, &["a", "b"])
        .completed(2, 0, 2)
        .events
        .clone();
    let nameless: Vec<(Option<&str>, &str)> = b.iter().map(|(_, d)| (None, d.as_str())).collect();
    let (events, step) = run(Dialect::Responses, &nameless);
    assert_eq!(step, Step::Done);
    assert_eq!(events[3], text(0, "b"));
}

#[test]
fn items_done_without_deltas_are_written_whole() {
    let mut b = Builder::new();
    b.push("response.output_item.done", json!({"output_index": 0, "item": {"type": "reasoning",
            "summary": [{"type": "summary_text", "text": "a"}, {"type": "summary_text", "text": "b"}],
            "encrypted_content": "E"}}))
        .push("response.output_item.done", json!({"output_index": 1, "item": {"type": "message",
            "content": [{"type": "output_text", "text": "hi", "annotations": []}]}}))
        .push("response.output_item.done", json!({"output_index": 2, "item": {"type": "function_call",
            "call_id": "c", "name": "Bash", "arguments": "{}"}}))
        .completed(0, 0, 0);
    let (events, _) = b.run();
    let mut want = vec![
        message_start("msg_resp_1"),
        thinking_start(0),
        thinking(0, "a"),
        thinking(0, "\n\n"),
        thinking(0, "b"),
        signature(0, "claude-host:responses:E"),
        block_stop(0),
        text_start(1),
        text(1, "hi"),
        block_stop(1),
        tool_start(2, "c", "Bash"),
        json_part(2, "{}"),
        block_stop(2),
    ];
    want.extend(message_end("tool_use", 0, 0, 0));
    assert_eq!(events, want);
}
