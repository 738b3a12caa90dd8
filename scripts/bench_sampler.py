#!/usr/bin/env python
"""Sampler throughput on Atari Pong: rlfast's samplers vs ale-py's AtariVectorEnv and
gymnasium's AsyncVectorEnv, side by side in one run.

Every contender steps 8 Pong environments with frame skip 4 and uniformly random actions
(rlfast also with its AtariFfAgent choosing the actions); the figure is environment frames per
second (agent steps x frame skip). Each contender runs for about ``--seconds`` after a warm-up.

Usage: python scripts/bench_sampler.py [--seconds 8] [--envs 8] [--batch-T 64] [--quick]
"""
from __future__ import annotations

import argparse
import time

import numpy as np
from _bench_common import machine, rate

FRAME_SKIP = 4


def n_cores() -> int:
    from rlfast.utils.misc import available_cpus

    return len(available_cpus())


def bench_rlfast(sampler_name: str, agent_name: str, n_envs: int, batch_T: int,
                 seconds: float, cuda: bool) -> float:
    import torch

    from rlfast.agents import AtariFfAgent, RandomAgent
    from rlfast.envs import AtariEnv
    from rlfast.samplers import AlternatingSampler, CpuSampler, GpuSampler, SerialSampler

    torch.set_num_threads(1)
    cores = n_cores()
    SamplerCls = dict(serial=SerialSampler, cpu=CpuSampler, gpu=GpuSampler,
                      alternating=AlternatingSampler)[sampler_name]
    sampler = SamplerCls(EnvCls=AtariEnv, env_kwargs=dict(game="pong", frame_skip=FRAME_SKIP),
                         batch_T=batch_T, batch_B=n_envs, max_decorrelation_steps=0)
    agent = RandomAgent() if agent_name == "random" else AtariFfAgent()
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
        return rate(step, batch_T * n_envs * FRAME_SKIP, seconds)
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
        return rate(step, batch_T * n_envs * FRAME_SKIP, seconds)
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--envs", type=int, default=8)
    parser.add_argument("--batch-T", type=int, default=64)
    parser.add_argument("--samplers", nargs="+", default=["serial", "cpu", "gpu", "alternating"])
    parser.add_argument("--agents", nargs="+", default=["random", "atari_ff"])
    parser.add_argument("--cuda", action="store_true", help="agent on GPU 0 (gpu/alternating)")
    parser.add_argument("--quick", action="store_true", help="1 s per contender (smoke test)")
    args = parser.parse_args()
    seconds = 1.0 if args.quick else args.seconds
    print(f"Machine: {machine()}")
    print(f"Pong, {args.envs} envs, frame skip {FRAME_SKIP}, batch_T {args.batch_T}, "
          f"~{seconds:.0f} s per contender\n")
    results: list[tuple[str, float]] = []

    def record(name: str, fps: float) -> None:
        results.append((name, fps))
        print(f"  {name:<38} {fps:>10,.0f} frames/s", flush=True)

    record("ale-py AtariVectorEnv", bench_ale_vector(args.envs, seconds, args.batch_T))
    record("gymnasium AsyncVectorEnv", bench_gym_async(args.envs, seconds, args.batch_T))
    for agent in args.agents:
        for sampler in args.samplers:
            record(f"rlfast {sampler} sampler, {agent} agent",
                   bench_rlfast(sampler, agent, args.envs, args.batch_T, seconds, args.cuda))
    ale_fps, gym_fps = results[0][1], results[1][1]
    print(f"\n| contender | frames/s | vs AtariVectorEnv | vs AsyncVectorEnv |")
    print("|---|---:|---:|---:|")
    for name, fps in results:
        print(f"| {name} | {fps:,.0f} | {fps / ale_fps:.2f}x | {fps / gym_fps:.2f}x |")
    best = max((r for r in results if r[0].startswith("rlfast") and "random" in r[0]),
               key=lambda r: r[1], default=None)
    if best is not None:
        print(f"\nBest rlfast (RandomAgent): {best[0]} at {best[1]:,.0f} frames/s = "
              f"{best[1] / ale_fps:.2f}x AtariVectorEnv (target >= 1.1x), "
              f"{best[1] / gym_fps:.2f}x AsyncVectorEnv (target >= 2x)")


if __name__ == "__main__":
    main()
