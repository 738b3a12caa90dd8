#!/usr/bin/env python
"""MinAtar side by side: rlfast's DQN (and Rainbow) presets against Stable-Baselines3's DQN on
the same games, budget and machine: wall clock, CPU, env steps per second and the return of
the last 100 training episodes, with the curve of that return.

Contenders, each run as its own child process, interleaved over ``--rounds`` rounds (the order
reversed every other round, so that drift in the machine's load hits every contender alike;
round ``r`` trains with seed ``--seed + r`` on every side):

- ``rlfast-dqn``: ``python -m rlfast train dqn minatar:<game>``, the ``dqn`` preset's
  ``minatar`` settings (rlfast/experiments/preset_data.py: the MinAtar paper's DQN), with
  ``runner.log_interval_steps=--log-every``, ``runner.log_traj_window=100`` and
  ``--snapshot-mode none`` (SB3 saves nothing either);
- ``rlfast-rainbow``: the same with the ``rainbow`` preset (not run unless named), its
  ``algo.pri_beta_steps`` set to ``--steps`` so that prioritized replay's beta still reaches 1
  at the end of the run, as the preset has it for its default 2M steps;
- ``sb3-dqn``: ``stable_baselines3.DQN`` on MinAtar's own gymnasium env (``MinAtar/<Game>-v0``,
  registered by ``minatar.gym.register_envs()``: ``import minatar`` alone registers nothing,
  and gymnasium 1.x does not load minatar's entry point), wrapped in a ``Monitor``, with the
  MinAtar paper's network written here (``MinAtarCNN``: one convolution of 16 3x3 filters at
  stride 1 without padding, ReLU, a fully connected layer of 128 ReLU units; ``net_arch=[]``,
  so the Q head is one linear layer on those 128 features, as in rlfast's model).

SB3's settings are read from rlfast's ``dqn`` preset at run time (``sb3_settings``), so that
they follow it. Matched:

- network: conv 16 3x3/1, fc 128, linear Q head; inputs 0 / 1 (SB3 turns MinAtar's boolean
  state into floats; rlfast scales its 0 / 255 uint8 frames by 1/255);
- env: sticky actions 0.1, difficulty ramping, the full six-action set (``-v0``: ``-v1`` is
  the minimal set; the preset's ``minimal_action_set=False``), no step limit (``horizon``
  None), rewards unclipped;
- replay 100k, batch 32, one gradient step per env step (SB3 ``train_freq=1``,
  ``gradient_steps=replay_ratio / batch_size = 1``), learning from step 5000 (SB3
  ``learning_starts``; both act uniformly at random until then), gamma 0.99, 1-step targets,
  no double Q (SB3's DQN has none), uniform replay, Huber loss with delta 1 (SB3's
  ``smooth_l1_loss``), gradient norm clipped at 10 (``max_grad_norm``);
- target network copied whole (tau 1) every 1000 updates: SB3 copies every 1000 env steps,
  which with one update per step is the same rate, counted from step 0 instead of from the
  start of learning;
- epsilon 1.0 until learning starts, then 1.0 -> 0.1 linearly over the next 100k steps, as
  rlfast counts it: SB3's ``exploration_fraction`` schedule starts at step 0, so the model's
  ``exploration_schedule`` is replaced by ``EpsilonAfterLearningStarts``, which does the same
  in SB3's progress units;
- optimizer: ``torch.optim.RMSprop(lr=2.5e-4, alpha=0.95, eps=0.01, centered=True)``
  (``optimizer_class`` and ``optimizer_kwargs``);
- torch threads: the preset's ``affinity.master_torch_threads`` (1) in SB3's process too;
  ``--device`` puts both learners on the same device.

Not matched:

- data flow: rlfast's preset steps 8 environments x 4 steps per sampler iteration (in worker
  processes) and then makes 32 updates; SB3 steps one environment and updates after every
  step, as the MinAtar paper does. The number of updates per env step is the same; their
  interleaving, and hence how fresh the acting policy is, is not;
- evaluation: rlfast's preset evaluates (4 episodes, epsilon 0.001) at every log row; SB3 does
  not. Its time is reported (``eval s``) and left out of steps/s and of the wall-clock ratio;
  ``--no-eval`` turns it off (``sampler.eval_n_envs=0``; the return then comes from the
  runner's own window of 100 training episodes, ``ReturnAverage``);
- weight initialisation: each library's own;
- the target copy's phase (above); SB3 also takes one ``loss.item()`` per update, rlfast reads
  its diagnostics once per log row.

Each child reports env steps, wall seconds (the child process from start to exit, interpreter
start and imports included, measured by this process), CPU seconds (the child and every
process it waited for, from ``RUSAGE_CHILDREN``), steps/s (steps / (wall - eval)), the mean
return of the last 100 training episodes at the end, and the curve of that mean every
``--log-every`` steps (rlfast: progress.csv's ``Diagnostics/CumSteps`` and
``Diagnostics/TrainReturnWindow``; SB3: a callback reading the ``Monitor``'s episode returns).
One table per game: medians over the rounds, and each contender's (wall - eval) over
rlfast-dqn's. ``--out FILE`` writes every run and the summaries as JSON.

``--dry-run`` checks the plumbing in seconds: 2000 steps, learning from step 1000, replay
2000, epsilon annealed over 500 steps, a row every 500 steps, on both sides.

Usage: python scripts/bench/bench_minatar.py [--games breakout space_invaders] [--steps 2000000]
           [--rounds 1] [--seed 0] [--contenders rlfast-dqn sb3-dqn] [--log-every 20000]
           [--device cpu|cuda] [--no-eval] [--dry-run] [--timeout S] [--out FILE]
"""
from __future__ import annotations

