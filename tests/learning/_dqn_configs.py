"""Configurations for the seeded DQN / Categorical DQN learning tests on CartPole-v1.

``dqn_cartpole_runner`` builds a ready ``MinibatchRlEval`` runner (``SerialSampler``) for DQN or,
with ``categorical=True``, C51; run it with ``tests.learning._configs.train``. Evaluation is
greedy (``eps_eval=0``) on 8 environments, at most 500 steps each (one full CartPole-v1 episode),
counting the first 8 completed episodes. The hyperparameters were tuned on a 2-core CPU machine
(the tuning record is in each test module's docstring); the benchmark script
``scripts/bench/bench_dqn_cartpole.py`` reuses them through ``DQN_CARTPOLE`` /
``dqn_cartpole_runner``.
"""
from __future__ import annotations

from typing import Sequence

from rlfast.agents import CatDqnAgent, DqnAgent
from rlfast.algos.dqn import DQN, CategoricalDQN
from rlfast.envs import make
from rlfast.runners import MinibatchRlEval
from rlfast.samplers import CpuSampler, SerialSampler

CARTPOLE = dict(id="CartPole-v1")
DQN_EVAL_KWARGS = dict(eval_n_envs=8, eval_max_steps=8 * 500, eval_max_trajectories=8)
TWO_WORKERS = dict(workers_cpus=[[0], [1]])

# Tuned settings (the tuning record is in tests/learning/test_dqn_cartpole.py and
# test_cat_dqn_cartpole.py). 8 envs x 4 steps = 32 steps per iteration, 4 updates of 64 samples
# each per iteration (replay ratio 8), so 12.5k updates in 100k steps. The long n-step return
# (10) and the squared TD loss (delta_clip=None: Q-values reach ~75-100, where a Huber loss with
# threshold 1 learns slowly) are what lift DQN off a ~250-400 plateau where the greedy policy
# balances the pole but lets the cart drift off the track.
DQN_CARTPOLE = dict(
    discount=0.99, batch_size=64, min_steps_learn=1_000, replay_size=100_000, replay_ratio=8,
    target_update_interval=250, target_update_tau=1.0, n_step_return=10, learning_rate=5e-4,
    eps_steps=20_000, double_dqn=True, delta_clip=None, clip_grad_norm=10.0,
)
DQN_AGENT = dict(hidden_sizes=(64, 64), dueling=False, eps_final=0.01)
DQN_SAMPLER = dict(batch_T=4, batch_B=8)

# C51: the same, with a larger learning rate (its Adam epsilon is 0.01 / batch_size) and the
# return support [0, 100] (discounted CartPole returns at 0.99 are at most 100).
CAT_DQN_CARTPOLE = dict(DQN_CARTPOLE, learning_rate=1e-3, V_min=0.0, V_max=100.0)
CAT_DQN_AGENT = dict(DQN_AGENT, n_atoms=51)
CAT_DQN_SAMPLER = dict(DQN_SAMPLER)


def dqn_cartpole_runner(seed: int, n_steps: int = 100_000, categorical: bool = False,
                        sampler: str = "serial", log_interval_steps: int = 5_000,
                        hidden_sizes: Sequence[int] | None = None, dueling: bool | None = None,
                        eps_final: float | None = None, n_atoms: int | None = None,
                        batch_T: int | None = None, batch_B: int | None = None,
                        stop_return: float | None = None, noisy: bool = False,
                        **algo_overrides) -> MinibatchRlEval:
    """DQN (or C51 with ``categorical=True``) on CartPole-v1 with the tuned settings above;
    keyword arguments override single settings (agent / sampler ones by name, the rest go to
    the algorithm). ``stop_return``: end training at the first evaluation reaching it.
    ``noisy``: noisy layers explore instead of epsilon-greedy (epsilon 0 throughout)."""
    if sampler not in ("serial", "cpu"):
        raise ValueError(f"sampler must be 'serial' or 'cpu', got {sampler!r}")
    agent_cfg = dict(CAT_DQN_AGENT if categorical else DQN_AGENT)
    sampler_cfg = dict(CAT_DQN_SAMPLER if categorical else DQN_SAMPLER)
    algo_cfg = dict(CAT_DQN_CARTPOLE if categorical else DQN_CARTPOLE)
    for key, value in dict(hidden_sizes=hidden_sizes, dueling=dueling, eps_final=eps_final,
                           n_atoms=n_atoms).items():
        if value is not None:
            agent_cfg[key] = value
    for key, value in dict(batch_T=batch_T, batch_B=batch_B).items():
        if value is not None:
            sampler_cfg[key] = value
    algo_cfg.update(algo_overrides)

    SamplerCls = SerialSampler if sampler == "serial" else CpuSampler
    sampler_obj = SamplerCls(EnvCls=make, env_kwargs=CARTPOLE, max_decorrelation_steps=0,
                             **sampler_cfg, **DQN_EVAL_KWARGS)
    model_kwargs = dict(hidden_sizes=list(agent_cfg["hidden_sizes"]), dueling=agent_cfg["dueling"])
    eps = dict(eps_init=1.0, eps_final=agent_cfg["eps_final"], eps_eval=0.0)
    if noisy:
        model_kwargs["noisy"] = True
        eps.update(eps_init=0.0, eps_final=0.0)
    if categorical:
        agent = CatDqnAgent(n_atoms=agent_cfg["n_atoms"], model_kwargs=model_kwargs, **eps)
        algo = CategoricalDQN(**algo_cfg)
    else:
        agent = DqnAgent(model_kwargs=model_kwargs, **eps)
        algo = DQN(**algo_cfg)
    return MinibatchRlEval(algo=algo, agent=agent, sampler=sampler_obj, n_steps=n_steps,
                           seed=seed, affinity=TWO_WORKERS if sampler == "cpu" else None,
                           log_interval_steps=log_interval_steps, progress_bar=False,
                           stop_return=stop_return)
