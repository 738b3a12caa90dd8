"""Off-policy continuous control built by hand: SAC with twin critics on Pendulum-v1.

The same run as ``rlfast train sac Pendulum-v1``: one environment stepped serially, one
gradient update per environment step once 1000 steps are stored, 64x64 networks, and the
episode's time-limit end bootstrapped from its final observation (``final_observation=True``).

Run: python examples/example_4_sac_pendulum.py   (logs go under data/)
"""
from rlfast.agents import SacAgent
from rlfast.algos import SAC
from rlfast.envs import make
from rlfast.runners import MinibatchRlEval
from rlfast.samplers import CpuResetCollector, SerialEvalCollector, SerialSampler
from rlfast.utils.logging import logger_context


def build_and_train(seed: int = 0, n_steps: int = 20_000):
    sampler = SerialSampler(EnvCls=make, env_kwargs=dict(id="Pendulum-v1", final_observation=True),
                            batch_T=1, batch_B=1, CollectorCls=CpuResetCollector,
                            eval_CollectorCls=SerialEvalCollector, eval_n_envs=5,
                            eval_max_steps=5 * 200, eval_max_trajectories=5)
    agent = SacAgent(model_kwargs=dict(hidden_sizes=[64, 64]),
                     q_model_kwargs=dict(hidden_sizes=[64, 64]))
    # replay_ratio = batch_size: one update per sampled step.
    algo = SAC(learning_rate=1e-3, batch_size=256, replay_ratio=256, min_steps_learn=1000,
               target_entropy="auto", bootstrap_timelimit=True)
    runner = MinibatchRlEval(algo=algo, agent=agent, sampler=sampler, n_steps=n_steps, seed=seed,
                             log_interval_steps=2000, affinity=dict(master_torch_threads=1))
    with logger_context("example_4", run_ID=0, name="sac_pendulum", log_params=dict(seed=seed)):
        return runner.train()


if __name__ == "__main__":
    print("final evaluation return:", build_and_train()["final_return"])
