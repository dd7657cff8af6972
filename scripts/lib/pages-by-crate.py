#!/usr/bin/env python3
"""The code pages a process paged in between two moments, by crate (docs/BENCHMARKS.md,
"What a restore pages in").

    scripts/lib/pages-by-crate.py BINARY BEFORE.pages AFTER.pages [CRATE]

BINARY: the same build unstripped (`--config 'profile.release.strip="none"'`: stripping
removes only sections that are not loaded, so the code sits at the same offsets).
BEFORE/AFTER: `restore-bench`'s `.pages` files (`RESTORE_BENCH_SMAPS=DIR`). Prints how many
new executable pages each crate's functions fill, most first (a page counts for the crate
with the most functions on it); with CRATE, that crate's functions on the new pages.
"""
import bisect
import collections
import re
import subprocess
import sys

from symbols import symbols

binary, before, after = sys.argv[1:4]
want = sys.argv[4] if len(sys.argv) > 4 else None

# File offset -> virtual address, from the executable LOAD segment.
text = None
for line in subprocess.run(["readelf", "-lW", binary], capture_output=True, text=True, check=True).stdout.splitlines():
    f = line.split()
    if f[:1] == ["LOAD"] and "E" in f[6:-1]:
        text = (int(f[1], 16), int(f[2], 16))
if text is None:
    sys.exit("no executable LOAD segment in " + binary)
delta = text[1] - text[0]

syms = symbols(binary, "tTwW")
if not syms:
    sys.exit(binary + " has no symbols: build it unstripped")
addrs = [a for a, _ in syms]


def pages(path):
    out = set()
    for line in open(path):
        perms, offset = line.split()
        if "x" in perms:
            out.add(int(offset, 16))
    return out


def crate(name):
    m = re.match(r"<*(?:&(?:mut )?)?([A-Za-z_][A-Za-z0-9_]*)::", name)
    return m.group(1) if m else "(other)"


new = sorted(pages(after) - pages(before))
print(f"{len(new)} new code pages ({len(new) * 4} KiB)")
by_crate = collections.Counter()
functions = collections.Counter()
for offset in new:
    lo = offset + delta
    first = max(bisect.bisect_right(addrs, lo) - 1, 0)
    names = [syms[k][1] for k in range(first, bisect.bisect_left(addrs, lo + 4096))]
    crates = collections.Counter(crate(n) for n in names)
    if crates:
        by_crate[crates.most_common(1)[0][0]] += 1
    for n in names:
        if crate(n) == want:
            functions[n] += 1
if want:
    for n, c in functions.most_common(60):
        print(c, n[:200])
else:
    for c, n in by_crate.most_common(30):
        print(n, c)
