"""Preset configurations for ``rlfast train ALGO ENV`` and the builder that assembles them.

A preset is a nested dict with sections ``agent``, ``algo``, ``sampler`` and ``runner``;
every leaf can be overridden from the command line by its dotted key. The agent and model are
chosen from the environment's gymnasium spaces, matched exactly: categorical on Discrete
actions, one categorical per dimension on (1-D) MultiDiscrete and MultiBinary actions (PPO and
A2C only), Gaussian on 1-D float Box actions, and the convolutional Atari agent for
``atari:<game>`` (rlfast's own AtariEnv). An algorithm that cannot act in the space is a
``ValueError`` naming the space and the algorithms that can. Dict and Tuple observations are
flattened into one vector for the MLP agents (``env.flatten_observation``).
"""
from __future__ import annotations

from collections import namedtuple
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from gymnasium import spaces as gym_spaces

from rlfast.agents import (AlternatingRecurrentCategoricalPgAgent,
                           AlternatingRecurrentMultiCategoricalPgAgent, CategoricalPgAgent,
                           MujocoFfAgent, MujocoLstmAgent, MultiCategoricalPgAgent,
                           RecurrentCategoricalPgAgent, RecurrentMultiCategoricalPgAgent)
from rlfast.algos import A2C, PPO, RLAlgorithm
from rlfast.algos.dqn import DQN, R2D1, CategoricalDQN
from rlfast.algos.qpg import DDPG, SAC, TD3
from rlfast.envs import make as make_gym_env
from rlfast.envs.gym import gym_horizon
from rlfast.envs.gym import gym_spaces as make_gym_spaces
from rlfast.experiments.device import (device_label, learner_device, resolve_device,
                                      sampler_for_device)
from rlfast.experiments.env_overrides import DQN_CARTPOLE, ENV_SAMPLER, ENV_TUNED
from rlfast.experiments.qpg_presets import QPG_ALGOS, QPG_PRESETS
from rlfast.runners import AsyncRlEval, MinibatchRlEval, SyncRlEval
from rlfast.samplers import (AlternatingSampler, AsyncAlternatingSampler, AsyncCpuSampler,
                             AsyncGpuSampler, AsyncSerialSampler, CpuEvalCollector, CpuResetCollector, CpuSampler,
                             CpuWaitResetCollector, GpuEvalCollector, GpuResetCollector,
                             GpuSampler, GpuWaitResetCollector, SerialEvalCollector,
                             SerialSampler, TrajInfo)
from rlfast.utils.checks import check_choice
from rlfast.utils.distributed import DEFAULT_DIST_TIMEOUT_S
from rlfast.utils.misc import available_cpus, deep_merge

# Evaluation: 8 greedy episodes, one per eval env, each allowed its full 500 steps.
_COMMON_SAMPLER = dict(max_decorrelation_steps=100, eval_n_envs=8, eval_max_steps=8 * 500,
                       eval_max_trajectories=8)

PRESETS: dict[str, dict] = {
    "ppo": dict(
        discrete=dict(
            agent=dict(model_kwargs=dict(hidden_sizes=[64, 64]), greedy_eval=True,
                       recurrent=False),
            algo=dict(discount=0.99, learning_rate=3e-3, value_loss_coeff=0.5,
                      entropy_loss_coeff=0.0, clip_grad_norm=1.0, gae_lambda=0.95,
                      minibatches=4, epochs=4, ratio_clip=0.2, linear_lr_schedule=True,
                      normalize_advantage=True),
            sampler=dict(batch_T=64, batch_B=16, **_COMMON_SAMPLER),
            runner=dict(n_steps=100_000, log_interval_steps=10_240),
        ),
        continuous=dict(
            agent=dict(model_kwargs=dict(hidden_sizes=[64, 64], normalize_observation=True),
                       greedy_eval=True, recurrent=False),
            # Observation and reward normalization, as in the PPO paper's MuJoCo setup and
            # SB3's VecNormalize. Measured on Pendulum-v1 (seeds 1, 2; 100k steps): final
            # greedy return -211 / -210 with reward normalization, -307 / -419 without.
            algo=dict(discount=0.99, learning_rate=1e-3, value_loss_coeff=0.5,
                      entropy_loss_coeff=0.0, clip_grad_norm=1.0, gae_lambda=0.95,
                      minibatches=32, epochs=10, ratio_clip=0.2, linear_lr_schedule=True,
                      normalize_advantage=True, normalize_reward=True),
            sampler=dict(batch_T=256, batch_B=8, **_COMMON_SAMPLER),
            runner=dict(n_steps=200_000, log_interval_steps=20_480),
        ),
    ),
    "a2c": dict(
        discrete=dict(
            agent=dict(model_kwargs=dict(hidden_sizes=[64, 64]), greedy_eval=True,
                       recurrent=False),
            algo=dict(discount=0.99, learning_rate=1e-3, value_loss_coeff=0.5,
                      entropy_loss_coeff=0.01, clip_grad_norm=0.5, gae_lambda=1.0,
                      normalize_advantage=False),
            sampler=dict(batch_T=5, batch_B=16, **_COMMON_SAMPLER),
            runner=dict(n_steps=200_000, log_interval_steps=20_000),
        ),
        continuous=dict(
            agent=dict(model_kwargs=dict(hidden_sizes=[64, 64], normalize_observation=True),
                       greedy_eval=True, recurrent=False),
            algo=dict(discount=0.99, learning_rate=7e-4, value_loss_coeff=0.5,
                      entropy_loss_coeff=0.0, clip_grad_norm=0.5, gae_lambda=0.95,
                      normalize_advantage=True),
            sampler=dict(batch_T=16, batch_B=16, **_COMMON_SAMPLER),
            runner=dict(n_steps=200_000, log_interval_steps=20_480),
        ),
    ),
}

