#!/usr/bin/env python
"""PPO with each memory core on POPGym tasks: POPGym's metric, seed by seed, with wall times.

For every task, core and seed this runs ``rlfast train ppo popgym:<task> --set
agent.core=<core> --seed <seed> --steps <steps> --sampler serial`` (the ``popgym`` preset: a
128-unit core over a 64-unit MLP, 32 envs x 64 steps; see rlfast/experiments/preset_data.py)
in its own process, the runs interleaved: seed by seed, task by task, the cores in an order
rotated every round, so that drift in this shared machine's load falls on every core alike.

POPGym's metric is the MMER, the mean maximum episodic return (Morad et al., "POPGym:
Benchmarking Partially Observable Reinforcement Learning", ICLR 2023): for each trial the
maximum over training of the mean training-episode return of a reporting interval, then the
mean over trials. Here the reporting interval is a log row (``runner.log_interval_steps``) and
the value is progress.csv's ``Diagnostics/TrainReturn`` (training episodes with the sampling
policy, as RLlib's ``episode_reward_mean`` that POPGym reports). The table also gives the last
greedy evaluation, whether the curve was still rising where the run stopped (the mean
training return of the last quarter of the log rows above that of the quarter before it, by
more than 0.02), and the wall time of each run (the whole process).

POPGym's paper trains each trial for millions of steps (its experiment script,
popgym/baselines/ppo.py, defaults to 15M); this machine affords far fewer, so the budget is
stated in the table. ``--paper FILE`` adds the paper's PPO-GRU and PPO-LSTM MMER beside ours:
a JSON object ``{"<task>": {"gru": 0.0, "lstm": 0.0, "source": "Table N"}}`` copied from the
paper (this script holds no figures of its own, so none can be misquoted).

    python scripts/bench/bench_memory.py                            # 3 tasks x 4 cores x 3 seeds
    python scripts/bench/bench_memory.py --tasks RepeatPreviousEasy --cores gru attention --seeds 0
    python scripts/bench/bench_memory.py --jobs 2 --steps 300000 --out data/bench_memory
"""
from __future__ import annotations

import argparse
import concurrent.futures
import csv
import json
import math
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import REPO_ROOT, machine, markdown_table, run_process, write_json  # noqa: E402

TASKS = ["PositionOnlyCartPoleEasy", "RepeatPreviousEasy", "CountRecallEasy"]
CORES = ["gru", "lstm", "ln_lstm", "attention"]
RISING_MARGIN = 0.02


