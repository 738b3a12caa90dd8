"""Presets for the Q-value policy gradient algorithms (continuous actions only).

The ``continuous`` presets are general defaults for vector-observation control (standard
published settings). Per-environment settings applied on top live in one table,
``rlfast.experiments.env_overrides.ENV_TUNED``.
"""
from __future__ import annotations

from rlfast.agents import DdpgAgent, SacAgent, Td3Agent
from rlfast.experiments.class_defaults import class_defaults

QPG_ALGOS = ("ddpg", "td3", "sac")

# One environment stepped serially; evaluation: 5 deterministic episodes.
_QPG_SAMPLER = dict(batch_T=1, batch_B=1, max_decorrelation_steps=0, eval_n_envs=5,
                    eval_max_steps=5 * 1000, eval_max_trajectories=5)
# The last step of a time-limited episode bootstraps from its final observation.
_QPG_ENV = dict(final_observation=True)
_QPG_RUNNER = dict(n_steps=1_000_000, log_interval_steps=10_000)
# The master's torch threads (0: every available core). 256-400 wide networks are FLOP-bound
# and gain from more threads (1.6x with 2 cores); 64 wide ones are op-bound and lose.
_QPG_AFFINITY = dict(master_torch_threads=0)

# Replay and target settings every QPG preset shares (standard published values).
_QPG_REPLAY = dict(discount=0.99, batch_size=256, min_steps_learn=10_000, replay_size=1_000_000,
                   replay_ratio=256, target_update_tau=0.005, n_step_return=1,
                   bootstrap_timelimit=True, linear_lr_schedule=False)


def _qpg_preset(hidden_sizes: list, agent: dict, algo: dict) -> dict:
    """The ``continuous`` preset of one QPG algorithm: its networks, agent and algorithm
    settings on top of the shared replay, sampler, runner and affinity sections."""
    nets = dict(model_kwargs=dict(hidden_sizes=list(hidden_sizes)),
                q_model_kwargs=dict(hidden_sizes=list(hidden_sizes)))
    return dict(continuous=dict(agent=dict(nets, **agent), algo=dict(_QPG_REPLAY, **algo),
                                env=_QPG_ENV, sampler=_QPG_SAMPLER, runner=_QPG_RUNNER,
                                affinity=_QPG_AFFINITY))


# The exploration keys each preset exposes at its agent's defaults, so that --set can reach
# them: exploration ("gaussian", or "ou": the DDPG paper's Ornstein-Uhlenbeck noise, with its
# ou_theta and ou_dt; SAC: "gsde", state-dependent exploration, with its resampling interval)
# and pretrain_uniform.
_DDPG_EXPLORATION = ("exploration", "pretrain_uniform", "ou_theta", "ou_dt")

QPG_PRESETS: dict[str, dict] = {
    "ddpg": _qpg_preset([400, 300], dict(action_std=0.1, action_noise_clip=0.5,
                                         **class_defaults(DdpgAgent, *_DDPG_EXPLORATION)),
                        dict(target_update_interval=1, policy_update_interval=1,
                             learning_rate=1e-3, q_learning_rate=1e-3)),
    # TD3: 256x256 networks, as in the TD3 author's reference implementation since its 2020
    # revision (github.com/sfujim/TD3) and DeepMind Acme's TD3 defaults, not the paper's
    # 400x300: 0.55x the FLOPs per update, and updates are the cost of a run. HalfCheetah-v5,
    # 50k steps, one CPU each (2-core machine), greedy return of bench_presets / training
    # time, seeds 0 / 1: 400x300 2227 / 2953 in 579 / 590 s; 256x256 3507 / 3332 in 390 / 386
    # s; SB3 with the zoo's settings (400x300) 2501 / 3864 in 598 / 591 s.
    "td3": _qpg_preset([256, 256], dict(action_std=0.1, pretrain_std=0.5, target_noise_std=0.2,
                                        target_noise_clip=0.5,
                                        **class_defaults(Td3Agent, *_DDPG_EXPLORATION)),
                       dict(target_update_interval=2, policy_update_interval=2,
                            mu_learning_rate=1e-3, q_learning_rate=1e-3)),
    "sac": _qpg_preset([256, 256], dict(pretrain_std=0.75,
                                        **class_defaults(SacAgent, "exploration",
                                                         "sde_sample_interval",
                                                         "pretrain_uniform")),
                       dict(target_update_interval=1, learning_rate=3e-4,
                            target_entropy="auto", reward_scale=1.0)),
}
