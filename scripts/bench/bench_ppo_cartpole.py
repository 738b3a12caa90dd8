#!/usr/bin/env python
"""Benchmark: `rlfast train ppo CartPole-v1` (100k steps) against Stable-Baselines3's PPO.

Both run end to end as separate processes on the same machine, one after the other, and the
wall clock of each process is measured (interpreter start, imports, training, evaluation).
SB3 uses its own tuned CartPole settings (rl-baselines3-zoo: 8 envs, n_steps 32, batch 256,
20 epochs, lr 1e-3 linear, clip 0.2 linear, gae 0.8, gamma 0.98); its final score is a
10-episode deterministic evaluation, whose time is reported separately and subtracted from
its wall clock so SB3 is not charged for it (rlfast's periodic evaluations stay in its time).

Usage: python scripts/bench/bench_ppo_cartpole.py [--steps 100000] [--seeds 0 1 2] [--sampler cpu]
"""
from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import (machine, median, parse_result, run_process, sb3_log_dir,  # noqa: E402
                     sb3_version)

SB3_SCRIPT = r"""
import json, sys, time
t0 = time.time()
import gymnasium as gym
import torch
from stable_baselines3 import PPO
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.evaluation import evaluate_policy
steps, seed = int(sys.argv[1]), int(sys.argv[2])
def linear(start):
    return lambda progress_remaining: progress_remaining * start
env = make_vec_env("CartPole-v1", n_envs=8, seed=seed)
model = PPO("MlpPolicy", env, n_steps=32, batch_size=256, n_epochs=20, gae_lambda=0.8,
            gamma=0.98, ent_coef=0.0, learning_rate=linear(1e-3), clip_range=linear(0.2),
            seed=seed, device="cpu", verbose=0)
model.learn(total_timesteps=steps)
t_learn = time.time()
mean, std = evaluate_policy(model, gym.make("CartPole-v1"), n_eval_episodes=10,
                            deterministic=True)
t_eval = time.time()
print(json.dumps(dict(final_return=float(mean), learn_s=t_learn - t0, eval_s=t_eval - t_learn)))
"""


def run_rlfast(steps: int, seed: int, sampler: str) -> dict:
    with tempfile.TemporaryDirectory() as log_dir:
        cmd = [sys.executable, "-m", "rlfast", "train", "ppo", "CartPole-v1", "--steps",
               str(steps), "--seed", str(seed), "--sampler", sampler, "--log-dir", log_dir,
               "--no-progress", "--snapshot-mode", "none"]
        start = time.time()
        returncode, stdout, stderr = run_process(cmd)
        wall = time.time() - start
    if returncode != 0:
        raise RuntimeError(f"rlfast failed:\n{stderr[-3000:]}")
    match = re.search(r"Final evaluation return: ([\d.]+) after (\d+) steps "
                      r"\(best ([\d.]+) at (\d+)", stdout)
    return dict(wall_s=wall, final_return=float(match.group(1)), best=float(match.group(3)),
                best_at=int(match.group(4)))


def run_sb3(steps: int, seed: int) -> dict | None:
    start = time.time()
    finished = run_process([sys.executable, "-c", SB3_SCRIPT, str(steps), str(seed)])
    wall = time.time() - start
    result = parse_result("SB3", *finished, tag=None)
    result["wall_s"] = wall - result["eval_s"]
    return result


def main() -> None:
    sb3_log_dir()  # SB3's children log nowhere lasting
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--sampler", default="cpu", choices=("serial", "cpu"))
    args = parser.parse_args()
    have_sb3 = sb3_version() is not None
    print(f"Machine: {machine()}")
    print(f"PPO on CartPole-v1, {args.steps} env steps, rlfast sampler={args.sampler}\n")
    header = f"{'seed':>4} | {'rlfast s':>9} | {'rlfast final':>12} | {'rlfast best@step':>17}"
    if have_sb3:
        header += f" | {'SB3 s':>7} | {'SB3 final':>9} | {'ratio':>6}"
    print(header)
    print("-" * len(header))
    ratios, rows = [], []
    for seed in args.seeds:
        r = run_rlfast(args.steps, seed, args.sampler)
        line = (f"{seed:>4} | {r['wall_s']:>9.1f} | {r['final_return']:>12.1f} | "
                f"{r['best']:>8.1f}@{r['best_at']:<8d}")
        if have_sb3:
            s = run_sb3(args.steps, seed)
            ratio = r["wall_s"] / s["wall_s"]
            ratios.append(ratio)
            line += f" | {s['wall_s']:>7.1f} | {s['final_return']:>9.1f} | {ratio:>6.2f}"
            rows.append((r, s))
        print(line, flush=True)
    if have_sb3:
        print(f"\nMedian wall-clock ratio rlfast/SB3: {median(ratios):.2f} (target <= 0.60)")
        ok = (sum(r["final_return"] >= 475 for r, _ in rows),
              sum(s["final_return"] >= 475 for _, s in rows))
        print(f"Runs with final return >= 475: rlfast {ok[0]}/{len(rows)}, SB3 {ok[1]}/{len(rows)}")


if __name__ == "__main__":
    main()