_ATARI_SAMPLER = dict(max_decorrelation_steps=1000, eval_n_envs=4, eval_max_steps=40_000,
                      eval_max_trajectories=4)
PRESETS["ppo"]["atari"] = dict(
    agent=dict(model_kwargs=dict(fc_sizes=512), greedy_eval=False, recurrent=False),
    env=dict(frame_skip=4, num_img_obs=4, clip_reward=True, episodic_lives=True,
             repeat_action_probability=0.0, horizon=27_000),
    algo=dict(discount=0.99, learning_rate=2.5e-4, value_loss_coeff=0.5,
              entropy_loss_coeff=0.01, clip_grad_norm=0.5, gae_lambda=0.95, minibatches=4,
              epochs=4, ratio_clip=0.1, linear_lr_schedule=True, normalize_advantage=True,
              optim_kwargs=dict(fused=True)),  # one-kernel Adam: see build_optimizer
    sampler=dict(batch_T=128, batch_B=8, **_ATARI_SAMPLER),
    runner=dict(n_steps=10_000_000, log_interval_steps=100_000),
)
PRESETS["a2c"]["atari"] = dict(
    agent=dict(model_kwargs=dict(fc_sizes=512), greedy_eval=False, recurrent=False),
    env=dict(PRESETS["ppo"]["atari"]["env"]),
    algo=dict(discount=0.99, learning_rate=7e-4, value_loss_coeff=0.5,
              entropy_loss_coeff=0.01, clip_grad_norm=0.5, gae_lambda=1.0,
              normalize_advantage=False,
              OptimCls="RMSprop", optim_kwargs=dict(alpha=0.99, eps=1e-5)),
    sampler=dict(batch_T=5, batch_B=16, **_ATARI_SAMPLER),
    runner=dict(n_steps=10_000_000, log_interval_steps=100_000),
)

# ---- value-based presets (discrete actions only) -----------------------------------------
_DQN_SAMPLER = dict(batch_T=4, batch_B=8, max_decorrelation_steps=0, eval_n_envs=8,
                    eval_max_steps=8 * 500, eval_max_trajectories=8)
# The general DQN preset for vector observations: the standard classic-control DQN of
# rl-baselines3-zoo (hyperparams/dqn.yml, its Acrobot-v1 and LunarLander-v2 entries, which
# agree: learning_rate 6.3e-4, batch_size 128, buffer_size 50000, gamma 0.99,
# target_update_interval 250, train_freq 4, gradient_steps -1, exploration_fraction 0.12,
# exploration_final_eps 0.1, net_arch [256, 256]), in rlfast's units: one update of 128
# samples per environment step is replay_ratio 128; 250 steps between target copies are 250
# updates; epsilon reaches its floor after 12% of the 100k-step default budget. One-step
# targets, not double: the zoo's (and the Nature paper's) DQN. Learning starts after 1000
# steps (zoo: 0), so the first batches are not 128 draws of a handful of transitions.
# The network is 128x128, not the zoo's 256x256. Measured here (rlfast train dqn, 100k steps,
# cpu sampler; final = 10 greedy episodes of bench_presets, seed 0 / 1):
#   LunarLander-v3: 64x64 32 / -, 128x128 169 / 209, 256x256 112 / - (the old preset, rlfast's
#   CartPole tuning: -32);
#   Acrobot-v1: 128x128 -87 / -78; (last evaluation of the run, 8 episodes) 64x64 -81 / -81
#   / -89 (seeds 0-2), 256x256 -81 / -72.
# 256x256 took about twice as long as 128x128 (LunarLander seed 0: 618 s / 333 s, both on a
# loaded machine).
# CartPole-v1 keeps the preset rlfast tuned on it (DQN_CARTPOLE in env_overrides).
_DQN_ALGO = dict(discount=0.99, batch_size=128, min_steps_learn=1000, delta_clip=None,
                 replay_size=50_000, replay_ratio=128, target_update_tau=1.0,
                 target_update_interval=250, n_step_return=1, learning_rate=6.3e-4,
                 clip_grad_norm=10.0, eps_steps=12_000, double_dqn=False,
                 prioritized_replay=False)
