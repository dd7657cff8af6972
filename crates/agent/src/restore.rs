//! Turns rebuilt from a transcript on disk, for sessions the host did not run itself (or ran
//! before a restart), including ones created by the user's own `claude`.

use crate::actions;
use crate::mapper::UsageTokens;
use ahp_types::common::StringOrMarkdown;
use ahp_types::state::{
    MarkdownResponsePart, MessageKind, ReasoningResponsePart, ResponsePart, ToolCallCompletedState,
    ToolCallConfirmationReason, ToolCallResponsePart, ToolCallState, ToolInput, ToolResultContent,
    ToolResultTextContent, Turn, TurnState, UsageInfo,
};
use claude_host_protocol::frames::{BlockRef, ContentRef};
use claude_host_sdk::transcripts::{Transcript, TranscriptError, TranscriptIndex};
use serde_json::{Map, Value};
use std::collections::HashMap;

/// An entry's message content, read in place ([`ContentRef`]: not copied into `Block`s).
fn content(entry: &Map<String, Value>) -> Option<ContentRef<'_>> {
    ContentRef::of(entry.get("message")?.get("content")?)
}

/// The completed turns of a transcript's main chain, oldest first. A turn starts at each
/// human prompt; assistant text, thinking and tool calls, and the tool results that answer
/// them, make its response parts.
pub fn turns_from_transcript(t: &Transcript) -> Vec<Turn> {
    conversation(t).turns
}

/// A transcript's conversation as a session is restored from it.
pub struct Conversation {
    /// Its completed turns, oldest first (see [`turns_from_transcript`]).
    pub turns: Vec<Turn>,
    /// The prompt id of a warm-up turn at the end of the main chain: a host stopped (killed,
    /// crashed) between its warm-up turn and the cut. It is not among `turns`, and the next
    /// CLI resumes before it, so the model does not see it either.
    pub uncut_warm_up: Option<String>,
}

/// The conversation of a transcript's main chain (one walk of it).
pub fn conversation(t: &Transcript) -> Conversation {
    let mut chain = t.main_chain();
    let mut uncut_warm_up = None;
    if let Some(at) = uncut_warm_up_at(&chain) {
        uncut_warm_up = chain[at]
            .get("uuid")
            .and_then(Value::as_str)
            .map(str::to_owned);
        chain.truncate(at);
    }
    Conversation {
        turns: turns_of(chain, false),
        uncut_warm_up,
    }
}

/// What a session is restored from, read from its transcript in bounded memory: the index
/// (a few words per entry), then the main chain's entries one at a time from their offsets
/// into the turns. The same as [`conversation`], [`title`] and [`cwd`] of the whole file.
pub struct Restored {
    /// The conversation.
    pub conversation: Conversation,
    /// See [`title`].
    pub title: Option<String>,
    /// See [`cwd`].
    pub cwd: Option<std::path::PathBuf>,
}

/// Runs `read` (a transcript's reading) on a thread of its own that ends with it, not on the
/// blocking pool. The reading allocates and frees a great deal; glibc keeps the last of what
/// a thread frees in that thread's cache, out of `malloc_trim`'s reach, and a pool thread
/// lives on for 10 s, so after a long session closed, its pages stayed resident. A thread
/// that ends hands its cache back to the arena at once (docs/BENCHMARKS.md, *What the close
/// leaves*).
pub(crate) async fn on_own_thread<T: Send + 'static>(
    read: impl FnOnce() -> T + Send + 'static,
) -> std::io::Result<T> {
    let (answer, answered) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("claude-host-restore".into())
        .spawn(move || {
            let _ = answer.send(read());
        })?;
    answered
        .await
        .map_err(|_| std::io::Error::other("the reading thread ended without an answer"))
}

/// Reads a session's transcript as [`Restored`] (see there).
pub fn read_session(
    config_dir: &std::path::Path,
    session_id: &str,
) -> Result<Restored, TranscriptError> {
    restore_from(&TranscriptIndex::of_session(config_dir, session_id)?)
}

/// Reads one transcript file as [`Restored`] (see there).
pub fn read_file(path: &std::path::Path) -> Result<Restored, TranscriptError> {
    restore_from(&TranscriptIndex::open(path)?)
}

