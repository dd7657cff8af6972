//! Scripted fake Claude Code CLIs for the failure cases the real one will not produce on
//! demand: each scenario is a small executable (a bash script) that speaks stream-json.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// A result frame the fakes print.
pub const RESULT_FRAME: &str =
    r#"{"type":"result","subtype":"success","is_error":false,"result":"ok","session_id":"s"}"#;

/// What the fake CLI does.
#[derive(Debug, Clone)]
pub enum Scenario {
    /// Reads one user line, prints `init`, writes `stderr` to stderr, then dies of SIGSEGV.
    CrashMidTurn {
        /// The last words on stderr.
        stderr: String,
    },
    /// After one user line: a non-JSON line, an oversize line of `oversize` bytes, a JSON
    /// non-object, then a valid `result`; then waits for stdin to close.
    BadLines {
        /// Length of the oversize line.
        oversize: usize,
    },
    /// Reads stdin forever and never answers anything (e.g. `initialize`).
    Hang,
    /// Prints `stderr` to stderr and exits with `code` before reading anything.
    Exit {
        /// Exit code.
        code: i32,
        /// Message on stderr.
        stderr: String,
    },
    /// Sends the given control requests, reads as many lines back, and prints them as a JSON
    /// array in the `result` text of a result frame.
    AskAndEcho {
        /// Control request frames (one JSON object each).
        requests: Vec<String>,
    },
    /// Prints `frames` assistant frames numbered 1.. in `n` before reading anything, then
    /// answers every control request it reads with success and
    /// `{"frames_before": frames}`: each answer follows all those frames on stdout.
    FloodThenAnswer {
        /// How many frames come first.
        frames: usize,
    },
    /// Any script body.
    Custom(String),
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// Writes the fake CLI for `scenario` into `dir` and returns its path.
pub fn write(dir: &Path, scenario: &Scenario) -> std::io::Result<PathBuf> {
    let body = match scenario {
        Scenario::CrashMidTurn { stderr } => format!(
            "read line\necho '{{\"type\":\"system\",\"subtype\":\"init\",\"session_id\":\"s\"}}'\necho {} >&2\nkill -SEGV $$",
            shell_quote(stderr)
        ),
        Scenario::BadLines { oversize } => format!(
            "read line\necho 'not json at all'\necho '{{\"type\":\"assistant\",\"pad\":\"{}\"}}'\necho '[1,2]'\necho {}\nwhile read line; do :; done",
            "x".repeat(*oversize),
            shell_quote(RESULT_FRAME)
        ),
        Scenario::Hang => "while read line; do :; done".to_owned(),
        Scenario::Exit { code, stderr } => format!("echo {} >&2\nexit {code}", shell_quote(stderr)),
        Scenario::AskAndEcho { requests } => {
            let mut b = String::new();
            for r in requests {
                b.push_str(&format!("echo {}\n", shell_quote(r)));
            }
            b.push_str("answers=()\n");
            b.push_str(&format!(
                "for i in $(seq {}); do read -r a; answers+=(\"$a\"); done\n",
                requests.len()
            ));
            b.push_str("joined=$(IFS=,; echo \"[${answers[*]}]\")\n");
            b.push_str(
                "escaped=$(printf '%s' \"$joined\" | sed 's/\\\\/\\\\\\\\/g; s/\"/\\\\\"/g')\n",
            );
            b.push_str("echo \"{\\\"type\\\":\\\"result\\\",\\\"subtype\\\":\\\"success\\\",\\\"result\\\":\\\"$escaped\\\"}\"\n");
            b
        }
        Scenario::FloodThenAnswer { frames } => concat!(
            r#"for ((i = 1; i <= FRAMES; i++)); do printf '{"type":"assistant","n":%d}\n' "$i"; done"#,
            "\n",
            r#"while read -r line; do"#,
            "\n",
            r#"  id=$(printf '%s' "$line" | sed -n 's/.*"request_id":"\([^"]*\)".*/\1/p')"#,
            "\n",
            r#"  [ -n "$id" ] && printf '{"type":"control_response","response":{"subtype":"success","request_id":"%s","response":{"frames_before":FRAMES}}}\n' "$id""#,
            "\n",
            "done",
        )
        .replace("FRAMES", &frames.to_string()),
        Scenario::Custom(body) => body.clone(),
    };
    let path = dir.join(format!("fake-claude-{}", uuid::Uuid::new_v4().simple()));
    std::fs::write(&path, format!("#!/bin/bash\n{body}\n"))?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))?;
    Ok(path)
}
