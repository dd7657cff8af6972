#!/usr/bin/env bash
# Installs the npm packages scripts/release.sh built, from their local tarballs, into an empty
# folder, and runs them through the package's launcher: `npx claude-host --version`, the
# README's replay demo, and an exit status passed through.
#
# No network: npm is pointed at an unreachable registry and runs offline (the other
# platforms' optional packages are skipped, as npm skips them where they do not fit), and the
# demo's Claude Code is the tests' pinned CLI (CLAUDE_HOST_TEST_CLI, or the install
# scripts/test.sh makes) instead of one claude-host would install from the registry.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO="$PWD"

VERSION="$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' Cargo.toml)"
. scripts/lib/platform.sh
MAIN="${REPO}/dist/npm/claude-host-${VERSION}.tgz"
NATIVE="${REPO}/dist/npm/claude-host-${PLATFORM}-${VERSION}.tgz"
for f in "${MAIN}" "${NATIVE}"; do
  [ -f "$f" ] || { echo "missing $f: run scripts/release.sh first" >&2; exit 1; }
done

CLI="${CLAUDE_HOST_TEST_CLI:-${HOME}/.cache/claude-host-test/cli/2.1.330/node_modules/@anthropic-ai/claude-code-${PLATFORM}/claude}"
"${CLI}" --version | grep -q '^2\.1\.330' \
  || { echo "the pinned Claude Code CLI is needed at ${CLI} (scripts/test.sh installs it)" >&2; exit 1; }

DIR="$(mktemp -d)"
trap 'rm -rf "$DIR"' EXIT
mkdir -p "${DIR}/app" "${DIR}/home"
export npm_config_registry=http://127.0.0.1:9/ npm_config_offline=true \
  npm_config_cache="${DIR}/npm-cache" npm_config_audit=false npm_config_fund=false \
  npm_config_update_notifier=false
cd "${DIR}/app"
echo '{"name": "empty", "private": true}' > package.json
npm install --no-progress "${NATIVE}" "${MAIN}" >/dev/null

fail() { echo "FAIL: $*" >&2; exit 1; }

got="$(npx claude-host --version)"
[ "${got}" = "claude-host ${VERSION}" ] || fail "npx claude-host --version printed '${got}'"
echo "ok: npx claude-host --version: ${got}"

# The demo, in a home of its own, with the pinned CLI given rather than installed.
answer="$(HOME="${DIR}/home" CLAUDE_HOST_HOME="${DIR}/home/data" CLAUDE_HOST_CLAUDE_PATH="${CLI}" \
  npx claude-host --upstream "replay:${REPO}/examples/hello.replay.jsonl" claude -p "say hello")"
case "${answer}" in
  *"Hello from the claude-host replay upstream!"*) echo "ok: replay demo: ${answer}" ;;
  *) fail "replay demo printed '${answer}'" ;;
esac

status=0
npx claude-host no-such-command 2>/dev/null || status=$?
[ "${status}" = 2 ] || fail "a usage error exited ${status}, not 2"
echo "ok: exit status passed through"
