#!/usr/bin/env bash
# Soak (docs/BENCHMARKS.md): SESSIONS sessions (default 20) doing turns with the real Claude
# Code CLI against the fake upstream for SECONDS (default 300), sampling the host's memory,
# open descriptors and live tasks every second; fails when their troughs rise past a small
# budget. CSV, when given, receives every sample. CI runs it for a few minutes; an hour by
# hand: scripts/soak.sh 3600.
# The pinned CLI is the tests' (installed like theirs when missing). Built with the dev
# profile: it shares the test build's artifacts, and a leak does not depend on optimization.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build -q -p claude-host-bench --bin soak
exec "${CARGO_TARGET_DIR:-target}/debug/soak" "${1:-300}" "${2:-20}" ${3:+"$3"}
