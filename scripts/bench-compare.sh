#!/usr/bin/env bash
# Runs the agent and AHP benchmarks for this checkout and for another revision (default: the
# previous commit) on the same machine in the same run, alternating between the two, and prints
# each measurement's ratio (this checkout / the other revision).
#
#   scripts/bench-compare.sh [REV] [ROUNDS]
#
# BENCH_BASE=DIR uses an existing checkout of REV there (and its target/) instead of a
# temporary worktree.
set -euo pipefail
cd "$(dirname "$0")/.."
REV="${1:-HEAD~1}"
ROUNDS="${2:-3}"
WORK="$(mktemp -d)"
if [ -n "${BENCH_BASE:-}" ]; then
  BASE="$BENCH_BASE"
  trap 'rm -rf "$WORK"' EXIT
else
  BASE="$WORK/base"
  git worktree add --detach "$BASE" "$REV" >/dev/null
  trap 'git worktree remove --force "$BASE" >/dev/null 2>&1 || true; rm -rf "$WORK"' EXIT
fi
# claude-host on its own: built with the bench in one cargo run, it would get the features
# the bench's dependencies ask for, and not be the binary users run.
build() {
  cargo build --release -q -p claude-host --bin claude-host
  cargo build --release -q -p claude-host-bench --bin ahp-bench --bin agent-bench
}
(cd "$BASE" && build)
build

# One line per measurement: "<label>\t<number>", from either benchmark's output.
measurements() {
  awk '
    /^\| / && $0 !~ /measurement/ && $0 !~ /^\|---/ {
      n = split($0, f, "|"); label = f[2]; gsub(/^ +| +$/, "", label)
      v = f[3]; gsub(/[^0-9.-]/, "", v); if (v != "") print label "\t" v
    }
    /clients:/ {
      label = $1 " clients, deliveries/s"; print label "\t" $6
    }
    /serve RSS/ {
      for (i = 1; i <= NF; i++) if ($i ~ /^\(/) { v = substr($i, 2); print "serve RSS per idle session (KiB)\t" v }
    }'
}

for round in $(seq "$ROUNDS"); do
  for side in base this; do
    dir=.; [ "$side" = base ] && dir="$BASE"
    out="$WORK/$side.$round"
    (cd "$dir" && ./target/release/agent-bench 5 && ./target/release/ahp-bench 20000) > "$out" 2>/dev/null
    measurements < "$out" > "$out.tsv"
  done
done

echo "# this checkout ($(git rev-parse --short HEAD)$(git diff --quiet || echo '+changes')) vs $(git -C "$BASE" rev-parse --short HEAD) (base), $ROUNDS rounds, medians"
printf '| measurement | base | this | this / base |\n|---|---|---|---|\n'
cat "$WORK"/base.*.tsv | cut -f1 | awk '!seen[$0]++' | while IFS= read -r label; do
  med() { cat "$WORK"/$1.*.tsv | awk -F'\t' -v l="$label" '$1 == l { print $2 }' | sort -g |
          awk '{ a[NR] = $1 } END { if (NR) print a[int((NR + 1) / 2)] }'; }
  b=$(med base); t=$(med this)
  [ -n "$b" ] && [ -n "$t" ] || continue
  awk -v l="$label" -v b="$b" -v t="$t" 'BEGIN { r = (b != 0) ? t / b : 0; printf "| %s | %s | %s | %.2f |\n", l, b, t, r }'
done
