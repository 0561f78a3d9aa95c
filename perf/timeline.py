#!/usr/bin/env python3
"""Reads the bodies' timelines that `depengine-perf --timeline DIR` writes.

    perf/timeline.py DIR/per_device-random-w1000.tsv [more.tsv ...]
    perf/timeline.py --rounds 17 DIR/per_device-fanout-w1000.tsv
    perf/timeline.py --markdown DIR/*.tsv     one table row per file

For each file: the repetition's span and ns per operation, the median
body, and per thread its bodies, its busy share of the span, the gaps
between two of its bodies (p50/p90/p99, and the mean of those up to
5 us: what the engine costs that thread per operation, from the end of
one body to the start of the next) and the gaps over 5 us ("away": the thread had no work, or another thread
had its CPU; on a machine with as many workers as CPUs, mostly the
pusher).

With --rounds K (`fanout`: K = 17, op 0 of a round writes what ops 1..K-1
read), per round: how its K-1 readers split between the threads, and,
over the rounds whose split is even, from the writer's end to the first
reader on the writer's thread and on the other, between two readers on
one thread, and from the last reader's end to the next writer's start;
then the mean round against the round of the graph itself on two
workers (the writer alone, then half the readers on each: no engine).

Each file ends with its sum over the workers (threads named
depengine-cpu-*), per operation: their bodies, their gaps, their time
away, and all three over one body, which is their time per operation
over one body (shown beside it), and so what the row reads over the
floor of its workers. --markdown prints only that, a table row per
file (what perf/report.sh adds to the report), with `fanout`'s mean
round over its graph's.
"""
import argparse
import collections
import os
import statistics

AWAY_NS = 5000

# The engine's CPU workers name their threads so.
WORKER = "depengine-cpu-"


def load(path):
    names, ops = {}, []
    with open(path) as f:
        for line in f:
            if line.startswith("# thread "):
                _, _, k, name = line.split(maxsplit=3)
                names[int(k)] = name.strip()
            elif line.strip():
                op, start, end, thread = map(int, line.split())
                ops.append((op, start, end, thread))
    ops.sort()
    return names, ops


def pct(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(p * len(values)))] if values else float("nan")


def threads(names, ops, quiet=False):
    """The per-thread table; returns the median body and the file's sum."""
    span = max(o[2] for o in ops) - min(o[1] for o in ops)
    body = statistics.median(o[2] - o[1] for o in ops)
    if not quiet:
        print(f"  span {span / 1e3:,.0f} us, {span / len(ops):,.1f} ns/op, body p50 {body:,.0f} ns")
    by = collections.defaultdict(list)
    for _, start, end, t in ops:
        by[t].append((start, end))
    if not quiet:
        print(f"  {'thread':<22} {'bodies':>7} {'busy':>6} {'gap p50':>8} {'p90':>6} {'p99':>6} {'mean':>6} {'away':>5} {'away us':>9}")
    workers, bodies, gaps, away = 0, 0, 0, 0
    for t, spans in sorted(by.items()):
        spans.sort()
        between = [b[0] - a[1] for a, b in zip(spans, spans[1:])]
        far = [g for g in between if g > AWAY_NS]
        near = [g for g in between if g <= AWAY_NS]
        mean = statistics.mean(near) if near else float("nan")
        busy = sum(e - s for s, e in spans) / span
        if str(names.get(t, "")).startswith(WORKER):
            workers += 1
            bodies += sum(e - s for s, e in spans)
            gaps += sum(near)
            away += sum(far)
        if not quiet:
            print(
                f"  {names.get(t, t):<22} {len(spans):>7} {busy:>6.1%} {pct(between, .5):>8,} {pct(between, .9):>6,} "
                f"{pct(between, .99):>6,} {mean:>6,.0f} {len(far):>5} {sum(far) / 1e3:>9,.0f}"
            )
    n = len(ops)
    total = {
        "elsewhere": 1 - sum(1 for o in ops if str(names.get(o[3], "")).startswith(WORKER)) / n,
        "gaps": gaps / n,
        "away": away / n,
        "sum": (bodies + gaps + away) / n / body,
        "time": workers * span / n / body,
    }
    if not quiet:
        print(
            f"  per operation, over the {workers} workers: bodies {bodies / n:,.0f} ns (the other threads ran "
            f"{total['elsewhere']:.1%} of them), gaps {total['gaps']:,.0f}, away {total['away']:,.0f}: "
            f"{total['sum']:.3f} of one body; their time per operation {total['time']:.3f} of one body"
        )
    return body, total


