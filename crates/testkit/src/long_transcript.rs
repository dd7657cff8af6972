//! Long transcripts for restore tests and `restore-bench`: a real recorded 2.1.330 transcript
//! (`fixtures/transcript_2.1.330.jsonl`: a Write → Bash → text tool loop, then a resumed turn)
//! repeated until the file reaches a size, each copy with fresh ids and chained to the one
//! before, plus subagent transcripts beside it as the CLI writes them.
//!
//! Per copy: every uuid-shaped string (entry uuids, `parentUuid`, `promptId`, `leafUuid`,
//! request refs) and every `toolu_` / `msg_` / `req_` id is replaced by a fresh one, the same
//! within the copy, so tool results still answer their calls; the copy's root entry (the one
//! with no parent) hangs off the previous copy's last conversation entry; `sessionId` and
//! `cwd` are the generated session's. Every [`SUBAGENT_EVERY`]th copy's first tool call becomes
//! an `Agent` call with a subagent transcript (`<session>/subagents/agent-<id>.jsonl`, its
//! entries on the side chain) and the `.meta.json` naming the call.

use serde_json::{Map, Value, json};
use std::collections::HashMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};

/// The recorded transcript every copy is made from.
pub const SAMPLE: &[u8] = include_bytes!("../fixtures/transcript_2.1.330.jsonl");

/// One copy in this many carries a subagent.
pub const SUBAGENT_EVERY: usize = 20;

/// What [`generate`] wrote.
#[derive(Debug, Clone)]
pub struct Generated {
    /// The session's id (the transcript's file stem).
    pub session_id: String,
    /// The main transcript.
    pub path: PathBuf,
    /// Its size in bytes.
    pub bytes: u64,
    /// Its lines.
    pub lines: usize,
    /// Copies of the sample it holds.
    pub copies: usize,
    /// Subagent transcripts written beside it.
    pub subagents: usize,
}

/// Writes a session of at least `target_bytes` (at least one copy) under
/// `config_dir/projects/<slug of cwd>/`, recorded in `cwd`.
pub fn generate(config_dir: &Path, cwd: &str, target_bytes: u64) -> std::io::Result<Generated> {
    let sample: Vec<Map<String, Value>> = SAMPLE
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .filter_map(|l| serde_json::from_slice(l).ok())
        .collect();
    let session_id = uuid::Uuid::new_v4().to_string();
    let dir = config_dir
        .join("projects")
        .join(claude_host_protocol::transcript::project_slug(cwd));
    std::fs::create_dir_all(&dir)?;
    let path = dir.join(format!("{session_id}.jsonl"));
    let subagent_dir = dir.join(&session_id).join("subagents");
    let mut out = std::io::BufWriter::new(std::fs::File::create(&path)?);
    let mut bytes = 0u64;
    let mut lines = 0usize;
    let mut copies = 0usize;
    let mut subagents = 0usize;
    let mut last: Option<String> = None;
    while copies == 0 || bytes < target_bytes {
        let mut ids = Fresh::default();
        let mut copy: Vec<Map<String, Value>> = sample
            .iter()
            .map(|e| {
                let mut v = Value::Object(e.clone());
                ids.renew(&mut v, &session_id, cwd);
                match v {
                    Value::Object(m) => m,
                    _ => Map::new(),
                }
            })
            .collect();
        for e in &mut copy {
            if e.contains_key("uuid")
                && e.get("parentUuid") == Some(&Value::Null)
                && let Some(l) = &last
            {
                e.insert("parentUuid".into(), Value::String(l.clone()));
            }
        }
        if copies % SUBAGENT_EVERY == SUBAGENT_EVERY - 1
            && let Some(call) = make_agent_call(&mut copy)
        {
            write_subagent(&subagent_dir, &sample, &session_id, cwd, &call)?;
            subagents += 1;
        }
        for e in &copy {
            let line = serde_json::to_vec(e)?;
            out.write_all(&line)?;
            out.write_all(b"\n")?;
            bytes += line.len() as u64 + 1;
            lines += 1;
            let conversational = matches!(
                e.get("type").and_then(Value::as_str),
                Some("user" | "assistant" | "attachment" | "system")
            );
            if conversational && let Some(u) = e.get("uuid").and_then(Value::as_str) {
                last = Some(u.to_owned());
            }
        }
        copies += 1;
    }
    out.flush()?;
    Ok(Generated {
        session_id,
        path,
        bytes,
        lines,
        copies,
        subagents,
    })
}

