#!/usr/bin/env python
"""End-to-end Atari training throughput: env steps per second of whole training (sampling and
learning) of rlfast against Stable-Baselines3 and a CleanRL-style PPO on EnvPool, on Pong.

Contenders, side by side in one run, interleaved over ``--rounds`` rounds (the order reversed
every other round, so that drift in the machine's load hits every contender alike):

PPO, one workload for all: ``--envs`` environments (8) x ``--steps-per-env`` steps (128) per
batch, 4 epochs of 4 minibatches, lr 2.5e-4 (linearly annealed, over a horizon so long that it
stays put while measured), clip 0.1, gamma 0.99, GAE lambda 0.95, entropy 0.01, value 0.5,
gradient-norm clip 0.5; frame skip 4, 4 stacked 84x84 grayscale frames, a life lost ends the
training episode, rewards clipped, no sticky actions; the Nature CNN (conv 32 8x8/4, 64 4x4/2,
64 3x3/1, no padding, 3136 features, fc 512, ReLU, policy and value heads).

- ``rlfast-cpu``, ``rlfast-serial``, ``rlfast-gpu``, ``rlfast-alternating``: the ``ppo``
  preset on ``atari:pong`` with the sampler of that name and the affinity ``build_experiment``
  picks (what ``rlfast train`` runs), its ``cuda_idx`` set by ``--device``: with ``cuda`` the
  master's agent (training; the gpu/alternating samplers' action server too) is on GPU 0,
  with ``cpu`` (the default) everything runs on the CPU, the gpu/alternating samplers
  serving actions from the master's CPU;
- ``rlfast-overlap``: cpu sampler, ``runner.overlap=True`` (sampling the next batch while the
  algorithm trains on the last);
- ``rlfast-compile``: cpu sampler, ``algo.compile=True`` (torch.compile and CUDA-graph capture
  of the update); ``rlfast-compile-overlap``: both options;
- ``rlfast-<sampler>-overlap``, ``rlfast-<sampler>-compile``, ``rlfast-<sampler>-compile-overlap``
  for the gpu and alternating samplers: the same options on those samplers (not run by
  default);
- ``rlfast-bf16``: cpu sampler, ``agent.autocast="bf16"``;
- ``rlfast-preset-net``: cpu sampler with the ``ppo`` Atari preset's own network, rlpyt's
  policy-gradient convolutions (16 8x8/4, 32 4x4/2; ``A2C_CONV``), not the Nature CNN: the
  configuration that ``scripts/reproduce.py``'s Pong row trains, for its time to score;
- ``sb3``: Stable-Baselines3 PPO, ``CnnPolicy``, ``SubprocVecEnv`` of ``make_atari_env`` with
  ``VecFrameStack(4)``, ``n_steps`` = steps per env, 4 minibatches, 4 epochs;
- ``cleanrl-envpool``: a compact PPO loop written here after CleanRL's ``ppo_atari_envpool``
  algorithm (EnvPool's Pong-v5 with its own 84x84x4 stacking, an ``nn.Sequential`` Nature CNN
  with orthogonal init, per-step inference under ``no_grad``, GAE, advantage normalization,
  clipped value loss, Adam eps 1e-5); torch's default threads, as CleanRL leaves them;
- ``cleanrl-alevec``: the same loop on ale-py's ``AtariVectorEnv`` (84x84 grayscale, 4 stacked
  frames, frame skip 4, 30 no-op starts, a lost life ends the episode, rewards clipped, no
  sticky actions: EnvPool's settings), which needs no package beyond rlfast's;
- ``leanrl-alevec``: that loop with LeanRL's published method: torch.compile of the policy
  step and of the loss, CUDA graphs of the policy step, of GAE and of the whole update step,
  a capturable fused Adam with the learning rate as a device tensor, uint8 frames, no host
  read in the loop but the actions (``--leanrl-compile``: auto = compile on CUDA only; on the
  CPU there are no graphs). Both loops: scripts/bench/_cleanrl.py.

DQN (its own table): ``rlfast-dqn`` (``dqn`` preset, synchronous runner, cpu sampler),
``rlfast-dqn-async`` (``--runner async``: sampler process and optimizer overlapping, the
preset's throttle holding the replay ratio) and ``sb3-dqn`` (SB3 DQN ``CnnPolicy`` on a
``SubprocVecEnv``), all with the Nature CNN above, batch 32, the same replay size
(``--dqn-replay-size``) and learning start (``--dqn-learning-starts``) and the same number of
gradient updates per env step: SB3 trains every ``batch_T`` vector steps (rlfast's sampler
iteration) with as many gradient steps as rlfast's DQN makes per iteration.

``--random-agent`` (or the contender ``rlfast-random``) adds the rlfast cpu sampler alone with
a uniformly random agent on the PPO environments (no model, no learning): the ceiling of what
sampling allows, to which each rlfast PPO row is compared (its share of it).

Every run is one child process (``--child NAME``; ``--quick`` forks it from the parent,
which has imported torch and rlfast once: a smoke test's figures). Its clock starts at the
first iteration boundary after the first gradient update; the measurement window opens at
the first boundary ``--warmup`` s later and closes at the first boundary ``--seconds``
after that (boundaries:
rlfast's log rows, one per PPO iteration and about every 256 env steps for DQN (64 with
``--quick``); SB3's
rollout starts, every ``n_steps`` (PPO) or ``train_freq`` (DQN) vector steps; the CleanRL
loop's iterations), so model construction, environment start-up and the first update are
never timed. Env steps/s counts agent steps
(frames / 4) of every environment; updates/s gradient steps. Medians over rounds. Each round's
line also gives the CPU the run used over its window (in cores, its processes and threads)
and the CPU other processes took meanwhile: on a shared machine, rounds with much of the
latter are suspect (the spread over rounds is printed below the tables).

A contender whose package is missing (stable_baselines3, envpool) is reported as skipped, as
are the ``overlap``, ``compile`` and ``bf16`` contenders while this rlfast lacks the option
(their child fails with the TypeError about the unexpected keyword). Each figure also carries
the wall-clock times of its window (``t_start``, ``t_end``), which scripts/bench/bench_gpu.sh
lines up with the GPU utilisation it samples.

Usage: python scripts/bench/bench_atari_train.py [--rounds 3] [--seconds 60] [--warmup 20]
           [--envs 8] [--steps-per-env 128] [--device cpu|cuda] [--contenders NAME ...]
           [--random-agent] [--leanrl-compile auto|on|off] [--quick] [--json OUT]
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import RESULT_TAG, interleave, machine, machine_busy_seconds  # noqa: E402
from _common import Window as BaseWindow  # noqa: E402
from _common import (markdown_table, medians, preload_child_modules, print_result,  # noqa: E402
                     ratio_cell, run_forked, run_process, sb3_log_dir, write_json)

SCRIPT = os.path.abspath(__file__)
SKIP_TAG = "BENCH_ATARI_TRAIN_SKIP "
ENV = "atari:pong"

# name: (table, description, python package it needs beyond rlfast's)
CONTENDERS = {
    "rlfast-cpu": ("ppo", "rlfast PPO, cpu sampler (the default)", None),
    "rlfast-serial": ("ppo", "rlfast PPO, serial sampler", None),
    "rlfast-gpu": ("ppo", "rlfast PPO, gpu sampler (action server in the master)", None),
    "rlfast-alternating": ("ppo", "rlfast PPO, alternating sampler", None),
    "rlfast-overlap": ("ppo", "rlfast PPO, cpu sampler, runner.overlap=True", None),
    "rlfast-compile": ("ppo", "rlfast PPO, cpu sampler, algo.compile=True", None),
    "rlfast-compile-overlap": ("ppo", "rlfast PPO, cpu sampler, algo.compile=True, "
                               "runner.overlap=True", None),
    "rlfast-bf16": ("ppo", "rlfast PPO, cpu sampler, agent.autocast='bf16'", None),
    "rlfast-preset-net": ("ppo", "rlfast PPO, cpu sampler, the preset's network (rlpyt's "
                          "policy-gradient convolutions, not the Nature CNN)", None),
    "sb3": ("ppo", "Stable-Baselines3 PPO, CnnPolicy, SubprocVecEnv", "stable_baselines3"),
    "cleanrl-envpool": ("ppo", "CleanRL-style PPO loop on EnvPool", "envpool"),
    "cleanrl-alevec": ("ppo", "CleanRL-style PPO loop on ale-py's AtariVectorEnv", None),
    "leanrl-alevec": ("ppo", "LeanRL-style PPO loop (torch.compile, CUDA graphs, capturable "
                      "fused Adam) on ale-py's AtariVectorEnv", None),
    "rlfast-dqn": ("dqn", "rlfast DQN, synchronous runner, cpu sampler", None),
    "rlfast-dqn-async": ("dqn", "rlfast DQN, asynchronous runner (throttled), cpu sampler",
                         None),
    "sb3-dqn": ("dqn", "Stable-Baselines3 DQN, CnnPolicy, SubprocVecEnv", "stable_baselines3"),
    "rlfast-random": ("random", "rlfast cpu sampler, random agent, no learning", None),
}
DEFAULT_CONTENDERS = [n for n, c in CONTENDERS.items() if c[0] != "random"]
# rlfast PPO contenders: name -> (sampler, options); the options are "overlap", "compile" and
# "bf16". The same options on the gpu and alternating samplers are contenders too, run only
# when named (bench_gpu.sh names them).
RLFAST_PPO = {"rlfast-cpu": ("cpu", ()), "rlfast-serial": ("serial", ()),
              "rlfast-gpu": ("gpu", ()), "rlfast-alternating": ("alternating", ()),
              "rlfast-overlap": ("cpu", ("overlap",)), "rlfast-compile": ("cpu", ("compile",)),
              "rlfast-compile-overlap": ("cpu", ("compile", "overlap")),
              "rlfast-bf16": ("cpu", ("bf16",)), "rlfast-preset-net": ("cpu", ("preset-net",)),
              "rlfast-random": ("cpu", ())}
for _sampler in ("gpu", "alternating"):
    for _options in (("overlap",), ("compile",), ("compile", "overlap")):
        _name = f"rlfast-{_sampler}-" + "-".join(_options)
        RLFAST_PPO[_name] = (_sampler, _options)
        CONTENDERS[_name] = ("ppo", f"rlfast PPO, {_sampler} sampler, "
                             + ", ".join({"overlap": "runner.overlap=True",
                                          "compile": "algo.compile=True"}[o]
                                         for o in _options), None)
RLFAST_PPO_SAMPLER = {name: sampler for name, (sampler, _) in RLFAST_PPO.items()}
# The options being added to rlfast: a child failing on them is "not available", not an error.
OPTION_MARKERS = {"overlap": "unexpected keyword argument 'overlap'",
                  "compile": "unexpected keyword argument 'compile'",
                  "bf16": "unexpected keyword argument 'autocast'"}
UNAVAILABLE_MARKERS = {name: [OPTION_MARKERS[o] for o in options if o in OPTION_MARKERS]
                       for name, (_, options) in RLFAST_PPO.items() if options}

# The one PPO workload (rlfast's algo keyword names; the peers get the same values).
PPO_HP = dict(discount=0.99, learning_rate=2.5e-4, value_loss_coeff=0.5,
              entropy_loss_coeff=0.01, clip_grad_norm=0.5, gae_lambda=0.95, minibatches=4,
              epochs=4, ratio_clip=0.1, linear_lr_schedule=True, normalize_advantage=True)
NATURE_CNN = dict(channels=(32, 64, 64), kernel_sizes=(8, 4, 3), strides=(4, 2, 1),
                  paddings=(0, 0, 0))
HUGE_STEPS = 10 ** 12  # "train forever": the window ends the run


# ---- the measurement window ------------------------------------------------------------------

def _tree_cpu_seconds() -> float:
    """CPU seconds of this process and its descendants: over the window, the machine's busy
    seconds less these are the load other processes put on the machine."""
    import psutil

    tree = 0.0
    me = psutil.Process()
    for proc in [me] + me.children(recursive=True):
        try:
            t = proc.cpu_times()
            tree += t.user + t.system
        except psutil.Error:
            pass
    return tree


class Window(BaseWindow):
    """The shared measurement window (its clock starts at the first boundary with an update;
    with ``settle=0`` at the first boundary), with the CPU this run and the rest of the
    machine used over it, its figures under this benchmark's names."""

    def point(self, steps: int, updates: int) -> dict:
        return dict(super().point(steps, updates), busy=machine_busy_seconds(),
                    own=_tree_cpu_seconds())

    def result(self) -> dict:
        r = super().result()
        seconds, a, b = r["window_s"], self.start, self.end
        own = b["own"] - a["own"]
        return dict(steps_per_s=r["env_sps"], updates_per_s=r["ups"], seconds=seconds,
                    steps=r["steps"], updates=r["updates"], cpu_own=own / seconds,
                    cpu_other=max(0.0, (b["busy"] - a["busy"]) - own) / seconds,
                    t_start=r["t_start"], t_end=r["t_end"])


