#!/usr/bin/env bash
# Restoring long sessions (results in docs/BENCHMARKS.md, "Restoring long sessions"): wall
# time and peak RSS of `sessions show --json`, `sessions fork`, AHP open (subscribe to the
# session and its chat until the snapshot) and ACP `session/load` for transcripts of 1, 10
# and 100 MB, and `sessions list` over 1,000 transcripts. Sizes in MB as arguments.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p claude-host -p claude-host-bench --bin claude-host --bin restore-bench
exec "${CARGO_TARGET_DIR:-target}/release/restore-bench" "$@"
