#!/usr/bin/env python
"""rlfast MAPPO against BenchMARL's MAPPO on PettingZoo's MPE Spread, side by side.

The task: ``mpe2.simple_spread_v3`` with N agents (default 3), 25 cycles, local_ratio 0.5,
discrete actions (PettingZoo's defaults) for both. The contenders, interleaved seed by seed
(the order reversed every other seed, so that drift in the machine's load hits both alike):

- rlfast: ``rlfast train mappo pz:mpe2.simple_spread_v3`` (the ``mappo`` preset: MAPPO's
  MPE settings, CPU sampler over the available cores), ``--steps`` environment steps;
- BenchMARL (``pip install benchmarl``, in the ``bench`` extra; ``--peer-python`` may name
  another interpreter that has it): its MAPPO with its own default experiment, algorithm and
  MLP configurations (what a BenchMARL user runs), on the same task, the same number of
  environment steps (BenchMARL's frames) and the same seeds. Only what the comparison needs
  is set: discrete actions, 25 cycles, CSV logging, no video, the evaluation at the end.

The same figure for both: the final return, a deterministic (greedy) evaluation of the
trained policy over ``--eval-episodes`` episodes at the end of training, as the mean
per-agent episode return (both frameworks log PettingZoo's per-agent rewards summed over the
episode, averaged over agents and episodes: the same units); and the wall time of the
whole run, from starting the process to its exit (imports, environment building, training,
evaluation). The table gives each seed, the means, and the ratios rlfast/BenchMARL.

BenchMARL 1.5 on torchrl 0.11 imports the MPE tasks from ``pettingzoo.mpe``, which PettingZoo
1.25 moved to the ``mpe2`` package: the peer's process points that import at ``mpe2`` (the
same environments rlfast runs) before it imports BenchMARL. Steps must be a multiple of both
batch sizes (rlfast 25 x 128 = 3200 env steps, BenchMARL 6000 frames): the default 144,000 is.

    python scripts/bench/bench_multiagent.py                     # 3 seeds, 144k steps each
    python scripts/bench/bench_multiagent.py --steps 48000 --seeds 0   # a quick look
"""
from __future__ import annotations

import argparse
import csv
import glob
import json
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import (REPO_ROOT, interleave, machine, markdown_table, run_process,  # noqa: E402
                     write_json)

TASK = "mpe2.simple_spread_v3"

# The peer's run: BenchMARL's own defaults but for the settings named in the docstring.
PEER_SOURCE = r'''
import json, sys, time, types
start = time.time()
import mpe2.all_modules
shim = types.ModuleType("pettingzoo.mpe")
shim.all_modules = mpe2.all_modules
sys.modules["pettingzoo.mpe"] = shim
sys.modules["pettingzoo.mpe.all_modules"] = mpe2.all_modules
from benchmarl.algorithms import MappoConfig
from benchmarl.environments import PettingZooTask
from benchmarl.experiment import Experiment, ExperimentConfig
from benchmarl.models.mlp import MlpConfig
args = json.loads(sys.argv[1])
task = PettingZooTask.SIMPLE_SPREAD.get_from_yaml()
task.config.update(dict(max_cycles=25, N=args["n_agents"], local_ratio=0.5))
config = ExperimentConfig.get_from_yaml()
config.prefer_continuous_actions = False
config.loggers = ["csv"]
config.render = False
config.create_json = False
config.checkpoint_at_end = False
config.max_n_frames = args["steps"]
config.evaluation_interval = args["steps"]
config.evaluation_episodes = args["eval_episodes"]
config.save_folder = args["out"]
experiment = Experiment(task=task, algorithm_config=MappoConfig.get_from_yaml(),
                        model_config=MlpConfig.get_from_yaml(),
                        critic_model_config=MlpConfig.get_from_yaml(), seed=args["seed"],
                        config=config)
experiment.run()
print("PEER_DONE", time.time() - start)
'''


def _last_csv_value(path: str) -> float:
    with open(path) as f:
        rows = [row for row in csv.reader(f) if row]
    return float(rows[-1][-1])