# ---- rlfast --------------------------------------------------------------------------------------

def _rlfast_affinity(built, args: argparse.Namespace) -> dict:
    """The affinity ``build_experiment`` picked; ``--device`` decides where the master's agent
    lives (the default already puts the gpu/alternating samplers' agent on GPU 0 when CUDA is
    there; ``--device cuda`` also trains the cpu/serial samplers' agent there)."""
    return dict(built.affinity, cuda_idx=0 if args.device == "cuda" else None)


def _ppo_config(name: str, args: argparse.Namespace) -> dict:
    from rlfast.experiments.presets import get_preset

    config = get_preset("ppo", ENV)
    config["env"]["obs_type"] = "84x84"
    options = RLFAST_PPO[name][1]
    if "preset-net" not in options:  # the Nature CNN of the other contenders
        config["agent"]["model_kwargs"] = dict(fc_sizes=512, **NATURE_CNN)
    config["sampler"].update(batch_T=args.steps_per_env, batch_B=args.envs, eval_n_envs=0,
                             eval_max_steps=None, max_decorrelation_steps=0)
    config["algo"].update(PPO_HP)
    # Each option on where named and off where not, whatever the preset's default on this
    # machine; an option this rlfast lacks is set only where named (that child then fails as
    # "not available").
    for section, key, on, off in (("runner", "overlap", True, False),
                                  ("algo", "compile", True, False),
                                  ("agent", "autocast", "bf16", None)):
        wanted = {"autocast": "bf16"}.get(key, key) in options
        if wanted or key in config[section]:
            config[section][key] = on if wanted else off
    return config