import argparse
import csv
import importlib.util
import json
import math
import os
import resource
import shutil
import sys
import tempfile
import time
from collections import deque
from collections.abc import Iterable

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import (interleave, machine, markdown_table, median, parse_result,  # noqa: E402
                     print_result, run_process, sb3_log_dir, write_json)

SCRIPT = os.path.abspath(__file__)
WINDOW = 100  # training episodes in the reported return, as the MinAtar paper averages
GAMES = ("asterix", "breakout", "freeway", "seaquest", "space_invaders")
# name: (rlfast algorithm, or None for SB3; description)
CONTENDERS = {
    "rlfast-dqn": ("dqn", "rlfast train dqn minatar:<game>, its preset"),
    "rlfast-rainbow": ("rainbow", "rlfast train rainbow minatar:<game>, its preset"),
    "sb3-dqn": (None, "Stable-Baselines3 DQN on MinAtar/<Game>-v0, the MinAtar paper's "
                      "network, settings matched to rlfast's dqn preset"),
}
DEFAULT_CONTENDERS = ["rlfast-dqn", "sb3-dqn"]
BASELINE = "rlfast-dqn"
# --dry-run: what both sides shrink to.
DRY_RUN = dict(steps=2000, learning_starts=1000, replay_size=2000, eps_steps=500,
               log_every=500)
PROGRESS_STEPS = "Diagnostics/CumSteps"
PROGRESS_EVAL_TIME = "Diagnostics/EvalTime (s)"
PROGRESS_SPS = "Diagnostics/StepsPerSecond"


# ---- pure helpers ----------------------------------------------------------------------------

class ReturnWindow:
    """The returns of the last ``size`` completed episodes; ``mean()`` is None before the first."""

    def __init__(self, size: int = WINDOW) -> None:
        if size < 1:
            raise ValueError(f"a return window needs size >= 1, got {size}")
        self.returns: deque = deque(maxlen=size)

    def add(self, episode_return: float) -> None:
        self.returns.append(float(episode_return))

    def mean(self) -> float | None:
        return sum(self.returns) / len(self.returns) if self.returns else None


