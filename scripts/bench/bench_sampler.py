#!/usr/bin/env python
"""Sampler throughput on Atari Pong: rlfast's samplers vs ale-py's AtariVectorEnv and
gymnasium's AsyncVectorEnv, side by side in one run.

Every contender steps 8 Pong environments with frame skip 4 and uniformly random actions
(rlfast also with its AtariFfAgent choosing the actions); the figure is environment frames per
second (agent steps x frame skip). Each contender runs for about ``--seconds`` after a warm-up.

Usage: python scripts/bench/bench_sampler.py [--seconds 8] [--envs 8] [--batch-T 64] [--quick]
       [--samplers serial cpu gpu alternating] [--agents random atari_ff nature_cnn]
       [--device cpu|cuda] [--obs-type 84x84] [--peers ale gym] [--json FILE]

Agents: ``random`` (uniform actions, no model), ``atari_ff`` (rlfast's AtariFfAgent with its
default model) and ``nature_cnn`` (AtariFfAgent with the Nature CNN: conv 32 8x8/4, 64 4x4/2,
64 3x3/1, fc 512; give ``--obs-type 84x84`` for the 84x84 frames it was made for). With
``--device cuda`` the gpu and alternating samplers serve the agent from GPU 0 (the cpu and
serial samplers run it where they always do). The table gives, per sampler, the CNN agent's
frames/s as a share of the random agent's. ``--json`` also writes every figure with the
wall-clock times of its measurement (for lining up GPU utilisation samples).

``--check-finite`` measures instead what the samplers' NaN / inf check of each batch costs:
each configuration (CartPole with an MLP agent; cheap environments with large float32 or
uint8 frames and a random agent) runs on ONE sampler whose ``check_finite`` is switched on and
off between rounds (interleaved, the order alternating, so drift hits both alike); the table
gives the median throughput of each, the median ratio of back-to-back pairs, and the check
alone timed on a real batch (the number least disturbed by other load on the machine).

Usage: python scripts/bench/bench_sampler.py --check-finite [--rounds 15] [--seconds 1]
       [--envs 8] [--batch-T 64] [--configs cartpole-serial float-frames-cpu ...]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np

from rlfast.envs import Env, EnvStep
from rlfast.spaces import FloatBox, IntBox

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import (interleave, machine, markdown_table, median, paired_ratios,  # noqa: E402
                     rate, ratio_cell, write_json)

FRAME_SKIP = 4
NATURE_CNN = dict(fc_sizes=512, channels=(32, 64, 64), kernel_sizes=(8, 4, 3), strides=(4, 2, 1),
                  paddings=(0, 0, 0))


# Wall-clock start and end of the last timed window (after the warm-up call), for lining up
# GPU utilisation samples with it.
LAST_WINDOW = [0.0, 0.0]


def timed_rate(step, items_per_call: int, seconds: float) -> float:
    """``rate`` that also keeps the wall-clock times of its window in ``LAST_WINDOW``."""
    calls = 0

    def stamped():
        nonlocal calls
        calls += 1
        if calls == 2:  # rate's first call is its warm-up
            LAST_WINDOW[0] = time.time()
        step()

    fps = rate(stamped, items_per_call, seconds)
    LAST_WINDOW[1] = time.time()
    return fps


def n_cores() -> int:
    from rlfast.utils.misc import available_cpus

    return len(available_cpus())


def make_agent(agent_name: str):
    """The sampling agent of ``--agents``: random, atari_ff or nature_cnn."""
    from rlfast.agents import AtariFfAgent, RandomAgent

    if agent_name == "random":
        return RandomAgent()
    if agent_name == "nature_cnn":
        return AtariFfAgent(model_kwargs=dict(NATURE_CNN))
    return AtariFfAgent()


def bench_rlfast(sampler_name: str, agent_name: str, n_envs: int, batch_T: int,
                 seconds: float, cuda: bool, obs_type: str | None = None) -> float:
    import torch

    from rlfast.envs import AtariEnv
    from rlfast.samplers import AlternatingSampler, CpuSampler, GpuSampler, SerialSampler

    torch.set_num_threads(1)
    cores = n_cores()
    SamplerCls = dict(serial=SerialSampler, cpu=CpuSampler, gpu=GpuSampler,
                      alternating=AlternatingSampler)[sampler_name]
    env_kwargs = dict(game="pong", frame_skip=FRAME_SKIP)
    if obs_type is not None:
        env_kwargs["obs_type"] = obs_type
    sampler = SamplerCls(EnvCls=AtariEnv, env_kwargs=env_kwargs,
                         batch_T=batch_T, batch_B=n_envs, max_decorrelation_steps=0)
    agent = make_agent(agent_name)
    n_workers = min(n_envs, max(cores, 2 if sampler_name == "alternating" else 1))
    affinity = dict(workers_cpus=[[c % cores] for c in range(n_workers)],
                    cuda_idx=0 if cuda and sampler_name in ("gpu", "alternating") else None)
    sampler.initialize(agent=agent, affinity=affinity, seed=0)
    agent.to_device(affinity["cuda_idx"])
    agent.sample_mode(0)
    itr = [0]

    def step():
        sampler.obtain_samples(itr[0])
        itr[0] += 1

    try:
        return timed_rate(step, batch_T * n_envs * FRAME_SKIP, seconds)
    finally:
        sampler.shutdown()


def bench_vector_env(env, n_envs: int, seconds: float, batch_T: int) -> float:
    """Frames/s of a gymnasium-style vector env stepped with uniformly random actions."""
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    n_actions = env.single_action_space.n

    def step():
        for _ in range(batch_T):
            env.step(rng.integers(0, n_actions, size=n_envs))

    try:
        return timed_rate(step, batch_T * n_envs * FRAME_SKIP, seconds)
    finally:
        env.close()


def bench_ale_vector(n_envs: int, seconds: float, batch_T: int) -> float:
    from ale_py.vector_env import AtariVectorEnv

    env = AtariVectorEnv(game="pong", num_envs=n_envs, num_threads=n_cores(),
                         frameskip=FRAME_SKIP)
    return bench_vector_env(env, n_envs, seconds, batch_T)


def _make_gym_pong():
    import ale_py
    import gymnasium as gym
    from gymnasium.wrappers import AtariPreprocessing, FrameStackObservation

    gym.register_envs(ale_py)
    env = gym.make("ALE/Pong-v5", frameskip=1, repeat_action_probability=0.0)
    env = AtariPreprocessing(env, frame_skip=FRAME_SKIP, screen_size=84, grayscale_obs=True,
                             noop_max=30)
    return FrameStackObservation(env, 4)


def bench_gym_async(n_envs: int, seconds: float, batch_T: int) -> float:
    from gymnasium.vector import AsyncVectorEnv

    env = AsyncVectorEnv([_make_gym_pong for _ in range(n_envs)])
    return bench_vector_env(env, n_envs, seconds, batch_T)


# ---- cost of the samplers' finite check -------------------------------------------------------

FRAMES = (4, 84, 84)


class FrameEnv(Env):
    """The cheapest environment with a large observation: ``shape`` frames of ``dtype``
    (one preallocated frame, its first element set to the step count), reward 1, episodes of
    1000 steps. Stands in for environments with big float observations (normalized images,
    large state vectors), where the check's pass over the batch weighs most because the
    environment itself costs almost nothing; uint8 frames (Atari) show the integer skip."""

    def __init__(self, dtype: str = "float32", shape: tuple = FRAMES):
        self.frame = np.zeros(shape, dtype=dtype)
        self._observation_space = (IntBox(0, 256, shape=shape, dtype=dtype)
                                   if np.dtype(dtype).kind in "ui" else
                                   FloatBox(-1.0, 1.0, shape=shape, dtype=dtype))
        self._action_space = IntBox(0, 4, dtype="int64")
        self.t = 0

    def reset(self):
        self.t = 0
        return self.frame

    def step(self, action):
        self.t += 1
        self.frame.flat[0] = self.t % 100
        return EnvStep(self.frame, 1.0, self.t >= 1000, None)


CHECK_CONFIGS = {  # name: (environment, observation shape, sampler, agent)
    "cartpole-serial": ("cartpole", None, "serial", "mlp"),
    "cartpole-cpu": ("cartpole", None, "cpu", "mlp"),
    "float-376-serial": ("float32", (376,), "serial", "random"),  # Humanoid-sized state
    "float-frames-serial": ("float32", FRAMES, "serial", "random"),
    "float-frames-cpu": ("float32", FRAMES, "cpu", "random"),
    "uint8-frames-serial": ("uint8", FRAMES, "serial", "random"),
}


def _check_sampler(env: str, shape: tuple | None, sampler_name: str, agent_name: str,
                   n_envs: int, batch_T: int):
    import torch

    from rlfast.agents import CategoricalPgAgent, RandomAgent
    from rlfast.envs import make
    from rlfast.samplers import CpuSampler, SerialSampler

    torch.set_num_threads(1)
    if env == "cartpole":
        EnvCls, env_kwargs = make, dict(id="CartPole-v1")
    else:
        EnvCls, env_kwargs = FrameEnv, dict(dtype=env, shape=shape)
    SamplerCls = dict(serial=SerialSampler, cpu=CpuSampler)[sampler_name]
    sampler = SamplerCls(EnvCls=EnvCls, env_kwargs=env_kwargs, batch_T=batch_T, batch_B=n_envs,
                         max_decorrelation_steps=0, check_finite=True)
    agent = (RandomAgent() if agent_name == "random"
             else CategoricalPgAgent(model_kwargs=dict(hidden_sizes=[64, 64])))
    cores = n_cores()
    affinity = None
    if sampler_name != "serial":
        affinity = dict(workers_cpus=[[c % cores] for c in range(min(n_envs, cores))])
    sampler.initialize(agent=agent, affinity=affinity, seed=0)
    agent.sample_mode(0)
    return sampler


def _time_check_alone(sampler, repeats: int = 7) -> float:
    """Median seconds of one ``check_batch`` call on the sampler's last (real) batch."""
    calls, per_call = 20, []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            sampler.check_batch(sampler.samples_np, 0)
        per_call.append((time.perf_counter() - start) / calls)
    return median(per_call)


