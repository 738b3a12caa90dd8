"""Build sampler, agent, algorithm and runner by hand: PPO on CartPole-v1 (serial sampler).

Run: python examples/example_1_ppo_cartpole.py [--cpu]   (logs go under data/)
"""
import argparse

from rlfast.agents import CategoricalPgAgent
from rlfast.algos import PPO
from rlfast.envs import make
from rlfast.runners import MinibatchRlEval
from rlfast.samplers import CpuSampler, SerialSampler
from rlfast.utils.logging import logger_context


def build_and_train(use_cpu_sampler: bool = False, seed: int = 0, n_steps: int = 100_000):
    SamplerCls = CpuSampler if use_cpu_sampler else SerialSampler
    sampler = SamplerCls(
        EnvCls=make, env_kwargs=dict(id="CartPole-v1"),
        batch_T=128, batch_B=8,              # 1024 env steps per iteration
        max_decorrelation_steps=100,
        eval_n_envs=4, eval_max_steps=2000, eval_max_trajectories=8,
    )
    agent = CategoricalPgAgent(model_kwargs=dict(hidden_sizes=[64, 64]))
    algo = PPO(learning_rate=3e-3, gae_lambda=0.95, ratio_clip=0.2, minibatches=4, epochs=4,
               value_loss_coeff=0.5, entropy_loss_coeff=0.0, normalize_advantage=True)
    affinity = dict(workers_cpus=[[0], [1]]) if use_cpu_sampler else None
    runner = MinibatchRlEval(algo=algo, agent=agent, sampler=sampler, n_steps=n_steps,
                             seed=seed, log_interval_steps=10_240, affinity=affinity)
    with logger_context("example_1", run_ID=0, name="ppo_cartpole",
                        log_params=dict(seed=seed, cpu_sampler=use_cpu_sampler),
                        snapshot_mode="last"):
        result = runner.train()
    print(f"final evaluation return: {result['final_return']:.1f}")
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cpu", action="store_true", help="use the CPU-parallel sampler")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    build_and_train(args.cpu, args.seed)
