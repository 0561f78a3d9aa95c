#!/usr/bin/env python3
"""Prints the criterion suite's results (target/criterion/*/new) as a
markdown table: one row per benchmark, criterion's median estimate in ns.
perf/report.sh puts it in PERF.md between the floors markers."""
import json
import pathlib
import sys

root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "target/criterion")
rows = []
for bench in sorted(root.rglob("new/benchmark.json")):
    meta = json.loads(bench.read_text())
    est = json.loads((bench.parent / "estimates.json").read_text())
    median = est["median"]["point_estimate"]
    lo = est["median"]["confidence_interval"]["lower_bound"]
    hi = est["median"]["confidence_interval"]["upper_bound"]
    name = meta["function_id"] or ""
    if meta.get("value_str"):
        name = f"{name} ({meta['value_str']})"
    rows.append((meta["group_id"], name, median, lo, hi))
if not rows:
    sys.exit(f"no criterion results under {root}")
print("| family | benchmark | median ns | 95 % interval |")
print("|---|---|---|---|")
for group, func, med, lo, hi in rows:
    print(f"| {group} | {func} | {med:.1f} | {lo:.1f}–{hi:.1f} |")
