//! Fuzz targets for claude-host's parsers. Each target is a plain function of the input bytes
//! that calls the project's real entry points and panics when an invariant breaks; the AFL++
//! harness (`src/bin/fuzz-target.rs`, feature `afl`) and the regression test
//! (`tests/regressions.rs`, every file under `seeds/` and `regressions/`) share them.

mod input;
mod targets;

/// A target: runs one input, panicking on a broken invariant.
pub type Target = fn(&[u8]);

/// Every target, by name (the folder names under `seeds/` and `regressions/`).
pub const TARGETS: &[(&str, Target)] = &[
    ("sse", targets::sse::run),
    ("relay", targets::relay::run),
    ("proxy_request", targets::proxy_request::run),
    ("stream_json", targets::stream_json::run),
    ("control", targets::control::run),
    ("transcript", targets::transcript::run),
    ("ahp", targets::ahp::run),
    ("openai_stream", targets::openai_stream::run),
    ("openai_request", targets::openai_request::run),
    ("openai_response", targets::openai_response::run),
];

/// The target called `name`.
pub fn target(name: &str) -> Option<Target> {
    TARGETS.iter().find(|(n, _)| *n == name).map(|(_, t)| *t)
}
