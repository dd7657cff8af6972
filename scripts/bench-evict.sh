#!/usr/bin/env bash
# Many open sessions, few active (results in docs/BENCHMARKS.md): the memory of the host and
# its CLIs once idle CLIs are stopped, against live CLIs per session in the same run, and a
# prompt's first delta on an evicted session whose client typed a draft, against a warm one.
# Usage: scripts/bench-evict.sh [SESSIONS=100] [ACTIVE=5]
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p claude-host-bench --bin evict-bench
exec ./target/release/evict-bench "${1:-100}" "${2:-5}"