/// [`Restored`] from an index: the chain's last prompt is found reading back from its end
/// (one turn's entries), then the chain is read forward once, up to an uncut warm-up.
pub fn restore_from(index: &TranscriptIndex) -> Result<Restored, TranscriptError> {
    let chain = index.main_chain();
    let mut end = chain.len();
    let mut uncut_warm_up = None;
    for (at, &i) in chain.iter().enumerate().rev() {
        if !index.is_user(i) {
            continue;
        }
        let Some(e) = index.entry(i)? else { continue };
        if !is_prompt_entry(&e) {
            continue;
        }
        if content(&e).is_some_and(|c| is_warm_up(&prompt_text(&c))) {
            end = at;
            uncut_warm_up = e.get("uuid").and_then(Value::as_str).map(str::to_owned);
        }
        break;
    }
    let mut turns = TurnBuilder::new(false);
    let mut first_prompt = None;
    for e in index.entries(chain[..end].iter().copied()) {
        let e = e?;
        if first_prompt.is_none() && is_prompt_entry(&e) {
            first_prompt = content(&e).map(|c| prompt_text(&c));
        }
        turns.push(&e);
    }
    // With no prompt before it, the uncut warm-up is the chain's first prompt.
    let title = index
        .custom_title()
        .or(index.ai_title())
        .map(str::to_owned)
        .or_else(|| first_prompt.and_then(|p| prompt_title(&p)))
        .filter(|s| !s.is_empty());
    Ok(Restored {
        conversation: Conversation {
            turns: turns.finish(),
            uncut_warm_up,
        },
        title,
        cwd: index.cwd().map(std::path::PathBuf::from),
    })
}

fn is_warm_up(prompt: &str) -> bool {
    prompt.trim() == claude_host_protocol::request_kind::WARM_UP_PROMPT
}

/// A title from a session's first prompt (none from a warm-up left uncut: no one's words).
fn prompt_title(prompt: &str) -> Option<String> {
    (!is_warm_up(prompt)).then(|| {
        prompt
            .lines()
            .next()
            .unwrap_or("")
            .chars()
            .take(80)
            .collect()
    })
}

/// Where in `chain` an uncut warm-up prompt sits, when it is the chain's last prompt.
fn uncut_warm_up_at(chain: &[&Map<String, Value>]) -> Option<usize> {
    let at = chain.iter().rposition(|e| is_prompt_entry(e))?;
    let text = content(chain[at]).map(|c| prompt_text(&c))?;
    (text.trim() == claude_host_protocol::request_kind::WARM_UP_PROMPT).then_some(at)
}

/// The subagents of a session from their transcripts (`agent-<id>.jsonl`, each with the
/// `agent-<id>.meta.json` that names the tool call that started it). Transcripts without
/// that call are skipped.
pub(crate) fn subagents_from_transcripts(
    paths: &[std::path::PathBuf],
) -> Vec<crate::subagent::RestoredSubagent> {
    let mut out = Vec::new();
    for path in paths {
        let Some(call) = subagent_call(path) else {
            tracing::debug!(path = %path.display(), "a subagent transcript without its tool call; skipped");
            continue;
        };
        let mut turns = match read_subagent_turns(path) {
            Ok(t) => t,
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "cannot read a subagent transcript");
                continue;
            }
        };
        // Its first run is the turn the live chat had: named after the call, as it was.
        for (i, turn) in turns.iter_mut().enumerate() {
            turn.id = if i == 0 {
                call.clone()
            } else {
                format!("{call}#{i}")
            };
        }
        out.push(crate::subagent::RestoredSubagent { call, turns });
    }
    out
}

/// The tool call that started the subagent whose transcript is `path` (from the
/// `agent-<id>.meta.json` beside it).
fn subagent_call(path: &std::path::Path) -> Option<String> {
    let meta = std::fs::read(path.with_extension("meta.json")).ok()?;
    serde_json::from_slice::<Value>(&meta)
        .ok()?
        .get("toolUseId")?
        .as_str()
        .map(str::to_owned)
}

/// Whether the transcript of the subagent called by `call` (among `paths`) ends with its
/// final answer: an assistant entry that stopped for any reason but a tool call. The CLI
/// reports a subagent's end before its transcript's last lines are on disk.
pub(crate) fn subagent_transcript_ended(paths: &[std::path::PathBuf], call: &str) -> bool {
    let Some(path) = paths
        .iter()
        .find(|p| subagent_call(p).as_deref() == Some(call))
    else {
        return false;
    };
    let Ok(text) = std::fs::read_to_string(path) else {
        return false;
    };
    let last = text
        .lines()
        .rev()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|e| {
            matches!(
                e.get("type").and_then(Value::as_str),
                Some("user" | "assistant")
            )
        });
    last.is_some_and(|e| {
        e.get("type").and_then(Value::as_str) == Some("assistant")
            && e.pointer("/message/stop_reason")
                .and_then(Value::as_str)
                .is_some_and(|r| r != "tool_use")
    })
}

