"""Gaussian policy gradient on a continuous task: PPO with MujocoFfAgent on Pendulum-v1.

Run: python examples/example_2_ppo_pendulum.py   (logs go under data/)
"""
from rlfast.agents import MujocoFfAgent
from rlfast.algos import PPO
from rlfast.envs import make
from rlfast.runners import MinibatchRl
from rlfast.samplers import SerialSampler
from rlfast.utils.logging import logger_context


def build_and_train(seed: int = 0, n_steps: int = 200_000):
    sampler = SerialSampler(EnvCls=make, env_kwargs=dict(id="Pendulum-v1"),
                            batch_T=256, batch_B=8, max_decorrelation_steps=0)
    agent = MujocoFfAgent(model_kwargs=dict(hidden_sizes=[64, 64], normalize_observation=True))
    algo = PPO(learning_rate=1e-3, gae_lambda=0.95, minibatches=32, epochs=10, ratio_clip=0.2,
               value_loss_coeff=0.5, entropy_loss_coeff=0.0, normalize_advantage=True)
    runner = MinibatchRl(algo=algo, agent=agent, sampler=sampler, n_steps=n_steps, seed=seed,
                         log_interval_steps=20_480)
    with logger_context("example_2", run_ID=0, name="ppo_pendulum", log_params=dict(seed=seed)):
        return runner.train()


if __name__ == "__main__":
    build_and_train()
