#!/usr/bin/env python
"""MAPPO's value normalization and Huber value loss, each on and off, on PettingZoo's MPE
Spread: the measurement that decided the ``mappo`` preset's ``algo.value_norm`` and
``algo.value_loss``.

The task is bench_multiagent.py's: ``mpe2.simple_spread_v3`` with N agents (default 3), 25
cycles, local ratio 0.5, discrete actions. Each variant is ``rlfast train mappo`` with the
preset (MAPPO's MPE settings, cpu sampler) and both options set explicitly (``--set``), so
that the variants mean the same whatever the preset's defaults:

- ``none``: ``algo.value_norm=False algo.value_loss=mse``;
- ``value_norm``: ``algo.value_norm=True algo.value_loss=mse`` (the MAPPO code's ValueNorm);
- ``huber``: ``algo.value_norm=False algo.value_loss=huber`` (delta 10, the MAPPO code's);
- ``both``: ``algo.value_norm=True algo.value_loss=huber``, as the MAPPO code runs (and the
  preset since this measurement).

The variants run interleaved seed by seed, the order reversed every other seed, one run at a
time. The figure is the final return: a greedy evaluation over ``--eval-episodes`` episodes at
the end of training, the mean per-agent episode return. Per variant the table gives each
seed's final return, the mean and its difference from the mean of ``none``, and the mean
wall time of a run (the whole process).

    python scripts/bench/bench_mappo_options.py                           # none vs both
    python scripts/bench/bench_mappo_options.py --variants none value_norm huber both
    python scripts/bench/bench_mappo_options.py --steps 32000 --seeds 0   # a quick look
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import interleave, machine, markdown_table, write_json  # noqa: E402
from bench_multiagent import run_rlfast  # noqa: E402

VARIANTS = {
    "none": ("algo.value_norm=False", "algo.value_loss=mse"),
    "value_norm": ("algo.value_norm=True", "algo.value_loss=mse"),
    "huber": ("algo.value_norm=False", "algo.value_loss=huber"),
    "both": ("algo.value_norm=True", "algo.value_loss=huber"),
}
BASE = "none"  # the variant the others are compared with


def table(results: dict[str, list[dict]]) -> str:
    """The markdown table of ``results`` (variant -> runs), the mean of ``BASE`` as the
    base."""
    base = (statistics.mean(r["final_return"] for r in results[BASE])
            if results.get(BASE) else None)
    rows = []
    for name, runs in results.items():
        finals = [r["final_return"] for r in runs]
        mean = statistics.mean(finals)
        rows.append([name, " ".join(VARIANTS[name]),
                     " / ".join(f"{v:.2f}" for v in finals), f"{mean:.2f}",
                     "" if base is None or name == BASE else f"{mean - base:+.2f}",
                     f"{statistics.mean(r['wall_s'] for r in runs):.1f}"])
    return markdown_table(["variant", "--set", "final return, per seed", "mean",
                           f"vs {BASE}", "wall time per run (s), mean"], rows, "lllrrr")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variants", nargs="+", default=["none", "both"],
                        choices=sorted(VARIANTS))
    parser.add_argument("--steps", type=int, default=500_000,
                        help="environment steps per run (a multiple of 3200, the preset's "
                             "batch; default 500000)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--n-agents", type=int, default=3)
    parser.add_argument("--eval-episodes", type=int, default=32)
    parser.add_argument("--sampler", default=None,
                        help="rlfast's sampler (default: the preset's)")
    parser.add_argument("--out", default=None, help="directory for the runs' logs")
    parser.add_argument("--json", default=None, help="write the results here")
    args = parser.parse_args()
    if len(set(args.variants)) != len(args.variants):
        parser.error(f"--variants names a variant twice: {args.variants}")
    out = args.out or tempfile.mkdtemp(prefix="bench_mappo_options_")
    print(f"Machine: {machine()}")
    print(f"MPE Spread N={args.n_agents}, 25 cycles; {args.steps:,} env steps per run; seeds "
          f"{args.seeds}; variants {args.variants}; logs in {out}", flush=True)
    results: dict[str, list[dict]] = {name: [] for name in args.variants}
    for i, order in interleave(args.variants, len(args.seeds)):
        seed = args.seeds[i]
        for name in order:
            result = run_rlfast(seed, args.steps, args.n_agents, args.eval_episodes, out,
                                args.sampler, sets=VARIANTS[name], name=name)
            result["seed"] = seed
            results[name].append(result)
            print(f"  {name:10s} seed {seed}: final return {result['final_return']:8.2f} "
                  f"({result['episodes']} episodes, {result['steps']:,} steps), wall "
                  f"{result['wall_s']:7.1f} s", flush=True)
    print()
    print(table(results))
    if args.json:
        write_json(args.json, dict(steps=args.steps, n_agents=args.n_agents, seeds=args.seeds,
                                   variants={k: list(VARIANTS[k]) for k in args.variants},
                                   machine=machine(), results=results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
