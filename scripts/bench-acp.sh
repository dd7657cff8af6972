#!/usr/bin/env bash
# ACP benchmark (results in docs/BENCHMARKS.md): `claude-host acp` against claude-agent-acp
# (installed here from npm), same client, CLI and fake upstream.
#
#   scripts/bench-acp.sh [ROUNDS]     (8 by default, 6 typed first prompts a round on each side:
#                                      fewer leave their median noisier than its 5 ms target)
#
# The peer is the maintained @agentclientprotocol/claude-agent-acp; BENCH_ACP_PEER=zed runs the
# frozen @zed-industries/claude-agent-acp 0.23.1 instead (what this benchmark ran until
# 2026-12-03). The client declares form elicitation, as Zed does, so the maintained peer keeps
# AskUserQuestion (BENCH_ACP_NO_FORMS=1: it declares none, and that peer turns the tool off).
# The peer and the bare CLI reach the fake through `claude-host proxy` in a process of its own.
# Knobs for comparisons (docs/BENCHMARKS.md): BENCH_ACP_PROXY=in-process (that proxy inside the
# benchmark instead), BENCH_ACP_SAME_TOOLS=1 (claude-host without AskUserQuestion),
# BENCH_BARE_EXTRAS=session-id,no-websearch,models,compact-window (the bare CLI given what
# claude-host adds to its CLIs), BENCH_BARE_FRESH=1 (the bare CLI with no session before it),
# BENCH_ACP_TYPED=<n> (typed first prompts a round), BENCH_ACP_TYPED_FIRST=1 (each agent's
# typed sessions before its others),
# BENCH_ACP_TYPED_OWN_DIR=1 (in a project of its own), BENCH_AGENT_LOG=<filter> (each agent's
# log kept), BENCH_ACP_DUMP=<dir> (every model request of a round written there).
set -euo pipefail
cd "$(dirname "$0")/.."
case "${BENCH_ACP_PEER:-current}" in
  zed) PEER_PACKAGE=@zed-industries/claude-agent-acp; PEER_VERSION=0.23.1; PEER_DIR_NAME="acp-peer-$PEER_VERSION" ;;
  current) PEER_PACKAGE=@agentclientprotocol/claude-agent-acp; PEER_VERSION=0.101.0; PEER_DIR_NAME="acp-peer-next-$PEER_VERSION" ;;
  *) echo "BENCH_ACP_PEER: zed or current" >&2; exit 2 ;;
esac
PEER_DIR="${XDG_CACHE_HOME:-$HOME/.cache}/claude-host-bench/$PEER_DIR_NAME"
PEER="$PEER_DIR/node_modules/$PEER_PACKAGE/dist/index.js"
if [ ! -f "$PEER" ]; then
  mkdir -p "$PEER_DIR"
  npm install --prefix "$PEER_DIR" --no-audit --no-fund "$PEER_PACKAGE@$PEER_VERSION" >&2
fi
# claude-host on its own: built with the bench in one cargo run, it would get the features
# the bench's dependencies ask for, and not be the binary users run.
cargo build --release -p claude-host --bin claude-host
cargo build --release -p claude-host-bench --bin acp-bench
exec "${CARGO_TARGET_DIR:-target}/release/acp-bench" "$PEER" "${1:-8}"
