//! Long sessions: `sessions show --json` of a transcript far larger than its memory bound
//! prints what the whole-file reader would, and its peak RSS (the child's own, from `wait4` in
//! a fresh process) stays under the bound.

use claude_host_sdk::transcripts::parse_transcript;
use claude_host_testkit::long_transcript;
use serde_json::{Value, json};
use std::process::{Command, Stdio};

/// The generated transcript: larger than [`BOUND_MIB`], so reading it whole could not stay
/// under the bound, and small enough for a debug build to run the test in about half a
/// minute (generating it and the test's own whole-file parse, the oracle, take most of it; at
/// 100 MiB it takes 80 s). A debug `show --json` of 100 MiB peaks at 24 MiB.
const TRANSCRIPT_MIB: u64 = 40;

/// Below the bound for a 100 MB transcript (64 MB), and below the file's size.
const BOUND_MIB: u64 = 32;

/// Set in a fresh process of this test binary that runs `sessions show` for the test: the
/// session's HOME. See [`show_in_a_fresh_process`].
const MEASURE: &str = "CLAUDE_HOST_TEST_MEASURE_SHOW";

/// The test's own name, to run it alone in a fresh process.
fn this_test() -> String {
    let module = module_path!();
    let module = module.split_once("::").map_or(module, |(_, rest)| rest);
    format!("{module}::showing_a_long_session_streams_the_same_chain_in_bounded_memory")
}

/// `sessions show ID --json` in `home`, its stdout to `home/show.out` and its peak RSS (KiB)
/// to `home/show.peak`, measured from a fresh process of this test binary.
///
/// Linux folds the spawning process's high-water RSS into the child's `ru_maxrss` across
/// `execve`; a child of the test process itself would count whatever the tests running beside
/// it in this process had used. A fresh process running only this test spawns it instead.
fn show_in_a_fresh_process(home: &std::path::Path, id: &str) -> (Vec<u8>, u64) {
    let status = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", &this_test(), "--test-threads=1", "--quiet"])
        .env(MEASURE, home)
        .env("CLAUDE_HOST_TEST_SESSION", id)
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "the measuring process failed");
    let peak = std::fs::read_to_string(home.join("show.peak")).unwrap();
    (
        std::fs::read(home.join("show.out")).unwrap(),
        peak.trim().parse().unwrap(),
    )
}

/// The measuring process's part (see [`show_in_a_fresh_process`]).
#[allow(unsafe_code)] // wait4: the only way to a child's own peak RSS.
#[allow(clippy::zombie_processes)] // wait4 reaps it.
fn measure_show(home: &std::path::Path) {
    let id = std::env::var("CLAUDE_HOST_TEST_SESSION").unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_claude-host"))
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("CLAUDE_HOST_HOME", home.join("home"))
        .env("CLAUDE_HOST_LOG", "warn")
        .args(["sessions", "show", &id, "--json"])
        .stdout(std::fs::File::create(home.join("show.out")).unwrap())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let pid = i32::try_from(child.id()).unwrap();
    let mut status = 0;
    // SAFETY: a zeroed rusage is a valid value for wait4 to fill in.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `pid` is our child, not yet reaped (std's `Child` never waited on it).
    let r = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(r, pid, "wait4: {}", std::io::Error::last_os_error());
    assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
    std::fs::write(home.join("show.peak"), usage.ru_maxrss.to_string()).unwrap();
}

#[test]
fn showing_a_long_session_streams_the_same_chain_in_bounded_memory() {
    if let Some(home) = std::env::var_os(MEASURE) {
        return measure_show(std::path::Path::new(&home));
    }
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
    let (out, peak_kib) = show_in_a_fresh_process(dir.path(), &g.session_id);
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
