#!/usr/bin/env bash
# The page faults that bring serve's own code in while a session is opened and closed, and the
# function each one ran into (docs/BENCHMARKS.md, "What a first open faults in").
#
#   RESTORE_BENCH_HOOK=scripts/lib/code-faults.sh restore-bench 100   # records, as the hook
#   scripts/lib/code-faults.sh report                                # one line per fault
#
# As restore-bench's hook (`PID MOMENT`), it starts `perf record` of serve's page faults at
# "listed" and stops it at "closed", into $CODE_FAULTS_DIR (default /tmp/code-faults). The
# kernel maps up to 16 pages around each fault of a file mapping, so the resident code a
# restore adds is about the number of these faults times 64 KiB. Name functions with a build
# whose symbols are kept (`--config 'profile.release.strip="none"'`).
set -euo pipefail
dir=${CODE_FAULTS_DIR:-/tmp/code-faults}
mkdir -p "$dir"

case ${2:-$1} in
listed)
  pid=$1
  rm -f "$dir/$pid.ctl" "$dir/$pid.ack"
  mkfifo "$dir/$pid.ctl" "$dir/$pid.ack"
  # Started disabled and enabled through its control fifo: the "ack" comes once perf counts,
  # so the open cannot begin before it does.
  setsid perf record -q -e page-faults -c 1 -d -D -1 \
    --control "fifo:$dir/$pid.ctl,$dir/$pid.ack" -o "$dir/$pid.data" -p "$pid" \
    >"$dir/$pid.log" 2>&1 &
  echo $! >"$dir/$pid.perf"
  exec 3<>"$dir/$pid.ctl" 4<>"$dir/$pid.ack"
  echo enable >&3
  read -r -t 30 ack <&4 || { echo "code-faults: perf did not start" >&2; exit 1; }
  ;;
closed)
  pid=$1
  perf=$(cat "$dir/$pid.perf")
  kill -INT "$perf"
  while kill -0 "$perf" 2>/dev/null; do sleep 0.05; done
  ;;
report)
  for data in "$dir"/*.data; do
    echo "== serve $(basename "$data" .data)"
    # A fault in the binary's code: the faulting address is on the instruction's own page.
    perf script -i "$data" -F ip,sym,addr,dso 2>/dev/null | awk '
      /\/claude-host\)/ {
        ip = $1
        line = $0; sub(/^ *[0-9a-f]+ /, "", line)
        sym = line; sub(/ \(\/.*$/, "", sym)
        addr = line; sub(/^.*claude-host\) +/, "", addr); split(addr, a, " ")
        if (substr(ip, 1, length(ip) - 3) == substr(a[1], 1, length(a[1]) - 3)) {
          print ip, substr(sym, 1, 140); n++
        }
      }
      END { print n + 0, "faults in the binary'"'"'s code" }'
  done
  ;;
*) ;; # restore-bench's other moments
esac
