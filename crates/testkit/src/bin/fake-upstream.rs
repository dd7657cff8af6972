//! The fake GitHub + Copilot upstream as a process of its own, for tests that run
//! `claude-host` as a binary and drive it from another language (the real-VS-Code suite,
//! `scripts/vscode-e2e.sh`).
//!
//! It listens on `127.0.0.1` (a free port), prints one line `{"url": "http://…"}`
//! on stdout once it serves, and then takes commands, one JSON object per line on stdin,
//! answering each with one JSON line on stdout:
//!
//! - `{"push": {"when": W, "reply": R, "times": N}}` adds a scripted reply (`times` absent: once),
//!   where `W` is `"always"`, `"toolResult"` or `{"lastUserContains": "…"}`, and `R` is
//!   `{"text": "…"}`, `{"toolUse": {"name": "…", "input": {…}}}`, `{"subagent": "prompt"}` or
//!   `{"slowText": {"text": "…", "ms": 30000}}` (silent that long, then the text);
//! - `{"default": R}` sets the reply when no rule matches;
//! - `{"requests": true}` answers `{"lastUserTexts": […]}`: the last user message of each model
//!   request so far, in order.
//!
//! End of stdin ends it.

use claude_host_testkit::fake::{FakeUpstream, Match, Reply, Rule};
use serde::Deserialize;
use serde_json::{Value, json};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
enum When {
    Always,
    ToolResult,
    LastUserContains(String),
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
enum Answer {
    Text(String),
    ToolUse { name: String, input: Value },
    Subagent(String),
    SlowText { text: String, ms: u64 },
}

impl Answer {
    fn reply(self) -> Reply {
        match self {
            Answer::Text(t) => Reply::text(&t),
            Answer::ToolUse { name, input } => Reply::tool_use(&name, input),
            Answer::Subagent(prompt) => Reply::subagent_call(&prompt),
            Answer::SlowText { text, ms } => {
                Reply::silent_then_text(Duration::from_millis(ms), &text)
            }
        }
    }
}

#[derive(Deserialize)]
struct Push {
    when: When,
    reply: Answer,
    times: Option<usize>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
enum Command {
    Push(Push),
    Default(Answer),
    Requests(serde::de::IgnoredAny),
}

fn run(fake: &FakeUpstream, line: &str) -> Result<Value, String> {
    let command: Command = serde_json::from_str(line).map_err(|e| e.to_string())?;
    match command {
        Command::Push(p) => fake.push(Rule {
            when: match p.when {
                When::Always => Match::Always,
                When::ToolResult => Match::HasToolResult,
                When::LastUserContains(s) => Match::LastUserContains(s),
            },
            reply: p.reply.reply(),
            times: p.times,
        }),
        Command::Default(a) => fake.set_default_reply(a.reply()),
        Command::Requests(_) => {
            let texts: Vec<String> = fake
                .message_requests()
                .iter()
                .map(|r| r.last_user_text())
                .collect();
            return Ok(json!({ "lastUserTexts": texts }));
        }
    }
    Ok(json!({ "ok": true }))
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    if let Some(a) = std::env::args().nth(1) {
        anyhow::bail!("unknown argument {a:?}: commands come on stdin");
    }
    let fake = FakeUpstream::start().await?;
    let mut out = tokio::io::stdout();
    out.write_all(format!("{}\n", json!({ "url": fake.url() })).as_bytes())
        .await?;
    out.flush().await?;
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    while let Some(line) = lines.next_line().await? {
        if line.trim().is_empty() {
            continue;
        }
        let answer = run(&fake, &line).unwrap_or_else(|e| json!({ "error": e }));
        out.write_all(format!("{answer}\n").as_bytes()).await?;
        out.flush().await?;
    }
    Ok(())
}