def bench_check_finite(name: str, n_envs: int, batch_T: int, rounds: int,
                       seconds: float) -> dict:
    """Steps/s of configuration ``name`` with the check on and off (medians over interleaved
    rounds on one sampler), and the check alone per batch."""
    sampler = _check_sampler(*CHECK_CONFIGS[name], n_envs, batch_T)
    itr = [0]

    def step():
        sampler.obtain_samples(itr[0])
        itr[0] += 1

    try:
        rates = {True: [], False: []}
        for _, order in interleave((True, False), rounds):
            for flag in order:
                sampler.check_finite = flag
                rates[flag].append(rate(step, batch_T * n_envs, seconds))
        sampler.check_finite = True
        check_s = _time_check_alone(sampler)
        obs = sampler.samples_np.env.observation
    finally:
        sampler.shutdown()
    on, off = median(rates[True]), median(rates[False])
    # Each round's on/off pair ran back to back: their ratio cancels slow drift in the load.
    paired = sorted(paired_ratios(rates[True], rates[False]))
    quartiles = statistics.quantiles(paired, n=4) if len(paired) > 1 else paired * 3
    return dict(name=name, obs=f"{obs.dtype} {tuple(obs.shape[2:])}", mb=obs.nbytes / 2 ** 20,
                on=on, off=off, ratio=median(paired),
                spread=(quartiles[0], quartiles[-1]), check_us=check_s * 1e6,
                share=check_s / (batch_T * n_envs / off))


