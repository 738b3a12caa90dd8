#!/usr/bin/env python
"""Benchmark: rlfast's SAC, TD3 and DDPG on Pendulum-v1 against Stable-Baselines3's.

Every measurement is its own child process, run one after the other, so imports and torch
threads start alike. rlfast runs exactly what ``rlfast train <algo> Pendulum-v1`` builds: the
preset ``get_preset(algo, "Pendulum-v1")`` (Pendulum-tuned overrides merged in) with
``runner.n_steps = --steps``, ``build_experiment(..., sampler="serial", seed=seed)``, the
preset's master torch threads (1 for the 64x64 Pendulum networks), no progress bar, no
snapshots. Its time is the wall clock of ``runner.train()`` inside ``logger_context``: env and
network construction, replay allocation, training and ALL its evaluations (before training, every
``log_interval_steps`` and at the end: 5 deterministic episodes each); the eval share is shown
in the "eval s" column and stays in rlfast's time. SB3 runs its rl-baselines3-zoo Pendulum-v1
hyperparameters (ZOO below) with ``device="cpu"`` and torch's default thread count; its time is
the wall clock of ``gym.make`` + model construction + ``model.learn(steps)`` (the same kinds of
work as rlfast's ``train()``, minus evaluation). The final return of BOTH is one protocol, run
after training and not timed: ``--eval-episodes`` (20) deterministic episodes on a fresh
gymnasium env reset with seeds ``10000 + 100 * seed + episode``. (Pendulum's start state
decides much of an episode's return, from about 0 to -400 for a good policy, so a few
episodes from different start states are not comparable: with the runner's own 5-episode
final evaluation, rlfast read -210 where the same trained policies score -106 on SB3's
episodes.) CPU seconds (all threads, process-wide) are printed too.

The two tuned settings differ (the script prints, per algorithm, the preset keys whose values
differ from SB3's: e.g. learning_starts, network sizes); ``--same-settings`` adds a row per
algorithm where rlfast runs SB3's effective settings (networks, batch, learning_starts ->
algo.min_steps_learn, gamma, learning rates, buffer, tau, update/policy-delay intervals, noise)
as dotted ``apply_overrides`` keys, to separate framework speed from tuning. Not mapped: before
learning starts SB3 acts uniformly at random, rlfast with its preset pre-training noise.
``--smoke`` caps learning_starts / min_steps_learn at 500 in every run so a short run exercises
the learning path; it is not a measurement.

Usage: python scripts/bench/bench_qpg.py [--steps 20000] [--seeds 0] [--algos sac,td3,ddpg]
           [--same-settings] [--smoke] [--eval-episodes 20] [--json PATH]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import (REPO_ROOT, machine, median, parse_result, run_process,  # noqa: E402
                     sb3_log_dir, sb3_version, write_json)

ENV_ID = "Pendulum-v1"
ALGOS = ("sac", "td3", "ddpg")
SMOKE_LEARNING_STARTS = 500
TARGET_RATIO = 0.7

# rl-baselines3-zoo (rl_zoo3 2.9.2) hyperparams/{sac,td3,ddpg}.yml, entries "Pendulum-v1"
# (policy 'MlpPolicy', n_timesteps 20000 in all three). Keys as in the zoo files.
ZOO: dict[str, dict] = {
    "sac": dict(learning_rate=1e-3),
    "td3": dict(gamma=0.98, buffer_size=200_000, learning_starts=10_000, noise_type="normal",
                noise_std=0.1, gradient_steps=1, train_freq=1, learning_rate=1e-3,
                net_arch=[400, 300]),  # zoo: policy_kwargs: "dict(net_arch=[400, 300])"
    "ddpg": dict(gamma=0.98, buffer_size=200_000, learning_starts=10_000, noise_type="normal",
                 noise_std=0.1, gradient_steps=1, train_freq=1, learning_rate=1e-3,
                 net_arch=[400, 300]),
}
# SB3 2.9 constructor defaults for what the zoo leaves unset (checked against SB3 2.9.2).
_SB3_COMMON = dict(buffer_size=1_000_000, learning_starts=100, batch_size=256, tau=0.005,
                   gamma=0.99, train_freq=1, gradient_steps=1)
SB3_DEFAULTS: dict[str, dict] = {
    "sac": dict(_SB3_COMMON, net_arch=[256, 256], learning_rate=3e-4, target_update_interval=1),
    "td3": dict(_SB3_COMMON, net_arch=[400, 300], learning_rate=1e-3, noise_std=None,
                policy_delay=2, target_policy_noise=0.2, target_noise_clip=0.5),
    "ddpg": dict(_SB3_COMMON, net_arch=[400, 300], learning_rate=1e-3, noise_std=None,
                 policy_delay=1),
}

RLFAST_SCRIPT = r"""
import json, sys, tempfile, time
algo, steps, seed, overrides, repo_root, cap, n_eval = (
    sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), json.loads(sys.argv[4]), sys.argv[5],
    int(sys.argv[6]), int(sys.argv[7]))
