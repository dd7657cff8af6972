//! Session transcripts (`~/.claude/projects/<slug>/<session>.jsonl`): the SDK's reader
//! (`parse_transcript`, `Transcript::main_chain`) and the agent's restore of a session from it
//! (turns, title, working directory), plus the mirror's line check. Input: JSONL text.
//!
//! Checks: every non-blank line is either an entry or counted as skipped; the main chain is
//! made of the transcript's own entries, follows `parentUuid` links, and ends (a cycle in a
//! corrupt file must not loop); restored turns survive the JSON trip to a client.

use crate::input;
use claude_host_agent::{mirror, restore};
use claude_host_sdk::transcripts::parse_transcript;
use serde_json::Value;

/// Runs one input.
pub fn run(data: &[u8]) {
    let t = parse_transcript(data);
    let non_blank = data
        .split(|b| *b == b'\n')
        .filter(|l| !l.iter().all(u8::is_ascii_whitespace))
        .count();
    assert_eq!(
        t.entries.len() + t.skipped,
        non_blank,
        "lines lost or counted twice"
    );

    let chain = t.main_chain();
    assert!(
        chain.len() <= t.entries.len() + 1,
        "the main chain is longer than the file"
    );
    for e in &chain {
        assert!(
            t.entries.iter().any(|x| std::ptr::eq(x, *e)),
            "the main chain holds an entry that is not in the transcript"
        );
    }
    for pair in chain.windows(2) {
        let parent = pair[1]
            .get("parentUuid")
            .and_then(Value::as_str)
            .or_else(|| pair[1].get("logicalParentUuid").and_then(Value::as_str));
        assert_eq!(
            parent,
            pair[0].get("uuid").and_then(Value::as_str),
            "the main chain skips a link"
        );
    }

    let turns = restore::turns_from_transcript(&t);
    for turn in &turns {
        input::assert_json_round_trip(turn, "a restored turn");
    }
    let _ = restore::title(&t);
    let _ = restore::cwd(&t);
    for line in input::lines(data) {
        let _ = mirror::is_mirrored(&line);
    }
}