def main_check_finite(args: argparse.Namespace) -> None:
    """Print the cost of ``sampler.check_finite`` for each chosen configuration."""
    if args.quick:
        args.seconds, args.rounds = 0.5, 3
    elif args.seconds is None:
        args.seconds = 1.0
    print(f"Machine: {machine()}")
    print(f"check_finite on vs off: {args.envs} envs, batch_T {args.batch_T}, {args.rounds} "
          f"interleaved rounds of ~{args.seconds:g} s each per setting, medians\n")
    rows = []
    for name in args.configs:
        row = bench_check_finite(name, args.envs, args.batch_T, args.rounds, args.seconds)
        rows.append(row)
        print(f"  {name:<22} on {row['on']:>10,.0f}  off {row['off']:>10,.0f} steps/s  "
              f"on/off {row['ratio']:.3f}  check {row['check_us']:,.1f} us/batch", flush=True)
    print("\n" + markdown_table(
        ["config", "observation (batch MiB)", "check on, steps/s", "check off, steps/s",
         "on / off, paired (IQR)", "check alone, us per batch", "its share of a batch"],
        [[row["name"], f"{row['obs']} ({row['mb']:.1f})", f"{row['on']:,.0f}",
          f"{row['off']:,.0f}",
          f"{row['ratio']:.3f} ({row['spread'][0]:.2f}-{row['spread'][1]:.2f})",
          f"{row['check_us']:,.1f}", f"{100 * row['share']:.2f}%"] for row in rows], "llrrrrr"))
    print("\non / off: median over rounds of the ratio of each back-to-back pair (1 = free); "
          "the check alone is timed on a real batch, its share relative to a batch without it.")


