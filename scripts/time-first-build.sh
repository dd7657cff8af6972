#!/usr/bin/env bash
# Times the README's first command as a newcomer meets it: a fresh clone, an empty cargo
# registry cache and target directory, a fresh claude-host home. Results go in
# docs/BENCHMARKS.md, "Build time".
#
#   scripts/time-first-build.sh [REV]     # default: HEAD of this checkout
#   TIMINGS=1 scripts/time-first-build.sh # also keeps cargo's --timings report
#   KEEP_BINARY=/tmp/x scripts/time-first-build.sh  # keeps the built binary there
#
# Printed apart, so the build is not blamed for the network: the registry download (`cargo
# fetch`), the build (`cargo build --release -p claude-host`, offline), and the first run
# (which installs the pinned Claude Code CLI with npm, then answers from the replay file).
# Their sum is the README's first command. The binary's size is printed last.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
rev="${1:-HEAD}"
cargo_bin="$(command -v cargo)"
work="$(mktemp -d "${TMPDIR:-/tmp}/claude-host-first-build.XXXXXX")"
trap 'rm -rf "$work"' EXIT

git clone --quiet "$repo" "$work/src"
git -C "$work/src" checkout --quiet "$(git -C "$repo" rev-parse "$rev")"
cd "$work/src"
# An empty registry cache and target; the toolchain itself stays (rustup's, not cargo's home).
export CARGO_HOME="$work/cargo-home" CARGO_TARGET_DIR="$work/target"
export CLAUDE_HOST_HOME="$work/home" XDG_CONFIG_HOME="$work/config"
mkdir -p "$CARGO_HOME"
for config in "$HOME/.cargo/config.toml" "$HOME/.cargo/config"; do
  # A user-level cargo config (mirrors, linkers) still applies, as it would for the newcomer.
  if [ -f "$config" ]; then cp "$config" "$CARGO_HOME/"; fi
done

now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }

t0="$(now)"
"$cargo_bin" fetch --locked --quiet
t1="$(now)"
timings=()
[ -n "${TIMINGS:-}" ] && timings=(--timings)
"$cargo_bin" build --release --offline --locked -p claude-host "${timings[@]}" 2> "$work/build.log" \
  || { cat "$work/build.log" >&2; exit 1; }
t2="$(now)"
answer="$("$cargo_bin" run --release --offline --locked -q -p claude-host -- \
  --upstream replay:examples/hello.replay.jsonl claude -p "say hello")"
t3="$(now)"
case "$answer" in
  *"Hello from the claude-host replay upstream"*) ;;
  *) echo "the first command did not print the replayed answer: $answer" >&2; exit 1 ;;
esac
if [ -n "${TIMINGS:-}" ]; then
  mkdir -p "$repo/target/first-build"
  cp "$CARGO_TARGET_DIR"/cargo-timings/cargo-timing.html "$repo/target/first-build/"
  echo "timings: $repo/target/first-build/cargo-timing.html"
fi

if [ -n "${KEEP_BINARY:-}" ]; then cp "$CARGO_TARGET_DIR/release/claude-host" "$KEEP_BINARY"; fi

echo "revision: $(git rev-parse --short HEAD)"
echo "answer: $answer"
echo "registry download (cargo fetch): $(secs "$t0" "$t1") s"
echo "build (cargo build --release -p claude-host): $(secs "$t1" "$t2") s"
echo "first run (pinned CLI installed with npm, then the replayed turn): $(secs "$t2" "$t3") s"
echo "README's first command, without the download: $(secs "$t1" "$t3") s"
echo "binary: $(stat -c %s "$CARGO_TARGET_DIR/release/claude-host") bytes"
echo "crates compiled: $(grep -c '^ *Compiling ' "$work/build.log")"
