//! Latency marks for the benchmarks: where a prompt's time goes between a client and the CLI.
//!
//! With `CLAUDE_HOST_LATENCY_TRACE=<file>` in its environment, a process appends one line per
//! mark to that file: `<step> <key> <ns>`, where `ns` is `CLOCK_MONOTONIC` in nanoseconds
//! (one clock for every process of the machine, so a benchmark compares its own instants
//! with the host's) and `key` names the session (its id). Without it, [`mark`] is one load of
//! a flag that is never set: production pays nothing else.
//!
//! The steps are few and fixed: a front end's receipt of a prompt (`acp.prompt`,
//! `ahp.dispatch`), the CLI's stdin line written (`cli.stdin`), the proxy's receipt of the
//! CLI's model request and its first frame of the upstream's answer ready for the CLI
//! (`proxy.request`, `proxy.first`, keyed by the session its token names), the first content
//! block and the first stream delta read back from the CLI (`cli.part`, `cli.delta`), and the
//! front end's first text of that turn handed to its connection (`acp.update`: the first
//! `agent_message_chunk`; `ahp.part`: the first `chat/responsePart`). `acp-bench` and
//! `ahp-bench` read them (docs/BENCHMARKS.md). The proxy marks in whichever process runs it,
//! so a benchmark splits a peer's path at its proxy the same way.

use std::io::Write;
use std::sync::{Mutex, OnceLock};

/// The environment variable that turns the marks on and names their file.
pub const TRACE_ENV: &str = "CLAUDE_HOST_LATENCY_TRACE";

/// A front end received a client's prompt.
pub const ACP_PROMPT: &str = "acp.prompt";
/// The ACP server handed the turn's first text update to its connection.
pub const ACP_UPDATE: &str = "acp.update";
/// The AHP server received a client's `chat/turnStarted`.
pub const AHP_DISPATCH: &str = "ahp.dispatch";
/// The AHP server queued the turn's first text part (a `chat/responsePart`) to a client.
pub const AHP_PART: &str = "ahp.part";
/// A user message was written (and flushed) to the CLI's stdin.
pub const CLI_STDIN: &str = "cli.stdin";
/// The proxy has read a model request's whole body (before it parses it).
pub const PROXY_REQUEST: &str = "proxy.request";
/// The proxy has the first frame of the upstream's answer to a model request ready to send
/// (for an answer that is not streamed, or an error: when it is complete).
pub const PROXY_FIRST: &str = "proxy.first";
/// The first `content_block_start` (a response part begins) after a user message was read
/// from the CLI's stdout.
pub const CLI_PART: &str = "cli.part";
/// The first `content_block_delta` after a user message was read from the CLI's stdout.
pub const CLI_DELTA: &str = "cli.delta";

static SINK: OnceLock<Option<Mutex<std::fs::File>>> = OnceLock::new();

fn sink() -> Option<&'static Mutex<std::fs::File>> {
    SINK.get_or_init(|| {
        let path = std::env::var_os(TRACE_ENV)?;
        match std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
        {
            Ok(f) => Some(Mutex::new(f)),
            Err(e) => {
                tracing::warn!(error = %e, "cannot open the latency trace file; no marks");
                None
            }
        }
    })
    .as_ref()
}

/// Whether marks are being written (the environment asked for them).
pub fn enabled() -> bool {
    sink().is_some()
}

/// `CLOCK_MONOTONIC` in nanoseconds: the clock `std::time::Instant` reads on Linux, shared by
/// every process of the machine.
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the call's duration, and
    // CLOCK_MONOTONIC is always available on Linux; the call writes nothing else.
    #[allow(unsafe_code)]
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    if rc != 0 {
        return 0;
    }
    u64::try_from(ts.tv_sec).unwrap_or(0) * 1_000_000_000 + u64::try_from(ts.tv_nsec).unwrap_or(0)
}

/// Records that `step` happened now for session `key` (nothing unless [`TRACE_ENV`] is set).
pub fn mark(step: &str, key: &str) {
    let Some(file) = sink() else {
        return;
    };
    let ns = now_ns();
    // One write of one short line to a file opened for appending: lines from several
    // threads or processes do not interleave.
    let line = format!("{step} {key} {ns}\n");
    let mut f = file
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let _ = f.write_all(line.as_bytes());
}

/// A mark's session key from a URI or an id: its last path segment (`ahp-session:/<id>`,
/// `claude:/<id>` and `<id>` all give `<id>`).
pub fn key_of(uri_or_id: &str) -> &str {
    uri_or_id.rsplit('/').next().unwrap_or(uri_or_id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clock_moves_forward_with_instant() {
        let a = now_ns();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let b = now_ns();
        assert!(b >= a + 2_000_000, "{a} then {b}");
    }

    #[test]
    fn keys_are_the_last_segment() {
        assert_eq!(key_of("ahp-session:/abc"), "abc");
        assert_eq!(key_of("claude:/abc"), "abc");
        assert_eq!(key_of("abc"), "abc");
    }
}