_DQN_AGENT = dict(model_kwargs=dict(hidden_sizes=[128, 128], dueling=False), eps_init=1.0,
                  eps_final=0.1, eps_eval=0.0, recurrent=False)
# The distributional presets build on the CartPole-tuned DQN (their tuning started there).
_DQN_TUNED_ALGO = deep_merge(_DQN_ALGO, DQN_CARTPOLE["algo"])
_DQN_TUNED_AGENT = deep_merge(_DQN_AGENT, DQN_CARTPOLE["agent"])
_ATARI_DQN_SAMPLER = dict(batch_T=2, batch_B=16, max_decorrelation_steps=1000, eval_n_envs=4,
                          eval_max_steps=40_000, eval_max_trajectories=4)
_ATARI_DQN_ALGO = dict(discount=0.99, batch_size=32, min_steps_learn=50_000, delta_clip=1.0,
                       replay_size=1_000_000, replay_ratio=8, target_update_tau=1.0,
                       target_update_interval=312, n_step_return=1, learning_rate=2.5e-4,
                       clip_grad_norm=10.0, eps_steps=1_000_000, double_dqn=False,
                       prioritized_replay=False, frame_buffer=True,
                       optim_kwargs=dict(fused=True))  # one-kernel Adam: see build_optimizer
_ATARI_DQN_AGENT = dict(model_kwargs=dict(dueling=False), eps_init=1.0, eps_final=0.01,
                        eps_eval=0.001, recurrent=False)
_RUN_CLASSIC = dict(n_steps=100_000, log_interval_steps=10_000)
_RUN_ATARI = dict(n_steps=10_000_000, log_interval_steps=100_000)

_RAINBOW = dict(n_step_return=3, double_dqn=True, prioritized_replay=True)
PRESETS["dqn"] = dict(
    discrete=dict(agent=_DQN_AGENT, algo=_DQN_ALGO, sampler=_DQN_SAMPLER, runner=_RUN_CLASSIC),
    atari=dict(agent=_ATARI_DQN_AGENT, env=dict(PRESETS["ppo"]["atari"]["env"]),
               algo=_ATARI_DQN_ALGO, sampler=_ATARI_DQN_SAMPLER, runner=_RUN_ATARI),
)
PRESETS["cat_dqn"] = dict(
    discrete=dict(agent=deep_merge(_DQN_TUNED_AGENT, dict(n_atoms=51)),
                  algo=deep_merge(_DQN_TUNED_ALGO, dict(V_min=0.0, V_max=100.0, learning_rate=1e-3)),
                  sampler=_DQN_SAMPLER, runner=_RUN_CLASSIC),
    atari=dict(agent=deep_merge(_ATARI_DQN_AGENT, dict(n_atoms=51)),
               env=dict(PRESETS["ppo"]["atari"]["env"]),
               algo=deep_merge(_ATARI_DQN_ALGO, dict(V_min=-10.0, V_max=10.0)),
               sampler=_ATARI_DQN_SAMPLER, runner=_RUN_ATARI),
)
PRESETS["rainbow"] = dict(
    discrete=dict(agent=deep_merge(_DQN_TUNED_AGENT, dict(n_atoms=51, eps_init=0.0, eps_final=0.0,
                                                    model_kwargs=dict(dueling=True, noisy=True))),
                  algo=deep_merge(_DQN_TUNED_ALGO, dict(V_min=0.0, V_max=100.0, **_RAINBOW)),
                  sampler=_DQN_SAMPLER, runner=_RUN_CLASSIC),
    atari=dict(agent=deep_merge(_ATARI_DQN_AGENT,
                                dict(n_atoms=51, eps_init=0.0, eps_final=0.0,
                                     model_kwargs=dict(dueling=True, noisy=True))),
               env=dict(PRESETS["ppo"]["atari"]["env"]),
               algo=deep_merge(_ATARI_DQN_ALGO,
                               dict(V_min=-10.0, V_max=10.0, learning_rate=6.25e-5,
                                    replay_ratio=4, target_update_interval=2000, **_RAINBOW)),
               sampler=_ATARI_DQN_SAMPLER, runner=_RUN_ATARI),
)

