//! Restoring from a transcript in bounded memory (`restore::read_file`: an index of byte
//! offsets, then the main chain read entry by entry) gives what the whole-file reader gives
//! (`restore::conversation`, `title`, `cwd` of `parse_transcript`), kept as the oracle.

use claude_host_agent::restore;
use claude_host_sdk::transcripts::{TranscriptIndex, parse_transcript};
use claude_host_testkit::long_transcript;
use serde_json::{Value, json};
use std::path::Path;

/// Asserts the streaming restore of `path` equals the whole-file one, turn by turn.
fn same_as_whole_file(path: &Path) -> usize {
    let text = std::fs::read(path).unwrap();
    let whole = parse_transcript(&text);
    drop(text);
    let old = restore::conversation(&whole);
    let new = restore::read_file(path).unwrap();
    assert_eq!(
        new.conversation.turns.len(),
        old.turns.len(),
        "{}: turn count",
        path.display()
    );
    for (i, (a, b)) in new
        .conversation
        .turns
        .iter()
        .zip(old.turns.iter())
        .enumerate()
    {
        assert!(
            a == b,
            "{}: turn {i} differs:\n{a:?}\n{b:?}",
            path.display()
        );
    }
    assert_eq!(new.conversation.uncut_warm_up, old.uncut_warm_up);
    assert_eq!(
        new.title,
        restore::title(&whole),
        "{}: title",
        path.display()
    );
    assert_eq!(new.cwd, restore::cwd(&whole), "{}: cwd", path.display());
    let index = TranscriptIndex::open(path).unwrap();
    assert_eq!(index.skipped(), whole.skipped);
    let chain: Vec<Value> = index
        .entries(index.main_chain())
        .map(|e| Value::Object(e.unwrap()))
        .collect();
    let old_chain: Vec<Value> = whole
        .main_chain()
        .into_iter()
        .map(|e| Value::Object(e.clone()))
        .collect();
    assert!(chain == old_chain, "{}: main chain", path.display());
    old.turns.len()
}

fn write(dir: &Path, name: &str, lines: &[Value]) -> std::path::PathBuf {
    let p = dir.join(name);
    let mut text = String::new();
    for l in lines {
        text.push_str(&l.to_string());
        text.push('\n');
    }
    std::fs::write(&p, text).unwrap();
    p
}

fn user(uuid: &str, parent: Option<&str>, text: &str) -> Value {
    json!({"type": "user", "uuid": uuid, "parentUuid": parent, "cwd": "/w",
        "timestamp": "2026-01-01T00:00:00Z", "message": {"role": "user", "content": text}})
}

/// A prompt as the CLI writes one it got over stream-json (a block list).
fn user_blocks(uuid: &str, parent: Option<&str>, text: &str) -> Value {
    json!({"type": "user", "uuid": uuid, "parentUuid": parent,
        "message": {"role": "user", "content": [{"type": "text", "text": text}]}})
}

fn assistant(uuid: &str, parent: &str, text: &str) -> Value {
    json!({"type": "assistant", "uuid": uuid, "parentUuid": parent,
        "message": {"id": format!("msg_{uuid}"), "role": "assistant", "model": "m",
            "content": [{"type": "text", "text": text}],
            "usage": {"input_tokens": 3, "output_tokens": 2}}})
}

#[test]
fn the_recorded_transcripts_restore_as_before() {
    let seeds = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/seeds/transcript");
    for f in ["full.jsonl", "head.jsonl", "cycle.jsonl"] {
        same_as_whole_file(&seeds.join(f));
    }
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("sample.jsonl");
    std::fs::write(&p, long_transcript::SAMPLE).unwrap();
    assert_eq!(same_as_whole_file(&p), 2);
}

#[test]
fn edge_cases_restore_as_before() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let warm = claude_host_protocol::request_kind::WARM_UP_PROMPT;
    // An uncut warm-up at the end; titles from records; bad and blank lines.
    let p = write(
        d,
        "warm.jsonl",
        &[
            user("u1", None, "first words\nsecond line"),
            assistant("a1", "u1", "one"),
            json!({"type": "ai-title", "aiTitle": "AI", "sessionId": "s"}),
            user_blocks("u2", Some("a1"), warm),
            assistant("a2", "u2", "warm"),
        ],
    );
    std::fs::write(
        &p,
        [
            std::fs::read(&p).unwrap(),
            b"{not json\n\n   \n[1,2]\n".to_vec(),
        ]
        .concat(),
    )
    .unwrap();
    same_as_whole_file(&p);
    assert_eq!(
        restore::read_file(&p)
            .unwrap()
            .conversation
            .uncut_warm_up
            .as_deref(),
        Some("u2")
    );
    // Nothing but a warm-up: no turns, no title from it.
    let p = write(
        d,
        "only-warm.jsonl",
        &[user_blocks("w", None, warm), assistant("wa", "w", "x")],
    );
    same_as_whole_file(&p);
    assert_eq!(restore::read_file(&p).unwrap().title, None);
    // A dead branch (a rewind): the `last-prompt` pointer picks the leaf, a later custom title
    // wins, a compact boundary links through `logicalParentUuid`, side-chain entries are no
    // leaf, and a repeated uuid's last entry is the one on the chain.
    let p = write(
        d,
        "branches.jsonl",
        &[
            user("u1", None, "hello"),
            assistant("a1", "u1", "first answer"),
            user("u2", Some("a1"), "dead branch"),
            assistant("a2", "u2", "dead"),
            json!({"type": "system", "subtype": "compact_boundary", "uuid": "c1",
                "parentUuid": null, "logicalParentUuid": "a1"}),
            user("u3", Some("c1"), "after compact"),
            assistant("a3", "u3", "v1"),
            assistant("a3", "u3", "v2 (same uuid, written again)"),
            json!({"type": "custom-title", "customTitle": "Mine", "sessionId": "s"}),
            json!({"type": "custom-title", "customTitle": 7, "sessionId": "s"}),
            json!({"type": "last-prompt", "leafUuid": "a3", "sessionId": "s"}),
            json!({"type": "assistant", "uuid": "side", "parentUuid": "a3", "isSidechain": true,
                "message": {"role": "assistant", "content": [{"type": "text", "text": "side"}]}}),
        ],
    );
    same_as_whole_file(&p);
    assert_eq!(
        restore::read_file(&p).unwrap().title.as_deref(),
        Some("Mine")
    );
    // A cycle ends; a line with a lone surrogate escape is skipped as a whole parse skips it.
    let p = write(
        d,
        "cycle.jsonl",
        &[user("x", Some("y"), "loop"), assistant("y", "x", "loop")],
    );
    std::fs::write(
        &p,
        [
            std::fs::read(&p).unwrap(),
            br#"{"type":"user","uuid":"z","parentUuid":"y","message":{"role":"user","content":"bad \ud800 text"}}"#.to_vec(),
            b"\n".to_vec(),
        ]
        .concat(),
    )
    .unwrap();
    same_as_whole_file(&p);
}

