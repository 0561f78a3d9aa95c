#!/usr/bin/env python3
"""Draws perf/scaling.sh's runs: ns/op against workers (one pusher) and
against pushers, one line per engine, workload and W, on a log scale.

    perf/scaling.py DIR     reads DIR/t<T>-p<P>.json, writes DIR/scaling.svg
                            and DIR/scaling.md

scaling.md also reads the rows against issue 65's many-core targets: each
W=0 row over its figure on 2 workers (no row slower with more workers),
each W=1000 row over the floor of its workers taken around it (the
harness's probe; within 1.15 on 15 workers), and the pusher series'
throughput over one pusher's (8 pushers at least 5x).
"""

import json
import math
import re
import sys
from pathlib import Path


def load(d):
    """({(engine, workload, w): {(threads, pushers): ns_per_op}},
    {(engine, workload, w): {(threads, pushers): ns/op over the workers' floor}})"""
    series, over = {}, {}
    for f in sorted(d.glob("t*-p*.json")):
        t, p = map(int, re.match(r"t(\d+)-p(\d+)\.json", f.name).groups())
        for r in json.loads(f.read_text())["rows"]:
            if r["ns_per_op"] is None:
                continue
            # The harness names a row of P pushers "<engine>+<P>pushers".
            engine = re.sub(r"\+\d+pushers$", "", r["engine"])
            key = (engine, r["workload"], r["w"])
            series.setdefault(key, {})[(t, p)] = r["ns_per_op"]
            if r.get("over_round_floor") is not None:
                over.setdefault(key, {})[(t, p)] = r["over_round_floor"]
    return series, over


def ratio_table(title, xs, rows):
    """A markdown table: rows = [(label, {x: value})]."""
    md = [title, "", "| row | " + " | ".join(str(x) for x in xs) + " |", "|---|" + "---|" * len(xs)]
    for label, vals in rows:
        md.append(f"| {label} | " + " | ".join(f"{vals[x]:.2f}" if x in vals else "" for x in xs) + " |")
    return md


def panel(x0, title, xs, lines, xlabel):
    """One chart: lines = [(label, [(x, ns)])]; returns SVG elements."""
    w, h, left, top = 520, 320, 60, 30
    ys = [ns for _, pts in lines for _, ns in pts]
    if not ys or not xs:
        return []
    lo, hi = math.log10(min(ys)) - 0.1, math.log10(max(ys)) + 0.1
    px = lambda x: x0 + left + (xs.index(x) + 0.5) * (w - left) / len(xs)
    py = lambda ns: top + (hi - math.log10(ns)) / (hi - lo) * (h - top - 40)
    out = [f'<text x="{x0 + w / 2}" y="18" text-anchor="middle" font-weight="bold">{title}</text>']
    for x in xs:
        out.append(f'<text x="{px(x)}" y="{h - 15}" text-anchor="middle">{x}</text>')
    out.append(f'<text x="{x0 + w / 2}" y="{h}" text-anchor="middle">{xlabel}</text>')
    for k in range(math.ceil(lo), math.floor(hi) + 1):
        for m in (1, 2, 5):
            v = m * 10 ** k
            if lo <= math.log10(v) <= hi:
                out.append(f'<line x1="{x0 + left}" x2="{x0 + w}" y1="{py(v):.1f}" y2="{py(v):.1f}" stroke="#ddd"/>')
                out.append(f'<text x="{x0 + left - 4}" y="{py(v) + 4:.1f}" text-anchor="end">{v:g}</text>')
    palette = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"]
    for i, (label, pts) in enumerate(lines):
        c = palette[i % len(palette)]
        path = " ".join(f"{'M' if j == 0 else 'L'}{px(x):.1f},{py(ns):.1f}" for j, (x, ns) in enumerate(pts))
        dash = ' stroke-dasharray="5,3"' if "pooled" in label else ""
        out.append(f'<path d="{path}" fill="none" stroke="{c}" stroke-width="2"{dash}/>')
        x, ns = pts[-1]
        out.append(f'<text x="{px(x) + 4:.1f}" y="{py(ns) + 4:.1f}" fill="{c}" font-size="10">{label}</text>')
    return out