def _number(text: str | None) -> float | None:
    """A progress.csv cell as a float; None for an empty cell or NaN."""
    if text is None or text == "":
        return None
    value = float(text)
    return None if math.isnan(value) else value


def read_rlfast_progress(path: str, return_column: str) -> dict:
    """What an rlfast run's progress.csv says: ``steps`` (the last row's CumSteps), ``eval_s``
    (the evaluations' time, summed), ``final_return`` (the last row's ``return_column``), and
    ``curve``: ``[steps, return, steps/s]`` of every row after step 0 (return None while no
    training episode has ended)."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        raise ValueError(f"{path} has no rows")
    missing = [c for c in (PROGRESS_STEPS, return_column) if c not in rows[0]]
    if missing:
        raise ValueError(f"{path} lacks the column(s) {', '.join(missing)}")
    curve = []
    for row in rows:
        steps = int(float(row[PROGRESS_STEPS]))
        if steps > 0:
            curve.append([steps, _number(row[return_column]), _number(row.get(PROGRESS_SPS))])
    eval_s = sum(_number(row.get(PROGRESS_EVAL_TIME)) or 0.0 for row in rows)
    return dict(steps=int(float(rows[-1][PROGRESS_STEPS])), eval_s=eval_s,
                final_return=_number(rows[-1][return_column]), curve=curve)


def summarise(runs: Iterable[dict], baseline_train_s: float | None = None) -> dict:
    """Medians over rounds of one contender's runs: ``wall_s``, ``eval_s``, ``train_s`` (wall
    less evaluation), ``cpu_s``, ``steps_per_s``, ``final_return`` (over the rounds that have
    one; None if none), and ``vs_baseline``: its ``train_s`` over ``baseline_train_s``."""
    runs = list(runs)
    if not runs:
        raise ValueError("summarise needs at least one run")

    def of(key):
        values = [r[key] for r in runs if r.get(key) is not None]
        return median(values) if values else None

    out = dict(rounds=len(runs), wall_s=of("wall_s"), eval_s=of("eval_s"),
               train_s=median(r["wall_s"] - r["eval_s"] for r in runs),
               cpu_s=of("cpu_s"), steps_per_s=of("steps_per_s"),
               final_return=of("final_return"))
    out["vs_baseline"] = out["train_s"] / baseline_train_s if baseline_train_s else None
    return out


def sb3_settings(config: dict, steps: int, dry_run: bool) -> dict:
    """SB3 DQN's keyword arguments (and the env's) matching rlfast's ``dqn`` preset ``config``
    (``get_preset("dqn", "minatar:<game>")``) for a run of ``steps``; ``dry_run`` shrinks them
    as ``DRY_RUN`` says. A preset setting that SB3's DQN cannot express is a ValueError."""
    algo, agent, env = config["algo"], config["agent"], config["env"]
    unmatched = {key: algo[key] for key, value in (("double_dqn", False), ("n_step_return", 1),
                                                    ("prioritized_replay", False),
                                                    ("delta_clip", 1.0))
                 if algo.get(key, value) != value}
    if algo["replay_ratio"] % algo["batch_size"]:
        unmatched["replay_ratio"] = algo["replay_ratio"]
    if unmatched:
        raise ValueError(f"SB3's DQN has no equivalent of the preset's {unmatched}")
    import torch

    if not hasattr(torch.optim, algo["OptimCls"]):
        raise ValueError(f"the preset's optimizer {algo['OptimCls']!r} is not in torch.optim")
    learning_starts, replay_size, eps_steps = (algo["min_steps_learn"], algo["replay_size"],
                                               algo["eps_steps"])
    if dry_run:
        learning_starts, replay_size, eps_steps = (DRY_RUN["learning_starts"],
                                                   DRY_RUN["replay_size"], DRY_RUN["eps_steps"])
    return dict(
        dqn=dict(learning_rate=algo["learning_rate"], buffer_size=replay_size,
                 learning_starts=learning_starts, batch_size=algo["batch_size"],
                 tau=algo["target_update_tau"], gamma=algo["discount"], train_freq=1,
                 gradient_steps=algo["replay_ratio"] // algo["batch_size"],
                 target_update_interval=algo["target_update_interval"],
                 max_grad_norm=algo["clip_grad_norm"],
                 exploration_initial_eps=agent["eps_init"],
                 exploration_final_eps=agent["eps_final"],
                 optimizer=algo["OptimCls"], optimizer_kwargs=dict(algo["optim_kwargs"])),
        eps_steps=eps_steps,
        env=dict(sticky_action_prob=env["sticky_action_prob"],
                 difficulty_ramping=env["difficulty_ramping"],
                 use_minimal_action_set=env["minimal_action_set"]),
        horizon=env["horizon"], steps=steps,
        torch_threads=config.get("affinity", {}).get("master_torch_threads"))


