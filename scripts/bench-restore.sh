#!/usr/bin/env bash
# Restoring long sessions (results in docs/BENCHMARKS.md, "Restoring long sessions"): wall
# time and peak RSS of `sessions show --json`, `sessions fork`, AHP open (subscribe to the
# session and its chat until the snapshot) and ACP `session/load` for transcripts of 1, 10
# and 100 MB, and `sessions list` over 1,000 transcripts. Sizes in MB as arguments.
set -euo pipefail
cd "$(dirname "$0")/.."
# claude-host on its own: built with the bench in one cargo run, it would get the features
# the bench's dependencies ask for, and not be the binary users run.
cargo build --release -p claude-host --bin claude-host
cargo build --release -p claude-host-bench --bin restore-bench
exec "${CARGO_TARGET_DIR:-target}/release/restore-bench" "$@"
