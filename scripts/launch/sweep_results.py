#!/usr/bin/env python
"""Summarise a sweep: one row per run, then the mean over runs of each variant.

Usage::

    python scripts/launch/sweep_results.py EXPERIMENT_DIR [--key ReturnAverage]
                                           [--steps-key Diagnostics/CumSteps]

Reads every ``progress.csv`` below EXPERIMENT_DIR (as left by ``run_experiments``:
``EXPERIMENT_DIR/<variant dirs>/run_<ID>/progress.csv``) and prints, per run, the number of
logged rows, the last step count, and the final and best value of ``--key``. A variant is the
path from EXPERIMENT_DIR to the run directory's parent. Empty or still-running files are
shown with what they hold so far.
"""
from __future__ import annotations

import argparse
import csv
import math
import os
import statistics
import sys


def read_run(path: str, key: str, steps_key: str) -> dict:
    """Rows, last steps, final and best ``key`` of one progress.csv (NaN when absent)."""
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))

    def number(row: dict, column: str) -> float:
        try:
            return float(row.get(column, "nan") or "nan")
        except ValueError:
            return math.nan

    values = [number(r, key) for r in rows]
    finite = [v for v in values if not math.isnan(v)]
    return dict(rows=len(rows), steps=number(rows[-1], steps_key) if rows else math.nan,
                final=values[-1] if values else math.nan,
                best=max(finite) if finite else math.nan)


def collect(exp_dir: str, key: str, steps_key: str) -> list[dict]:
    runs = []
    for root, dirs, files in os.walk(exp_dir):
        dirs.sort()
        if "progress.csv" in files:
            rel = os.path.relpath(root, exp_dir)
            variant, run = os.path.split(rel)
            runs.append(dict(variant=variant or ".", run=run,
                             **read_run(os.path.join(root, "progress.csv"), key, steps_key)))
    return runs


def fmt(value: float, digits: int = 1) -> str:
    if isinstance(value, float) and math.isnan(value):
        return "nan"
    if isinstance(value, float) and value.is_integer() and digits == 0:
        return str(int(value))
    return f"{value:.{digits}f}"


def print_table(header: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    print("  ".join(h.ljust(w) for h, w in zip(header, widths)))
    print("  ".join("-" * w for w in widths))
    for r in rows:
        print("  ".join(c.ljust(w) if i < 2 else c.rjust(w)
                        for i, (c, w) in enumerate(zip(r, widths))))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("exp_dir", help="experiment directory (log_root/experiment_title)")
    parser.add_argument("--key", default="ReturnAverage", help="column to report")
    parser.add_argument("--steps-key", default="Diagnostics/CumSteps")
    args = parser.parse_args()
    if not os.path.isdir(args.exp_dir):
        print(f"{args.exp_dir!r} is not a directory", file=sys.stderr)
        return 2
    runs = collect(args.exp_dir, args.key, args.steps_key)
    if not runs:
        print(f"no progress.csv below {args.exp_dir}", file=sys.stderr)
        return 1
    print(f"Runs in {os.path.abspath(args.exp_dir)} ({args.key}):\n")
    print_table(["variant", "run", "rows", "steps", "final", "best"],
                [[r["variant"], r["run"], str(r["rows"]), fmt(r["steps"], 0),
                  fmt(r["final"]), fmt(r["best"])] for r in runs])
    by_variant: dict[str, list[dict]] = {}
    for r in runs:
        by_variant.setdefault(r["variant"], []).append(r)

    def mean(values: list[float]) -> float:
        finite = [v for v in values if not math.isnan(v)]
        return statistics.fmean(finite) if finite else math.nan

    print(f"\nMean over runs per variant ({args.key}):\n")
    print_table(["variant", "runs", "mean final", "mean best"],
                [[v, str(len(rs)), fmt(mean([r["final"] for r in rs])),
                  fmt(mean([r["best"] for r in rs]))] for v, rs in by_variant.items()])
    return 0


if __name__ == "__main__":
    sys.exit(main())