def gym_id(game: str) -> str:
    """MinAtar's gymnasium id of ``game`` (``space_invaders`` -> ``MinAtar/SpaceInvaders-v0``);
    ``-v0`` takes the game's action set from ``use_minimal_action_set``, passed explicitly."""
    return "MinAtar/" + game.title().replace("_", "") + "-v0"


def rlfast_command(algo: str, game: str, steps: int, seed: int, log_dir: str,
                   args: argparse.Namespace) -> list[str]:
    """The ``python -m rlfast train`` command of an rlfast contender."""
    sets = [f"runner.log_interval_steps={args.log_every}", f"runner.log_traj_window={WINDOW}"]
    if algo == "rainbow":
        sets.append(f"algo.pri_beta_steps={steps}")
    if args.dry_run:
        sets += [f"algo.min_steps_learn={DRY_RUN['learning_starts']}",
                 f"algo.replay_size={DRY_RUN['replay_size']}",
                 f"algo.eps_steps={DRY_RUN['eps_steps']}"]
    if args.no_eval:
        sets.append("sampler.eval_n_envs=0")
    cmd = [sys.executable, "-m", "rlfast", "train", algo, f"minatar:{game}", "--steps",
           str(steps), "--seed", str(seed), "--log-dir", log_dir, "--no-progress",
           "--snapshot-mode", "none", "--device", args.device]
    for item in sets:
        cmd += ["--set", item]
    return cmd


# ---- the SB3 child ---------------------------------------------------------------------------

class EpsilonAfterLearningStarts:
    """SB3 exploration schedule (a function of SB3's progress remaining, 1 -> 0 over
    ``total`` steps) that holds ``initial`` until ``learning_starts`` steps and then anneals
    linearly to ``final`` over ``anneal_steps`` steps, as rlfast's DQN counts epsilon."""

    def __init__(self, initial: float, final: float, learning_starts: int, anneal_steps: int,
                 total: int) -> None:
        self.initial, self.final = initial, final
        self.learning_starts, self.anneal_steps, self.total = (learning_starts,
                                                               max(1, anneal_steps), total)

    def __call__(self, progress_remaining: float) -> float:
        step = (1.0 - progress_remaining) * self.total
        done = min(1.0, max(0.0, (step - self.learning_starts) / self.anneal_steps))
        return self.initial + (self.final - self.initial) * done