/// Size of the generated transcript compared whole: big enough for thousands of turns and
/// subagents, small enough for a debug build (parsing it whole, the oracle, is the slow part).
const COMPARED_MB: u64 = 24;

#[test]
fn a_long_generated_transcript_restores_as_before_with_its_subagents() {
    let dir = tempfile::tempdir().unwrap();
    let g =
        long_transcript::generate(&dir.path().join(".claude"), "/work", COMPARED_MB << 20).unwrap();
    assert!(g.subagents > 0);
    let turns = same_as_whole_file(&g.path);
    assert_eq!(turns, 2 * g.copies, "two prompts a copy");
    let subagents = dir
        .path()
        .join(".claude/projects/-work")
        .join(&g.session_id)
        .join("subagents");
    let mut compared = 0;
    for f in std::fs::read_dir(&subagents).unwrap() {
        let p = f.unwrap().path();
        if p.extension().and_then(|e| e.to_str()) != Some("jsonl") {
            continue;
        }
        let whole = parse_transcript(&std::fs::read(&p).unwrap());
        let old = restore::subagent_turns(&whole);
        assert!(!old.is_empty());
        assert!(
            restore::read_subagent_turns(&p).unwrap() == old,
            "{}",
            p.display()
        );
        compared += 1;
    }
    assert_eq!(compared, g.subagents);
}

/// A restored turn's usage: its responses' tokens summed (a response written once per content
/// block counts once, as its last copy says), the last response's model, and the context its
/// request used, as a live turn reports them.
#[test]
fn a_restored_turn_sums_its_responses_usage() {
    let dir = tempfile::tempdir().unwrap();
    let response = |uuid: &str, parent: &str, id: &str, model: &str, usage: Value| {
        json!({"type": "assistant", "uuid": uuid, "parentUuid": parent,
            "message": {"id": id, "role": "assistant", "model": model,
                "content": [{"type": "text", "text": uuid}], "usage": usage}})
    };
    let p = write(
        dir.path(),
        "usage.jsonl",
        &[
            user("u1", None, "count"),
            // One response written twice, its usage grown in the second copy.
            response(
                "a1",
                "u1",
                "msg_1",
                "m1",
                json!({"input_tokens": 1, "output_tokens": 1}),
            ),
            response(
                "a2",
                "a1",
                "msg_1",
                "m1",
                json!({"input_tokens": 10, "cache_read_input_tokens": 100,
                    "cache_creation_input_tokens": 5, "output_tokens": 7, "service_tier": "x"}),
            ),
            response(
                "a3",
                "a2",
                "msg_2",
                "m2",
                json!({"input_tokens": 20, "cache_read_input_tokens": 200, "output_tokens": 3}),
            ),
            user("u2", Some("a3"), "again"),
            response(
                "a4",
                "u2",
                "msg_3",
                "<synthetic>",
                json!({"output_tokens": "not a number"}),
            ),
        ],
    );
    let turns = restore::read_file(&p).unwrap().conversation.turns;
    assert_eq!(turns.len(), 2);
    let usage = turns[0].usage.as_ref().unwrap();
    assert_eq!(usage.input_tokens, Some(10 + 100 + 5 + 20 + 200));
    assert_eq!(usage.output_tokens, Some(7 + 3));
    assert_eq!(usage.cache_read_tokens, Some(100 + 200));
    assert_eq!(usage.model.as_deref(), Some("m2"));
    assert_eq!(
        usage.meta.as_ref().unwrap()[claude_host_agent::mapper::CONTEXT_TOKENS],
        json!(20 + 200 + 3)
    );
    // A response whose usage cannot be read counts nothing; a synthetic one names no model.
    let usage = turns[1].usage.as_ref().unwrap();
    assert_eq!(
        (usage.input_tokens, usage.output_tokens),
        (Some(0), Some(0))
    );
    assert_eq!(usage.model, None);
    assert!(usage.meta.as_ref().unwrap().is_empty());
}