def print_agent_ratios(results: list[dict]) -> None:
    """Per sampler: frames/s with the random agent and with each model agent, and the model
    agent's share of the random agent's (how much of the sampling limit inference costs)."""
    by_sampler: dict[str, dict[str, float]] = {}
    for r in results:
        if r.get("sampler"):
            by_sampler.setdefault(r["sampler"], {})[r["agent"]] = r["fps"]
    models = [a for a in dict.fromkeys(r["agent"] for r in results if r.get("sampler"))
              if a != "random"]
    if not models or not any("random" in v for v in by_sampler.values()):
        return
    header = ["sampler", "random agent, frames/s"]
    for m in models:
        header += [f"{m} agent, frames/s", f"{m} / random"]
    rows = []
    for sampler, fps in by_sampler.items():
        cells = [sampler, f"{fps['random']:,.0f}" if "random" in fps else "-"]
        for m in models:
            cells.append(f"{fps[m]:,.0f}" if m in fps else "-")
            cells.append(f"{fps[m] / fps['random']:.2f}" if m in fps and fps.get("random")
                         else "-")
        rows.append(cells)
    print("\n" + markdown_table(header, rows, "l" + "r" * (len(header) - 1)))


def print_comparison(results: list[dict]) -> None:
    """Every contender against the two vector envs, each sampler's model agents against its
    random agent, and the best rlfast sampler against the targets."""
    peer_fps = {r["peer"]: r["fps"] for r in results if r.get("peer")}
    ale_fps, gym_fps = peer_fps.get("ale"), peer_fps.get("gym")
    print("\n" + markdown_table(
        ["contender", "frames/s", "vs AtariVectorEnv", "vs AsyncVectorEnv"],
        [[r["name"], f"{r['fps']:,.0f}", ratio_cell(r["fps"], ale_fps),
          ratio_cell(r["fps"], gym_fps)] for r in results], "lrrr"))
    print_agent_ratios(results)
    best = max((r for r in results if r.get("agent") == "random"), key=lambda r: r["fps"],
               default=None)
    if best is not None and ale_fps and gym_fps:
        print(f"\nBest rlfast (RandomAgent): {best['name']} at {best['fps']:,.0f} frames/s = "
              f"{best['fps'] / ale_fps:.2f}x AtariVectorEnv (target >= 1.1x), "
              f"{best['fps'] / gym_fps:.2f}x AsyncVectorEnv (target >= 2x)")