sys.path.insert(0, repo_root)
import torch
from rlfast.experiments.config import apply_overrides
from rlfast.experiments.presets import build_experiment, get_preset
from rlfast.utils.logging import logger_context
config = get_preset(algo, "Pendulum-v1")
config["runner"]["n_steps"] = steps
config = apply_overrides(config, overrides)
if cap >= 0:
    config["algo"]["min_steps_learn"] = min(cap, config["algo"]["min_steps_learn"])
runner = build_experiment(algo, "Pendulum-v1", config, sampler="serial", seed=seed)
runner.progress_bar = False
eval_s = [0.0]
_evaluate = runner.evaluate_agent
def timed_evaluate(*args, **kwargs):  # the evaluations' share; they stay in train()'s time
    start = time.perf_counter()
    try:
        return _evaluate(*args, **kwargs)
    finally:
        eval_s[0] += time.perf_counter() - start
runner.evaluate_agent = timed_evaluate
with tempfile.TemporaryDirectory() as log_dir:
    with logger_context(log_dir, 0, f"bench_{algo}", config, override_prefix=True):
        cpu0, t0 = time.process_time(), time.perf_counter()
        result = runner.train()
        wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
# The final return both frameworks report: the same seeded episodes, deterministic actions.
import gymnasium as gym
agent = runner.agent
agent.eval_mode(0)
eval_env, returns = gym.make("Pendulum-v1"), []
prev_action, prev_reward = torch.zeros(eval_env.action_space.shape), torch.zeros(())
for ep in range(n_eval):
    obs, _ = eval_env.reset(seed=10_000 + 100 * seed + ep)
    done, total = False, 0.0
    while not done:
        action = agent.step(torch.as_tensor(obs, dtype=torch.float32), prev_action,
                            prev_reward).action.numpy()
        obs, reward, terminated, truncated, _ = eval_env.step(action)
        total += float(reward)
        done = terminated or truncated
    returns.append(total)
print(json.dumps(dict(wall_s=wall, cpu_s=cpu, eval_s=eval_s[0],
                      final_return=sum(returns) / len(returns),
                      runner_final_return=result["final_return"],
                      eval_returns=result["eval_returns"], updates=runner.algo.update_counter,
                      min_steps_learn=config["algo"]["min_steps_learn"],
                      torch_threads=torch.get_num_threads())))
"""

SB3_SCRIPT = r"""
import json, sys, time
algo, steps, seed, zoo, n_eval, cap = (sys.argv[1], int(sys.argv[2]), int(sys.argv[3]),
                                       json.loads(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]))
import numpy as np
import torch
import gymnasium as gym
from stable_baselines3 import DDPG, SAC, TD3
from stable_baselines3.common.noise import NormalActionNoise
kwargs = {k: v for k, v in zoo.items() if k not in ("noise_type", "noise_std", "net_arch")}
if "net_arch" in zoo:
    kwargs["policy_kwargs"] = dict(net_arch=zoo["net_arch"])
if cap >= 0:
    kwargs["learning_starts"] = min(cap, kwargs.get("learning_starts", 100))
cpu0, t0 = time.process_time(), time.perf_counter()
env = gym.make("Pendulum-v1")
if zoo.get("noise_type") == "normal":
    n = env.action_space.shape[0]
    kwargs["action_noise"] = NormalActionNoise(mean=np.zeros(n),
                                               sigma=zoo["noise_std"] * np.ones(n))