/// Turns the copy's first tool call into an `Agent` call; returns its id.
fn make_agent_call(copy: &mut [Map<String, Value>]) -> Option<String> {
    for e in copy.iter_mut() {
        let Some(blocks) = e
            .get_mut("message")
            .and_then(|m| m.get_mut("content"))
            .and_then(Value::as_array_mut)
        else {
            continue;
        };
        for b in blocks {
            if b.get("type").and_then(Value::as_str) == Some("tool_use") {
                let id = b.get("id").and_then(Value::as_str)?.to_owned();
                b["name"] = json!("Agent");
                b["input"] = json!({
                    "description": "Write and run",
                    "prompt": "Write hello.txt, then run echo hi.",
                    "subagent_type": "general-purpose"
                });
                return Some(id);
            }
        }
    }
    None
}

/// A subagent's transcript for `call`: the sample's user and assistant entries, fresh ids, on
/// the side chain, its first prompt the call's.
fn write_subagent(
    dir: &Path,
    sample: &[Map<String, Value>],
    session_id: &str,
    cwd: &str,
    call: &str,
) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let agent_id = uuid::Uuid::new_v4().simple().to_string()[..17].to_owned();
    let mut ids = Fresh::default();
    let mut text = Vec::new();
    let mut prompted = false;
    for e in sample {
        if !matches!(
            e.get("type").and_then(Value::as_str),
            Some("user" | "assistant")
        ) {
            continue;
        }
        let mut v = Value::Object(e.clone());
        ids.renew(&mut v, session_id, cwd);
        v["isSidechain"] = json!(true);
        v["agentId"] = json!(agent_id);
        if !prompted && v["type"] == "user" && v["message"]["content"].is_string() {
            v["message"]["content"] = json!("Write hello.txt, then run echo hi.");
            prompted = true;
        }
        serde_json::to_writer(&mut text, &v)?;
        text.push(b'\n');
    }
    std::fs::write(dir.join(format!("agent-{agent_id}.jsonl")), text)?;
    std::fs::write(
        dir.join(format!("agent-{agent_id}.meta.json")),
        serde_json::to_vec(&json!({"agentType": "general-purpose", "toolUseId": call}))?,
    )
}

/// Fresh ids for one copy: the same old id always gets the same new one.
#[derive(Default)]
struct Fresh(HashMap<String, String>);

impl Fresh {
    fn renew(&mut self, v: &mut Value, session_id: &str, cwd: &str) {
        match v {
            Value::Object(m) => {
                for (k, x) in m.iter_mut() {
                    match (k.as_str(), &*x) {
                        ("sessionId", Value::String(_)) => *x = json!(session_id),
                        ("cwd", Value::String(_)) => *x = json!(cwd),
                        _ => self.renew(x, session_id, cwd),
                    }
                }
            }
            Value::Array(a) => {
                for x in a {
                    self.renew(x, session_id, cwd);
                }
            }
            Value::String(s) => {
                if let Some(new) = self.fresh(s) {
                    *s = new;
                }
            }
            _ => {}
        }
    }

    fn fresh(&mut self, s: &str) -> Option<String> {
        let kind = if is_uuid(s) {
            None
        } else {
            Some(["toolu_", "msg_", "req_"].into_iter().find(|p| {
                s.starts_with(p) && s.len() > p.len() + 8 && !s.contains(char::is_whitespace)
            })?)
        };
        Some(
            self.0
                .entry(s.to_owned())
                .or_insert_with(|| {
                    let u = uuid::Uuid::new_v4();
                    match kind {
                        None => u.to_string(),
                        Some(prefix) => format!("{prefix}{}", &u.simple().to_string()[..24]),
                    }
                })
                .clone(),
        )
    }
}

fn is_uuid(s: &str) -> bool {
    s.len() == 36 && uuid::Uuid::try_parse(s).is_ok()
}
