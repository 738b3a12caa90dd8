#!/usr/bin/env python
"""Benchmark: rlfast's DQN on CartPole-v1 (100k steps) against Stable-Baselines3's DQN.

Each run is its own process, one after the other, and the wall clock of each process is
measured (interpreter start, imports, training). rlfast runs its tuned learning-test config
(``tests/learning/_dqn_configs.py``: SerialSampler 8 envs x 4 steps, 64x64 MLP, replay ratio 8
= 12.5k updates of batch 64, 10-step double DQN), built through the API, with its periodic
greedy evaluations (8 episodes every 10k steps) left in its time. SB3 runs its rl-baselines3-zoo
CartPole-v1 settings (MlpPolicy net_arch [256, 256], lr 2.3e-3, batch 64, buffer 100k,
learning_starts 1000, gamma 0.99, target_update_interval 10, train_freq 256, gradient_steps 128
= ~50k updates, exploration_fraction 0.16, exploration_final_eps 0.04) for the same number of
steps. Both are scored by the same final 10-episode deterministic (greedy) evaluation on a fresh
``gym.make("CartPole-v1")``, whose time is subtracted from each wall clock. rlfast trains on one
torch thread (its runner's default on CPU), SB3 on torch's default thread count; the CPU seconds
each process used (all threads) are printed too, since wall clocks on a shared machine vary.
With ``--rlfast-zoo`` rlfast also runs with SB3's zoo hyperparameters (same network, update
count and schedules), which compares the frameworks on the same amount of work.

Usage: python scripts/bench/bench_dqn_cartpole.py [--steps 100000] [--seeds 0 1] [--rlfast-zoo]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import (REPO_ROOT, machine, median, parse_result, run_process,  # noqa: E402
                     sb3_log_dir, sb3_version)

# Greedy 10-episode evaluation shared by both child processes: ``act(obs) -> int``.
EVAL_CODE = r"""
def evaluate(act, seed, n_episodes=10):
    import gymnasium as gym
    env = gym.make("CartPole-v1")
    returns = []
    for ep in range(n_episodes):
        obs, _ = env.reset(seed=10_000 + 100 * seed + ep)
        done, total = False, 0.0
        while not done:
            obs, reward, terminated, truncated, _ = env.step(act(obs))
            total += reward
            done = terminated or truncated
        returns.append(total)
    env.close()
    return sum(returns) / len(returns)
"""

RLFAST_SCRIPT = EVAL_CODE + r"""
import json, os, sys, tempfile, time
t0 = time.time()
sys.path.insert(0, sys.argv[4])
import torch
from rlfast.utils.logging import logger_context
from tests.learning._dqn_configs import dqn_cartpole_runner
steps, seed, config = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
if config == "zoo":  # SB3's zoo hyperparameters, in rlfast's terms (1 env, 256 steps/iteration)
    overrides = dict(hidden_sizes=[256, 256], learning_rate=2.3e-3, batch_size=64,
                     replay_size=100_000, min_steps_learn=1000, discount=0.99,
                     target_update_interval=128, batch_T=256, batch_B=1, replay_ratio=32,
                     eps_steps=int(0.16 * steps) - 1000, eps_final=0.04, n_step_return=1,
                     double_dqn=False, delta_clip=1.0)
else:
    overrides = {}
runner = dqn_cartpole_runner(seed=seed, n_steps=steps, log_interval_steps=10_000, **overrides)
with tempfile.TemporaryDirectory() as log_dir:
    with logger_context(log_dir, 0, "bench_dqn", {}, override_prefix=True, snapshot_mode="none"):
        result = runner.train()
t_learn, cpu_learn = time.time(), time.process_time()
model = runner.agent.model
model.eval()
@torch.no_grad()
def act(obs):
    return int(model(torch.as_tensor(obs, dtype=torch.float32)).argmax())
final = evaluate(act, seed)
t_eval = time.time()
evals = result["eval_returns"]
print(json.dumps(dict(final_return=final, learn_s=t_learn - t0, eval_s=t_eval - t_learn,
                      cpu_s=cpu_learn, best=max(r for _, r in evals),
                      best_at=max(evals, key=lambda e: e[1])[0],
                      last_periodic=evals[-1][1])))
"""

SB3_SCRIPT = EVAL_CODE + r"""
import json, sys, time
t0 = time.time()
import gymnasium as gym
from stable_baselines3 import DQN
steps, seed = int(sys.argv[1]), int(sys.argv[2])
model = DQN("MlpPolicy", gym.make("CartPole-v1"), learning_rate=2.3e-3, batch_size=64,
            buffer_size=100_000, learning_starts=1000, gamma=0.99, target_update_interval=10,
            train_freq=256, gradient_steps=128, exploration_fraction=0.16,
            exploration_final_eps=0.04, policy_kwargs=dict(net_arch=[256, 256]), seed=seed,
            device="cpu", verbose=0)