model = dict(sac=SAC, td3=TD3, ddpg=DDPG)[algo]("MlpPolicy", env, seed=seed, device="cpu",
                                                 verbose=0, **kwargs)
model.learn(total_timesteps=steps)
wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
eval_env, returns = gym.make("Pendulum-v1"), []
t_eval = time.perf_counter()
for ep in range(n_eval):
    obs, _ = eval_env.reset(seed=10_000 + 100 * seed + ep)
    done, total = False, 0.0
    while not done:
        action, _ = model.predict(obs, deterministic=True)
        obs, reward, terminated, truncated, _ = eval_env.step(action)
        total += float(reward)
        done = terminated or truncated
    returns.append(total)
print(json.dumps(dict(wall_s=wall, cpu_s=cpu, final_return=sum(returns) / len(returns),
                      eval_s_uncharged=time.perf_counter() - t_eval, updates=model._n_updates,
                      learning_starts=model.learning_starts,
                      torch_threads=torch.get_num_threads())))
"""


def sb3_settings(algo: str) -> dict:
    """SB3's effective Pendulum-v1 settings for ``algo``: its defaults updated by the zoo's."""
    if algo not in ALGOS:
        raise ValueError(f"unknown algorithm {algo!r}; choose from {list(ALGOS)}")
    return {**SB3_DEFAULTS[algo], **ZOO[algo]}


def same_settings_overrides(algo: str) -> list[str]:
    """SB3's effective settings for ``algo`` as rlfast ``dotted.key=value`` overrides."""
    s = sb3_settings(algo)
    if (s["batch_size"] * s["gradient_steps"]) % s["train_freq"]:
        raise ValueError(f"{algo}: batch_size*gradient_steps/train_freq must be whole, got "
                         f"{s['batch_size']}*{s['gradient_steps']}/{s['train_freq']}")
    lr_keys = dict(sac=["learning_rate"], td3=["mu_learning_rate", "q_learning_rate"],
                   ddpg=["learning_rate", "q_learning_rate"])[algo]
    out = [f"agent.model_kwargs.hidden_sizes={s['net_arch']}",
           f"agent.q_model_kwargs.hidden_sizes={s['net_arch']}",
           f"algo.batch_size={s['batch_size']}", f"algo.min_steps_learn={s['learning_starts']}",
           f"algo.discount={s['gamma']}", f"algo.replay_size={s['buffer_size']}",
           f"algo.target_update_tau={s['tau']}",
           "affinity.master_torch_threads=0",  # every core, as SB3's torch default
           # one sampler step per iteration: updates/step = replay_ratio / batch_size
           f"algo.replay_ratio={s['batch_size'] * s['gradient_steps'] // s['train_freq']}"]
    out += [f"algo.{key}={s['learning_rate']}" for key in lr_keys]
    if algo == "sac":
        out.append(f"algo.target_update_interval={s['target_update_interval']}")
    else:  # SB3 updates the actor and both targets every policy_delay critic updates
        out += [f"algo.policy_update_interval={s['policy_delay']}",
                f"algo.target_update_interval={s['policy_delay']}",
                f"agent.action_std={s['noise_std']}"]
    if algo == "td3":
        out += [f"agent.target_noise_std={s['target_policy_noise']}",
                f"agent.target_noise_clip={s['target_noise_clip']}"]
    return out


def settings_diff(algo: str) -> dict[str, tuple]:
    """Preset keys where rlfast's Pendulum-v1 preset differs from SB3's settings for ``algo``:
    ``{dotted key: (rlfast value, SB3 value)}``."""
    from rlfast.experiments.config import apply_overrides, flatten
    from rlfast.experiments.presets import get_preset
    preset = get_preset(algo, ENV_ID)
    ours, theirs = flatten(preset), flatten(apply_overrides(preset, same_settings_overrides(algo)))
    return {key: (ours[key], value) for key, value in theirs.items() if ours[key] != value}


def _run_child(script: str, args: list, name: str) -> dict:
    finished = run_process([sys.executable, "-c", script, *map(str, args)], cwd=REPO_ROOT)
    return parse_result(name, *finished, tag=None)


