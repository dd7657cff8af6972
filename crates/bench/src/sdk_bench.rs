//! SDK layer benchmarks: stream-json frame parsing throughput, and `list_sessions` over
//! 10,000 generated transcripts. Run with `scripts/bench-sdk.sh`.

use claude_host_protocol::stream_json::Frame;
use std::io::Write;
use std::time::Instant;

fn main() -> anyhow::Result<()> {
    let runs: usize = std::env::args()
        .nth(1)
        .map(|r| r.parse())
        .transpose()?
        .unwrap_or(3);
    frames(runs)?;
    listing(runs)?;
    Ok(())
}

/// A realistic mix: mostly partial-message stream events, some assistant / user / system lines.
fn sample_lines() -> Vec<String> {
    let stream_event = r#"{"type":"stream_event","event":{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"This is "}},"session_id":"5a186890-495d-4418-a332-7791631d6d56","parent_tool_use_id":null,"uuid":"0b5e3a47-96a4-4a0e-8f8d-0d7c2e2b9a11","api_message_id":"msg_01ABCDEF"}"#;
    let assistant = r#"{"type":"assistant","message":{"id":"msg_01ABCDEF","type":"message","role":"assistant","model":"claude-opus-5-5","content":[{"type":"tool_use","id":"toolu_01","name":"Write","input":{"file_path":"/home/user/project/hello.txt","content":"hello world\n"}}],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":10,"output_tokens":1,"cache_creation_input_tokens":0,"cache_read_input_tokens":0},"context_management":null},"parent_tool_use_id":null,"session_id":"5a186890-495d-4418-a332-7791631d6d56","uuid":"f6cd0a1e-8a0e-4b53-a2a6-1c1b1a0b9c8d","timestamp":"2026-11-21T10:00:00.000Z","request_id":"req_01"}"#;
    let user = r#"{"type":"user","message":{"role":"user","content":[{"tool_use_id":"toolu_01","type":"tool_result","content":"File created successfully at: /home/user/project/hello.txt"}]},"parent_tool_use_id":null,"session_id":"5a186890-495d-4418-a332-7791631d6d56","uuid":"a1b2c3d4-0000-4000-8000-000000000000","timestamp":"2026-11-21T10:00:01.000Z","tool_use_result":{"type":"create","filePath":"/home/user/project/hello.txt","content":"hello world\n","structuredPatch":[],"originalFile":null}}"#;
    let status = r#"{"type":"system","subtype":"status","status":"requesting","session_id":"5a186890-495d-4418-a332-7791631d6d56","uuid":"b1b2c3d4-0000-4000-8000-000000000000"}"#;
    let mut out = Vec::new();
    for i in 0..100 {
        out.push(
            if i % 20 == 0 {
                assistant
            } else if i % 20 == 1 {
                user
            } else if i % 20 == 2 {
                status
            } else {
                stream_event
            }
            .to_owned(),
        );
    }
    out
}

fn frames(runs: usize) -> anyhow::Result<()> {
    let lines = sample_lines();
    let bytes: usize = lines.iter().map(|l| l.len() + 1).sum();
    let reps = 2_000;
    let mut rates = Vec::new();
    for _ in 0..runs {
        let t = Instant::now();
        let mut n = 0usize;
        for _ in 0..reps {
            for l in &lines {
                let f = Frame::parse(l)?;
                n += usize::from(f.session_id().is_some());
            }
        }
        let secs = t.elapsed().as_secs_f64();
        anyhow::ensure!(n == reps * lines.len(), "parse lost frames");
        rates.push((
            (reps * lines.len()) as f64 / secs,
            (reps * bytes) as f64 / secs / 1e6,
        ));
    }
    rates.sort_by(|a, b| a.0.total_cmp(&b.0));
    let (fps, mbs) = rates[rates.len() / 2];
    println!(
        "frame parse: {:.0}k frames/s, {:.0} MB/s (median of {runs}; {} frames of {:.0} bytes on average; min {:.0}k, max {:.0}k frames/s)",
        fps / 1e3,
        mbs,
        reps * lines.len(),
        bytes as f64 / lines.len() as f64,
        rates[0].0 / 1e3,
        rates[rates.len() - 1].0 / 1e3
    );
    Ok(())
}

fn listing(runs: usize) -> anyhow::Result<()> {
    let dir = tempfile_dir()?;
    let config = dir.join("config");
    let sessions = 10_000;
    let projects = 50;
    let t = Instant::now();
    let mut total = 0u64;
    for i in 0..sessions {
        let proj = config
            .join("projects")
            .join(format!("-home-user-project-{}", i % projects));
        std::fs::create_dir_all(&proj)?;
        let id = format!("{:08x}-0000-4000-8000-{:012x}", i, i);
        let mut f = std::fs::File::create(proj.join(format!("{id}.jsonl")))?;
        let mut text = String::new();
        text.push_str(&format!(
            r#"{{"type":"queue-operation","operation":"enqueue","sessionId":"{id}"}}"#
        ));
        text.push('\n');
        let mut parent = "null".to_owned();
        // 6 to 40 messages a session, ~10 KB on average.
        for m in 0..(6 + i % 35) {
            let uuid = format!("{i:08x}-{m:04x}-4000-8000-000000000000");
            let (ty, content) = if m % 2 == 0 {
                (
                    "user",
                    format!(r#""please do task {m} of session {i} with some context text""#),
                )
            } else {
                (
                    "assistant",
                    format!(
                        r#"[{{"type":"text","text":"Working on task {m}. {}"}}]"#,
                        "detail ".repeat(20)
                    ),
                )
            };
            text.push_str(&format!(
                r#"{{"parentUuid":{parent},"isSidechain":false,"type":"{ty}","message":{{"role":"{ty}","content":{content}}},"uuid":"{uuid}","timestamp":"2026-11-21T10:00:00Z","sessionId":"{id}","cwd":"/home/user/project-{}","version":"2.1.330","gitBranch":"main"}}"#,
                i % projects
            ));
            text.push('\n');
            parent = format!("\"{uuid}\"");
        }
        text.push_str(&format!(
            r#"{{"type":"last-prompt","lastPrompt":"x","leafUuid":{parent},"sessionId":"{id}"}}"#
        ));
        text.push('\n');
        total += text.len() as u64;
        f.write_all(text.as_bytes())?;
    }
    println!(
        "generated {sessions} transcripts in {projects} projects, {:.0} MB, in {:.1} s",
        total as f64 / 1e6,
        t.elapsed().as_secs_f64()
    );
    let mut times = Vec::new();
    for _ in 0..runs {
        let t = Instant::now();
        let listed = claude_host_sdk::transcripts::list_sessions(&config, None)?;
        times.push(t.elapsed().as_secs_f64());
        anyhow::ensure!(listed.len() == sessions, "listed {}", listed.len());
        anyhow::ensure!(
            listed
                .iter()
                .all(|s| !s.summary.is_empty() && s.message_count >= 6),
            "bad summary"
        );
    }
    times.sort_by(f64::total_cmp);
    println!(
        "list_sessions over {sessions} transcripts: {:.3} s median (min {:.3}, max {:.3}; warm page cache)",
        times[times.len() / 2],
        times[0],
        times[times.len() - 1]
    );
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}

fn tempfile_dir() -> anyhow::Result<std::path::PathBuf> {
    let d = std::env::temp_dir().join(format!("claude-host-sdk-bench-{}", std::process::id()));
    std::fs::create_dir_all(&d)?;
    Ok(d)
}