PRESETS["r2d1"] = dict(
    discrete=dict(
        agent=dict(model_kwargs=dict(hidden_sizes=[64], lstm_size=64, head_size=64), eps_init=1.0,
                   eps_final=0.02, eps_eval=0.0, recurrent=True),
        # Tuned on masked CartPole (tests/learning/test_r2d1_masked_cartpole.py).
        algo=dict(discount=0.99, batch_T=20, batch_B=16, warmup_T=10, store_rnn_state_interval=20,
                  min_steps_learn=2000, delta_clip=None, replay_size=100_000, replay_ratio=16,
                  target_update_interval=100, n_step_return=3, learning_rate=1e-3,
                  clip_grad_norm=10.0, eps_steps=20_000, double_dqn=True,
                  prioritized_replay=True, pri_eta=0.9),
        sampler=dict(batch_T=20, batch_B=8, max_decorrelation_steps=0, eval_n_envs=8,
                     eval_max_steps=8 * 500, eval_max_trajectories=8),
        runner=_RUN_CLASSIC),
    atari=dict(
        agent=dict(model_kwargs=dict(dueling=True), eps_init=1.0, eps_final=0.01, eps_eval=0.001,
                   recurrent=True),
        env=dict(PRESETS["ppo"]["atari"]["env"]),
        algo=dict(discount=0.997, batch_T=80, batch_B=64, warmup_T=40, store_rnn_state_interval=40,
                  min_steps_learn=100_000, delta_clip=None, replay_size=1_000_000, replay_ratio=1,
                  target_update_interval=2500, n_step_return=5, learning_rate=1e-4,
                  clip_grad_norm=80.0, eps_steps=1_000_000, double_dqn=True,
                  prioritized_replay=True, pri_eta=0.9, frame_buffer=True),
        sampler=dict(batch_T=40, batch_B=16, max_decorrelation_steps=1000, eval_n_envs=4,
                     eval_max_steps=40_000, eval_max_trajectories=4),
        runner=_RUN_ATARI),
)

PRESETS.update(QPG_PRESETS)

ALGOS = {"ppo": PPO, "a2c": A2C, "dqn": DQN, "cat_dqn": CategoricalDQN, "rainbow": CategoricalDQN,
         "r2d1": R2D1, "ddpg": DDPG, "td3": TD3, "sac": SAC}
VALUE_BASED = ("dqn", "cat_dqn", "rainbow", "r2d1")
SAMPLERS = ("serial", "cpu", "gpu", "alternating")
RUNNERS = ("sync", "async")
REPLAY_ALGOS = VALUE_BASED + tuple(QPG_ALGOS)  # the algorithms an async runner can train
# The async runner's own settings (``--set async.sampler_throttle=False``), see AsyncRlBase.
# The presets hold the replay ratio (their tuning assumes it); the runner's default is a
# free-running sampler.
ASYNC_DEFAULTS = dict(copier="optimizer", sampler_throttle=True)
# Multi-rank (SyncRl) settings (``--set distributed.dist_timeout=600``): seconds a collective
# may wait on another rank before the run fails, see SyncRlMixin.
DISTRIBUTED_DEFAULTS = dict(dist_timeout=DEFAULT_DIST_TIMEOUT_S)
ATARI_PREFIX = "atari:"
# Sampler safety settings every preset exposes (``--set sampler.check_finite=False``).
SAMPLER_SAFETY = dict(check_finite=True, worker_timeout="auto")


# Action kinds (``EnvTraits.kind``), the preset family each uses, the algorithms that can act
# in them and how messages name them. MultiDiscrete actions use the "discrete" hyperparameters
# with the per-dimension categorical agent, which only the policy-gradient algorithms have.
ACTION_KIND_FAMILY = {"atari": "atari", "discrete": "discrete", "multi_discrete": "discrete",
                      "continuous": "continuous"}
MULTI_DISCRETE_ALGOS = ("a2c", "ppo")
_KIND_LABEL = {"atari": "Atari (discrete)", "discrete": "Discrete",
               "multi_discrete": "MultiDiscrete / MultiBinary", "continuous": "continuous Box"}

EnvTraits = namedtuple("EnvTraits", ["kind", "action_space", "observation_space", "horizon"],
                       defaults=(None,))
EnvTraits.__doc__ = ("What the presets need to know of an environment: the action ``kind`` "
                     "(a key of ACTION_KIND_FAMILY, or None for an action space no preset "
                     "supports), the gymnasium spaces (None for Atari games) and the time "
                     "limit gymnasium registers for it (None if none is known).")


def action_kind(space: Any) -> str | None:
    """The action kind of a gymnasium action space: ``"discrete"`` (Discrete),
    ``"multi_discrete"`` (1-D MultiDiscrete or MultiBinary), ``"continuous"`` (1-D float Box),
    else None (Dict, Tuple, integer Box, multi-dimensional spaces, ...)."""
    if isinstance(space, gym_spaces.Discrete):
        return "discrete"
    if isinstance(space, (gym_spaces.MultiDiscrete, gym_spaces.MultiBinary)):
        return "multi_discrete" if len(space.shape) == 1 else None
    if isinstance(space, gym_spaces.Box) and np.dtype(space.dtype).kind == "f" and \
            len(space.shape) == 1:
        return "continuous"
    return None


def inspect_env(env_id: str) -> EnvTraits:
    """The ``EnvTraits`` of ``env_id``: ``atari:<game>`` is an Atari game (nothing is made);
    a gymnasium id is made once, its spaces read and the env closed again."""
    if env_id.startswith(ATARI_PREFIX):
        return EnvTraits("atari", None, None)
    spaces = make_gym_spaces(env_id)
    return EnvTraits(action_kind(spaces.action), spaces.action, spaces.observation,
                     gym_horizon(env_id))


def env_kind(env_id: str) -> str | None:
    """The action kind of ``env_id`` (see ``inspect_env`` and ``action_kind``)."""
    return inspect_env(env_id).kind


