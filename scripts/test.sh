#!/usr/bin/env bash
# Runs the whole test suite. Installs what the tests need first (the pinned Claude Code CLI,
# once per machine, from the npm registry). Extra arguments go to `cargo test`.
set -euo pipefail
cd "$(dirname "$0")/.."

CLI_VERSION=2.1.330
CLI_DIR="${HOME}/.cache/claude-host-test/cli/${CLI_VERSION}"
. scripts/lib/platform.sh
CLI_BIN="${CLI_DIR}/node_modules/@anthropic-ai/claude-code-${PLATFORM}/claude"
if ! "${CLI_BIN}" --version 2>/dev/null | grep -q "^${CLI_VERSION}"; then
  command -v npm >/dev/null || { echo "npm is required to install Claude Code ${CLI_VERSION} for the tests" >&2; exit 1; }
  echo "Installing @anthropic-ai/claude-code@${CLI_VERSION} for the tests into ${CLI_DIR}"
  mkdir -p "${CLI_DIR}"
  npm install --no-audit --no-fund --prefix "${CLI_DIR}" "@anthropic-ai/claude-code@${CLI_VERSION}"
  "${CLI_BIN}" --version
fi
export CLAUDE_HOST_TEST_CLI="${CLI_BIN}"

# The store's tests run real PostgreSQL: each test binary starts a private cluster from the
# server binaries (initdb into a temporary directory, its own port on 127.0.0.1), so only the
# binaries are needed, not a running service.
if ! ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 && [ -z "${CLAUDE_HOST_TEST_PG_BIN:-}" ] \
    && ! command -v pg_config >/dev/null; then
  if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
    echo "Installing PostgreSQL for the tests"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql >/dev/null \
      || { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql >/dev/null; }
  else
    echo "PostgreSQL's server binaries are required for the tests (apt install postgresql, or set CLAUDE_HOST_TEST_PG_BIN)" >&2
    exit 1
  fi
fi

LOG="$(mktemp)"
trap 'rm -f "$LOG"' EXIT
# Every optional part of the binary is tested (README.md, "Teams: PostgreSQL"); the store alone
# is tested once more without PostgreSQL, as a default source build has it.
FEATURES=(--features claude-host/full)
cargo test --workspace --doc "${FEATURES[@]}" 2>&1 | tee -a "$LOG"
cargo test --workspace --all-targets "${FEATURES[@]}" "$@" 2>&1 | tee -a "$LOG"
cargo test -p claude-host-store --test all "$@" 2>&1 | tee -a "$LOG"
# One closing line over every test binary (cargo prints one result line per binary).
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
     END { printf "tests: %d passed, %d failed\n", p, f }' "$LOG"