model.learn(total_timesteps=steps)
t_learn, cpu_learn = time.time(), time.process_time()
final = evaluate(lambda obs: int(model.predict(obs, deterministic=True)[0]), seed)
t_eval = time.time()
print(json.dumps(dict(final_return=final, learn_s=t_learn - t0, eval_s=t_eval - t_learn,
                      cpu_s=cpu_learn)))
"""


def _run_child(script: str, args: list[str], name: str) -> dict:
    start = time.time()
    finished = run_process([sys.executable, "-c", script, *args])
    wall = time.time() - start
    result = parse_result(name, *finished, tag=None)
    result["wall_s"] = wall - result["eval_s"]  # neither side is charged for the final score
    return result


def run_rlfast(steps: int, seed: int, config: str = "tuned") -> dict:
    """rlfast DQN in a child process: ``config`` is ``"tuned"`` or ``"zoo"``."""
    if config not in ("tuned", "zoo"):
        raise ValueError(f"config must be 'tuned' or 'zoo', got {config!r}")
    return _run_child(RLFAST_SCRIPT, [str(steps), str(seed), config, REPO_ROOT],
                      f"rlfast ({config})")


def run_sb3(steps: int, seed: int) -> dict:
    """Stable-Baselines3 DQN with its zoo CartPole-v1 settings in a child process."""
    return _run_child(SB3_SCRIPT, [str(steps), str(seed)], "SB3")


def _header(zoo: bool, have_sb3: bool) -> str:
    """The columns of the per-seed table: rlfast, rlfast with the zoo's settings, SB3."""
    header = f"{'seed':>4} | {'rlfast s':>8} | {'rlfast final':>12} | {'rlfast best@step':>16}"
    if zoo:
        header += f" | {'rlf-zoo s':>9} | {'rlf-zoo final':>13}"
    if have_sb3:
        header += f" | {'SB3 s':>7} | {'SB3 final':>9} | {'ratio':>5}"
        if zoo:
            header += f" | {'zoo ratio':>9}"
    return header


def _print_summary(cpu: dict, finals: dict, ratios: list, zoo_ratios: list) -> None:
    """CPU seconds of every run, the median wall-clock ratios and the final returns."""
    print("\nCPU seconds up to the end of training (all threads; load-independent): "
          + "; ".join(f"{name} {', '.join(f'{c:.0f}' for c in values)}"
                      for name, values in cpu.items() if values))
    if ratios:
        print(f"Median wall-clock ratio rlfast (tuned) / SB3 (zoo): {median(ratios):.2f}")
    if zoo_ratios:
        print(f"Median wall-clock ratio rlfast (zoo settings) / SB3 (zoo): "
              f"{median(zoo_ratios):.2f}")
    for name, values in finals.items():
        if values:
            print(f"{name}: mean final return {statistics.mean(values):.1f}; runs >= 450: "
                  f"{sum(v >= 450 for v in values)}/{len(values)}")


def main() -> None:
    sb3_log_dir()  # SB3's children log nowhere lasting
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--rlfast-zoo", action="store_true",
                        help="also run rlfast with SB3's zoo hyperparameters")
    args = parser.parse_args()
    if args.steps < 1000:
        parser.error(f"--steps must be >= 1000 (learning starts after 1000), got {args.steps}")
    have_sb3 = sb3_version() is not None
    print(f"Machine: {machine()}")
    print(f"DQN on CartPole-v1, {args.steps} env steps; final score = mean of 10 greedy "
          f"episodes\n")
    header = _header(args.rlfast_zoo, have_sb3)
    print(header)
    print("-" * len(header))
    ratios, zoo_ratios, finals = [], [], {"rlfast": [], "rlfast-zoo": [], "SB3": []}
    cpu = {name: [] for name in finals}
    for seed in args.seeds:
        r = run_rlfast(args.steps, seed)
        finals["rlfast"].append(r["final_return"])
        cpu["rlfast"].append(r["cpu_s"])
        line = (f"{seed:>4} | {r['wall_s']:>8.1f} | {r['final_return']:>12.1f} | "
                f"{r['best']:>6.1f}@{r['best_at']:<9d}")
        z = None
        if args.rlfast_zoo:
            z = run_rlfast(args.steps, seed, "zoo")
            finals["rlfast-zoo"].append(z["final_return"])
            cpu["rlfast-zoo"].append(z["cpu_s"])
            line += f" | {z['wall_s']:>9.1f} | {z['final_return']:>13.1f}"
        if have_sb3:
            s = run_sb3(args.steps, seed)
            finals["SB3"].append(s["final_return"])
            cpu["SB3"].append(s["cpu_s"])
            ratios.append(r["wall_s"] / s["wall_s"])
            line += f" | {s['wall_s']:>7.1f} | {s['final_return']:>9.1f} | {ratios[-1]:>5.2f}"
            if z is not None:
                zoo_ratios.append(z["wall_s"] / s["wall_s"])
                line += f" | {zoo_ratios[-1]:>9.2f}"
        print(line, flush=True)
    _print_summary(cpu, finals, ratios, zoo_ratios)


if __name__ == "__main__":
    main()
