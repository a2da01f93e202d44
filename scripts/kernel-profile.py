#!/usr/bin/env python3
"""Where a training step's GPU time goes, kernel by kernel, from Nsight Compute's CSV.

scripts/gpu-check.sh's profile part runs a few steps of tpx-gpt-cuda and tpx-train-cuda under
`ncu --csv --print-units base --metrics gpu__time_duration.sum` (one row per kernel launch: its
time on the GPU, measured alone) and prints this table of it: kernels grouped by name, heaviest
first, with their share of the summed kernel time, their time per step and their launches per
step. That says which kernel to work on next; nsys, where installed, shows the overlaps, copies
and gaps between kernels that this sum leaves out.

    python3 scripts/kernel-profile.py ncu.csv --steps 2 [--top 30] [--json out.json]

Kernels launched once (initialization) are in the sum too, divided by the steps like the rest.
"""

import argparse
import collections
import csv
import json
import sys

SECONDS_PER_UNIT = {"nsecond": 1e-9, "usecond": 1e-6, "msecond": 1e-3, "second": 1.0}


def short_name(name):
    """A kernel's demangled name without 'void ' and its parameter list."""
    name = name.strip()
    if name.startswith("void "):
        name = name[len("void "):]
    if name.endswith(")"):
        depth = 0
        for i in range(len(name) - 1, -1, -1):
            depth += {")": 1, "(": -1}.get(name[i], 0)
            if depth == 0:
                name = name[:i]
                break
    return name


def kernel_times(lines):
    """{kernel: [seconds of each launch]} from ncu's CSV (details page, any number of metrics)."""
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        raise ValueError('no CSV header line starting with "ID": is this `ncu --csv` output?')
    times = collections.defaultdict(list)
    for row in csv.DictReader(lines[start:]):
        if row.get("Metric Name") != "gpu__time_duration.sum":
            continue
        unit = row["Metric Unit"]
        if unit not in SECONDS_PER_UNIT:
            raise ValueError(f"gpu__time_duration.sum in unknown unit '{unit}'")
        value = float(row["Metric Value"].replace(",", ""))
        times[short_name(row["Kernel Name"])].append(value * SECONDS_PER_UNIT[unit])
    if not times:
        raise ValueError("no gpu__time_duration.sum rows: run ncu with --metrics gpu__time_duration.sum")
    return times


def table(times, steps, top):
    total = sum(sum(t) for t in times.values())
    ranked = sorted(times.items(), key=lambda item: -sum(item[1]))
    rows = [
        {
            "kernel": name,
            "share": sum(t) / total,
            "ms_per_step": 1e3 * sum(t) / steps,
            "launches_per_step": len(t) / steps,
            "mean_us": 1e6 * sum(t) / len(t),
        }
        for name, t in ranked
    ]
    out = [f"{'share':>6} {'ms/step':>9} {'launches/step':>13} {'mean us':>9}  kernel"]
    for r in rows[:top]:
        kernel = r["kernel"] if len(r["kernel"]) <= 100 else r["kernel"][:97] + "..."
        out.append(f"{100 * r['share']:5.1f}% {r['ms_per_step']:9.3f} {r['launches_per_step']:13g} "
                   f"{r['mean_us']:9.1f}  {kernel}")
    if len(rows) > top:
        rest = rows[top:]
        out.append(f"{100 * sum(r['share'] for r in rest):5.1f}% "
                   f"{sum(r['ms_per_step'] for r in rest):9.3f} "
                   f"{sum(r['launches_per_step'] for r in rest):13g} {'':>9}  ({len(rest)} more kernels)")
    launches = sum(len(t) for t in times.values())
    out.append(f"{100.0:5.1f}% {1e3 * total / steps:9.3f} {launches / steps:13g} {'':>9}  "
               f"all {len(rows)} kernels: the sum of their times, per step")
    return "\n".join(out), rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("csv", help="ncu --csv output (e.g. from --log-file)")
    parser.add_argument("--steps", type=int, default=1, help="training steps the profile ran")
    parser.add_argument("--top", type=int, default=30, help="kernels listed (the rest summed)")
    parser.add_argument("--json", help="also write every kernel's row here")
    args = parser.parse_args()
    if args.steps < 1 or args.top < 1:
        parser.error("--steps and --top must be at least 1")
    with open(args.csv, encoding="utf-8", errors="replace") as f:
        lines = f.read().splitlines()
    try:
        text, rows = table(kernel_times(lines), args.steps, args.top)
    except ValueError as e:
        sys.exit(f"kernel-profile: {args.csv}: {e}")
    print(text)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"steps": args.steps, "kernels": rows}, f, indent=1)


if __name__ == "__main__":
    main()