def algos_for(kind: str) -> list[str]:
    """The preset algorithms that can act in action spaces of ``kind``, sorted."""
    family = ACTION_KIND_FAMILY[kind]
    return sorted(algo for algo, presets in PRESETS.items() if family in presets and
                  (kind != "multi_discrete" or algo in MULTI_DISCRETE_ALGOS))


def check_algo_fits(algo: str, traits: EnvTraits, env_id: str) -> str:
    """The preset family of ``algo`` for this environment, or a ``ValueError`` that names the
    action space and the algorithms that can act in it."""
    if algo not in PRESETS:
        raise ValueError(f"unknown algorithm {algo!r}; choose from {sorted(PRESETS)}")
    space = "" if traits.action_space is None else " " + " ".join(str(traits.action_space).split())
    if traits.kind is None:
        supported = "; ".join(f"{label} ({', '.join(algos_for(kind))})"
                              for kind, label in _KIND_LABEL.items() if kind != "atari")
        raise ValueError(f"no rlfast algorithm can act in the action space{space} of {env_id}; "
                         f"the presets support these action spaces: {supported} (MultiDiscrete, "
                         f"MultiBinary and Box ones 1-D)")
    able = algos_for(traits.kind)
    if algo not in able:
        own = ", ".join(label for kind, label in _KIND_LABEL.items() if algo in algos_for(kind))
        raise ValueError(f"{algo!r} cannot act in the {_KIND_LABEL[traits.kind]} action "
                         f"space{space} of {env_id} (it acts in {own} action spaces); "
                         f"algorithms that can: {', '.join(able)}")
    return ACTION_KIND_FAMILY[traits.kind]


def needs_flat_observation(traits: EnvTraits) -> bool:
    """Whether the MLP agents need ``env.flatten_observation``: a Dict or Tuple observation
    space, which they read flattened into one vector."""
    return isinstance(traits.observation_space, (gym_spaces.Dict, gym_spaces.Tuple))


def fit_evaluation_to_horizon(sampler: dict, horizon: int | None) -> None:
    """Raise ``sampler["eval_max_steps"]`` (in place) so that every evaluation environment can
    play one whole episode of ``horizon`` steps. The presets' budgets assume CartPole's 500
    (on-policy and DQN) or MuJoCo's 1000 (SAC, TD3, DDPG); with LunarLander's 1000 or
    BipedalWalker's 1600 an evaluation would end before any episode did and log no return.
    Never lowers a budget; ``--set sampler.eval_max_steps`` still applies afterwards."""
    n_envs, budget = sampler.get("eval_n_envs"), sampler.get("eval_max_steps")
    if horizon and n_envs and budget is not None and budget < n_envs * horizon:
        sampler["eval_max_steps"] = n_envs * horizon


def get_preset(algo: str, env_id: str) -> dict:
    """The preset for ``algo`` matched to ``env_id``: a fresh nested dict that the caller
    may change freely.

    The family preset (from the action space, ``check_algo_fits``) comes first, then any
    per-environment tuning from ``ENV_TUNED``; Dict and Tuple observations add
    ``env.flatten_observation=True``. An unknown algorithm, or one that cannot act in this
    action space, is a ``ValueError`` naming the valid choices.
    """
    if algo not in PRESETS:
        raise ValueError(f"unknown algorithm {algo!r}; choose from {sorted(PRESETS)}")
    traits = inspect_env(env_id)
    family = check_algo_fits(algo, traits, env_id)
    config = deep_merge(PRESETS[algo][family], ENV_TUNED.get((algo, env_id), {}))
    if needs_flat_observation(traits):
        config["env"] = dict(config.get("env", {}), flatten_observation=True)
    fit_evaluation_to_horizon(config["sampler"], traits.horizon)
    for key, value in SAMPLER_SAFETY.items():  # every preset can set them with --set
        config["sampler"].setdefault(key, value)
    # --set runner.stop_return=X ends training at the first evaluation averaging X or more.
    config["runner"].setdefault("stop_return", None)
    if algo in REPLAY_ALGOS:  # read by --runner async only (see AsyncRlBase)
        config.setdefault("async", dict(ASYNC_DEFAULTS))
        # Where replay lives: host, device, or host + prefetcher (rlfast.algos.replay_choice)
        config["algo"].setdefault("replay_device", "auto")
        # torch.compile of the loss; on CUDA the whole update in one CUDA graph (LeanRL)
        config["algo"].setdefault("compile", False)
    else:  # on-policy: sampling may overlap learning; the agent may run its model in bf16
        config["runner"].setdefault("overlap", False)
        config["agent"].setdefault("autocast", None)
        config["algo"].setdefault("normalize_reward", False)  # VecNormalize-style scaling
        # torch.compile of the loss; on CUDA PPO's whole step in one CUDA graph (LeanRL)
        config["algo"].setdefault("compile", False)
        if algo == "ppo":  # stop an iteration's epochs once their KL passes it (None: off)
            config["algo"].setdefault("target_kl", None)
    config.setdefault("distributed", dict(DISTRIBUTED_DEFAULTS))  # read by multi-rank runs
    return config