/// A subagent transcript's turns, from the transcript read whole: every entry is on its side
/// chain, in file order. (A restore reads the same from the file a line at a time.)
pub fn subagent_turns(t: &Transcript) -> Vec<Turn> {
    let mut turns = TurnBuilder::new(true);
    for e in &t.entries {
        if is_subagent_turn_entry(e) {
            turns.push(e);
        }
    }
    turns.finish()
}

fn is_subagent_turn_entry(e: &Map<String, Value>) -> bool {
    matches!(
        e.get("type").and_then(Value::as_str),
        Some("user" | "assistant")
    )
}

/// [`subagent_turns`] of a subagent transcript file, read a line at a time.
pub fn read_subagent_turns(path: &std::path::Path) -> std::io::Result<Vec<Turn>> {
    use std::io::BufRead;
    let mut reader = std::io::BufReader::new(std::fs::File::open(path)?);
    let mut turns = TurnBuilder::new(true);
    let mut line = Vec::new();
    for n in 1.. {
        line.clear();
        if reader.read_until(b'\n', &mut line)? == 0 {
            break;
        }
        let text = line.strip_suffix(b"\n").unwrap_or(&line);
        if text.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match serde_json::from_slice::<Value>(text) {
            Ok(Value::Object(e)) => {
                if is_subagent_turn_entry(&e) {
                    turns.push(&e);
                }
            }
            _ => tracing::warn!(path = %path.display(), line = n, "skipping a bad transcript line"),
        }
    }
    Ok(turns.finish())
}

/// What a turn id starts with when it names its prompt's transcript entry: VS Code's own form
/// for its chat requests (`request_<uuid>`).
const TURN_ID_PREFIX: &str = "request_";

/// The id of the turn whose prompt is the transcript entry `uuid`.
///
/// A turn's id is kept with the transcript rather than beside it: its prompt goes to the CLI
/// with the uuid in the turn id ([`prompt_uuid`]), which the CLI writes as the entry's own, so
/// a restore (after a restart, on another host through the shared store, or with `import`)
/// names the turn as its client did, with nothing more to store or to lose.
pub fn turn_id(uuid: &str) -> String {
    format!("{TURN_ID_PREFIX}{uuid}")
}

/// A fresh turn id for a turn the host opens itself (a prompt from `run` or ACP, a queued
/// message promoted), in the same durable form as VS Code's.
pub fn new_turn_id() -> String {
    turn_id(&uuid::Uuid::new_v4().to_string())
}

/// The uuid a turn's prompt goes to the CLI with: the one in a `request_<uuid>` id, so a
/// restore gives the same id back; any other client id gets a fresh one and is restored as
/// `request_<that uuid>` (AHP leaves turn ids to the client, and only this form round-trips).
pub fn prompt_uuid(turn_id: &str) -> String {
    turn_id
        .strip_prefix(TURN_ID_PREFIX)
        .and_then(|u| uuid::Uuid::parse_str(u).ok())
        .map(|u| u.hyphenated().to_string())
        .filter(|u| turn_id.ends_with(u.as_str()))
        .unwrap_or_else(|| uuid::Uuid::new_v4().to_string())
}

fn turns_of(entries: Vec<&Map<String, Value>>, sidechain: bool) -> Vec<Turn> {
    let mut turns = TurnBuilder::new(sidechain);
    for e in entries {
        turns.push(e);
    }
    turns.finish()
}

/// Turns built from a chain's entries, one entry at a time (the entries need not be kept).
struct TurnBuilder {
    turns: Vec<Turn>,
    /// Tool call id → (turn index, part index), filled in when its result is seen.
    calls: HashMap<String, (usize, usize)>,
    /// The turn's API responses (a response is written once per content block).
    responses: Vec<Response>,
    /// A subagent's own transcript, where every entry is on the side chain.
    sidechain: bool,
}

impl TurnBuilder {
    fn new(sidechain: bool) -> Self {
        TurnBuilder {
            turns: Vec::new(),
            calls: HashMap::new(),
            responses: Vec::new(),
            sidechain,
        }
    }

