#!/usr/bin/env bash
# ACP benchmark (results in docs/BENCHMARKS.md): `claude-host acp` against
# @zed-industries/claude-agent-acp (installed here from npm), same client, CLI and fake upstream.
#
#   scripts/bench-acp.sh [ROUNDS]     (8 by default: fewer leave the typed first prompt's median
#                                      noisier than its 5 ms target)
#
# The peer and the bare CLI reach the fake through `claude-host proxy` in a process of its own.
# Knobs for comparisons (docs/BENCHMARKS.md): BENCH_ACP_PROXY=in-process (that proxy inside the
# benchmark instead), BENCH_ACP_SAME_TOOLS=1 (claude-host without AskUserQuestion, as the peer),
# BENCH_BARE_EXTRAS=session-id,no-websearch,models,compact-window (the bare CLI given what
# claude-host adds to its CLIs), BENCH_BARE_FRESH=1 (the bare CLI with no session before it),
# BENCH_ACP_TYPED_FIRST=1 (each agent's typed session before its others),
# BENCH_ACP_TYPED_OWN_DIR=1 (in a project of its own), BENCH_AGENT_LOG=<filter> (each agent's log kept).
set -euo pipefail
cd "$(dirname "$0")/.."
PEER_VERSION=0.23.1
PEER_DIR="${XDG_CACHE_HOME:-$HOME/.cache}/claude-host-bench/acp-peer-$PEER_VERSION"
PEER="$PEER_DIR/node_modules/@zed-industries/claude-agent-acp/dist/index.js"
if [ ! -f "$PEER" ]; then
  mkdir -p "$PEER_DIR"
  npm install --prefix "$PEER_DIR" --no-audit --no-fund "@zed-industries/claude-agent-acp@$PEER_VERSION" >&2
fi
# claude-host on its own: built with the bench in one cargo run, it would get the features
# the bench's dependencies ask for, and not be the binary users run.
cargo build --release -p claude-host --bin claude-host
cargo build --release -p claude-host-bench --bin acp-bench
exec "${CARGO_TARGET_DIR:-target}/release/acp-bench" "$PEER" "${1:-8}"
