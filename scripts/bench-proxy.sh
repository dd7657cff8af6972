#!/usr/bin/env bash
# Proxy overhead benchmark (results go in docs/BENCHMARKS.md). Builds release binaries and runs
# streams of 2,000 events through `claude-host proxy` and directly from the fake upstream.
set -euo pipefail
cd "$(dirname "$0")/.."
# claude-host on its own: built with the bench in one cargo run, it would get the features
# the bench's dependencies ask for, and not be the binary users run.
cargo build --release -p claude-host --bin claude-host
cargo build --release -p claude-host-bench
ulimit -n 65536 2>/dev/null || true
# A worktree with its own target folder (CARGO_TARGET_DIR) benchmarks its own binaries.
target="${CARGO_TARGET_DIR:-./target}"
exec "$target/release/proxy-bench" "$target/release/claude-host" "${1:-3}"
