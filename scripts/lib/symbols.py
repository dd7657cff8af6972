"""A binary's symbols by address, for the scripts beside it (`nm -C -n`, Rust's hash suffix cut)."""
import re
import subprocess


def symbols(binary, kinds=None):
    """[(address, name)] sorted by address; `kinds`: the nm type letters to keep (all if None)."""
    nm = subprocess.run(["nm", "-C", "--defined-only", "-n", binary], capture_output=True, text=True, check=True)
    out = []
    for line in nm.stdout.splitlines():
        f = line.split(" ", 2)
        if len(f) == 3 and (kinds is None or f[1] in kinds):
            out.append((int(f[0], 16), re.sub(r"::h[0-9a-f]{16}$", "", f[2])))
    return out
