#!/usr/bin/env python3
"""The chunks glibc's main heap holds in a live process, and what they are (docs/BENCHMARKS.md,
"The `@` index built before the restore").

    scripts/lib/heap-walk.py PID [--from KIB] [--binary UNSTRIPPED]

Walks the main arena's heap (`[heap]` in /proc/PID/maps) chunk by chunk through
/proc/PID/mem, as root. Prints what stays resident after a `malloc_trim`, about; each
thread's cache of freed chunks (the main thread's is the heap's first chunk) with how many
of its chunks sit above the first MiB; the heap's free and in-use bytes per MiB; and each
in-use chunk at or above --from KiB into the heap (default: the upper half): its offset,
size, `c` if it sits in a thread's cache, the symbols its words point at (vtables and
statics, which name a Rust type) and its printable strings. Chunks in a thread's cache or a
fast bin count as in use, as glibc itself counts them; `malloc_trim` empties the fast bins
first. Built for glibc 2.36 on x86_64 (Debian 12).
"""
import argparse
import bisect
import collections
import os
import re
import struct

from symbols import symbols

p = argparse.ArgumentParser()
p.add_argument("pid", type=int)
p.add_argument("--from", dest="start", type=int, default=None, help="KiB into the heap")
p.add_argument("--binary", default=None, help="unstripped build of the process's binary")
args = p.parse_args()

maps = open(f"/proc/{args.pid}/maps").read().splitlines()
heap = None
exe = os.readlink(f"/proc/{args.pid}/exe")
base = None
for line in maps:
    f = line.split()
    lo, hi = (int(x, 16) for x in f[0].split("-"))
    if len(f) >= 6 and f[5] == "[heap]":
        heap = (lo, hi)
    if len(f) >= 6 and f[5] == exe and int(f[2], 16) == 0 and base is None:
        base = lo
if heap is None:
    raise SystemExit("no [heap] mapping")

syms = symbols(args.binary or exe)
addrs = [a for a, _ in syms]


def symbol(word):
    if base is None or not syms:
        return None
    v = word - base
    if v < addrs[0] or v > addrs[-1] + 65536:
        return None
    i = bisect.bisect_right(addrs, v) - 1
    return syms[i][1] if i >= 0 else None


with open(f"/proc/{args.pid}/mem", "rb") as mem:
    mem.seek(heap[0])
    data = mem.read(heap[1] - heap[0])

size_of_heap = len(data)
start = args.start * 1024 if args.start is not None else size_of_heap // 2
chunks = []  # (offset, size, in_use)
off = 0
while off + 16 <= size_of_heap:
    size = struct.unpack_from("<Q", data, off + 8)[0] & ~7
    if size < 16 or off + size > size_of_heap:
        break  # the top chunk runs to the end of the mapping
    nxt = off + size
    in_use = nxt + 16 <= size_of_heap and struct.unpack_from("<Q", data, nxt + 8)[0] & 1
    chunks.append((off, size, bool(in_use)))
    off = nxt
top = off


# Each thread's cache: a 656-byte chunk of 64 counts (u16) and 64 list heads; the main
# thread's is the heap's first chunk. Its heads point into the heap exactly where counts > 0.
# Each entry's `next` is stored as next ^ (the entry's address >> 12) (glibc 2.32+).
cached = set()  # chunk offsets
caches = []  # (the cache's offset, its chunk count, sizes of its chunks above the first MiB)
for o, s, u in chunks:
    if s != 656 or not u:
        continue
    counts = struct.unpack_from("<64H", data, o + 16)
    heads = struct.unpack_from("<64Q", data, o + 16 + 128)
    if any(c > 64 for c in counts) or any((c > 0) != (h != 0) for c, h in zip(counts, heads)):
        continue
    if not all(h == 0 or heap[0] <= h < heap[1] for h in heads):
        continue
    high = []
    for i, h in enumerate(heads):
        for _ in range(counts[i]):
            if not heap[0] <= h < heap[1]:
                break
            cached.add(h - heap[0] - 16)
            if h - heap[0] >= 1 << 20:
                high.append(16 * i + 32)
            h = struct.unpack_from("<Q", data, h - heap[0])[0] ^ (h >> 12)
    caches.append((o, sum(counts), collections.Counter(high)))


def pages(spans):
    out = set()
    for lo, hi in spans:
        out.update(range(lo >> 12, ((hi - 1) >> 12) + 1))
    return out


# Resident, as `malloc_trim` leaves it: every page an in-use chunk touches, and each free
# chunk's first page (its header and links); the whole pages inside a free chunk are given back.
live = pages((o, o + s) for o, s, u in chunks if u)
headers = pages((o, o + 48) for o, s, u in chunks if not u)
held = pages((o, o + s) for o, s, u in chunks if u and o not in cached)
print(f"resident after a trim, about: {len(live | headers) * 4} KiB ({len(live) * 4} KiB of pages with"
      f" a chunk in use); without the {len(cached)} chunks in threads' caches: {len(held | headers) * 4} KiB")
for o, n, sizes in caches:
    print(f"a thread's cache at {o / 1024:.1f} KiB{' (the main thread)' if o == 0 else ''}: {n} chunks,"
          f" {sum(sizes.values())} above the first MiB (chunk size x count: {', '.join(f'{k}x{v}' for k, v in sorted(sizes.items()))})")
used = sum(s for _, s, u in chunks if u)
free = [c for c in chunks if not c[2]]
print(f"heap {size_of_heap / 1024:.0f} KiB, {len(chunks)} chunks below the top at {top / 1024:.0f} KiB;"
      f" in use {used / 1024:.0f} KiB, free {sum(s for _, s, _ in free) / 1024:.0f} KiB in {len(free)} chunks")
per_mib = {}
for o, s, u in chunks:
    k = o >> 20
    a = per_mib.setdefault(k, [0, 0, 0, 0])
    a[0 if u else 1] += s
    a[2] += u
    a[3] += o in cached
for k in sorted(per_mib):
    a = per_mib[k]
    print(f"  MiB {k:3}: in use {a[0] / 1024:7.1f} KiB in {a[2]:5} chunks ({a[3]:4} cached), free {a[1] / 1024:7.1f} KiB")

print(f"in-use chunks from {start / 1024:.0f} KiB:")
for o, s, u in chunks:
    if not u or o < start:
        continue
    body = data[o + 16:o + s]
    names = []
    for i in range(0, len(body) - 7, 8):
        n = symbol(struct.unpack_from("<Q", body, i)[0])
        if n and n not in names:
            names.append(n)
    strings = [m.decode() for m in re.findall(rb"[\x20-\x7e]{6,}", body)][:4]
    print(f"  {o / 1024:9.1f} KiB  {s:7} {'c' if o in cached else ' '} {' | '.join(x[:90] for x in names[:3])}  {strings!r:.160}")
