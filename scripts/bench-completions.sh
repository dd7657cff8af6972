#!/usr/bin/env bash
# `@` completions on a 100,000-file tree (results in docs/BENCHMARKS.md): the index walk and
# its memory, the first `@` after createSession, warm `completions` p50/p99 through a
# `claude-host serve` process, against a fresh walk per query (the strategy before the index).
# Arguments: runs (default 3), requests per query and run (default 200).
set -euo pipefail
cd "$(dirname "$0")/.."
# claude-host on its own: built with the bench in one cargo run, it would get the features
# the bench's dependencies ask for, and not be the binary users run.
cargo build --release -p claude-host --bin claude-host
cargo build --release -p claude-host-bench --bin completions-bench
exec "${CARGO_TARGET_DIR:-target}/release/completions-bench" "${1:-3}" "${2:-200}"