def run_rlfast(algo: str, steps: int, seed: int, overrides: list[str], cap: int,
               n_eval: int) -> dict:
    """rlfast in a child process; ``cap`` >= 0 caps min_steps_learn (smoke runs), -1: none."""
    return _run_child(RLFAST_SCRIPT, [algo, steps, seed, json.dumps(overrides), REPO_ROOT, cap,
                                      n_eval], f"rlfast {algo}")


def run_sb3(algo: str, steps: int, seed: int, n_eval: int, cap: int) -> dict:
    """SB3 with its zoo Pendulum-v1 settings in a child process (``cap`` as in run_rlfast)."""
    return _run_child(SB3_SCRIPT, [algo, steps, seed, json.dumps(ZOO[algo]), n_eval, cap],
                      f"SB3 {algo}")


def _spread(values: list[float]) -> float:
    return statistics.stdev(values) if len(values) > 1 else 0.0


def _summarize(algo: str, rows: list[dict], have_sb3: bool) -> dict:
    """Median wall ratios and mean returns of one algorithm's rows, with the target verdict."""
    out = {"algo": algo}
    finals = {}
    for fw in ("rlfast", "rlfast-sb3-settings", "SB3"):
        values = [r["final_return"] for r in rows if r["framework"] == fw]
        if values:
            finals[fw] = values
            out[fw] = dict(mean_return=statistics.mean(values), return_spread=_spread(values),
                           median_wall_s=median(r["wall_s"] for r in rows
                                                if r["framework"] == fw))
    if have_sb3:
        for fw in ("rlfast", "rlfast-sb3-settings"):
            ratios = [r["ratio"] for r in rows if r["framework"] == fw]
            if ratios:
                out[fw]["median_ratio"] = median(ratios)
        spread = max(_spread(finals["rlfast"]), _spread(finals["SB3"]))
        out["speed_ok"] = out["rlfast"]["median_ratio"] <= TARGET_RATIO
        out["return_ok"] = out["rlfast"]["mean_return"] >= out["SB3"]["mean_return"] - spread
        out["seed_spread"] = spread
    return out