def _dqn_settings(args: argparse.Namespace) -> dict:
    """The rlfast DQN config of the bench and what SB3 must do to match its replay ratio."""
    from rlfast.experiments.presets import get_preset

    config = get_preset("dqn", ENV)
    config["env"]["obs_type"] = "84x84"
    config["agent"]["model_kwargs"] = dict(config["agent"].get("model_kwargs", {}),
                                           fc_sizes=512, dueling=False, **NATURE_CNN)
    config["sampler"].update(batch_B=args.dqn_envs, eval_n_envs=0, eval_max_steps=None,
                             max_decorrelation_steps=0)
    config["algo"].update(min_steps_learn=args.dqn_learning_starts,
                          replay_size=args.dqn_replay_size)
    algo = config["algo"]
    T, B = config["sampler"]["batch_T"], config["sampler"]["batch_B"]
    # DQN.initialize: updates per sampler iteration of T x B env steps.
    per_itr = max(1, round(algo["replay_ratio"] * T * B / algo["batch_size"]))
    return dict(config=config, batch_T=T, batch_B=B, updates_per_itr=per_itr,
                updates_per_step=per_itr / (T * B), batch_size=algo["batch_size"],
                replay_ratio=algo["replay_ratio"],
                target_update_steps=round(algo["target_update_interval"] * T * B / per_itr),
                learning_rate=algo["learning_rate"], discount=algo["discount"],
                clip_grad_norm=algo["clip_grad_norm"], eps_steps=algo["eps_steps"],
                eps_final=config["agent"]["eps_final"])