def parse_args() -> tuple[argparse.ArgumentParser, argparse.Namespace]:
    """The parser and the command line's arguments."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=None,
                        help="per contender (default 8), or per round with --check-finite "
                             "(default 1)")
    parser.add_argument("--envs", type=int, default=8)
    parser.add_argument("--batch-T", type=int, default=64)
    parser.add_argument("--samplers", nargs="+", default=["serial", "cpu", "gpu", "alternating"],
                        choices=["serial", "cpu", "gpu", "alternating"])
    parser.add_argument("--agents", nargs="+", default=["random", "atari_ff"],
                        choices=["random", "atari_ff", "nature_cnn"])
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                        help="cuda: the gpu/alternating samplers' agent on GPU 0")
    parser.add_argument("--cuda", action="store_true", help="the same as --device cuda")
    parser.add_argument("--obs-type", default=None,
                        help="AtariEnv obs_type of the rlfast contenders (default: AtariEnv's)")
    parser.add_argument("--peers", nargs="*", default=["ale", "gym"], choices=["ale", "gym"],
                        help="the non-rlfast contenders to run (default both; none: no ratios "
                             "to them)")
    parser.add_argument("--json", default=None, help="also write the figures here")
    parser.add_argument("--quick", action="store_true", help="1 s per contender (smoke test)")
    parser.add_argument("--check-finite", action="store_true",
                        help="measure the samplers' NaN / inf check instead (see above)")
    parser.add_argument("--rounds", type=int, default=15,
                        help="--check-finite: interleaved rounds per setting")
    parser.add_argument("--configs", nargs="+", default=list(CHECK_CONFIGS),
                        choices=list(CHECK_CONFIGS), help="--check-finite: configurations")
    return parser, parser.parse_args()


def main() -> None:
    parser, args = parse_args()
    if args.check_finite:
        main_check_finite(args)
        return
    cuda = args.cuda or args.device == "cuda"
    if cuda:
        import torch
        if not torch.cuda.is_available():
            parser.error("--device cuda needs a GPU")
    seconds = 1.0 if args.quick else (args.seconds or 8.0)
    print(f"Machine: {machine()}")
    print(f"Pong, {args.envs} envs, frame skip {FRAME_SKIP}, batch_T {args.batch_T}, "
          f"obs_type {args.obs_type or 'default'}, device {'cuda' if cuda else 'cpu'}, "
          f"~{seconds:g} s per contender\n")
    results: list[dict] = []

    def record(name: str, measure, **labels) -> None:
        fps = measure()
        results.append(dict(name=name, fps=fps, t_start=LAST_WINDOW[0], t_end=LAST_WINDOW[1],
                            **labels))
        print(f"  {name:<38} {fps:>10,.0f} frames/s", flush=True)

    if "ale" in args.peers:
        record("ale-py AtariVectorEnv", lambda: bench_ale_vector(args.envs, seconds,
                                                                 args.batch_T), peer="ale")
    if "gym" in args.peers:
        record("gymnasium AsyncVectorEnv", lambda: bench_gym_async(args.envs, seconds,
                                                                   args.batch_T), peer="gym")
    for agent in args.agents:
        for sampler in args.samplers:
            record(f"rlfast {sampler} sampler, {agent} agent",
                   lambda: bench_rlfast(sampler, agent, args.envs, args.batch_T, seconds, cuda,
                                        args.obs_type),
                   sampler=sampler, agent=agent)
    print_comparison(results)
    if args.json:
        write_json(args.json, dict(envs=args.envs, batch_T=args.batch_T, seconds=seconds,
                                   obs_type=args.obs_type, device="cuda" if cuda else "cpu",
                                   results=results))


if __name__ == "__main__":
    main()