def child_sb3(spec: dict) -> dict:
    """Train SB3's DQN as ``spec`` says (``game``, ``seed``, ``log_every``, ``device``,
    ``settings``: ``sb3_settings``'s output) and return its figures."""
    import warnings

    import gymnasium as gym
    import torch
    from stable_baselines3 import DQN
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.monitor import Monitor
    from stable_baselines3.common.torch_layers import BaseFeaturesExtractor

    import minatar.gym

    class MinAtarCNN(BaseFeaturesExtractor):
        """The MinAtar paper's trunk on SB3's (B, 10, 10, C) observations: channels first,
        conv 16 3x3 stride 1 (no padding), ReLU, flatten, fc 128, ReLU."""

        def __init__(self, observation_space, features_dim: int = 128) -> None:
            super().__init__(observation_space, features_dim)
            height, width, channels = observation_space.shape
            self.conv = torch.nn.Conv2d(channels, 16, kernel_size=3, stride=1)
            self.fc = torch.nn.Linear(16 * (height - 2) * (width - 2), features_dim)

        def forward(self, observations: torch.Tensor) -> torch.Tensor:
            x = torch.relu(self.conv(observations.permute(0, 3, 1, 2)))
            return torch.relu(self.fc(x.flatten(1)))

    class Curve(BaseCallback):
        """The mean return of the last ``WINDOW`` episodes every ``log_every`` steps."""

        def __init__(self, log_every: int) -> None:
            super().__init__()
            self.log_every, self.window, self.points = log_every, ReturnWindow(), []

        def _on_step(self) -> bool:
            for info in self.locals["infos"]:
                if "episode" in info:
                    self.window.add(info["episode"]["r"])
            if self.num_timesteps % self.log_every == 0:
                self.points.append([self.num_timesteps, self.window.mean(), None])
            return True

    settings = spec["settings"]
    if settings["torch_threads"]:
        torch.set_num_threads(settings["torch_threads"])
    minatar.gym.register_envs()
    with warnings.catch_warnings():  # gymnasium calls -v0 out of date: we want its action set
        warnings.simplefilter("ignore", DeprecationWarning)
        env = gym.make(gym_id(spec["game"]), max_episode_steps=settings["horizon"],
                       **settings["env"])
    kwargs = dict(settings["dqn"])
    kwargs["optimizer_class"] = getattr(torch.optim, kwargs.pop("optimizer"))
    policy_kwargs = dict(features_extractor_class=MinAtarCNN, net_arch=[],
                         optimizer_class=kwargs.pop("optimizer_class"),
                         optimizer_kwargs=kwargs.pop("optimizer_kwargs"))
    model = DQN("MlpPolicy", Monitor(env), policy_kwargs=policy_kwargs, seed=spec["seed"],
                device=spec["device"], verbose=0, **kwargs)
    steps = settings["steps"]
    model.exploration_schedule = EpsilonAfterLearningStarts(
        kwargs["exploration_initial_eps"], kwargs["exploration_final_eps"],
        kwargs["learning_starts"], settings["eps_steps"], steps)
    curve = Curve(spec["log_every"])
    model.learn(total_timesteps=steps, callback=curve)
    if not curve.points or curve.points[-1][0] != model.num_timesteps:
        curve.points.append([model.num_timesteps, curve.window.mean(), None])
    env.close()
    return dict(steps=model.num_timesteps, eval_s=0.0, final_return=curve.window.mean(),
                curve=curve.points, torch_threads=torch.get_num_threads())


# ---- the parent ------------------------------------------------------------------------------

