#!/usr/bin/env bash
# What tracking Claude's edits costs (results in docs/BENCHMARKS.md): a shell command that
# changes 1,000 files of a 10,000-file git repository (snapshot time against the command's own,
# bytes kept against bytes changed), and turns of tool calls that change nothing, tracked and
# untracked, with the real Claude Code CLI against the fake upstream.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p claude-host-bench --bin edits-bench
exec ./target/release/edits-bench "${1:-5}"
