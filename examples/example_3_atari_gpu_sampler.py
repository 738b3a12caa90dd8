"""PPO on Atari Pong with the GPU sampler: workers step AtariEnv, the master batches the agent.

The agent runs on cuda:0 when a GPU is present and on the CPU otherwise. Equivalent command:
    rlfast train ppo atari:pong --sampler gpu

Run: python examples/example_3_atari_gpu_sampler.py [--steps N] [--alternating]
"""
import argparse
import os

import torch

from rlfast.agents import AtariFfAgent
from rlfast.algos import PPO
from rlfast.envs import AtariEnv, AtariTrajInfo
from rlfast.runners import MinibatchRlEval
from rlfast.samplers import AlternatingSampler, GpuSampler
from rlfast.utils.logging import logger_context


def build_and_train(n_steps: int, alternating: bool, seed: int = 0):
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else [0]
    n_workers = max(2, len(cpus)) if alternating else len(cpus)
    SamplerCls = AlternatingSampler if alternating else GpuSampler
    sampler = SamplerCls(
        EnvCls=AtariEnv, env_kwargs=dict(game="pong"), TrajInfoCls=AtariTrajInfo,
        batch_T=128, batch_B=8, max_decorrelation_steps=1000,
        eval_n_envs=4, eval_max_steps=40_000, eval_max_trajectories=4,
    )
    agent = AtariFfAgent()  # uint8 frames in; scaled to [0, 1] inside the model
    algo = PPO(learning_rate=2.5e-4, gae_lambda=0.95, ratio_clip=0.1, minibatches=4, epochs=4,
               value_loss_coeff=0.5, entropy_loss_coeff=0.01, clip_grad_norm=0.5,
               normalize_advantage=True)
    affinity = dict(workers_cpus=[[cpus[i % len(cpus)]] for i in range(n_workers)],
                    cuda_idx=0 if torch.cuda.is_available() else None)
    runner = MinibatchRlEval(algo=algo, agent=agent, sampler=sampler, n_steps=n_steps,
                             seed=seed, log_interval_steps=100_000, affinity=affinity)
    with logger_context("example_3", run_ID=0, name="ppo_pong", log_params=dict(seed=seed)):
        return runner.train()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=10_000_000)
    parser.add_argument("--alternating", action="store_true")
    args = parser.parse_args()
    build_and_train(args.steps, args.alternating)