def read_curve(run_dir: str) -> tuple[list[float], list[float], list[float]]:
    """(steps, training return, evaluation return) per log row of a run's progress.csv."""
    steps, train, evals = [], [], []
    with open(os.path.join(run_dir, "progress.csv"), newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            steps.append(float(row["Diagnostics/CumSteps"]))
            train.append(_number(row.get("Diagnostics/TrainReturn")))
            evals.append(_number(row.get("ReturnAverage")))
    return steps, train, evals


def _number(text: str | None) -> float:
    try:
        return float(text)
    except (TypeError, ValueError):
        return math.nan


def summarize(steps: list[float], train: list[float], evals: list[float]) -> dict:
    """A run's maximum training return (its MMER term), where it was reached, the last
    evaluation and whether the curve was still rising at the end."""
    rows = [(s, r) for s, r in zip(steps, train) if not math.isnan(r)]
    if not rows:
        raise ValueError("no training return was logged (no episode ended?)")
    best_step, best = max(rows, key=lambda sr: sr[1])
    values = [r for _, r in rows]
    quarter = max(1, len(values) // 4)
    last, before = values[-quarter:], values[-2 * quarter:-quarter] or values[:quarter]
    rising = statistics.fmean(last) > statistics.fmean(before) + RISING_MARGIN
    final_eval = next((e for e in reversed(evals) if not math.isnan(e)), math.nan)
    return dict(max_return=best, max_at=best_step, final_eval=final_eval, rising=rising,
                last_train=values[-1])


def run_one(task: str, core: str, seed: int, steps: int, out: str) -> dict:
    """Train one (task, core, seed) in its own process; its summary and wall time."""
    run_dir = os.path.join(out, f"{task}_{core}_s{seed}")
    cmd = [sys.executable, "-m", "rlfast", "train", "ppo", f"popgym:{task}", "--set",
           f"agent.core={core}", "--seed", str(seed), "--steps", str(steps), "--sampler",
           "serial", "--log-dir", run_dir, "--overwrite", "--no-progress"]
    start = time.time()
    returncode, _, stderr = run_process(cmd, cwd=REPO_ROOT)
    wall = time.time() - start
    if returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({returncode}):\n{stderr[-2000:]}")
    return dict(task=task, core=core, seed=seed, wall=wall, **summarize(*read_curve(run_dir)))


def plan(tasks: list[str], cores: list[str], seeds: list[int]) -> list[tuple[str, str, int]]:
    """Every run, interleaved: seed by seed, task by task, the cores rotated each round."""
    order, rnd = [], 0
    for seed in seeds:
        for task in tasks:
            k = rnd % len(cores)
            order += [(task, core, seed) for core in cores[k:] + cores[:k]]
            rnd += 1
    return order


def table(results: list[dict], tasks: list[str], cores: list[str], steps: int,
          paper: dict) -> str:
    """The markdown table: per task and core the MMER over seeds, each seed's maximum, the
    final greedy evaluation, whether still rising, the wall time, and the paper's figures."""
    rows = []
    for task in tasks:
        ref = paper.get(task, {})
        for core in cores:
            runs = sorted((r for r in results if r["task"] == task and r["core"] == core),
                          key=lambda r: r["seed"])
            if not runs:
                continue
            mmer = statistics.fmean(r["max_return"] for r in runs)
            per_seed = " / ".join(f"{r['max_return']:.2f}" for r in runs)
            final = statistics.fmean(r["final_eval"] for r in runs)
            rising = "/".join("yes" if r["rising"] else "no" for r in runs)
            wall = statistics.fmean(r["wall"] for r in runs)
            gru = f"{ref['gru']:.2f}" if "gru" in ref else "-"
            lstm = f"{ref['lstm']:.2f}" if "lstm" in ref else "-"
            rows.append([task, core, f"{mmer:.3f}", per_seed, f"{final:.2f}", rising,
                         f"{wall:.0f}", gru, lstm])
    lines = [f"PPO on POPGym, {steps:,} env steps per run; machine: {machine()}", "",
             markdown_table(["task", "core", "MMER (mean over seeds)", "per seed",
                             "last greedy eval (mean)", "still rising", "wall per run (s, mean)",
                             "paper PPO-GRU", "paper PPO-LSTM"], rows, "llrlrlrrr")]
    sources = sorted({v.get("source", "") for v in paper.values() if v.get("source")})
    if sources:
        lines += ["", f"Paper figures: Morad et al., ICLR 2023, {', '.join(sources)}."]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", nargs="+", default=TASKS)
    parser.add_argument("--cores", nargs="+", default=CORES, choices=CORES)
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=500_000)
    parser.add_argument("--jobs", type=int, default=1,
                        help="runs at once (the preset trains on one torch thread)")
    parser.add_argument("--out", default=os.path.join(REPO_ROOT, "data", "bench_memory"))
    parser.add_argument("--paper", help="JSON file of the paper's MMER per task (see above)")
    args = parser.parse_args()
    paper = {}
    if args.paper:
        with open(args.paper, encoding="utf-8") as f:
            paper = json.load(f)
    os.makedirs(args.out, exist_ok=True)
    runs = plan(args.tasks, args.cores, args.seeds)
    print(f"{len(runs)} runs of {args.steps:,} steps, {args.jobs} at a time; {machine()}",
          flush=True)
    results = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futures = [pool.submit(run_one, task, core, seed, args.steps, args.out)
                   for task, core, seed in runs]
        for future in futures:
            result = future.result()
            results.append(result)
            print(f"{result['task']:>26} {result['core']:>9} seed {result['seed']}: max "
                  f"{result['max_return']:.3f} at {result['max_at']:,.0f}, eval "
                  f"{result['final_eval']:.2f}, rising {result['rising']}, "
                  f"{result['wall']:.0f} s", flush=True)
    write_json(os.path.join(args.out, "results.json"), dict(steps=args.steps, results=results))
    print()
    print(table(results, args.tasks, args.cores, args.steps, paper))
    return 0


if __name__ == "__main__":
    sys.exit(main())
