#!/usr/bin/env bash
# AHP server benchmarks (results in docs/BENCHMARKS.md): actions per second fanned out to
# 1 / 10 / 100 clients, `claude-host serve` RSS with 100 idle sessions, and the per-step
# latency of a turn with 10 sessions streaming (the pinned Claude Code CLI, the fake upstream).
#
#   scripts/bench-ahp.sh [ACTIONS]                  # everything (20000 actions by default)
#   scripts/bench-ahp.sh latency [SESSIONS] [TURNS]  # the latency part alone (10, 10)
set -euo pipefail
cd "$(dirname "$0")/.."
# claude-host on its own: built with the bench in one cargo run, it would get the features
# the bench's dependencies ask for, and not be the binary users run.
cargo build --release -p claude-host --bin claude-host
cargo build --release -p claude-host-bench --bin ahp-bench
exec "${CARGO_TARGET_DIR:-target}/release/ahp-bench" "$@"
