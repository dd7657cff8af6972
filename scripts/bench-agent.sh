#!/usr/bin/env bash
# Agent-layer benchmarks (results in docs/BENCHMARKS.md): first-prompt latency warm vs cold,
# the agent layer's added latency over a bare SDK session, host RSS per idle session.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p claude-host-bench --bin agent-bench
exec ./target/release/agent-bench "${1:-5}"
