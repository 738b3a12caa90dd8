#!/usr/bin/env python
"""What the overlapped schedule's one-update policy lag costs in learning: the same seeded
run trained synchronously and with ``overlap=True``, return against environment steps.

Each run trains ``rlfast``'s preset for ``--algo`` on ``--env`` (``runner.overlap`` False, then
True) with online tracking (``MinibatchRl``: the mean return of the last 100 completed training
episodes at each log row, so no evaluation steps are spent), in its own child process; the
two children run at the same time (the comparison is against steps, not time). The table gives
each run's return at every log row, and the mean over the second half of the rows.

Usage: python scripts/bench/overlap_learning.py [--env atari:pong] [--steps 250000]
           [--log-every 25000] [--seeds 0] [--set KEY=VALUE ...] [--json OUT]
"""
from __future__ import annotations

import argparse
import csv
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import child_env, machine, markdown_table, write_json  # noqa: E402


def _child(args: argparse.Namespace) -> None:
    """Train one run and leave its progress.csv in ``--child-dir``."""
    from rlfast.experiments.config import apply_overrides
    from rlfast.experiments.presets import build_experiment, get_preset
    from rlfast.runners import MinibatchRl
    from rlfast.utils.logging import logger_context

    config = apply_overrides(get_preset(args.algo, args.env), list(args.set or []))
    config["sampler"].update(eval_n_envs=0, eval_max_steps=None)
    config["runner"]["overlap"] = args.child_overlap
    built = build_experiment(args.algo, args.env, config, sampler=args.sampler,
                             seed=args.child_seed)
    runner = MinibatchRl(algo=built.algo, agent=built.agent, sampler=built.sampler,
                         seed=args.child_seed, affinity=built.affinity, n_steps=args.steps,
                         log_interval_steps=args.log_every, progress_bar=False,
                         overlap=args.child_overlap)
    with logger_context(args.child_dir, 0, "overlap_learning", {}, snapshot_mode="none",
                        override_prefix=True):
        runner.train()


def _rows(path: str) -> list[tuple[int, float, float]]:
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    out = []
    for row in rows:
        lag = row.get("Diagnostics/PolicyLag", "")
        out.append((int(float(row["Diagnostics/CumSteps"])), float(row["ReturnAverage"] or "nan"),
                    float(lag) if lag else 0.0))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algo", default="ppo", choices=["ppo", "a2c"])
    parser.add_argument("--env", default="atari:pong")
    parser.add_argument("--sampler", default="cpu")
    parser.add_argument("--steps", type=int, default=250_000)
    parser.add_argument("--log-every", type=int, default=25_000)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--set", nargs="*", help="preset overrides, KEY=VALUE")
    parser.add_argument("--json", help="write the figures here")
    parser.add_argument("--child-dir", help=argparse.SUPPRESS)
    parser.add_argument("--child-seed", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--child-overlap", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child_dir:
        args.child_overlap = bool(args.child_overlap)
        _child(args)
        return

    print(f"Machine: {machine()}")
    print(f"{args.algo} on {args.env}, {args.sampler} sampler, {args.steps} steps, seeds "
          f"{args.seeds}; return = mean of the last 100 training episodes")
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        procs = {}
        for seed in args.seeds:
            for overlap in (0, 1):
                out = os.path.join(tmp, f"s{seed}_o{overlap}")
                cmd = [sys.executable, os.path.abspath(__file__), "--child-dir", out,
                       "--child-seed", str(seed), "--child-overlap", str(overlap),
                       "--algo", args.algo, "--env", args.env, "--sampler", args.sampler,
                       "--steps", str(args.steps), "--log-every", str(args.log_every)]
                if args.set:
                    cmd += ["--set", *args.set]
                procs[(seed, overlap)] = (subprocess.Popen(cmd, stdout=subprocess.DEVNULL,
                                                           stderr=subprocess.PIPE, text=True,
                                                           env=child_env()), out)
        for (seed, overlap), (proc, out) in procs.items():
            _, err = proc.communicate()
            if proc.returncode != 0:
                raise SystemExit(f"run seed {seed} overlap {bool(overlap)} failed:\n{err[-3000:]}")
            results[(seed, overlap)] = _rows(os.path.join(out, "progress.csv"))
    for seed in args.seeds:
        sync, over = results[(seed, 0)], results[(seed, 1)]
        print(f"\nseed {seed}")
        print(markdown_table(["steps", "synchronous", "overlapped", "overlapped PolicyLag"],
                             [[f"{steps:,}", f"{r0:.2f}", f"{r1:.2f}", f"{lag:.2f}"]
                              for (steps, r0, _), (_, r1, lag) in zip(sync, over)], "rrrr"))
        half = len(sync) // 2

        def mean(rows: list[tuple]) -> float:
            return sum(r for _, r, _ in rows[half:]) / max(len(rows[half:]), 1)

        print(f"mean over the second half of the rows: synchronous {mean(sync):.2f}, "
              f"overlapped {mean(over):.2f}")
    if args.json:
        write_json(args.json, {"settings": vars(args),
                               "runs": {f"seed{s}_{'overlap' if o else 'sync'}": rows
                                        for (s, o), rows in results.items()}})


if __name__ == "__main__":
    main()
