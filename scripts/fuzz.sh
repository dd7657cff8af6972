#!/usr/bin/env bash
# Runs the fuzz targets in fuzz/ with AFL++ on stable Rust, one at a time, each for a chosen
# time, under `nice -n 19`.
#
#   scripts/fuzz.sh [seconds-per-target] [target...]      (default: 60 s, every target)
#   scripts/fuzz.sh --summary      (per-target totals from fuzz/runs.tsv, as a Markdown table)
#
# Installs what it needs on a fresh machine: cargo-afl from crates.io (its install builds
# AFL++ from the source the crate ships; only a C compiler and make are needed), then the AFL++
# runtime for this rustc (`cargo afl config --build`).
#
# Each run starts from fuzz/seeds/<target>, fuzz/regressions/<target> and the corpus earlier
# runs left in fuzz/corpus/<target> (not committed), and:
#   - appends a line to fuzz/runs.tsv: date, target, seconds, execs, corpus size, crashes,
#     hangs (docs/FUZZING.md sums it per target);
#   - copies each crashing input to fuzz/regressions/<target>/ (the regression test replays
#     them) and each hang to fuzz/hangs/<target>/;
#   - exits 1 when any target crashed, or afl-fuzz could not run it; the last line says how
#     many targets ran clean (`fuzz: N passed, N failed`).
# Interrupted (Ctrl-C, SIGTERM), it still logs the run in progress and saves its crashes.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "${1:-}" = "--summary" ]; then
  awk -F'\t' 'NR > 1 { s[$2] += $3; e[$2] += $4; c[$2] += $6; h[$2] += $7; n[$2]++
                        if ($5 > p[$2]) p[$2] = $5 }
    END { print "| target | runs | time (h) | executions | largest corpus | crashes | hangs |"
          print "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"
          for (t in s) printf "| %s | %d | %.2f | %d | %d | %d | %d |\n", t, n[t], s[t] / 3600, e[t], p[t], c[t], h[t] }' \
    fuzz/runs.tsv | { read -r a; read -r b; printf '%s\n%s\n' "$a" "$b"; sort; }
  exit 0
fi

PER_TARGET="${1:-60}"
shift || true
ALL=(sse relay proxy_request stream_json control transcript ahp openai_stream openai_request openai_response)
TARGETS=("$@")
[ "${#TARGETS[@]}" -gt 0 ] || TARGETS=("${ALL[@]}")

CARGO_AFL_VERSION=0.18.2
if ! cargo afl --version 2>/dev/null | grep -q "$CARGO_AFL_VERSION"; then
  echo "Installing cargo-afl ${CARGO_AFL_VERSION} (builds AFL++)"
  nice -n 19 cargo install cargo-afl --locked --version "$CARGO_AFL_VERSION"
fi
# Builds the AFL++ runtime for this rustc; it refuses (harmlessly) when that is done already.
if ! out="$(nice -n 19 cargo afl config --build 2>&1)"; then
  grep -q "already built" <<<"$out" || { echo "$out" >&2; exit 1; }
fi

# Its own target folder: the instrumented build would otherwise evict the normal one.
AFL_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}/afl"
echo "Building the instrumented harness into ${AFL_TARGET_DIR}"
CARGO_TARGET_DIR="$AFL_TARGET_DIR" nice -n 19 cargo afl build --profile fuzz \
  -p claude-host-fuzz --features afl --bin fuzz-target
BIN="${AFL_TARGET_DIR}/fuzz/fuzz-target"

DICT="$(ls -d "$HOME"/.local/share/afl.rs/AFLplusplus/dictionaries/json.dict 2>/dev/null | head -1 || true)"
export AFL_SKIP_CPUFREQ=1 AFL_NO_AFFINITY=1 AFL_NO_UI=1 AFL_I_DONT_CARE_ABOUT_MISSING_CRASHES=1
export AFL_SKIP_CRASHES=1 AFL_IGNORE_SEED_PROBLEMS=1
mkdir -p fuzz/out
[ -f fuzz/runs.tsv ] || printf 'date\ttarget\tseconds\texecs\tcorpus\tcrashes\thangs\n' > fuzz/runs.tsv

stat_of() { awk -v k="$1" '$1 == k { print $3 }' "$2" 2>/dev/null || true; }

