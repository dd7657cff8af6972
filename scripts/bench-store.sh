#!/usr/bin/env bash
# Session store benchmark (results go in docs/BENCHMARKS.md): append throughput and restore of
# a 10,000-entry transcript on PostgreSQL (a private cluster started from the machine's
# PostgreSQL binaries, fsync on) and SQLite, against the same JSONL file written and read
# locally, in the same run.
set -euo pipefail
cd "$(dirname "$0")/.."
# The PostgreSQL store is a feature (docs/ARCHITECTURE.md, "Cargo features").
cargo build --release -p claude-host-bench --bin store-bench --features claude-host-store/postgres
exec ./target/release/store-bench "${1:-3}"