def default_sampler(algo: str, env_id: str | None = None, cuda_idx: int | None = None,
                    n_envs: int | None = None, n_cpus: int | None = None,
                    runner: str = "sync") -> str:
    """The sampler ``rlfast train`` uses without ``--sampler``.

    In this order: the per-environment choice of ``ENV_SAMPLER`` (``env_overrides``) where it
    has one for (``algo``, ``env_id``); serial for the replay-based continuous-control
    algorithms (one environment and many updates per step leave nothing for parallel workers
    to hide); with the learner on a GPU (``cuda_idx``) and a convolutional agent
    (``atari:<game>``) in a synchronous run, the measured rule of
    :func:`rlfast.experiments.device.sampler_for_device` (the GPU action server or
    worker-side inference, whichever measured faster at ``n_envs`` environments, default the
    preset's ``batch_B``, on ``n_cpus`` cores, default the available ones); else ``"cpu"``.
    """
    if env_id is not None and (algo, env_id) in ENV_SAMPLER:
        return ENV_SAMPLER[(algo, env_id)]
    if algo in QPG_ALGOS:
        return "serial"
    conv = env_id is not None and env_id.startswith(ATARI_PREFIX)
    if conv and cuda_idx is not None and runner == "sync" and algo in PRESETS:
        if n_envs is None:
            n_envs = PRESETS[algo]["atari"]["sampler"]["batch_B"]
        n_cpus = len(available_cpus()) if n_cpus is None else n_cpus
        measured = sampler_for_device(True, n_envs, n_cpus, cuda_idx)
        if measured is not None:
            return measured
    return "cpu"


def default_affinity(n_envs: int, sampler: str, master_threads: int | None = None,
                     device: str | None = "auto") -> dict:
    """The affinity dict of a single-machine run that uses every available core.

    One worker per core (at most one per environment; the alternating sampler needs two),
    and the learner on the GPU that ``device`` names (``--device``: ``auto``, the default,
    is GPU 0 when CUDA is available; ``cpu``; ``cuda``; ``cuda:N``), for every sampler; the
    gpu and alternating samplers serve their actions on that device too.
    ``master_threads`` sets the master's torch threads while the algorithm optimizes
    (default None: every core, since the synchronous samplers' workers are idle then; the
    master samples on one thread, see ``MinibatchRlBase``).
    """
    cpus = available_cpus()
    cuda_idx = resolve_device(device)
    if sampler == "serial":
        return dict(master_cpus=cpus, master_torch_threads=master_threads, cuda_idx=cuda_idx)
    n_workers = max(2 if sampler == "alternating" else 1, min(len(cpus), n_envs))
    workers = [[cpus[i % len(cpus)]] for i in range(n_workers)]
    return dict(master_cpus=cpus, master_torch_threads=master_threads, workers_cpus=workers,
                worker_torch_threads=1, cuda_idx=cuda_idx)


def default_async_affinity(sampler: str, device: str | None = "auto") -> dict:
    """The async affinity of a single-machine run: the optimizer on the GPU that ``device``
    names (``auto``, the default: GPU 0 when CUDA is available, else the CPU), the sampler
    process and its workers on every core (one worker per core, two at least for the
    alternating sampler). The sampler process acts on the CPU (``cuda_idx=None``), also for
    the gpu and alternating samplers."""
    cpus = available_cpus()
    cuda_idx = resolve_device(device)
    n_workers = max(2 if sampler == "alternating" else 1, len(cpus))
    sampler_affinity = dict(master_cpus=cpus, master_torch_threads=1,
                            workers_cpus=[[cpus[i % len(cpus)]] for i in range(n_workers)],
                            worker_torch_threads=1, cuda_idx=None, set_affinity=True)
    return dict(optimizer=[dict(cuda_idx=cuda_idx, master_cpus=cpus,
                                master_torch_threads=1)], sampler=sampler_affinity)


def run_affinity(config: dict, sampler: str, runner: str = "sync",
                 affinity: dict | list | None = None, device: str | None = "auto",
                 multi_rank: bool = False, code: str | None = None) -> dict | list:
    """The affinity a run of ``config`` uses: ``affinity`` when given (decoded from the
    affinity ``code``), checked against ``device`` (an explicit ``--device`` that
    contradicts it is a ``ValueError``, see :func:`rlfast.experiments.device.learner_device`);
    else the default for the runner on ``device``: :func:`default_async_affinity`, or
    :func:`default_affinity` with ``batch_B`` workers at most and the master's optimizing
    threads from the config's ``affinity.master_torch_threads`` (0: every core).
    ``multi_rank``: several ranks share the default affinity, each on its own GPU."""
    cuda_idx = learner_device(device, affinity, code=code, multi_rank=multi_rank)
    if affinity is not None:
        return affinity
    if runner == "async":
        return default_async_affinity(sampler, device_label(cuda_idx))
    # A preset's "affinity" section may set the master's torch threads (0: every core).
    threads = config.get("affinity", {}).get("master_torch_threads")
    if threads == 0:
        threads = len(available_cpus())
    return default_affinity(config["sampler"]["batch_B"], sampler, master_threads=threads,
                            device=device_label(cuda_idx))