def rounds(ops, k, body, quiet=False):
    """The rounds' account; returns the mean round over the graph's."""
    at = {o[0]: o for o in ops}
    splits = collections.Counter()
    lengths, even = [], []
    for r in range(len(ops) // k - 1):
        writer, nxt = at.get(r * k), at.get((r + 1) * k)
        readers = [at.get(r * k + j) for j in range(1, k)]
        if writer is None or nxt is None or None in readers:
            continue
        split = tuple(sorted(collections.Counter(x[3] for x in readers).values(), reverse=True))
        splits[split] += 1
        lengths.append(nxt[1] - writer[1])
        if len(split) == 2 and split[0] - split[1] <= 1:
            even.append((writer, readers, nxt))
    if not quiet:
        print(f"  rounds: {len(lengths)}; readers per thread: " + ", ".join(f"{'/'.join(map(str, s))} {n}" for s, n in splits.most_common(6)))
    first_own, first_other, between, to_next = [], [], [], []
    for writer, readers, nxt in even:
        own = sorted(x for x in readers if x[3] == writer[3])
        other = sorted(x for x in readers if x[3] != writer[3])
        if own:
            first_own.append(own[0][1] - writer[2])
        if other:
            first_other.append(other[0][1] - writer[2])
        for side in (own, other):
            between += [b[1] - a[2] for a, b in zip(side, side[1:])]
        to_next.append(nxt[1] - max(x[2] for x in readers))
    if even and not quiet:
        print(
            f"  even rounds ({len(even)}), p50 ns: writer's end to the first reader on its thread {pct(first_own, .5):,}, "
            f"on the other {pct(first_other, .5):,}; reader to reader on a thread {pct(between, .5):,}; "
            f"last reader to the next writer {pct(to_next, .5):,}"
        )
    graph = (1 + (k - 1 + 1) // 2) * body
    mean = statistics.mean(lengths)
    if not quiet:
        print(f"  round: mean {mean / 1e3:,.2f} us, p50 {pct(lengths, .5) / 1e3:,.2f}; the graph's own on two workers {graph / 1e3:,.2f} ({mean / graph:.3f} of it)")
    return mean / graph


def markdown(paths):
    print("| engine | row | body p50, ns | run on other threads | workers' gaps per op, ns | away per op, ns | (bodies + gaps + away) per op / body | workers' time per op / body | `fanout`: round / its graph's |")
    print("|---|---|---|---|---|---|---|---|---|")
    for path in paths:
        names, ops = load(path)
        if not ops:
            continue
        engine, row = os.path.basename(path).rsplit("-w", 1)[0].split("-", 1)
        body, t = threads(names, ops, quiet=True)
        graph = f"{rounds(ops, 17, body, quiet=True):.3f}" if row == "fanout" else ""
        print(
            f"| {engine} | `{row}` | {body:,.0f} | {t['elsewhere']:.1%} | {t['gaps']:,.0f} | {t['away']:,.0f} "
            f"| {t['sum']:.3f} | {t['time']:.3f} | {graph} |"
        )


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, help="ops per round (fanout: 17)")
    ap.add_argument("--markdown", action="store_true", help="a table row per file")
    ap.add_argument("files", nargs="+")
    args = ap.parse_args()
    if args.markdown:
        return markdown(args.files)
    for path in args.files:
        names, ops = load(path)
        if not ops:
            print(f"{path}: no operations")
            continue
        print(path)
        body, _ = threads(names, ops)
        if args.rounds:
            rounds(ops, args.rounds, body)


if __name__ == "__main__":
    main()