def _timed_runner(base: type, window: Window) -> type:
    class Timed(base):
        """Stops at the first log row after the measurement window closed."""

        def log_and_snapshot(self, itr: int) -> None:
            super().log_and_snapshot(itr)
            if window.observe((itr + 1) * self.itr_batch_size, self.algo.update_counter):
                self.stop_requested = True

    return Timed


def _train_rlfast(runner) -> None:
    from rlfast.utils.logging import logger_context

    with tempfile.TemporaryDirectory() as log_dir:
        with logger_context(log_dir, 0, "bench_atari_train", {}, snapshot_mode="none",
                            override_prefix=True):
            runner.train()


def child_rlfast_ppo(name: str, args: argparse.Namespace) -> dict:
    from rlfast.experiments.presets import build_experiment
    from rlfast.runners import MinibatchRl

    config = _ppo_config(name, args)
    sampler = RLFAST_PPO_SAMPLER[name]
    built = build_experiment("ppo", ENV, config, sampler=sampler, seed=args.seed)
    window = Window(args.seconds, args.warmup)
    extra = {k: v for k, v in config["runner"].items()
             if k not in ("n_steps", "log_interval_steps", "stop_return")}
    batch = args.envs * args.steps_per_env
    runner = _timed_runner(MinibatchRl, window)(
        algo=built.algo, agent=built.agent, sampler=built.sampler, seed=args.seed,
        affinity=_rlfast_affinity(built, args), n_steps=HUGE_STEPS, log_interval_steps=batch,
        progress_bar=False, **extra)
    _train_rlfast(runner)
    return dict(window.result(), envs=args.envs, sampler=sampler, **extra)


def child_rlfast_random(args: argparse.Namespace) -> dict:
    """The cpu sampler with a random agent: sampling alone, as bench_sampler.py
    measures it, on the PPO contenders' environments and affinity."""
    from rlfast.agents import RandomAgent
    from rlfast.experiments.presets import build_experiment

    built = build_experiment("ppo", ENV, _ppo_config("rlfast-cpu", args), sampler="cpu",
                             seed=args.seed)
    sampler, agent = built.sampler, RandomAgent()
    affinity = _rlfast_affinity(built, args)
    sampler.initialize(agent=agent, affinity=affinity, seed=args.seed + 1)
    agent.to_device(affinity.get("cuda_idx"))
    window = Window(args.seconds, args.warmup, settle=0)
    try:
        itr = 0
        while True:
            agent.sample_mode(itr)
            sampler.obtain_samples(itr)
            itr += 1
            if window.observe(itr * sampler.batch_spec.size, 0):
                break
    finally:
        sampler.shutdown()
    return dict(window.result(), envs=args.envs)