def check_runner(algo_name: str, runner: str) -> None:
    """Refuse an asynchronous run of an algorithm without replay, saying why."""
    check_choice(runner, "runner", RUNNERS)
    if runner == "async" and algo_name not in REPLAY_ALGOS:
        raise ValueError(f"--runner async needs a replay-based algorithm ({', '.join(REPLAY_ALGOS)}); "
                         f"{algo_name!r} learns on-policy from each batch once, so there is no "
                         f"replay buffer for an asynchronous sampler to fill")


def _env_factory(env_id: str, env_cfg: dict) -> tuple[type | Callable, dict, type]:
    """(EnvCls, env_kwargs, TrajInfoCls) for the samplers. An unknown Atari game is a
    ``ValueError`` here, while the run is still being configured, not in a worker later."""
    if env_id.startswith(ATARI_PREFIX):
        from rlfast.envs import AtariEnv, AtariTrajInfo
        from rlfast.envs.atari import resolve_game
        game = env_id[len(ATARI_PREFIX):]
        resolve_game(game)
        return AtariEnv, dict(game=game, **env_cfg), AtariTrajInfo
    return make_gym_env, dict(id=env_id, **env_cfg), TrajInfo


def _value_agent_class(algo_name: str, kind: str, sampler: str) -> type:
    """The DQN-family agent class; R2D1 under the alternating sampler gets the variant that
    keeps one recurrent state per worker group."""
    from rlfast.agents import (AtariCatDqnAgent, AtariDqnAgent, AtariR2d1Agent, CatDqnAgent,
                               DqnAgent, R2d1Agent)
    if algo_name == "r2d1":
        if sampler == "alternating":
            from rlfast.agents import AlternatingAtariR2d1Agent, AlternatingR2d1Agent
            return AlternatingAtariR2d1Agent if kind == "atari" else AlternatingR2d1Agent
        return AtariR2d1Agent if kind == "atari" else R2d1Agent
    categorical = algo_name in ("cat_dqn", "rainbow")
    if kind == "atari":
        return AtariCatDqnAgent if categorical else AtariDqnAgent
    return CatDqnAgent if categorical else DqnAgent


def _agent_class(kind: str, recurrent: bool, sampler: str) -> type:
    """The policy-gradient agent class for the action space; recurrent agents under the
    alternating sampler get the variant that keeps one recurrent state per worker group."""
    alternating = sampler == "alternating"
    if kind == "atari":
        from rlfast.agents import AlternatingAtariLstmAgent, AtariFfAgent, AtariLstmAgent
        if recurrent:
            return AlternatingAtariLstmAgent if alternating else AtariLstmAgent
        return AtariFfAgent
    if kind == "discrete":
        if recurrent:
            return AlternatingRecurrentCategoricalPgAgent if alternating else RecurrentCategoricalPgAgent
        return CategoricalPgAgent
    if kind == "multi_discrete":
        if recurrent:
            return (AlternatingRecurrentMultiCategoricalPgAgent if alternating
                    else RecurrentMultiCategoricalPgAgent)
        return MultiCategoricalPgAgent
    if recurrent:
        if alternating:
            raise ValueError("no alternating recurrent Gaussian preset agent; use --sampler gpu")
        return MujocoLstmAgent
    return MujocoFfAgent


def _algo(algo_name: str, algo_cfg: dict) -> RLAlgorithm:
    """The algorithm object; ``OptimCls`` is given by name (``"RMSprop"``) in presets."""
    algo_cfg = dict(algo_cfg)
    optim = algo_cfg.pop("OptimCls", None)
    if optim is not None:
        algo_cfg["OptimCls"] = getattr(torch.optim, optim)
    return ALGOS[algo_name](**algo_cfg)


def run_params(algo: str, env: str, config: dict, sampler: str, seed: int,
               affinity: str | None = None, runner: str = "sync", world_size: int = 1,
               backend: str | None = None, launcher: str | None = None,
               device: str | None = None) -> dict:
    """What a run records in ``params.json`` so that ``rlfast resume``, ``rlfast eval`` and
    ``rlfast watch`` can rebuild it: the preset name, environment id, the fully resolved
    ``config``, sampler, seed, affinity code (a string or None), runner kind, the
    distributed settings, and ``device``, where the learner ran (``"cpu"``, ``"cuda:0"``;
    a record: ``rlfast resume`` resolves the device again). ``rlfast train`` logs exactly
    this; a launch script that builds its run with :func:`build_experiment` logs it too
    (``logger_context(..., log_params=run_params(...))``) to make its runs resumable."""
    if affinity is not None and not isinstance(affinity, str):
        raise TypeError(f"run_params: affinity is the affinity code string (or None); got "
                        f"{type(affinity).__name__}")
    return dict(algo=algo, env=env, sampler=sampler, seed=seed, affinity=affinity,
                runner=runner, config=config, world_size=world_size, backend=backend,
                launcher=launcher, device=device)


