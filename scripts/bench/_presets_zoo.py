"""The rows of ``scripts/bench/bench_presets.py``: for each (environment, algorithm) its step
budget, why that budget, and the Stable-Baselines3 settings that rl-baselines3-zoo publishes for it.

The SB3 settings are hyperparameter VALUES read from rl-baselines3-zoo's ``hyperparams/*.yml``
files and written in the zoo's own notation (``"lin_0.001"`` is a learning rate or clip range
that decays linearly to 0; ``noise_type``/``noise_std`` make the action noise of TD3;
``normalize`` wraps the training environments in ``VecNormalize``; ``n_envs`` is the number of
environments of the ``DummyVecEnv``; unlisted values are SB3's defaults). ``bench_presets.py``
turns them into SB3 arguments. Each entry names the file and the entry it comes from:

- ``DLR-RM/rl-baselines3-zoo`` at the commits the stored files were read at: ppo.yml @208b6fd,
  dqn.yml @ce95481, a2c.yml @c6c209e, sac.yml @c94924e, td3.yml @a02f4fb.
- Newer gymnasium versions of an environment take the settings of the entry for its older
  version where the zoo file read has no entry for the new id (the dynamics are unchanged):
  LunarLander-v2 -> v3, LunarLanderContinuous-v2 -> v3, Pendulum-v0 -> v1 (td3.yml),
  HalfCheetah/Hopper v3 or v4 -> v5.
- td3.yml @a02f4fb has no MuJoCo entries; its MuJoCo defaults (``HalfCheetah-v3:
  &mujoco-defaults``, ``Hopper-v3``) are read from the zoo fork nize/rl-baselines3-zoo
  @492c479 (hyperparams/td3.yml), whose values agree with DLR-RM/rl-baselines3-zoo's
  hyperparams/python/td3.py ``seals/*`` entries.

Budgets lie in 50k-300k steps (the suite compares *default presets* on short runs, not final
performance), except Pendulum-v1 with SAC and TD3: 20k, the budget both frameworks tuned that
task for (see ``_PENDULUM_QPG``). The rule: the zoo's own ``n_timesteps`` for that row when
it lies in that range, else the nearest bound of the range. The off-policy continuous rows
(SAC, TD3) take the lower bound whatever the zoo trains: one gradient update of 256-400 wide
networks per environment step makes them the costly rows. Each row's ``reason`` says which applies.
"""
from __future__ import annotations

from typing import NamedTuple


class Row(NamedTuple):
    """One row of the suite: environment id, rlfast preset / SB3 algorithm name (lower case),
    environment-step budget, why that budget, and the zoo's SB3 settings."""

    env: str
    algo: str
    budget: int
    reason: str
    zoo: dict


_CHEAP = "zoo's n_timesteps"
_CLIPPED_UP = "zoo trains {zoo}; raised to the suite's 50k minimum"
_CLIPPED_DOWN = "zoo trains {zoo}; cut to the suite's {budget} maximum"
_COSTLY = ("zoo trains {zoo}; cut to the suite's {budget} minimum: a gradient update of "
           "256-400 wide networks per env step costs minutes per run on 2 cores")
# The one exception to the 50k floor.
_PENDULUM_QPG = ("below the 50k floor: the zoo trains 20k and rlfast's own Pendulum-v1 preset "
                 "runs 20k (runner.n_steps); one update per step makes 50k cost ~8 min per "
                 "seed pair on 2 cores")