def run_rlfast(seed: int, steps: int, n_agents: int, eval_episodes: int, out: str,
               sampler: str | None, sets: tuple[str, ...] = (), name: str = "rlfast") -> dict:
    """One ``rlfast train mappo`` run; ``sets``: extra ``--set KEY=VALUE`` overrides, and
    ``name`` the log folder's prefix."""
    log_dir = os.path.join(out, f"{name}_seed{seed}")
    per_env = -(-eval_episodes // 8)
    command = [sys.executable, "-m", "rlfast", "train", "mappo", f"pz:{TASK}",
               "--steps", str(steps), "--seed", str(seed), "--log-dir", log_dir,
               "--no-progress",
               "--set", f"env.kwargs.N={n_agents}", "--set", "env.kwargs.max_cycles=25",
               "--set", f"runner.log_interval_steps={steps}",
               "--set", "sampler.eval_n_envs=8",
               "--set", f"sampler.eval_max_steps={8 * per_env * 25}",
               "--set", f"sampler.eval_max_trajectories={eval_episodes}"]
    for item in sets:
        command += ["--set", item]
    if sampler:
        command += ["--sampler", sampler]
    start = time.time()
    returncode, stdout, stderr = run_process(command, cwd=REPO_ROOT)
    wall = time.time() - start
    if returncode != 0:
        raise RuntimeError(f"rlfast run failed:\n{stdout[-2000:]}\n{stderr[-2000:]}")
    with open(os.path.join(log_dir, "progress.csv")) as f:
        rows = list(csv.DictReader(f))
    last = rows[-1]
    return dict(final_return=float(last["ReturnAverage"]), wall_s=wall,
                steps=int(float(last["Diagnostics/CumSteps"])),
                episodes=int(float(last["Diagnostics/NumEvalTrajs"])),
                first_return=float(rows[0]["ReturnAverage"]))


def run_peer(python: str, seed: int, steps: int, n_agents: int, eval_episodes: int,
             out: str) -> dict:
    folder = os.path.join(out, f"benchmarl_seed{seed}")
    os.makedirs(folder, exist_ok=True)
    args = json.dumps(dict(seed=seed, steps=steps, n_agents=n_agents,
                           eval_episodes=eval_episodes, out=folder))
    start = time.time()
    returncode, stdout, stderr = run_process([python, "-c", PEER_SOURCE, args], cwd=folder,
                                           env=dict(os.environ))
    wall = time.time() - start
    if returncode != 0 or "PEER_DONE" not in stdout:
        raise RuntimeError(f"BenchMARL run failed:\n{stdout[-2000:]}\n{stderr[-3000:]}")
    scalars = glob.glob(os.path.join(folder, "**", "scalars"), recursive=True)
    if not scalars:
        raise RuntimeError(f"BenchMARL wrote no scalars under {folder}")
    final = _last_csv_value(os.path.join(scalars[0], "eval_agent_reward_episode_reward_mean.csv"))
    frames = int(_last_csv_value(os.path.join(scalars[0], "counters_total_frames.csv")))
    return dict(final_return=final, wall_s=wall, steps=frames, episodes=eval_episodes)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=144_000)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--n-agents", type=int, default=3)
    parser.add_argument("--eval-episodes", type=int, default=32)
    parser.add_argument("--sampler", default=None, help="rlfast's sampler (default: the "
                        "preset's choice)")
    parser.add_argument("--peer-python", default=sys.executable,
                        help="the Python that has benchmarl installed")
    parser.add_argument("--no-peer", action="store_true", help="rlfast only")
    parser.add_argument("--out", default=None, help="directory for the runs' logs")
    parser.add_argument("--json", default=None, help="write the results here")
    args = parser.parse_args()
    out = args.out or tempfile.mkdtemp(prefix="bench_multiagent_")
    print(f"Machine: {machine()}")
    print(f"MPE Spread N={args.n_agents}, 25 cycles; {args.steps:,} env steps per run; seeds "
          f"{args.seeds}; logs in {out}", flush=True)
    results: dict[str, list[dict]] = {"rlfast": [], "benchmarl": []}
    for i, order in interleave(["rlfast", "benchmarl"], len(args.seeds)):
        seed = args.seeds[i]
        for name in order:
            if name == "benchmarl" and args.no_peer:
                continue
            if name == "rlfast":
                result = run_rlfast(seed, args.steps, args.n_agents, args.eval_episodes, out,
                                    args.sampler)
            else:
                result = run_peer(args.peer_python, seed, args.steps, args.n_agents,
                                  args.eval_episodes, out)
            result["seed"] = seed
            results[name].append(result)
            print(f"  {name:9s} seed {seed}: final return {result['final_return']:8.2f} "
                  f"({result['episodes']} episodes, {result['steps']:,} steps), wall "
                  f"{result['wall_s']:7.1f} s", flush=True)
    means, rows = {}, []
    for name, runs in results.items():
        if not runs:
            continue
        finals = [r["final_return"] for r in runs]
        walls = [r["wall_s"] for r in runs]
        means[name] = (statistics.mean(finals), statistics.mean(walls))
        rows.append([name, ", ".join(str(r["seed"]) for r in runs),
                     ", ".join(f"{v:.2f}" for v in finals), f"{means[name][0]:.2f}",
                     f"{means[name][1]:.1f}"])
    print()
    print(markdown_table(["framework", "seeds", "final return, per seed", "mean final return",
                          "wall time per run (s), mean"], rows, "lllrr"))
    if len(means) == 2:
        (r_ret, r_wall), (p_ret, p_wall) = means["rlfast"], means["benchmarl"]
        print(f"\nrlfast - BenchMARL final return: {r_ret - p_ret:+.2f}; wall time ratio "
              f"rlfast/BenchMARL: {r_wall / p_wall:.2f}x ({p_wall / r_wall:.1f}x faster)")
    if args.json:
        write_json(args.json, dict(steps=args.steps, n_agents=args.n_agents, seeds=args.seeds,
                                   results=results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