def parse_args() -> tuple[argparse.Namespace, list[str], list[int]]:
    """The arguments, the algorithms of ``--algos`` and the seeds of ``--seeds`` (a one-line
    error naming the bad value otherwise)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20_000, help="env steps per run (20000)")
    parser.add_argument("--seeds", default="0", help="comma-separated seeds (default 0)")
    parser.add_argument("--algos", default="sac,td3,ddpg",
                        help="comma-separated, from sac,td3,ddpg")
    parser.add_argument("--same-settings", action="store_true",
                        help="also run rlfast with SB3's zoo settings mapped onto its preset keys")
    parser.add_argument("--smoke", action="store_true",
                        help=f"cap learning_starts/min_steps_learn at {SMOKE_LEARNING_STARTS} "
                             f"(exercises learning in short runs; not a measurement)")
    parser.add_argument("--eval-episodes", type=int, default=20,
                        help="final evaluation: this many deterministic episodes with the same "
                             "reset seeds for both frameworks, after training, not timed (20)")
    parser.add_argument("--json", metavar="PATH", help="also write the results here as JSON")
    args = parser.parse_args()
    algos = [a.strip() for a in args.algos.split(",") if a.strip()]
    bad = [a for a in algos if a not in ALGOS]
    if bad or not algos:
        parser.error(f"--algos: unknown {bad or 'empty list'}; choose from {','.join(ALGOS)}")
    try:
        seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    except ValueError:
        parser.error(f"--seeds must be comma-separated integers, got {args.seeds!r}")
    if not seeds:
        parser.error("--seeds is empty")
    if args.steps < 1:
        parser.error(f"--steps must be >= 1, got {args.steps}")
    return args, algos, seeds


def _print_summary(summaries: list[dict], have_sb3: bool, smoke: bool) -> None:
    """Per algorithm: the returns, the median wall-clock ratio and whether the targets are
    met."""
    print("Summary" + (" (SMOKE RUN: not a measurement)" if smoke else "")
          + f": target rlfast wall <= {TARGET_RATIO}x SB3, final return at least SB3's "
            f"within the seed spread (larger of the two std devs; 0 with one seed)")
    for s in summaries:
        line = f"  {s['algo']:<5} rlfast return {s['rlfast']['mean_return']:8.1f}"
        if have_sb3:
            line += (f" | SB3 return {s['SB3']['mean_return']:8.1f} | median ratio "
                     f"{s['rlfast']['median_ratio']:.2f}")
            if "rlfast-sb3-settings" in s:
                ss = s["rlfast-sb3-settings"]
                line += (f" (SB3 settings: {ss['median_ratio']:.2f}, return "
                         f"{ss['mean_return']:.1f})")
            line += (f" | speed {'met' if s['speed_ok'] else 'NOT met'}, return "
                     f"{'met' if s['return_ok'] else 'NOT met'}")
        print(line)


def main() -> None:
    sb3_log_dir()  # SB3's children log nowhere lasting
    args, algos, seeds = parse_args()
    cap = SMOKE_LEARNING_STARTS if args.smoke else -1
    sb3_release = sb3_version()
    have_sb3 = sb3_release is not None
    if args.smoke:
        print(f"SMOKE RUN: learning starts capped at {SMOKE_LEARNING_STARTS} steps in every run; "
              f"not a measurement.")
    print(f"Machine: {machine()}")
    print(f"{ENV_ID}, {args.steps} env steps per run, seeds {seeds}"
          + (f", stable-baselines3 {sb3_release}" if have_sb3 else ""))
    print("rlfast wall = runner.train() (env/net setup, training, all its evaluations: 'eval s');"
          " SB3 wall = gym.make + model construction + learn() (its final evaluation not "
          "charged).\n")
    rows, summaries = [], []
    for algo in algos:
        n_eval = args.eval_episodes
        configs = [("rlfast", [])]
        if args.same_settings:
            configs.append(("rlfast-sb3-settings", same_settings_overrides(algo)))
        print(f"== {algo.upper()} (final return: mean of the same {n_eval} seeded deterministic "
              f"episodes for both frameworks, not timed)")
        diff = settings_diff(algo)
        print("rlfast preset vs SB3 zoo: " + ("; ".join(f"{k} {a} (SB3 {b})" for k, (a, b)
                                                       in diff.items()) or "same settings"))
        header = (f"{'seed':>4} | {'framework':<19} | {'wall s':>7} | {'eval s':>6} | "
                  f"{'cpu s':>6} | {'updates':>7} | {'final return':>12} | {'ratio':>5}")
        print(header)
        print("-" * len(header))
        algo_rows = []
        for seed in seeds:
            seed_rows = [dict(algo=algo, seed=seed, framework=name,
                              **run_rlfast(algo, args.steps, seed, overrides, cap, n_eval))
                         for name, overrides in configs]
            if have_sb3:
                sb3 = dict(algo=algo, seed=seed, framework="SB3",
                           **run_sb3(algo, args.steps, seed, n_eval, cap))
                for r in seed_rows:
                    r["ratio"] = r["wall_s"] / sb3["wall_s"]
                seed_rows.append(sb3)
            for r in seed_rows:
                eval_text = f"{r['eval_s']:>6.1f}" if "eval_s" in r else f"{'-':>6}"
                ratio_text = f"{r['ratio']:>5.2f}" if "ratio" in r else f"{'':>5}"
                print(f"{seed:>4} | {r['framework']:<19} | {r['wall_s']:>7.1f} | {eval_text} | "
                      f"{r['cpu_s']:>6.1f} | {r['updates']:>7d} | {r['final_return']:>12.1f} | "
                      f"{ratio_text}", flush=True)
            algo_rows += seed_rows
        rows += algo_rows
        summaries.append(_summarize(algo, algo_rows, have_sb3))
        print()
    _print_summary(summaries, have_sb3, args.smoke)
    threads = sorted({(r["framework"], r["torch_threads"]) for r in rows})
    print("torch threads: " + ", ".join(f"{fw} {n}" for fw, n in threads))
    if args.json:
        write_json(args.json, dict(env=ENV_ID, steps=args.steps, seeds=seeds, smoke=args.smoke,
                                   sb3_version=sb3_release, zoo=ZOO,
                                   same_settings={a: same_settings_overrides(a) for a in algos}
                                   if args.same_settings else None,
                                   preset_vs_sb3={a: settings_diff(a) for a in algos},
                                   rows=rows, summary=summaries), indent=2)
        print(f"Results written to {args.json}")


if __name__ == "__main__":
    main()