def build_experiment(algo_name: str, env_id: str, config: dict, sampler: str = "cpu",
                     seed: int | None = None, affinity: dict | list | None = None,
                     runner: str = "sync", world_size: int | None = None,
                     backend: str | None = None, distributed: bool = False,
                     device: str | None = "auto"
                     ) -> MinibatchRlEval | SyncRlEval | AsyncRlEval:
    """Assemble sampler, agent, algorithm and runner from a (possibly overridden) preset.

    Everything is constructed but nothing is started: no process, environment step or
    gradient step happens until ``runner.train()``. Errors in the configuration (unknown
    sampler, unknown Atari game, an algorithm that cannot act in the action space, a
    combination without an agent) surface here. Dict and Tuple observations are flattened for
    the MLP agents unless the config says ``env.flatten_observation=False``. Without
    ``affinity`` the run uses every available core (``default_affinity``) and puts its
    learner on ``device`` (``auto``, the default: GPU 0 when CUDA is available; ``cpu``;
    ``cuda``; ``cuda:N``); with one, the affinity decides and an explicit ``device`` that
    contradicts it is a ``ValueError`` (see :func:`run_affinity`).

    ``distributed`` (or ``world_size`` > 1, or an affinity list of one dict per rank) makes
    a synchronous run a :class:`SyncRlEval`: ``world_size`` ranks spawned by the run, or the
    ranks a launcher (torchrun, srun) started; each rank's share of the cores and GPUs comes
    from the affinity (see :func:`rlfast.runners.sync_rl.rank_affinity`). ``backend``
    overrides the automatic choice (NCCL on CUDA, gloo on CPU).
    """
    check_choice(sampler, "sampler", SAMPLERS)
    traits = inspect_env(env_id)
    check_algo_fits(algo_name, traits, env_id)
    kind = traits.kind
    agent_cfg = dict(config["agent"])
    recurrent = agent_cfg.pop("recurrent", False)
    if algo_name in QPG_ALGOS:
        from rlfast.agents import DdpgAgent, SacAgent, Td3Agent
        agent = dict(ddpg=DdpgAgent, td3=Td3Agent, sac=SacAgent)[algo_name](**agent_cfg)
    elif algo_name in VALUE_BASED:
        agent = _value_agent_class(algo_name, kind, sampler)(**agent_cfg)
    else:
        agent = _agent_class(kind, recurrent, sampler)(**agent_cfg)
    env_cfg = dict(config.get("env", {}))
    if needs_flat_observation(traits):  # also for configs not made by get_preset
        env_cfg.setdefault("flatten_observation", True)
    EnvCls, env_kwargs, TrajInfoCls = _env_factory(env_id, env_cfg)
    sampler_cfg = dict(config["sampler"])
    # Recurrent agents replay whole sequences, so environments wait for the batch end to reset.
    cpu_side = sampler in ("serial", "cpu")
    if recurrent:
        collector = CpuWaitResetCollector if cpu_side else GpuWaitResetCollector
    else:
        collector = CpuResetCollector if cpu_side else GpuResetCollector
    SamplerCls, EvalCollectorCls = {
        "serial": (SerialSampler, SerialEvalCollector), "cpu": (CpuSampler, CpuEvalCollector),
        "gpu": (GpuSampler, GpuEvalCollector), "alternating": (AlternatingSampler, GpuEvalCollector),
    }[sampler]
    if runner == "async":
        SamplerCls = dict(serial=AsyncSerialSampler, cpu=AsyncCpuSampler, gpu=AsyncGpuSampler,
                          alternating=AsyncAlternatingSampler)[sampler]
    sampler_obj = SamplerCls(EnvCls=EnvCls, env_kwargs=env_kwargs, CollectorCls=collector,
                             eval_CollectorCls=EvalCollectorCls, TrajInfoCls=TrajInfoCls,
                             **sampler_cfg)
    distributed = distributed or (world_size or 1) > 1 or isinstance(affinity, list)
    if runner == "async" and not affinity:
        affinity = None  # {} too: the async default
    affinity = run_affinity(config, sampler, runner, affinity, device,
                            multi_rank=distributed and runner != "async")
    if runner == "async":
        return AsyncRlEval(algo=_algo(algo_name, config["algo"]), agent=agent,
                           sampler=sampler_obj, seed=seed, affinity=affinity,
                           **config["runner"], **config.get("async", {}))
    if distributed:
        return SyncRlEval(algo=_algo(algo_name, config["algo"]), agent=agent, sampler=sampler_obj,
                          seed=seed, affinity=affinity, world_size=world_size, backend=backend,
                          **config["runner"], **config.get("distributed", {}))
    return MinibatchRlEval(algo=_algo(algo_name, config["algo"]), agent=agent,
                           sampler=sampler_obj, seed=seed, affinity=affinity, **config["runner"])