    fn finish(mut self) -> Vec<Turn> {
        set_usage(self.turns.last_mut(), &mut self.responses);
        self.turns
    }

    fn push(&mut self, e: &Map<String, Value>) {
        let sidechain = self.sidechain;
        let turns = &mut self.turns;
        let calls = &mut self.calls;
        let responses = &mut self.responses;
        let ty = e.get("type").and_then(Value::as_str).unwrap_or("");
        let uuid = e.get("uuid").and_then(Value::as_str).unwrap_or("");
        let Some(c) = content(e) else { return };
        match ty {
            "user" if is_prompt_in(e, &c, sidechain) => {
                set_usage(turns.last_mut(), responses);
                turns.push(Turn {
                    id: turn_id(uuid),
                    started_at: e
                        .get("timestamp")
                        .and_then(Value::as_str)
                        .map(str::to_owned),
                    duration: None,
                    // A subagent's prompt is its tool call's, as in the live chat.
                    message: actions::message(
                        &prompt_text(&c),
                        if sidechain {
                            MessageKind::Tool
                        } else {
                            MessageKind::User
                        },
                    ),
                    response_parts: Vec::new(),
                    usage: None,
                    state: TurnState::Complete,
                });
            }
            "user" => {
                for b in c.blocks() {
                    let BlockRef::ToolResult {
                        tool_use_id,
                        is_error,
                        ..
                    } = b
                    else {
                        continue;
                    };
                    let Some(&(ti, pi)) = calls.get(tool_use_id) else {
                        continue;
                    };
                    if let Some(ResponsePart::ToolCall(part)) =
                        turns.get_mut(ti).and_then(|t| t.response_parts.get_mut(pi))
                        && let ToolCallState::Completed(call) = &mut part.tool_call
                    {
                        call.success = !is_error.unwrap_or(false);
                        call.content = Some(vec![ToolResultContent::Text(ToolResultTextContent {
                            text: b.result_text().unwrap_or_default(),
                        })]);
                    }
                }
            }
            "assistant" => {
                let ti = turns.len().saturating_sub(1);
                let Some(turn) = turns.last_mut() else {
                    return;
                };
                if let Some(m) = e.get("message").and_then(Value::as_object) {
                    let id = m
                        .get("id")
                        .and_then(Value::as_str)
                        .unwrap_or(uuid)
                        .to_owned();
                    let response = Response::of(id, m);
                    match responses.iter_mut().find(|r| r.id == response.id) {
                        Some(r) => *r = response,
                        None => responses.push(response),
                    }
                }
                for (i, b) in c.blocks().enumerate() {
                    let id = format!("{}#{uuid}#{i}", turn.id);
                    let part = match b {
                        BlockRef::Text(text) => ResponsePart::Markdown(MarkdownResponsePart {
                            id,
                            content: text.to_owned(),
                        }),
                        BlockRef::Thinking(thinking) => {
                            ResponsePart::Reasoning(ReasoningResponsePart {
                                id,
                                content: thinking.to_owned(),
                            })
                        }
                        BlockRef::ToolUse {
                            id: call_id,
                            name,
                            input,
                        } => {
                            calls.insert(call_id.to_owned(), (ti, turn.response_parts.len()));
                            completed_call(call_id.to_owned(), name, input)
                        }
                        _ => continue,
                    };
                    turn.response_parts.push(part);
                }
            }
            _ => {}
        }
    }
}

/// What a turn's usage needs of one API response, by its message id. Not the message
/// itself: its content (tool inputs, text) can be large, and a turn's usage reads only this.
struct Response {
    id: String,
    tokens: Option<UsageTokens>,
    model: Option<String>,
}

impl Response {
    fn of(id: String, message: &Map<String, Value>) -> Response {
        Response {
            id,
            tokens: UsageTokens::of(message),
            model: message
                .get("model")
                .and_then(Value::as_str)
                .map(str::to_owned),
        }
    }
}

