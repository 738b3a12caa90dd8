"""Per-environment overrides of the presets: one readable table, as rl-baselines3-zoo keeps
per-environment hyperparameters beside its defaults.

``ENV_TUNED[(algo, gymnasium id)]`` is merged on top of the algorithm's general preset for
that environment (``rlfast.experiments.presets.get_preset``); ``--set`` overrides still apply
after it. Every entry says where its values come from. Add an entry only where the general
default measurably cannot serve, and record the measurement.
"""
from __future__ import annotations

__all__ = ["ENV_TUNED"]

# Pendulum-v1: 3-D observations, 1-D action. 64x64 networks learn it as fast as 256x256 or
# 400x300 ones (same first step at -250 or better in the tuning runs recorded in
# tests/learning/test_qpg_pendulum.py) at a fraction of the FLOPs per update; learning starts
# after 1000 steps (the general presets wait 10k). Source: tuned here, see that test.
_PENDULUM_NETS = dict(model_kwargs=dict(hidden_sizes=[64, 64]),
                      q_model_kwargs=dict(hidden_sizes=[64, 64]))
# 20k steps; one torch thread (64-wide networks lose with more, see qpg_presets).
_PENDULUM_RUN = dict(runner=dict(n_steps=20_000, log_interval_steps=2_000),
                     affinity=dict(master_torch_threads=1))

ENV_TUNED: dict[tuple[str, str], dict] = {
    # learning_rate 1e-3: tuned here (tests/learning/test_qpg_pendulum.py).
    ("sac", "Pendulum-v1"): dict(agent=_PENDULUM_NETS,
                                 algo=dict(learning_rate=1e-3, min_steps_learn=1000),
                                 **_PENDULUM_RUN),
    # discount 0.98: rl-baselines3-zoo hyperparams/td3.yml, Pendulum entry (gamma: 0.98).
    ("td3", "Pendulum-v1"): dict(agent=_PENDULUM_NETS,
                                 algo=dict(discount=0.98, min_steps_learn=1000),
                                 **_PENDULUM_RUN),
    # discount 0.98: rl-baselines3-zoo hyperparams/ddpg.yml, Pendulum entry (gamma: 0.98).
    ("ddpg", "Pendulum-v1"): dict(agent=_PENDULUM_NETS,
                                  algo=dict(discount=0.98, min_steps_learn=1000),
                                  **_PENDULUM_RUN),
}
