#!/usr/bin/env bash
# Translation benchmark (results go in docs/BENCHMARKS.md, "Translation to OpenAI's APIs"):
# claude-host translating Anthropic requests for gpt-4.1 (Chat Completions) and gpt-5.4
# (Responses), side by side with copilot-api 0.7.0 from npm (gpt-4.1 on Chat Completions), all
# against the same fake upstream on 127.0.0.1, in one run of target/release/proxy-bench.
#
#   scripts/bench-translate.sh [RUNS]          # default 3 runs per point
#   BENCH_POINTS=1,64 scripts/bench-translate.sh 5
#   BENCH_PEER=none scripts/bench-translate.sh # claude-host only
#
# copilot-api is installed into ~/.cache/claude-host-bench/copilot-api-0.7.0 (BENCH_PEER_DIR)
# the first time. It has GitHub's and Copilot's URLs written into its code; a copy of its
# main.js is made with each of them replaced by $COPILOT_API_UPSTREAM, which the benchmark sets
# to the fake's URL (and the VS Code version lookup, which would go to the internet, goes to the
# fake too and falls back to copilot-api's built-in version). It runs on Node.js (its bin is
# `#!/usr/bin/env node`; Bun is only used to build and develop it).
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS="${1:-3}"
# claude-host on its own: built with the bench in one cargo run, it would get the features
# the bench's dependencies ask for, and not be the binary users run.
cargo build --release -p claude-host --bin claude-host
cargo build --release -p claude-host-bench --bin proxy-bench
target="${CARGO_TARGET_DIR:-./target}"

peer=""
if [ "${BENCH_PEER:-}" != none ]; then
  if ! command -v node >/dev/null; then
    echo "node not found: copilot-api cannot run; measuring claude-host only" >&2
  else
    dir="${BENCH_PEER_DIR:-$HOME/.cache/claude-host-bench/copilot-api-0.7.0}"
    pkg="$dir/node_modules/copilot-api"
    if ! grep -q '"version": "0.7.0"' "$pkg/package.json" 2>/dev/null; then
      mkdir -p "$dir"
      (cd "$dir" && npm install --no-audit --no-fund --no-save copilot-api@0.7.0 >&2)
    fi
    src="$pkg/dist/main.js"
    peer="$pkg/dist/main.bench.js"
    up='process.env.COPILOT_API_UPSTREAM'
    sed -e "s|\"https://api.githubcopilot.com\"|$up|" \
        -e "s|\`https://api.\${state\$1.accountType}.githubcopilot.com\`|$up|" \
        -e "s|const GITHUB_API_BASE_URL = \"https://api.github.com\"|const GITHUB_API_BASE_URL = $up|" \
        -e "s|const GITHUB_BASE_URL = \"https://github.com\"|const GITHUB_BASE_URL = $up|" \
        -e "s|\"https://aur.archlinux.org/cgit/aur.git/plain/PKGBUILD?h=visual-studio-code-bin\"|\`\${$up}/vscode-version\`|" \
        "$src" > "$peer"
    # Every URL it fetches now comes from the environment; what is left is only printed.
    left="$(grep -n 'https\?://' "$peer" | grep -v 'Usage Viewer' | grep -v 'http://localhost:\${options.port}' || true)"
    if [ -n "$left" ] || [ "$(grep -c "$up" "$peer")" -lt 4 ]; then
      echo "copilot-api's main.js did not rewrite as expected; URLs left:" >&2
      echo "$left" >&2
      exit 1
    fi
    echo "# peer: copilot-api $(node -p "require('$pkg/package.json').version") on node $(node --version)," \
      "hono $(node -p "require('$dir/node_modules/hono/package.json').version")," \
      "srvx $(node -p "require('$dir/node_modules/srvx/package.json').version")"
  fi
fi

ulimit -n 65536 2>/dev/null || true
# Bounded: each load run stops itself after BENCH_RUN_TIMEOUT (300 s); the whole after 40 min.
BENCH_MODEL="${BENCH_MODEL:-gpt-4.1,gpt-5.4}" BENCH_PEER="$peer" \
  exec timeout 2400 "$target/release/proxy-bench" "$target/release/claude-host" "$RUNS"