CRASHED=0
BAD=()
AFL_PID=""
finish() {
  # Logs the run of target $1 in output folder $2 and saves what it found.
  local target="$1" out="$2" stats="$2/default/fuzzer_stats"
  local secs execs corpus crashes hangs
  # fuzzer_stats is written every minute and on exit; a run killed hard may leave none.
  secs="$(stat_of run_time "$stats")"; execs="$(stat_of execs_done "$stats")"
  corpus="$(stat_of corpus_count "$stats")"
  crashes="$(find "$out/default/crashes" -name 'id:*' 2>/dev/null | wc -l)"
  hangs="$(find "$out/default/hangs" -name 'id:*' 2>/dev/null | wc -l)"
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$target" \
    "${secs:-0}" "${execs:-0}" "${corpus:-0}" "$crashes" "$hangs" >> fuzz/runs.tsv
  local f sum
  # The queue holds every input the run started from, so it replaces the corpus; files are
  # named by content, so nothing is kept twice.
  if compgen -G "$out/default/queue/id:*" >/dev/null; then
    rm -rf "fuzz/corpus/$target"
    mkdir -p "fuzz/corpus/$target"
    for f in "$out"/default/queue/id:*; do
      cp "$f" "fuzz/corpus/$target/$(sha1sum "$f" | cut -c1-16)"
    done
  fi
  for f in "$out"/default/crashes/id:*; do
    [ -e "$f" ] || continue
    sum="$(sha1sum "$f" | cut -c1-12)"
    mkdir -p "fuzz/regressions/$target"
    cp "$f" "fuzz/regressions/$target/crash-$sum"
    echo "CRASH: $target -> fuzz/regressions/$target/crash-$sum"
    CRASHED=1
  done
  for f in "$out"/default/hangs/id:*; do
    [ -e "$f" ] || continue
    sum="$(sha1sum "$f" | cut -c1-12)"
    mkdir -p "fuzz/hangs/$target"
    cp "$f" "fuzz/hangs/$target/hang-$sum"
  done
  echo "$target: ${secs:-0} s, ${execs:-0} execs, corpus ${corpus:-0}, $crashes crashes, $hangs hangs"
}

CURRENT=""
CURRENT_OUT=""
on_signal() {
  if [ -n "$AFL_PID" ]; then
    kill -INT "$AFL_PID" 2>/dev/null || true
    wait "$AFL_PID" 2>/dev/null || true
  fi
  [ -n "$CURRENT" ] && finish "$CURRENT" "$CURRENT_OUT"
  exit 130
}
trap on_signal INT TERM

for target in "${TARGETS[@]}"; do
  [ -d "fuzz/seeds/$target" ] || { echo "no such target: $target" >&2; exit 2; }
  in="$(mktemp -d)"
  cp fuzz/seeds/"$target"/* "$in"/
  cp fuzz/regressions/"$target"/* "$in"/ 2>/dev/null || true
  cp fuzz/corpus/"$target"/* "$in"/ 2>/dev/null || true
  out="fuzz/out/$target"
  rm -rf "$out"
  CURRENT="$target" CURRENT_OUT="$out"
  echo "Fuzzing $target for ${PER_TARGET} s"
  nice -n 19 cargo afl fuzz -V "$PER_TARGET" -t 2000 ${DICT:+-x "$DICT"} \
    -i "$in" -o "$out" -- "$BIN" "$target" > "fuzz/out/$target.log" 2>&1 &
  AFL_PID=$!
  status=0
  wait "$AFL_PID" || status=$?
  AFL_PID=""
  rm -rf "$in"
  CRASHED=0
  finish "$target" "$out"
  CURRENT=""
  if [ "$status" -ne 0 ]; then
    echo "afl-fuzz failed on $target with status $status; its log:" >&2
    tail -n 30 "fuzz/out/$target.log" >&2
    BAD+=("$target")
  elif [ "$CRASHED" -ne 0 ]; then
    BAD+=("$target")
  fi
done
echo "fuzz: $(( ${#TARGETS[@]} - ${#BAD[@]} )) passed, ${#BAD[@]} failed${BAD[*]:+ (${BAD[*]})}"
[ "${#BAD[@]}" -eq 0 ]
