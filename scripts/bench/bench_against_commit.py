#!/usr/bin/env python
"""Is this tree slower than another commit? rlfast's own CPU benchmarks, interleaved.

Runs the rlfast side of ``bench_dqn_cartpole.py`` (DQN on CartPole-v1, its tuned
learning-test config, ``--dqn-steps`` steps) and of ``bench_qpg.py`` (SAC and/or TD3
on Pendulum-v1 from the presets, ``--qpg-steps`` steps) once per round for each of two trees:
this working tree and ``--rev`` (exported with ``git archive`` into a temporary folder). The
two trees alternate, and which goes first alternates by round, so that a noisy shared machine
slows both alike. Each run is its own process, started through the tree's own benchmark
module (in ``scripts/bench/``, or ``scripts/`` in a tree from before the benchmarks moved
there), which puts that tree first on ``sys.path``. Prints, per benchmark, the wall seconds of
each round, the median of each tree and the median of the per-round ratios (this tree / the
other: below 1 is faster), and the final returns, with the machine.

Usage: python scripts/bench/bench_against_commit.py --rev 5f6397c [--rounds 3]
           [--benchmarks dqn sac] [--dqn-steps 100000] [--qpg-steps 10000]
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import (REPO_ROOT, interleave, machine, median, paired_ratios,  # noqa: E402
                     parse_result, run_process)

BENCHMARKS = ("dqn", "sac", "td3")

# Runs in a child: the tree's own benchmark module runs its own rlfast child process.
DRIVER = r"""
import json, os, sys
tree, name, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
bench = os.path.join(tree, "scripts", "bench")
sys.path.insert(0, bench if os.path.isdir(bench) else os.path.join(tree, "scripts"))
if name == "dqn":
    import bench_dqn_cartpole as b
    result = b.run_rlfast(steps, 0)
    print(json.dumps(dict(wall_s=result["wall_s"], cpu_s=result["cpu_s"],
                          final_return=result["final_return"])))
else:
    import bench_qpg as b
    result = b.run_rlfast(name, steps, 0, [], -1, 5)
    print(json.dumps(dict(wall_s=result["wall_s"], cpu_s=result["cpu_s"],
                          final_return=result["final_return"])))
"""


def run(tree: str, name: str, steps: int) -> dict:
    """One run of benchmark ``name`` from the checkout in ``tree``, with that tree's rlfast
    (the child runs in ``tree``, this environment unchanged)."""
    finished = run_process([sys.executable, "-c", DRIVER, tree, name, str(steps)], cwd=tree,
                         env=dict(os.environ))
    return parse_result(f"{name} in {tree}", *finished, tag=None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rev", required=True, help="the commit to compare with")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--benchmarks", nargs="+", choices=BENCHMARKS, default=["dqn", "sac"])
    parser.add_argument("--dqn-steps", type=int, default=100_000)
    parser.add_argument("--qpg-steps", type=int, default=10_000)
    args = parser.parse_args()
    print(machine())
    with tempfile.TemporaryDirectory(prefix="rlfast-rev-") as other:
        archive = subprocess.run(["git", "archive", args.rev], cwd=REPO_ROOT, check=True,
                                 capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", other], input=archive, check=True)
        trees = {"this": REPO_ROOT, args.rev: other}
        results: dict = {(name, t): [] for name in args.benchmarks for t in trees}
        for r, order in interleave(trees, args.rounds):
            for name in args.benchmarks:
                steps = args.dqn_steps if name == "dqn" else args.qpg_steps
                for label in order:
                    res = run(trees[label], name, steps)
                    results[(name, label)].append(res)
                    print(f"round {r + 1} {name:4} {label:>10}: {res['wall_s']:.1f} s "
                          f"(return {res['final_return']:.1f})", flush=True)
    print(f"\n{'benchmark':10} {'this (s)':>9} {args.rev + ' (s)':>14} {'ratio':>7}  rounds")
    for name in args.benchmarks:
        mine = [x["wall_s"] for x in results[(name, "this")]]
        theirs = [x["wall_s"] for x in results[(name, args.rev)]]
        ratios = paired_ratios(mine, theirs)
        print(f"{name:10} {median(mine):9.1f} {median(theirs):14.1f} "
              f"{median(ratios):7.3f}  {', '.join(f'{x:.3f}' for x in ratios)}")


if __name__ == "__main__":
    main()
