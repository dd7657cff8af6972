#!/usr/bin/env bash
# VS Code opening a long session (results in docs/BENCHMARKS.md, "VS Code opening a long
# session"): the real workbench (scripts/vscode-e2e.sh's code-server and Chromium) opens a
# session restored from a transcript of MB megabytes (default 100) from its sessions sidebar,
# in two windows one after the other; prints the time from the click to the newest answer on
# screen, how many rows the chat's list holds and what scrolling to the top finds. Runs a
# release claude-host; E2E_CHAT_TURNS=N runs it with `serve --chat-turns N` (0: every turn).
#
#   scripts/bench-vscode-open.sh [MB]
set -euo pipefail
cd "$(dirname "$0")/.."
target=${CARGO_TARGET_DIR:-target}
cargo build --release -q -p claude-host --bin claude-host
export E2E_LONG_MB=${1:-100}
CLAUDE_HOST_E2E_HOST_BINARY=$target/release/claude-host CLAUDE_HOST_E2E_FILES=./long-session.bench.mjs \
  exec ./scripts/vscode-e2e.sh
