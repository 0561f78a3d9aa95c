#!/usr/bin/env python3
"""Instructions per operation by source line, from a callgrind profile.

    perf/lines.py CALLGRIND_OUT BINARY OPS [TOP]

CALLGRIND_OUT is one thread's profile taken with `--dump-instr=yes
--compress-pos=no --compress-strings=no` (what `LINES=N
perf/instructions.sh` passes); BINARY the profiled executable; OPS the
operations the thread ran (each line's count is divided by it). Every
executed instruction of BINARY is given to the innermost frame of its
inline chain (`addr2line -i`) that lies in this repository's sources:
`Pool::slot` inlined into `Core::queue` counts at the pool's line, and
std's iterator code at the line of ours that called it. Prints the TOP
lines (default 40), each with its source text and the innermost frames
its instructions came from. Exact, as callgrind is; cheaper to act on
than callgrind_annotate's per-function totals, which LTO's inlining
merges into a few functions.
"""
import collections
import os
import re
import subprocess
import sys


def executed(path, binary):
    """Self counts per instruction address of `binary` (the calls' lines,
    inclusive costs of their callees, are left out)."""
    counts = collections.Counter()
    ours, skip = False, False
    name = os.path.basename(binary)
    with open(path) as profile:
        for line in profile:
            if line.startswith("ob="):
                ours = os.path.basename(line[3:].strip()) == name
            elif line.startswith("calls="):
                skip = True
            elif line.startswith("0x"):
                if skip:
                    skip = False
                elif ours:
                    address, _, count = line.split()[:3]
                    counts[int(address, 16)] += int(count)
    return counts


def inline_chains(binary, addresses):
    """Each address's inline chain, innermost first: [(function, file:line)]."""
    out = subprocess.run(
        ["addr2line", "-i", "-f", "-C", "-a", "-e", binary],
        input="\n".join(hex(a) for a in addresses),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    chains, current, i = {}, None, 0
    while i < len(out):
        if out[i].startswith("0x"):
            current = int(out[i], 16)
            chains[current] = []
            i += 1
        else:
            place = re.sub(r" \(discriminator \d+\)", "", out[i + 1]) if i + 1 < len(out) else "?"
            chains[current].append((out[i], place))
            i += 2
    return chains


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    path, binary, ops = sys.argv[1], sys.argv[2], float(sys.argv[3])
    top = int(sys.argv[4]) if len(sys.argv) > 4 else 40
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    counts = executed(path, binary)
    chains = inline_chains(binary, sorted(counts))
    by_line, inner = collections.Counter(), collections.defaultdict(collections.Counter)
    for address, count in counts.items():
        chain = chains.get(address) or [("?", "?")]
        ours = next((p for _, p in chain if p.startswith(root) or not p.startswith("/")), chain[0][1])
        place = os.path.relpath(ours, root) if ours.startswith(root) else ours
        by_line[place] += count
        inner[place][os.path.basename(chain[0][1])] += count
    engine = sum(c for place, c in by_line.items() if place.startswith("src/"))
    print(
        f"{sum(by_line.values()) / ops:.1f} instructions an operation in {os.path.basename(binary)}, "
        f"{engine / ops:.1f} of them at lines of src/ (the rest: the harness, its set-up included, and libraries)"
    )
    for place, count in by_line.most_common(top):
        text = ""
        m = re.match(r"(.*):(\d+)$", place)
        if m and os.path.exists(os.path.join(root, m.group(1))):
            lines = open(os.path.join(root, m.group(1))).read().splitlines()
            n = int(m.group(2))
            text = lines[n - 1].strip()[:72] if 0 < n <= len(lines) else ""
        frames = ", ".join(f for f, _ in inner[place].most_common(2))
        print(f"{count / ops:7.1f}  {place:34} {text:72} [{frames}]")


if __name__ == "__main__":
    main()