def main():
    d = Path(sys.argv[1])
    series, over = load(d)
    pushers1 = lambda pts: sorted((t, ns) for (t, p), ns in pts.items() if p == 1)
    # The pusher series' workers: those of its runs with several pushers.
    pusher_workers = max((t for pts in series.values() for (t, p) in pts if p > 1),
                       default=max((t for pts in series.values() for (t, p) in pts), default=2))
    by_pushers = lambda pts: sorted((p, ns) for (t, p), ns in pts.items() if t == pusher_workers)
    svg = ['<svg xmlns="http://www.w3.org/2000/svg" width="1100" height="340" font-family="sans-serif" font-size="11">']
    lines_w = [(f"{e} {wl} W={w}", pushers1(pts)) for (e, wl, w), pts in sorted(series.items()) if len(pushers1(pts)) > 0]
    lines_p = [(f"{e} {wl} W={w}", by_pushers(pts)) for (e, wl, w), pts in sorted(series.items()) if len(by_pushers(pts)) > 0]
    xs_w = sorted({t for _, pts in lines_w for t, _ in pts})
    xs_p = sorted({p for _, pts in lines_p for p, _ in pts})
    svg += panel(0, "ns/op against workers (one pusher)", xs_w, lines_w, "CPU workers")
    svg += panel(560, f"ns/op against pushers ({pusher_workers} workers)", xs_p, lines_p, "pushing threads")
    svg.append("</svg>")
    (d / "scaling.svg").write_text("\n".join(svg) + "\n")
    md = ["| engine | workload | W | " + " | ".join(f"{t} workers" for t in xs_w) + " | "
          + " | ".join(f"{p} pushers" for p in xs_p) + " |",
          "|---|---|---|" + "---|" * (len(xs_w) + len(xs_p))]
    for (e, wl, w), pts in sorted(series.items()):
        cells = [f"{pts[(t, 1)]:.1f}" if (t, 1) in pts else "" for t in xs_w]
        cells += [f"{pts[(pusher_workers, p)]:.1f}" if (pusher_workers, p) in pts else "" for p in xs_p]
        md.append(f"| {e} | {wl} | {w} | " + " | ".join(cells) + " |")
    targets = []
    slower = [(f"{e} {wl}", {t: pts[(t, 1)] / pts[(2, 1)] for t in xs_w if (t, 1) in pts})
              for (e, wl, w), pts in sorted(series.items()) if w == 0 and (2, 1) in pts]
    if slower:
        targets += [""] + ratio_table("W=0, one pusher: ns/op over its figure on 2 workers "
                                      "(target: no row over 1.00 with more workers)", xs_w, slower)
    floors = [(f"{e} {wl}", {t: v for (t, p), v in pts.items() if p == 1})
              for (e, wl, w), pts in sorted(over.items()) if w == 1000]
    if floors:
        targets += [""] + ratio_table("W=1000, one pusher: ns/op over the floor of that many workers taken "
                                      "around each round (target on 15 workers: 1.15 or less)", xs_w, floors)
    scale = [(f"{e} {wl} W={w}", {p: pts[(pusher_workers, 1)] / pts[(pusher_workers, p)]
                                  for p in xs_p if (pusher_workers, p) in pts})
             for (e, wl, w), pts in sorted(series.items()) if (pusher_workers, 1) in pts]
    if scale and len(xs_p) > 1:
        targets += [""] + ratio_table(f"Throughput over one pusher's, {pusher_workers} workers "
                                      "(target: 8 pushers at least 5.00)", xs_p, scale)
    (d / "scaling.md").write_text("ns/op (lower is better)\n\n" + "\n".join(md + targets) + "\n")
    print(f"chart: {d / 'scaling.svg'}; table: {d / 'scaling.md'}")


if __name__ == "__main__":
    main()
