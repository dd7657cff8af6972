#!/usr/bin/env bash
# SDK layer benchmarks (results go in docs/BENCHMARKS.md): frame parse throughput and
# list_sessions over 10,000 generated transcripts.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p claude-host-bench --bin sdk-bench
exec ./target/release/sdk-bench "${1:-3}"