/// A restored turn's usage, as a live turn reports it: its responses' tokens summed, the
/// model that answered last, and the context its last request used.
fn set_usage(turn: Option<&mut Turn>, responses: &mut Vec<Response>) {
    let taken = std::mem::take(responses);
    let Some(turn) = turn else { return };
    let Some(last) = taken.last() else {
        return;
    };
    let mut input = 0;
    let mut output = 0;
    let mut cache_read = 0;
    for t in taken.iter().filter_map(|r| r.tokens.as_ref()) {
        input += t.input();
        output += t.output_tokens.unwrap_or(0);
        cache_read += t.cache_read_input_tokens.unwrap_or(0);
    }
    let mut meta = Map::new();
    if let Some(t) = &last.tokens {
        meta.insert(
            crate::mapper::CONTEXT_TOKENS.into(),
            Value::from(t.context()),
        );
    }
    turn.usage = Some(UsageInfo {
        input_tokens: Some(input),
        output_tokens: Some(output),
        model: last.model.clone().filter(|m| m != "<synthetic>"),
        cache_read_tokens: Some(cache_read),
        meta: Some(meta),
    });
}

fn completed_call(id: String, name: &str, input: &Value) -> ResponsePart {
    ResponsePart::ToolCall(Box::new(ToolCallResponsePart {
        tool_call: ToolCallState::Completed(ToolCallCompletedState {
            tool_call_id: id,
            tool_name: name.to_owned(),
            display_name: actions::display_name(name),
            intention: None,
            contributor: None,
            meta: None,
            invocation_message: StringOrMarkdown::Plain(actions::invocation(name, input)),
            tool_input: Some(ToolInput::Inline(input.to_string())),
            success: true,
            past_tense_message: StringOrMarkdown::Plain(format!(
                "Ran {}",
                actions::display_name(name)
            )),
            content: None,
            structured_content: None,
            error: None,
            confirmed: ToolCallConfirmationReason::NotNeeded,
            selected_option: None,
        }),
    }))
}

/// Whether a transcript entry is a human prompt (which starts a turn).
pub(crate) fn is_prompt_entry(e: &Map<String, Value>) -> bool {
    e.get("type").and_then(Value::as_str) == Some("user")
        && content(e).is_some_and(|c| is_prompt(e, &c))
}

fn is_prompt(e: &Map<String, Value>, content: &ContentRef) -> bool {
    is_prompt_in(e, content, false)
}

/// Whether an entry is a prompt; `sidechain`: of a subagent's own transcript, where every
/// entry is on the side chain.
fn is_prompt_in(e: &Map<String, Value>, content: &ContentRef, sidechain: bool) -> bool {
    if e.get("isMeta") == Some(&Value::Bool(true))
        || (!sidechain && e.get("isSidechain") == Some(&Value::Bool(true)))
    {
        return false;
    }
    match content {
        ContentRef::Text(s) => !s.starts_with('<'),
        ContentRef::Blocks(_) => {
            !content
                .blocks()
                .any(|b| matches!(b, BlockRef::ToolResult { .. }))
                && !prompt_text(content).is_empty()
        }
    }
}

fn prompt_text(content: &ContentRef) -> String {
    match content {
        ContentRef::Text(s) => (*s).to_owned(),
        ContentRef::Blocks(_) => content
            .blocks()
            .filter_map(|b| match b {
                BlockRef::Text(text) if !text.starts_with("<system-reminder>") => Some(text),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("\n"),
    }
}

/// A transcript's title: the user's custom title, else the CLI's AI title, else the first
/// human prompt.
pub fn title(t: &Transcript) -> Option<String> {
    let titled = |ty: &str, key: &str| {
        t.entries
            .iter()
            .rev()
            .filter(|e| e.get("type").and_then(Value::as_str) == Some(ty))
            .find_map(|e| {
                e.get(key)
                    .or_else(|| e.get("title"))
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            })
    };
    titled("custom-title", "customTitle")
        .or_else(|| titled("ai-title", "aiTitle"))
        .or_else(|| {
            t.main_chain()
                .into_iter()
                .filter(|e| is_prompt_entry(e))
                .find_map(|e| content(e).map(|c| prompt_text(&c)))
                // A warm-up left uncut is no one's words.
                .filter(|p| p.trim() != claude_host_protocol::request_kind::WARM_UP_PROMPT)
                .map(|p| p.lines().next().unwrap_or("").chars().take(80).collect())
        })
        .filter(|s: &String| !s.is_empty())
}

/// The working directory a transcript was recorded in.
pub fn cwd(t: &Transcript) -> Option<std::path::PathBuf> {
    t.entries
        .iter()
        .find_map(|e| e.get("cwd").and_then(Value::as_str))
        .map(std::path::PathBuf::from)
}
