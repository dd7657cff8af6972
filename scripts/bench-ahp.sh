#!/usr/bin/env bash
# AHP server benchmarks (results in docs/BENCHMARKS.md): actions per second fanned out to
# 1 / 10 / 100 clients, and `claude-host serve` RSS with 100 idle sessions.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p claude-host -p claude-host-bench --bin claude-host --bin ahp-bench
exec ./target/release/ahp-bench "${1:-20000}"
