//! Long sessions: `sessions show --json` of a transcript far larger than its memory bound
//! prints what the whole-file reader would, and its peak RSS (the child's own, from `wait4`)
//! stays under the bound.

use claude_host_sdk::transcripts::parse_transcript;
use claude_host_testkit::long_transcript;
use serde_json::{Value, json};
use std::io::Read;
use std::process::{Command, Stdio};

/// The generated transcript: larger than [`BOUND_MIB`], so reading it whole could not stay
/// under the bound, and small enough for a debug build to run the test in about half a
/// minute (generating it and the test's own whole-file parse, the oracle, take most of it; at
/// 100 MiB it takes 80 s). A debug `show --json` of 100 MiB peaks at 24 MiB.
const TRANSCRIPT_MIB: u64 = 40;

/// Below the bound for a 100 MB transcript (64 MB), and below the file's size.
const BOUND_MIB: u64 = 32;

/// Runs `cmd`, returning its stdout and its peak RSS in KiB. Linux folds the spawning process's
/// high-water RSS into the child's `ru_maxrss` across `execve`, so this is at least the test
/// process's peak so far: the child is spawned before the test reads the transcript itself,
/// and the figure can only be too high, never too low.
#[allow(unsafe_code)] // wait4: the only way to a child's own peak RSS.
#[allow(clippy::zombie_processes)] // wait4 reaps it.
fn run_with_peak(cmd: &mut Command) -> (Vec<u8>, u64) {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut out = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut v = Vec::new();
        out.read_to_end(&mut v).unwrap();
        v
    });
    let pid = i32::try_from(child.id()).unwrap();
    let mut status = 0;
    // SAFETY: a zeroed rusage is a valid value for wait4 to fill in.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `pid` is our child, not yet reaped (std's `Child` never waited on it).
    let r = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(r, pid, "wait4: {}", std::io::Error::last_os_error());
    assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
    (
        reader.join().unwrap(),
        u64::try_from(usage.ru_maxrss).unwrap(),
    )
}

#[test]
fn showing_a_long_session_streams_the_same_chain_in_bounded_memory() {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let work = std::fs::canonicalize(&work).unwrap();
    let g = long_transcript::generate(
        &dir.path().join(".claude"),
        &work.display().to_string(),
        TRANSCRIPT_MIB << 20,
    )
    .unwrap();
    let (out, peak_kib) = run_with_peak(
        Command::new(env!("CARGO_BIN_EXE_claude-host"))
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", dir.path())
            .env("CLAUDE_HOST_HOME", dir.path().join("home"))
            .env("CLAUDE_HOST_LOG", "warn")
            .args(["sessions", "show", &g.session_id, "--json"]),
    );
    assert!(
        peak_kib < BOUND_MIB * 1024,
        "sessions show --json of a {} MiB transcript peaked at {} KiB (bound {BOUND_MIB} MiB)",
        g.bytes >> 20,
        peak_kib
    );
    // The oracle: the whole-file reader's main chain, serialized whole as before.
    let whole = parse_transcript(&std::fs::read(&g.path).unwrap());
    let expected = json!({
        "id": g.session_id,
        "entries": whole.main_chain(),
        "skipped_lines": whole.skipped,
        "customizations": Value::Array(Vec::new()),
    });
    let expected = format!("{expected}\n");
    assert!(
        out == expected.as_bytes(),
        "the streamed output differs from the whole-file one ({} vs {} bytes)",
        out.len(),
        expected.len()
    );
}