def child_rlfast_dqn(name: str, args: argparse.Namespace) -> dict:
    from rlfast.experiments.placement import default_async_affinity
    from rlfast.experiments.presets import build_experiment
    from rlfast.runners import AsyncRl, MinibatchRl

    settings = _dqn_settings(args)
    config = settings["config"]
    asynchronous = name == "rlfast-dqn-async"
    built = build_experiment("dqn", ENV, config, sampler="cpu", seed=args.seed,
                             runner="async" if asynchronous else "sync")
    window = Window(args.seconds, args.warmup)
    batch = settings["batch_T"] * settings["batch_B"]
    common = dict(algo=built.algo, agent=built.agent, sampler=built.sampler, seed=args.seed,
                  n_steps=HUGE_STEPS,
                  log_interval_steps=batch * max(1, (64 if args.quick else 256) // batch),
                  progress_bar=False)
    if asynchronous:
        affinity = default_async_affinity("cpu")  # what build_experiment gave AsyncRlEval
        if args.device != "cuda":
            affinity["optimizer"][0]["cuda_idx"] = None
        runner = _timed_runner(AsyncRl, window)(affinity=affinity, **config["async"],
                                                **common)
    else:
        runner = _timed_runner(MinibatchRl, window)(affinity=_rlfast_affinity(built, args),
                                                    **common)
    _train_rlfast(runner)
    return dict(window.result(), envs=settings["batch_B"],
                updates_per_itr=built.algo.updates_per_optimize)


# ---- Stable-Baselines3 ------------------------------------------------------------------------

def _sb3_pong(**kwargs):
    """PongNoFrameskip-v4 (frame skip 1, no sticky actions: SB3's AtariWrapper skips 4),
    registered in whichever process makes it (SubprocVecEnv's workers)."""
    import ale_py
    import gymnasium

    gymnasium.register_envs(ale_py)
    return gymnasium.make("PongNoFrameskip-v4", **kwargs)


def _sb3_env(n_envs: int, seed: int):
    from stable_baselines3.common.env_util import make_atari_env
    from stable_baselines3.common.vec_env import SubprocVecEnv, VecFrameStack

    # AtariWrapper: 30 no-op starts, max-and-skip 4, end of life = end of episode, fire reset,
    # 84x84 grayscale, rewards clipped to their sign.
    env = make_atari_env(_sb3_pong, n_envs=n_envs, seed=seed, vec_env_cls=SubprocVecEnv,
                         wrapper_kwargs=dict(terminal_on_life_loss=True, clip_reward=True))
    return VecFrameStack(env, n_stack=4)


def _sb3_clock(window: Window, updates_of):
    """An SB3 callback feeding the window at rollout starts (iteration boundaries: PPO's
    rollout of ``n_steps``, DQN's ``train_freq`` steps, the previous training done); it stops
    training once the window closed."""
    from stable_baselines3.common.callbacks import BaseCallback

    class Clock(BaseCallback):
        closed = False

        def _on_rollout_start(self) -> None:
            self.closed = window.observe(self.model.num_timesteps, updates_of(self.model))

        def _on_step(self) -> bool:
            return not self.closed

    return Clock()


def child_sb3_ppo(args: argparse.Namespace) -> dict:
    import torch
    from stable_baselines3 import PPO

    n_envs, T = args.envs, args.steps_per_env
    batch = n_envs * T
    env = _sb3_env(n_envs, args.seed)
    lr = PPO_HP["learning_rate"]
    model = PPO("CnnPolicy", env, learning_rate=lambda remaining: lr * remaining,
                n_steps=T, batch_size=batch // PPO_HP["minibatches"],
                n_epochs=PPO_HP["epochs"], gamma=PPO_HP["discount"],
                gae_lambda=PPO_HP["gae_lambda"], clip_range=PPO_HP["ratio_clip"],
                ent_coef=PPO_HP["entropy_loss_coeff"], vf_coef=PPO_HP["value_loss_coeff"],
                max_grad_norm=PPO_HP["clip_grad_norm"], normalize_advantage=True,
                seed=args.seed, device=args.device, verbose=0)
    window = Window(args.seconds, args.warmup)
    per_itr = PPO_HP["epochs"] * PPO_HP["minibatches"]
    # SB3 counts epochs in _n_updates; gradient steps are epochs x minibatches.
    clock = _sb3_clock(window, lambda m: m._n_updates // PPO_HP["epochs"] * per_itr)
    try:
        model.learn(total_timesteps=HUGE_STEPS, callback=clock)
    finally:
        env.close()
    return dict(window.result(), envs=n_envs, torch_threads=torch.get_num_threads())


def child_sb3_dqn(args: argparse.Namespace) -> dict:
    from stable_baselines3 import DQN

    s = _dqn_settings(args)
    env = _sb3_env(s["batch_B"], args.seed)
    model = DQN("CnnPolicy", env, learning_rate=s["learning_rate"],
                buffer_size=args.dqn_replay_size, learning_starts=args.dqn_learning_starts,
                batch_size=s["batch_size"], gamma=s["discount"],
                train_freq=(s["batch_T"], "step"), gradient_steps=s["updates_per_itr"],
                target_update_interval=s["target_update_steps"],
                exploration_fraction=s["eps_steps"] / HUGE_STEPS,
                exploration_final_eps=s["eps_final"], max_grad_norm=s["clip_grad_norm"],
                # one copy of each frame stack instead of two (SB3's memory saver)
                optimize_memory_usage=True,
                replay_buffer_kwargs=dict(handle_timeout_termination=False),
                seed=args.seed, device=args.device, verbose=0)
    window = Window(args.seconds, args.warmup)
    clock = _sb3_clock(window, lambda m: m._n_updates)
    try:
        model.learn(total_timesteps=HUGE_STEPS, callback=clock)
    finally:
        env.close()
    return dict(window.result(), envs=s["batch_B"])


# ---- CleanRL-style PPO on EnvPool and on AtariVectorEnv, LeanRL-style PPO ------------------------

def _torch_device(args: argparse.Namespace):
    import torch

    return torch.device("cuda" if args.device == "cuda" else "cpu")


def child_cleanrl_envpool(args: argparse.Namespace) -> dict:
    """PPO as CleanRL's ppo_atari_envpool runs it (_cleanrl.py) on EnvPool's
    Pong-v5 with its own 84x84x4 stacking."""
    import envpool
    import torch
    from _cleanrl import cleanrl_ppo

    envs = envpool.make("Pong-v5", env_type="gymnasium", num_envs=args.envs, seed=args.seed,
                        episodic_life=True, reward_clip=True, repeat_action_probability=0.0,
                        frame_skip=4, stack_num=4, img_height=84, img_width=84,
                        gray_scale=True, noop_max=30)
    window = Window(args.seconds, args.warmup)
    try:
        cleanrl_ppo(envs, args.envs, args.steps_per_env, PPO_HP, _torch_device(args),
                    window.observe, seed=args.seed, seed_reset=False)
    finally:
        envs.close()
    return dict(window.result(), envs=args.envs, torch_threads=torch.get_num_threads())


def child_alevec(name: str, args: argparse.Namespace) -> dict:
    """``cleanrl-alevec`` / ``leanrl-alevec``: the CleanRL loop or its LeanRL-style version
    (_cleanrl.py) on ale-py's AtariVectorEnv, its threads one per core."""
    import torch
    from _cleanrl import cleanrl_ppo, leanrl_ppo, make_ale_vector_env

    envs = make_ale_vector_env(args.envs, num_threads=min(args.envs, os.cpu_count() or 1))
    window = Window(args.seconds, args.warmup)
    try:
        if name == "leanrl-alevec":
            ran = leanrl_ppo(envs, args.envs, args.steps_per_env, PPO_HP, _torch_device(args),
                             window.observe, seed=args.seed, compile_mode=args.leanrl_compile)
        else:
            ran = cleanrl_ppo(envs, args.envs, args.steps_per_env, PPO_HP, _torch_device(args),
                              window.observe, seed=args.seed)
    finally:
        envs.close()
    ran = {k: v for k, v in ran.items() if k not in ("steps", "updates")}
    return dict(window.result(), envs=args.envs, torch_threads=torch.get_num_threads(), **ran)


# ---- the child ------------------------------------------------------------------------------

def run_child(name: str, args: argparse.Namespace) -> None:
    need = CONTENDERS[name][2]
    if need is not None:
        try:
            importlib.import_module(need)
        except ImportError as error:
            print(SKIP_TAG + f"{need} not importable ({error})", flush=True)
            return
    if name == "rlfast-random":
        figures = child_rlfast_random(args)
    elif name in RLFAST_PPO_SAMPLER:
        figures = child_rlfast_ppo(name, args)
    elif name in ("rlfast-dqn", "rlfast-dqn-async"):
        figures = child_rlfast_dqn(name, args)
    elif name == "sb3":
        figures = child_sb3_ppo(args)
    elif name == "sb3-dqn":
        figures = child_sb3_dqn(args)
    elif name == "cleanrl-envpool":
        figures = child_cleanrl_envpool(args)
    elif name in ("cleanrl-alevec", "leanrl-alevec"):
        figures = child_alevec(name, args)
    else:
        raise SystemExit(f"unknown contender {name!r}")
    print_result(figures)


# ---- the parent ------------------------------------------------------------------------------

CHILD_ARGS = ("envs", "steps_per_env", "seconds", "warmup", "device", "seed", "dqn_envs",
              "dqn_learning_starts", "dqn_replay_size", "leanrl_compile")


def run_contender(name: str, args: argparse.Namespace,
                  timeout: float | None = None) -> tuple[str, dict | str]:
    """One contender in a fresh child process (its own process group, killed on timeout,
    by default 300 s plus three windows): ``("ok", figures)``, ``("skipped", reason)`` or
    ``("failed", output tail)``. A child killed on timeout after it reported its figures (its
    shut-down was what ran late) counts as ok, with ``shutdown_timeout`` set. The child is a
    new interpreter, or with ``--quick`` a fork of this process, which spares the smoke test
    every child's start-up (imports); the measurements want the former."""
    if timeout is None:
        timeout = 300 + 3 * (args.warmup + args.seconds)
    if args.quick:
        returncode, out, err = run_forked(lambda: run_child(name, args), timeout)
    else:
        cmd = [sys.executable, SCRIPT, "--child", name]
        for key in CHILD_ARGS:
            cmd += ["--" + key.replace("_", "-"), str(getattr(args, key))]
        returncode, out, err = run_process(cmd, timeout, grace=0.0)
    out += err
    if returncode is None:  # killed on timeout
        results = [line for line in out.splitlines() if line.startswith(RESULT_TAG)]
        if results:
            return "ok", dict(json.loads(results[-1][len(RESULT_TAG):]), shutdown_timeout=True)
        return "failed", f"did not finish within {timeout:.0f} s:\n{out[-3000:]}"
    lines = out.splitlines()
    skip = [line for line in lines if line.startswith(SKIP_TAG)]
    if skip:
        return "skipped", skip[-1][len(SKIP_TAG):]
    markers = UNAVAILABLE_MARKERS.get(name, ())
    if returncode != 0 and "TypeError" in out and any(m in out for m in markers):
        return "skipped", "not available"
    results = [line for line in lines if line.startswith(RESULT_TAG)]
    if returncode != 0 or not results:
        return "failed", f"exit {returncode}:\n{out[-3000:]}"
    return "ok", json.loads(results[-1][len(RESULT_TAG):])


def missing_package(name: str) -> str | None:
    need = CONTENDERS[name][2]
    if need is not None and importlib.util.find_spec(need) is None:
        return f"{need} not installed"
    return None


def print_tables(args, names, meds, runs, status) -> None:
    def cell(name):
        if name in meds:
            return f"{meds[name]['steps_per_s']:,.0f}"
        return status.get(name, "no figures")

    def steps(name):
        return meds[name]["steps_per_s"] if name in meds else None

    window = (f"medians of {args.rounds} round(s) of {args.seconds:g} s after {args.warmup:g} s "
              f"warm-up, device {args.device}")
    ppo = [n for n in names if CONTENDERS[n][0] == "ppo"]
    if ppo:
        print(f"\nPPO on Pong, {args.envs} envs x {args.steps_per_env} steps per batch, "
              f"{window}")
        clean, sb3, alevec = steps("cleanrl-envpool"), steps("sb3"), steps("cleanrl-alevec")
        print(markdown_table(
            ["contender", "env steps/s (median)", "rounds", "vs CleanRL+EnvPool", "vs SB3",
             "vs CleanRL+AtariVectorEnv"],
            [[n, cell(n), len(runs[n]), ratio_cell(steps(n), clean), ratio_cell(steps(n), sb3),
              ratio_cell(steps(n), alevec)] for n in ppo]))
    dqn = [n for n in names if CONTENDERS[n][0] == "dqn"]
    if dqn:
        s = _dqn_settings(args)
        print(f"\nDQN on Pong, {s['batch_B']} envs x {s['batch_T']} steps per sampler "
              f"iteration, {window}")
        base, rows = steps("sb3-dqn"), []
        for n in dqn:
            m = meds.get(n)
            upd = (f"{m['updates_per_s'] / m['steps_per_s']:.3f}" if m and m["steps_per_s"]
                   else "n/a")
            rows.append([n, cell(n), len(runs[n]), ratio_cell(steps(n), base), upd])
        print(markdown_table(["contender", "env steps/s (median)", "rounds", "vs SB3 DQN",
                              "updates per env step"], rows))
        print(f"Matched replay ratio: rlfast DQN replay_ratio {s['replay_ratio']:g} x "
              f"{s['batch_B']} envs x {s['batch_T']} steps / batch {s['batch_size']} = "
              f"{s['updates_per_itr']} updates per {s['batch_B'] * s['batch_T']} env steps "
              f"({s['updates_per_step']:.3f}/step); SB3 DQN train_freq={s['batch_T']} vector "
              f"steps x {s['batch_B']} envs, gradient_steps={s['updates_per_itr']}, "
              f"batch_size={s['batch_size']}, target_update_interval="
              f"{s['target_update_steps']} env steps; both learning_starts/min_steps_learn="
              f"{args.dqn_learning_starts}, replay {args.dqn_replay_size:,}")
    if "rlfast-random" in names:
        base = steps("rlfast-random")
        print(f"\nSampling alone (rlfast cpu sampler, random agent, no learning): "
              f"{cell('rlfast-random')} env steps/s")
        if base:
            shares = ", ".join(f"{n} {steps(n) / base:.0%}" for n in ppo
                               if n.startswith("rlfast-") and n in meds)
            print(f"Training throughput as a share of it: {shares}")
    spread = [f"{n} {min(r['steps_per_s'] for r in runs[n]):,.0f}-"
              f"{max(r['steps_per_s'] for r in runs[n]):,.0f}" for n in names
              if n in meds and len(runs[n]) > 1]
    if spread:
        print("\nSpread over rounds (env steps/s, min-max): " + ", ".join(spread))
    print("\nContenders: " + "; ".join(f"{n}: {CONTENDERS[n][1]}" for n in names))


def parse_args(argv: list[str] | None = None) -> tuple[argparse.ArgumentParser,
                                                       argparse.Namespace]:
    """The parser and the arguments, every default filled in (``--quick`` ones where
    asked); _gpu.py builds its contenders' arguments here too."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=None, help="default 3 (--quick: 1)")
    parser.add_argument("--seconds", type=float, default=None, help="default 60 (--quick: 0.2)")
    parser.add_argument("--warmup", type=float, default=None, help="default 20 (--quick: 0)")
    parser.add_argument("--envs", type=int, default=None,
                        help="PPO environments for every contender (default 8, --quick 2)")
    parser.add_argument("--steps-per-env", type=int, default=None,
                        help="PPO steps per env per batch (default 128, --quick 8)")
    parser.add_argument("--dqn-envs", type=int, default=None,
                        help="DQN environments (default: the dqn preset's batch_B, 16; "
                        "--quick 2)")
    parser.add_argument("--dqn-learning-starts", type=int, default=None,
                        help="env steps before DQN learns, both libraries (default 5000; "
                        "--quick 200)")
    parser.add_argument("--dqn-replay-size", type=int, default=None,
                        help="DQN replay size, both libraries (default 50000; --quick 5000)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--leanrl-compile", choices=("auto", "on", "off"), default="auto",
                        help="torch.compile in leanrl-alevec: auto = on CUDA only (default)")
    parser.add_argument("--contenders", nargs="+", default=None, choices=list(CONTENDERS),
                        metavar="NAME", help="a subset of: " + " ".join(CONTENDERS))
    parser.add_argument("--random-agent", action="store_true",
                        help="also measure the rlfast cpu sampler with a random agent")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true",
                        help="tiny batches, one round of a few seconds, every contender "
                             "forked from this process (smoke test)")
    parser.add_argument("--json", default=None, help="also write the figures here")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    q = args.quick
    # --quick: the window is the first whole iteration (or DQN log interval) after the one
    # with the first update, on batches of 2 envs x 8 steps (DQN: 2 envs): fewer processes to
    # start (SB3's SubprocVecEnv, rlfast's workers). A smoke test, not a measurement.
    for key, full, quick in (("rounds", 3, 1), ("seconds", 60.0, 0.2), ("warmup", 20.0, 0.0),
                             ("envs", 8, 2), ("steps_per_env", 128, 8),
                             ("dqn_learning_starts", 5000, 200),
                             ("dqn_replay_size", 50_000, 5000)):
        if getattr(args, key) is None:
            setattr(args, key, quick if q else full)
    if args.dqn_envs is None:
        args.dqn_envs = 2 if q else _preset_dqn_envs()
    return parser, args


def check_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """A one-line error (exit status 2) for settings that cannot run here."""
    if args.rounds < 1 or args.seconds <= 0 or args.warmup < 0:
        parser.error("--rounds must be >= 1, --seconds > 0 and --warmup >= 0")
    if args.envs < 1 or args.steps_per_env < 1 or (args.envs * args.steps_per_env) % 4:
        parser.error("--envs x --steps-per-env must be a positive multiple of 4 "
                     "(4 minibatches)")
    if args.device == "cuda":
        import torch
        if not torch.cuda.is_available():
            parser.error("--device cuda needs a GPU")


def run_rounds(args: argparse.Namespace, names: list[str],
               status: dict[str, str]) -> tuple[dict[str, list[dict]], bool]:
    """Every contender not in ``status`` once a round, interleaved: (the runs by contender,
    whether one failed). A contender skipped or failed goes into ``status`` and sits out the
    later rounds."""
    runs: dict[str, list[dict]] = {n: [] for n in names}
    failed = False
    for round_, order in interleave(names, args.rounds):
        for n in order:
            if n in status:
                continue
            outcome, payload = run_contender(n, args)
            if outcome == "ok":
                runs[n].append(payload)
                print(f"round {round_ + 1}: {n}: {payload['steps_per_s']:,.0f} env steps/s, "
                      f"{payload['updates_per_s']:,.1f} updates/s (CPU: this run "
                      f"{payload['cpu_own']:.2f} cores, other processes "
                      f"{payload['cpu_other']:.2f})", flush=True)
            elif outcome == "skipped":
                status[n] = f"skipped ({payload})"
                print(f"round {round_ + 1}: {n}: skipped ({payload})", flush=True)
            else:
                status[n] = "failed"
                failed = True
                print(f"round {round_ + 1}: {n}: FAILED {payload}", file=sys.stderr,
                      flush=True)
                print(f"round {round_ + 1}: {n}: failed (output on stderr)", flush=True)
    return runs, failed


def main() -> None:
    sb3_log_dir()  # SB3's children log nowhere lasting
    parser, args = parse_args()
    if args.child:
        run_child(args.child, args)
        return
    check_args(parser, args)
    if args.quick:
        preload_child_modules()
    names = list(args.contenders or DEFAULT_CONTENDERS)
    if args.random_agent and "rlfast-random" not in names:
        names.append("rlfast-random")
    print(f"Machine: {machine()}", flush=True)
    status = {n: f"skipped ({missing_package(n)})" for n in names if missing_package(n)}
    for n, why in status.items():
        print(f"{n}: {why}", flush=True)
    runs, failed = run_rounds(args, names, status)
    meds = {n: dict(medians(runs[n], ("steps_per_s", "updates_per_s", "cpu_other")),
                    envs=runs[n][0]["envs"])
            for n in names if runs[n] and n not in status}
    print_tables(args, names, meds, runs, status)
    if args.json:
        settings = {k: getattr(args, k) for k in CHILD_ARGS + ("rounds", "quick")}
        write_json(args.json, dict(settings=settings, ppo_hyperparameters=PPO_HP,
                                   contenders={n: CONTENDERS[n][1] for n in names},
                                   medians=meds, runs=runs, status=status))
    if failed:
        sys.exit(1)


def _preset_dqn_envs() -> int:
    from rlfast.experiments.presets import get_preset

    return get_preset("dqn", ENV)["sampler"]["batch_B"]


if __name__ == "__main__":
    main()