ROWS: list[Row] = [
    # ---- discrete actions -----------------------------------------------------------------
    Row("CartPole-v1", "ppo", 100_000, _CHEAP,
        # rl-baselines3-zoo hyperparams/ppo.yml "CartPole-v1" (n_timesteps 1e5)
        dict(algo="PPO", n_envs=8, n_steps=32, batch_size=256, gae_lambda=0.8, gamma=0.98,
             n_epochs=20, ent_coef=0.0, learning_rate="lin_0.001", clip_range="lin_0.2")),
    Row("CartPole-v1", "dqn", 50_000, _CHEAP,
        # rl-baselines3-zoo hyperparams/dqn.yml "CartPole-v1" (n_timesteps 5e4)
        dict(algo="DQN", learning_rate=2.3e-3, batch_size=64, buffer_size=100_000,
             learning_starts=1000, gamma=0.99, target_update_interval=10, train_freq=256,
             gradient_steps=128, exploration_fraction=0.16, exploration_final_eps=0.04,
             policy_kwargs=dict(net_arch=[256, 256]))),
    Row("CartPole-v1", "a2c", 300_000, _CLIPPED_DOWN.format(zoo="500k", budget="300k"),
        # rl-baselines3-zoo hyperparams/a2c.yml "CartPole-v1" (n_timesteps 5e5)
        dict(algo="A2C", n_envs=8, ent_coef=0.0)),
    Row("Acrobot-v1", "ppo", 300_000, _CLIPPED_DOWN.format(zoo="1M", budget="300k"),
        # rl-baselines3-zoo hyperparams/ppo.yml "Acrobot-v1" (n_timesteps 1e6)
        dict(algo="PPO", normalize=True, n_envs=16, n_steps=256, gae_lambda=0.94, gamma=0.99,
             n_epochs=4, ent_coef=0.0)),
    Row("Acrobot-v1", "dqn", 100_000, _CHEAP,
        # rl-baselines3-zoo hyperparams/dqn.yml "Acrobot-v1" (n_timesteps 1e5)
        dict(algo="DQN", learning_rate=6.3e-4, batch_size=128, buffer_size=50_000,
             learning_starts=0, gamma=0.99, target_update_interval=250, train_freq=4,
             gradient_steps=-1, exploration_fraction=0.12, exploration_final_eps=0.1,
             policy_kwargs=dict(net_arch=[256, 256]))),
    Row("Acrobot-v1", "a2c", 300_000, _CLIPPED_DOWN.format(zoo="500k", budget="300k"),
        # rl-baselines3-zoo hyperparams/a2c.yml "Acrobot-v1" (n_timesteps 5e5)
        dict(algo="A2C", normalize=True, n_envs=16, ent_coef=0.0)),
    Row("MountainCar-v0", "ppo", 300_000, _CLIPPED_DOWN.format(zoo="1M", budget="300k"),
        # rl-baselines3-zoo hyperparams/ppo.yml "MountainCar-v0" (n_timesteps 1e6)
        dict(algo="PPO", normalize=True, n_envs=16, n_steps=16, gae_lambda=0.98, gamma=0.99,
             n_epochs=4, ent_coef=0.0)),
    Row("MountainCar-v0", "dqn", 120_000, _CHEAP,
        # rl-baselines3-zoo hyperparams/dqn.yml "MountainCar-v0" (n_timesteps 1.2e5)
        dict(algo="DQN", learning_rate=4e-3, batch_size=128, buffer_size=10_000,
             learning_starts=1000, gamma=0.98, target_update_interval=600, train_freq=16,
             gradient_steps=8, exploration_fraction=0.2, exploration_final_eps=0.07,
             policy_kwargs=dict(net_arch=[256, 256]))),
    Row("MountainCar-v0", "a2c", 300_000, _CLIPPED_DOWN.format(zoo="1M", budget="300k"),
        # rl-baselines3-zoo hyperparams/a2c.yml "MountainCar-v0" (n_timesteps 1e6)
        dict(algo="A2C", normalize=True, n_envs=16, ent_coef=0.0)),
    Row("LunarLander-v3", "ppo", 300_000, _CLIPPED_DOWN.format(zoo="1M", budget="300k"),
        # rl-baselines3-zoo hyperparams/ppo.yml "LunarLander-v2" (n_timesteps 1e6)
        dict(algo="PPO", n_envs=16, n_steps=1024, batch_size=64, gae_lambda=0.98, gamma=0.999,
             n_epochs=4, ent_coef=0.01)),
    Row("LunarLander-v3", "dqn", 100_000, _CHEAP,
        # rl-baselines3-zoo hyperparams/dqn.yml "LunarLander-v2" (n_timesteps 1e5)
        dict(algo="DQN", learning_rate=6.3e-4, batch_size=128, buffer_size=50_000,
             learning_starts=0, gamma=0.99, target_update_interval=250, train_freq=4,
             gradient_steps=-1, exploration_fraction=0.12, exploration_final_eps=0.1,
             policy_kwargs=dict(net_arch=[256, 256]))),
    Row("LunarLander-v3", "a2c", 200_000, _CHEAP,
        # rl-baselines3-zoo hyperparams/a2c.yml "LunarLander-v2" (n_timesteps 2e5)
        dict(algo="A2C", n_envs=8, gamma=0.995, n_steps=5, learning_rate="lin_0.00083",
             ent_coef=0.00001)),
    # ---- continuous actions ---------------------------------------------------------------
    Row("Pendulum-v1", "ppo", 100_000, _CHEAP,
        # rl-baselines3-zoo hyperparams/ppo.yml "Pendulum-v1" (n_timesteps 1e5)
        dict(algo="PPO", n_envs=4, n_steps=1024, gae_lambda=0.95, gamma=0.9, n_epochs=10,
             ent_coef=0.0, learning_rate=1e-3, clip_range=0.2, use_sde=True,
             sde_sample_freq=4)),
    Row("Pendulum-v1", "sac", 20_000, _PENDULUM_QPG,
        # rl-baselines3-zoo hyperparams/sac.yml "Pendulum-v1" (n_timesteps 20000)
        dict(algo="SAC", learning_rate=1e-3)),
    Row("Pendulum-v1", "td3", 20_000, _PENDULUM_QPG,
        # rl-baselines3-zoo hyperparams/td3.yml "Pendulum-v0" (n_timesteps 20000)
        dict(algo="TD3", gamma=0.98, buffer_size=200_000, learning_starts=10_000,
             noise_type="normal", noise_std=0.1, gradient_steps=-1, train_freq=(1, "episode"),
             learning_rate=1e-3, policy_kwargs=dict(net_arch=[400, 300]))),
    Row("MountainCarContinuous-v0", "ppo", 50_000, _CLIPPED_UP.format(zoo="20k"),
        # rl-baselines3-zoo hyperparams/ppo.yml "MountainCarContinuous-v0" (n_timesteps 20000)
        dict(algo="PPO", normalize=True, n_envs=1, batch_size=256, n_steps=8, gamma=0.9999,
             learning_rate=7.77e-05, ent_coef=0.00429, clip_range=0.1, n_epochs=10,
             gae_lambda=0.9, max_grad_norm=5, vf_coef=0.19, use_sde=True,
             policy_kwargs=dict(log_std_init=-3.29, ortho_init=False))),
    Row("MountainCarContinuous-v0", "sac", 50_000, _CHEAP,
        # rl-baselines3-zoo hyperparams/sac.yml "MountainCarContinuous-v0" (n_timesteps 50000)
        dict(algo="SAC", learning_rate=3e-4, buffer_size=50_000, batch_size=512, ent_coef=0.1,
             train_freq=32, gradient_steps=32, gamma=0.9999, tau=0.01, learning_starts=0,
             use_sde=True, policy_kwargs=dict(log_std_init=-3.67, net_arch=[64, 64]))),
    Row("MountainCarContinuous-v0", "td3", 50_000, _COSTLY.format(zoo="300k", budget="50k"),
        # rl-baselines3-zoo hyperparams/td3.yml "MountainCarContinuous-v0" (n_timesteps 300000)
        dict(algo="TD3", noise_type="ornstein-uhlenbeck", noise_std=0.5)),
    Row("LunarLanderContinuous-v3", "ppo", 300_000, _CLIPPED_DOWN.format(zoo="1M", budget="300k"),
        # rl-baselines3-zoo hyperparams/ppo.yml "LunarLanderContinuous-v3" (n_timesteps 1e6)
        dict(algo="PPO", n_envs=16, n_steps=1024, batch_size=64, gae_lambda=0.98, gamma=0.999,
             n_epochs=4, ent_coef=0.01)),
    Row("LunarLanderContinuous-v3", "sac", 50_000, _COSTLY.format(zoo="500k", budget="50k"),
        # rl-baselines3-zoo hyperparams/sac.yml "LunarLanderContinuous-v2" (n_timesteps 5e5)
        dict(algo="SAC", batch_size=256, learning_rate="lin_7.3e-4", buffer_size=1_000_000,
             ent_coef="auto", gamma=0.99, tau=0.01, train_freq=1, gradient_steps=1,
             learning_starts=10_000, policy_kwargs=dict(net_arch=[400, 300]))),
    Row("LunarLanderContinuous-v3", "td3", 50_000, _COSTLY.format(zoo="300k", budget="50k"),
        # rl-baselines3-zoo hyperparams/td3.yml "LunarLanderContinuous-v2" (n_timesteps 3e5)
        dict(algo="TD3", gamma=0.98, buffer_size=200_000, learning_starts=10_000,
             noise_type="normal", noise_std=0.1, gradient_steps=-1, train_freq=(1, "episode"),
             learning_rate=1e-3, policy_kwargs=dict(net_arch=[400, 300]))),
    Row("BipedalWalker-v3", "ppo", 300_000, _CLIPPED_DOWN.format(zoo="5M", budget="300k"),
        # rl-baselines3-zoo hyperparams/ppo.yml "BipedalWalker-v3" (n_timesteps 5e6)
        dict(algo="PPO", normalize=True, n_envs=32, n_steps=2048, batch_size=64,
             gae_lambda=0.95, gamma=0.999, n_epochs=10, ent_coef=0.0, learning_rate=3e-4,
             clip_range=0.18)),
    Row("BipedalWalker-v3", "sac", 50_000, _COSTLY.format(zoo="500k", budget="50k"),
        # rl-baselines3-zoo hyperparams/sac.yml "BipedalWalker-v3" (n_timesteps 5e5)
        dict(algo="SAC", learning_rate=7.3e-4, buffer_size=300_000, batch_size=256,
             ent_coef="auto", gamma=0.98, tau=0.02, train_freq=64, gradient_steps=64,
             learning_starts=10_000, use_sde=True,
             policy_kwargs=dict(log_std_init=-3, net_arch=[400, 300]))),
    Row("BipedalWalker-v3", "td3", 50_000, _COSTLY.format(zoo="1M", budget="50k"),
        # rl-baselines3-zoo hyperparams/td3.yml "BipedalWalker-v3" (n_timesteps 1e6)
        dict(algo="TD3", gamma=0.98, buffer_size=200_000, learning_starts=10_000,
             noise_type="normal", noise_std=0.1, gradient_steps=-1, train_freq=(1, "episode"),
             learning_rate=1e-3, policy_kwargs=dict(net_arch=[400, 300]))),
    Row("HalfCheetah-v5", "ppo", 300_000, _CLIPPED_DOWN.format(zoo="1M", budget="300k"),
        # rl-baselines3-zoo hyperparams/ppo.yml "HalfCheetah-v4" (n_timesteps 1e6)
        dict(algo="PPO", normalize=True, n_envs=1, batch_size=64, n_steps=512, gamma=0.98,
             learning_rate=2.0633e-05, ent_coef=0.000401762, clip_range=0.1, n_epochs=20,
             gae_lambda=0.92, max_grad_norm=0.8, vf_coef=0.58096,
             policy_kwargs=dict(log_std_init=-2, ortho_init=False, activation_fn="ReLU",
                                net_arch=dict(pi=[256, 256], vf=[256, 256])))),
    Row("HalfCheetah-v5", "sac", 50_000, _COSTLY.format(zoo="1M", budget="50k"),
        # rl-baselines3-zoo hyperparams/sac.yml "HalfCheetah-v3" (&mujoco-defaults, 1e6)
        dict(algo="SAC", learning_starts=10_000)),
    Row("HalfCheetah-v5", "td3", 50_000, _COSTLY.format(zoo="1M", budget="50k"),
        # rl-baselines3-zoo hyperparams/td3.yml "HalfCheetah-v3" (&mujoco-defaults, 1e6)
        dict(algo="TD3", learning_starts=10_000, noise_type="normal", noise_std=0.1)),
    Row("Hopper-v5", "ppo", 300_000, _CLIPPED_DOWN.format(zoo="1M", budget="300k"),
        # rl-baselines3-zoo hyperparams/ppo.yml "Hopper-v4" (n_timesteps 1e6)
        dict(algo="PPO", normalize=True, n_envs=1, batch_size=32, n_steps=512, gamma=0.999,
             learning_rate=9.80828e-05, ent_coef=0.00229519, clip_range=0.2, n_epochs=5,
             gae_lambda=0.99, max_grad_norm=0.7, vf_coef=0.835671,
             policy_kwargs=dict(log_std_init=-2, ortho_init=False, activation_fn="ReLU",
                                net_arch=dict(pi=[256, 256], vf=[256, 256])))),
    Row("Hopper-v5", "sac", 50_000, _COSTLY.format(zoo="1M", budget="50k"),
        # rl-baselines3-zoo hyperparams/sac.yml "Hopper-v3" (<<: *mujoco-defaults, 1e6)
        dict(algo="SAC", learning_starts=10_000)),
    Row("Hopper-v5", "td3", 50_000, _COSTLY.format(zoo="1M", budget="50k"),
        # rl-baselines3-zoo hyperparams/td3.yml "Hopper-v3" (<<: *mujoco-defaults, 1e6)
        dict(algo="TD3", learning_starts=10_000, noise_type="normal", noise_std=0.1,
             train_freq=1, gradient_steps=1, learning_rate=3e-4, batch_size=256)),
]

ROWS_BY_KEY: dict[tuple[str, str], Row] = {(row.env, row.algo): row for row in ROWS}
