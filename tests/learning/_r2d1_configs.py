"""Configurations for the seeded R2D1-versus-DQN learning test on velocity-masked CartPole-v1.

``masked_cartpole_dqn_runner`` builds a ready ``MinibatchRlEval`` runner (``SerialSampler``) for
either R2D1 (``recurrent=True``: ``R2d1Agent`` with ``R2d1MlpModel``, ``CpuWaitResetCollector``,
replayed sequences with stored LSTM states) or feedforward DQN (``recurrent=False``: ``DqnAgent``
with an MLP, ``CpuResetCollector``), both on ``masked_envs.make_masked_cartpole`` (cart position
and pole angle only). Run it with ``tests.learning._configs.train``. Evaluation is greedy
(``eps_eval=0``) on 8 environments, at most 500 steps each (one full CartPole-v1 episode),
counting the first 8 completed episodes. The hyperparameters were tuned on a 2-core CPU
machine; the tuning record is in ``test_r2d1_masked_cartpole``'s docstring.
"""
from __future__ import annotations

from rlfast.agents import DqnAgent, R2d1Agent
from rlfast.algos import DQN, R2D1
from rlfast.runners import MinibatchRlEval
from rlfast.samplers import CpuResetCollector, CpuWaitResetCollector, SerialSampler

from tests.learning.masked_envs import make_masked_cartpole

MASKED_DQN_EVAL_KWARGS = dict(eval_n_envs=8, eval_max_steps=8 * 500, eval_max_trajectories=8)

# R2D1: every sequence starts at a stored LSTM state, stored every ``store_rnn_state_interval``
# steps; with the interval equal to the sampler's batch_T, sequences start exactly where the
# wait-reset collector resets finished environments (a new episode starts from a zero state).
R2D1_MASKED = dict(
    discount=0.99, batch_T=20, batch_B=16, warmup_T=10, store_rnn_state_interval=20,
    min_steps_learn=2_000, replay_ratio=16, target_update_interval=100, n_step_return=3,
    learning_rate=1e-3, eps_steps=20_000, clip_grad_norm=10.0, delta_clip=None,
    prioritized_replay=True, double_dqn=True,
)
R2D1_AGENT = dict(hidden_sizes=(64,), lstm_size=64, head_size=64, dueling=False, eps_final=0.02)
R2D1_SAMPLER = dict(batch_T=20, batch_B=8)

# Feedforward DQN: the same replay ratio, learning rate, n-step return, discount, target interval
# and exploration schedule as R2D1, on single transitions (Huber loss, uniform replay).
DQN_MASKED = dict(
    discount=0.99, batch_size=64, min_steps_learn=2_000, replay_ratio=16,
    target_update_interval=100, n_step_return=3, learning_rate=1e-3, eps_steps=20_000,
    clip_grad_norm=10.0, delta_clip=1.0, double_dqn=True, prioritized_replay=False,
)
DQN_AGENT = dict(hidden_sizes=(64, 64), dueling=False, eps_final=0.02)
DQN_SAMPLER = dict(batch_T=20, batch_B=8)

_AGENT_KEYS = ("hidden_sizes", "lstm_size", "head_size", "dueling", "eps_final")
_SAMPLER_KEYS = ("sampler_batch_T", "sampler_batch_B")


def masked_cartpole_dqn_runner(recurrent: bool, seed: int, n_steps: int = 150_000,
                               log_interval_steps: int = 10_000,
                               stop_return: float | None = None,
                               **overrides) -> MinibatchRlEval:
    """R2D1 (``recurrent=True``) or feedforward DQN on velocity-masked CartPole-v1 with the tuned
    settings above. ``overrides`` replace single settings: agent / model ones by name
    (``hidden_sizes``, ``lstm_size``, ``head_size``, ``dueling``, ``eps_final``), the sampler's
    as ``sampler_batch_T`` / ``sampler_batch_B``, the rest go to the algorithm. The replay holds
    the whole run, so stored rows never wrap and sequence starts stay aligned to batches.
    ``stop_return``: end training at the first evaluation reaching it."""
    agent_cfg = dict(R2D1_AGENT if recurrent else DQN_AGENT)
    sampler_cfg = dict(R2D1_SAMPLER if recurrent else DQN_SAMPLER)
    algo_cfg = dict(R2D1_MASKED if recurrent else DQN_MASKED)
    for key, value in overrides.items():
        if key in _AGENT_KEYS:
            if not recurrent and key in ("lstm_size", "head_size"):
                raise ValueError(f"{key!r} applies to the recurrent model only")
            agent_cfg[key] = value
        elif key in _SAMPLER_KEYS:
            sampler_cfg[key[len("sampler_"):]] = value
        else:
            algo_cfg[key] = value
    batch_size = sampler_cfg["batch_T"] * sampler_cfg["batch_B"]
    algo_cfg.setdefault("replay_size", -(-n_steps // batch_size) * batch_size + batch_size)

    collector = CpuWaitResetCollector if recurrent else CpuResetCollector
    sampler = SerialSampler(EnvCls=make_masked_cartpole, env_kwargs={}, CollectorCls=collector,
                            max_decorrelation_steps=0, **sampler_cfg, **MASKED_DQN_EVAL_KWARGS)
    eps = dict(eps_init=1.0, eps_final=agent_cfg.pop("eps_final"), eps_eval=0.0)
    model_kwargs = dict(agent_cfg, hidden_sizes=list(agent_cfg["hidden_sizes"]))
    if recurrent:
        agent = R2d1Agent(model_kwargs=model_kwargs, **eps)
        algo = R2D1(**algo_cfg)
    else:
        agent = DqnAgent(model_kwargs=model_kwargs, **eps)
        algo = DQN(**algo_cfg)
    return MinibatchRlEval(algo=algo, agent=agent, sampler=sampler, n_steps=n_steps, seed=seed,
                           log_interval_steps=log_interval_steps, progress_bar=False,
                           stop_return=stop_return)