def _timed_run(cmd: list[str], output_path: str,
               timeout: float | None) -> tuple[int | None, float, float]:
    """Run ``cmd`` in its own session, its output into ``output_path``: (exit status, or None
    if stopped on timeout; wall seconds; CPU seconds of it and every process it waited for).
    On timeout or Ctrl-C its whole process group is stopped."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_before = usage.ru_utime + usage.ru_stime
    start = time.perf_counter()
    with open(output_path, "w") as out:
        returncode = run_process(cmd, timeout, output=out)[0]
    wall = time.perf_counter() - start
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return returncode, wall, usage.ru_utime + usage.ru_stime - cpu_before


def _tail(path: str, chars: int = 3000) -> str:
    with open(path, errors="replace") as f:
        return f.read()[-chars:]


def run_contender(name: str, game: str, seed: int, args: argparse.Namespace,
                  sb3: dict) -> dict:
    """One run of contender ``name`` on ``game``: its figures, or RuntimeError with the tail
    of its output."""
    work = tempfile.mkdtemp(prefix="rlfast_bench_minatar_")
    try:
        output = os.path.join(work, "output.txt")
        algo = CONTENDERS[name][0]
        if algo is not None:
            log_dir = os.path.join(work, "run")
            cmd = rlfast_command(algo, game, args.steps, seed, log_dir, args)
        else:
            spec = dict(game=game, seed=seed, log_every=args.log_every, device=args.device,
                        settings=sb3)
            cmd = [sys.executable, SCRIPT, "--child", json.dumps(spec)]
        returncode, wall, cpu = _timed_run(cmd, output, args.timeout)
        if returncode != 0:
            why = "timed out" if returncode is None else f"exit {returncode}"
            raise RuntimeError(f"{name} on {game} ({why}):\n{_tail(output)}")
        if algo is not None:
            column = "ReturnAverage" if args.no_eval else "Diagnostics/TrainReturnWindow"
            try:
                figures = read_rlfast_progress(os.path.join(log_dir, "progress.csv"), column)
            except (OSError, ValueError) as error:
                raise RuntimeError(f"{name} on {game}: {error}:\n{_tail(output)}") from None
        else:
            with open(output) as f:
                figures = parse_result(f"{name} on {game}", returncode, f.read())
    finally:
        shutil.rmtree(work, ignore_errors=True)
    train_s = wall - figures["eval_s"]
    return dict(figures, seed=seed, wall_s=wall, cpu_s=cpu,
                steps_per_s=figures["steps"] / train_s if train_s > 0 else None)


def _cell(value: float | None, fmt: str, suffix: str = "") -> str:
    return "n/a" if value is None else format(value, fmt) + suffix


def print_table(game: str, names: list[str], summaries: dict, status: dict) -> None:
    rows = []
    for name in names:
        s = summaries.get(name)
        if s is None:
            rows.append([name, 0, status.get(name, "no figures")] + [""] * 5)
            continue
        rows.append([name, s["rounds"], _cell(s["wall_s"], ".1f"), _cell(s["eval_s"], ".1f"),
                     _cell(s["steps_per_s"], ",.0f"), _cell(s["cpu_s"], ".1f"),
                     _cell(s["final_return"], ".2f"), _cell(s["vs_baseline"], ".2f", "x")])
    print(f"\nminatar:{game}")
    print(markdown_table(["contender", "rounds", "wall s", "eval s", "steps/s", "CPU s",
                          "final return", f"wall vs {BASELINE}"], rows))


def parse_args(argv: list[str] | None = None) -> tuple[argparse.ArgumentParser,
                                                       argparse.Namespace]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--games", nargs="+", default=["breakout", "space_invaders"],
                        choices=GAMES, metavar="GAME", help="of: " + " ".join(GAMES))
    parser.add_argument("--steps", type=int, default=None,
                        help=f"env steps per run (default 2000000; --dry-run "
                             f"{DRY_RUN['steps']})")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0, help="round r trains with seed + r")
    parser.add_argument("--contenders", nargs="+", default=DEFAULT_CONTENDERS,
                        choices=list(CONTENDERS), metavar="NAME",
                        help="of: " + " ".join(CONTENDERS))
    parser.add_argument("--log-every", type=int, default=None,
                        help="steps between curve points (default 20000; --dry-run "
                             f"{DRY_RUN['log_every']})")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                        help="where both learners compute (default cpu)")
    parser.add_argument("--no-eval", action="store_true",
                        help="turn off rlfast's periodic evaluation (sampler.eval_n_envs=0)")
    parser.add_argument("--dry-run", action="store_true",
                        help="a tiny budget on both sides, to check the plumbing")
    parser.add_argument("--timeout", type=float, default=None,
                        help="seconds before a run is stopped and counted failed (default: none)")
    parser.add_argument("--out", default=None, help="write every figure here as JSON")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.steps is None:
        args.steps = DRY_RUN["steps"] if args.dry_run else 2_000_000
    if args.log_every is None:
        args.log_every = DRY_RUN["log_every"] if args.dry_run else 20_000
    return parser, args


def check_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """A one-line error (exit status 2) for settings that cannot run here."""
    if args.steps < 1 or args.rounds < 1 or args.log_every < 1:
        parser.error(f"--steps, --rounds and --log-every must be >= 1, got {args.steps}, "
                     f"{args.rounds}, {args.log_every}")
    if "sb3-dqn" in args.contenders and importlib.util.find_spec("stable_baselines3") is None:
        parser.error("sb3-dqn needs stable-baselines3: pip install -e '.[bench]'")
    if args.device == "cuda":
        import torch
        if not torch.cuda.is_available():
            parser.error("--device cuda needs a GPU")


def measure(args: argparse.Namespace, names: list[str], sb3: dict) -> tuple[dict, dict]:
    """Every contender on every game, interleaved over the rounds: (the runs by game and
    contender, the status of those that failed: left out of the later rounds)."""
    runs = {game: {name: [] for name in names} for game in args.games}
    status: dict[str, dict[str, str]] = {game: {} for game in args.games}
    for round_, order in interleave(names, args.rounds):
        for game in args.games:
            for name in order:
                if name in status[game]:
                    continue
                try:
                    run = run_contender(name, game, args.seed + round_, args, sb3[game])
                except RuntimeError as error:
                    status[game][name] = "failed"
                    print(f"round {round_ + 1}: {game}: FAILED {error}", file=sys.stderr,
                          flush=True)
                    print(f"round {round_ + 1}: {game}: {name}: failed (output on stderr)",
                          flush=True)
                    continue
                runs[game][name].append(run)
                print(f"round {round_ + 1}: {game}: {name}: {run['steps']:,} steps in "
                      f"{run['wall_s']:.1f} s (eval {run['eval_s']:.1f} s), "
                      f"{_cell(run['steps_per_s'], ',.0f')} steps/s, CPU {run['cpu_s']:.1f} s, "
                      f"return {_cell(run['final_return'], '.2f')}", flush=True)
    return runs, status


def main(argv: list[str] | None = None) -> None:
    sb3_log_dir()  # SB3's children log nowhere lasting
    parser, args = parse_args(argv)
    if args.child:
        print_result(child_sb3(json.loads(args.child)))
        return
    check_args(parser, args)
    names = list(dict.fromkeys(args.contenders))
    from rlfast.experiments.presets import get_preset

    sb3 = {game: sb3_settings(get_preset("dqn", f"minatar:{game}"), args.steps, args.dry_run)
           for game in args.games}
    print(f"Machine: {machine()}", flush=True)
    print(f"MinAtar, {args.steps:,} env steps per run, {args.rounds} round(s), device "
          f"{args.device}{', dry run' if args.dry_run else ''}", flush=True)
    runs, status = measure(args, names, sb3)
    summaries = {}
    for game in args.games:
        base = runs[game].get(BASELINE)
        base_train = summarise(base)["train_s"] if base else None
        summaries[game] = {name: summarise(r, base_train)
                           for name, r in runs[game].items() if r}
        print_table(game, names, summaries[game], status[game])
    print(f"\nwall s: the child process, start to exit; eval s: rlfast's periodic evaluations "
          f"in it (left out of steps/s and of the ratio); final return: mean of the last "
          f"{WINDOW} training episodes; medians over rounds.")
    if args.out:
        settings = {k: v for k, v in vars(args).items() if k != "child"}
        write_json(args.out, dict(settings=settings, sb3_settings=sb3,
                                  contenders={n: CONTENDERS[n][1] for n in names}, runs=runs,
                                  summaries=summaries, status=status))
    if any(status.values()):
        sys.exit(1)


if __name__ == "__main__":
    main()
