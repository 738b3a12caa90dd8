"""Presets of the evolution strategies: ``rlfast train cem|cmaes|openai_es ENV``.

An ES preset has the sections ``strategy`` (the ``rlfast.es`` strategy's constructor
arguments: population size, initial step size, and its own settings), ``policy`` (the
searched network: ``hidden_sizes``, and ``init``: "zeros" or "torch"), ``evaluator``
(episodes per candidate, the center's evaluation episodes, the episode cap and the workers'
timeout), ``env`` (extra environment arguments) and ``runner`` (generations, an optional
population-step budget, the log interval and ``stop_return``). Every leaf can be overridden
with ``--set``. The general preset of each action family is merged with the per-environment
entry of ``ES_ENV_TUNED`` where there is one. The strategies are registered with these
presets in :mod:`rlfast.experiments.builtin`; ``rlfast.experiments.presets.get_es_preset``
resolves one for an environment.
"""
from __future__ import annotations


__all__ = ["ES_ALGOS", "ES_PRESETS", "ES_ENV_TUNED"]

ES_ALGOS = ("cem", "cmaes", "openai_es")

_EVALUATOR = dict(episodes_per_candidate=1, eval_episodes=8, max_episode_steps=10_000,
                  timeout_s=600.0)
_RUNNER = dict(n_generations=100, n_steps=None, log_interval_generations=1, stop_return=None)

# Discrete actions: a linear policy (obs -> logits) is enough for the classic-control tasks
# and keeps the search space small (10 numbers on CartPole), which is where ES shines.
# Continuous actions: one hidden layer of 16 tanh units, since the torque of Pendulum is not
# a linear function of its observation.
_FAMILY_POLICY = dict(discrete=dict(hidden_sizes=[], init="zeros"),
                      continuous=dict(hidden_sizes=[16], init="torch"))

_STRATEGY = {
    # Noisy CEM (Szita & Lorincz 2006): the top 20% are the elites. With continuous actions
    # the elites' spread collapses early without the extra noise (measured on Pendulum-v1:
    # stuck at -885 after 80 generations without it, -194 by generation 60 with 0.5 decaying
    # over 60 generations, seed 0).
    "cem": dict(discrete=dict(popsize=32, sigma0=0.5, elite_frac=0.2, extra_noise_init=0.0,
                              extra_noise_decay_gens=1, alpha=1.0),
                continuous=dict(popsize=32, sigma0=0.5, elite_frac=0.2, extra_noise_init=0.5,
                                extra_noise_decay_gens=60, alpha=1.0)),
    # CMA-ES (Hansen): the cma package's own adaptation rules; popsize 16 (its default
    # 4 + 3 ln D is smaller than the parallel workers can fill on small policies).
    "cmaes": dict(discrete=dict(popsize=16, sigma0=0.5), continuous=dict(popsize=16, sigma0=0.5)),
    # OpenAI-ES (Salimans et al. 2017): antithetic pairs, centered ranks, Adam on the mean.
    # Learning rate 0.1 on continuous actions: Pendulum-v1 reached -214 in 100 generations
    # with it, -906 with 0.05 (seed 0).
    "openai_es": dict(discrete=dict(popsize=32, sigma0=0.1, learning_rate=0.05, l2_coeff=0.005),
                      continuous=dict(popsize=32, sigma0=0.1, learning_rate=0.1,
                                      l2_coeff=0.005)),
}

# Episodes per candidate: one on the classic discrete tasks; with continuous actions the
# start state matters more (Pendulum starts anywhere on the circle), and a candidate's
# fitness averages a few episodes (measured on Pendulum-v1, seed 0, 100 generations:
# CMA-ES -276 with 4 episodes, -444 after 80 with 1).
_EPISODES = dict(cem=3, cmaes=4, openai_es=2)

ES_PRESETS: dict[str, dict[str, dict]] = {
    algo: {family: dict(strategy=dict(_STRATEGY[algo][family]),
                        policy=dict(_FAMILY_POLICY[family]),
                        evaluator=dict(_EVALUATOR, episodes_per_candidate=(
                            1 if family == "discrete" else _EPISODES[algo])),
                        env=dict(), runner=dict(_RUNNER))
           for family in ("discrete", "continuous")}
    for algo in ES_ALGOS
}

# Per-environment entries: (algo, gymnasium id) -> changes. Each says where it comes from.
ES_ENV_TUNED: dict[tuple[str, str], dict] = {}
