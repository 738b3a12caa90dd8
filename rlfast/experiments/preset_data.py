"""The preset configurations of rlfast's own algorithms, as data: one nested dict per
(algorithm, preset family) with sections ``agent``, ``algo``, ``sampler``, ``runner`` (and
``env`` where the family has settings). Each value says where it comes from. The
algorithms are registered with these presets in :mod:`rlfast.experiments.builtin`;
:func:`rlfast.experiments.presets.get_preset` resolves one for an environment.
"""
from __future__ import annotations

from rlfast.experiments.class_defaults import class_defaults
from rlfast.experiments.env_overrides import DQN_CARTPOLE
from rlfast.experiments.qpg_presets import QPG_PRESETS
from rlfast.runners import AsyncRl, MinibatchRlEval
from rlfast.samplers.base import BaseSampler
from rlfast.utils.distributed import DEFAULT_DIST_TIMEOUT_S
from rlfast.utils.misc import deep_merge

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
    # obs_type: rlpyt's 104x80 frames; "84x84" is the frame of CleanRL's and the zoo's runs.
    env=dict(frame_skip=4, num_img_obs=4, clip_reward=True, episodic_lives=True,
             repeat_action_probability=0.0, horizon=27_000, obs_type="rlpyt"),
    # lr_anneal_steps: None anneals over the run's own budget; a number of steps follows a
    # longer published run's schedule (scripts/reproduce.py's Pong row: 10M).
    algo=dict(discount=0.99, learning_rate=2.5e-4, value_loss_coeff=0.5,
              entropy_loss_coeff=0.01, clip_grad_norm=0.5, gae_lambda=0.95, minibatches=4,
              epochs=4, ratio_clip=0.1, linear_lr_schedule=True, lr_anneal_steps=None,
              normalize_advantage=True,
              # One-kernel Adam (see build_optimizer) with eps 1e-5, as in the PPO paper's
              # baselines code, SB3 and CleanRL's ppo_atari.py (torch's default is 1e-8).
              optim_kwargs=dict(fused=True, eps=1e-5)),
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
                  algo=deep_merge(_DQN_TUNED_ALGO,
                                  dict(V_min=0.0, V_max=100.0, learning_rate=1e-3)),
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

# MinAtar games (minatar:<game>; Young & Tian 2019, "MinAtar: An Atari-Inspired Testbed for
# Thorough and Reproducible Reinforcement Learning Experiments", arXiv:1903.03176). DQN as the
# paper runs it (its section on the baselines, and its code, kenjyoung/MinAtar
# examples/dqn.py): one convolution of 16 3x3 filters at stride 1 without padding (8 x 8 x 16
# = 1024 features on the 10 x 10 grid) into 128 ReLU units; replay of 100k transitions,
# batch 32, one update per environment step, Huber loss, gamma 0.99, the target network
# copied every 1000 updates, learning from step 5000 (uniformly random actions until then:
# epsilon 1.0), then epsilon 1.0 -> 0.1 linearly over 100k steps (counted from the start of
# learning, as MinAtar's code counts them), sticky actions 0.1 and difficulty ramping (the
# env defaults, also set below). In rlfast's units: one update of 32 samples per step is
# replay_ratio 32; 1000 steps between target copies are 1000 updates. The optimizer is
# RMSProp with lr 2.5e-4, squared-gradient momentum 0.95 and min squared gradient 0.01:
# torch's RMSprop(alpha=0.95, eps=0.01, centered=True) is the closest, as MinAtar's own code
# has it (torch adds eps to the root, DQN's RMSProp adds 0.01 under it; the later revision of
# examples/dqn.py also sets momentum=0.95, the paper-era one does not). Not MinAtar's: the
# gradient norm is clipped at 10 as in rlfast's Atari presets (MinAtar clips none), and the
# observations reach the model as 0 / 255 scaled by 1/255 (MinAtar's 0 / 1). 8 environments
# x 4 steps per batch keep the ratio of one update per step. Evaluation: 4 episodes with
# epsilon 0.001 (as the Atari DQN preset), at most 5000 steps each (Freeway ends at 2500).
# The paper trains for 5M steps; the default budget here is 2M.
_MINATAR_CONV = dict(channels=[16], kernel_sizes=[3], strides=[1], paddings=[0], fc_sizes=128)
_MINATAR_ENV = dict(sticky_action_prob=0.1, difficulty_ramping=True, minimal_action_set=False,
                    horizon=None)
_MINATAR_SAMPLER = dict(batch_T=4, batch_B=8, max_decorrelation_steps=1000, eval_n_envs=4,
                        eval_max_steps=4 * 5000, eval_max_trajectories=4)
_MINATAR_DQN_ALGO = dict(discount=0.99, batch_size=32, min_steps_learn=5000, delta_clip=1.0,
                         replay_size=100_000, replay_ratio=32, target_update_tau=1.0,
                         target_update_interval=1000, n_step_return=1, learning_rate=2.5e-4,
                         OptimCls="RMSprop", optim_kwargs=dict(alpha=0.95, eps=0.01,
                                                               centered=True),
                         clip_grad_norm=10.0, eps_steps=100_000, double_dqn=False,
                         prioritized_replay=False)
_RUN_MINATAR = dict(n_steps=2_000_000, log_interval_steps=20_000)
# One torch thread for the learner on the CPU: the network is small (133k weights), and beside
# another busy process (2 cores, a PPO benchmark running) one update of 32 took 2.1 ms on one
# thread and 7.6-19.7 ms on two; the POPGym presets found the same.
_MINATAR_AFFINITY = dict(master_torch_threads=1)
PRESETS["dqn"]["minatar"] = dict(
    agent=dict(model_kwargs=dict(_MINATAR_CONV, dueling=False), eps_init=1.0, eps_final=0.1,
               eps_eval=0.001, recurrent=False),
    env=dict(_MINATAR_ENV), algo=_MINATAR_DQN_ALGO, sampler=dict(_MINATAR_SAMPLER),
    runner=dict(_RUN_MINATAR), affinity=dict(_MINATAR_AFFINITY))
# Rainbow on MinAtar: the DQN preset's network and schedule (replay, batch, one update per
# step, target copies every 1000 updates, learning from step 5000) with the extras the Atari
# Rainbow preset adds (Hessel et al. 2018): 3-step double-Q returns, prioritized replay,
# a dueling noisy network and a 51-atom return distribution, no epsilon (the noise explores).
# MinAtar's rewards are not clipped, so the atoms span [-100, 100] and the optimizer is Adam
# with lr 2.5e-4 and eps 3.125e-4, as in the MinAtar Rainbow of Obando-Ceron & Castro,
# "Revisiting Rainbow" (ICML 2021; google/dopamine
# dopamine/labs/environments/minatar/rainbow_*.gin: vmax 100, gamma 0.99, update_horizon 3,
# target_update_period 1000, replay 100k, batch 32). Prioritized replay's beta reaches 1 at the
# end of the default 2M steps, as Rainbow anneals it over the whole run.
PRESETS["rainbow"]["minatar"] = dict(
    agent=dict(model_kwargs=dict(_MINATAR_CONV, dueling=True, noisy=True), n_atoms=51,
               eps_init=0.0, eps_final=0.0, eps_eval=0.001, recurrent=False),
    env=dict(_MINATAR_ENV),
    algo=dict(_MINATAR_DQN_ALGO, V_min=-100.0, V_max=100.0, OptimCls="Adam",
              optim_kwargs=dict(eps=3.125e-4), pri_beta_steps=2_000_000, **_RAINBOW),
    sampler=dict(_MINATAR_SAMPLER), runner=dict(_RUN_MINATAR), affinity=dict(_MINATAR_AFFINITY))

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

# POPGym tasks with discrete actions (popgym:<Task>; Morad et al., ICLR 2023): recurrent agents,
# since every task needs memory. PPO: a GRU of 128 over a 64-unit MLP, 32 envs x 64 steps,
# discount 0.9 (the rewards of the memory tasks are immediate: each step is scored on its own
# answer), an entropy bonus of 0.01, lr 1e-3. Tuned here (AMD EPYC, 2 cores, seed 0,
# RepeatPreviousEasy, greedy eval return): discount 0.9 and GRU 128 reach 1.00 at 174k steps;
# GRU 64 was at 0.19 after 72k; discount 0.99 with GRU 64 at 0.27 after 150k.
# scripts/bench/bench_memory.py measures every core on three tasks.
_POPGYM_PPO = dict(
    agent=dict(model_kwargs=dict(hidden_sizes=[64], lstm_size=128), greedy_eval=True,
               recurrent=True, core="gru"),
    algo=dict(discount=0.9, learning_rate=1e-3, value_loss_coeff=0.5, entropy_loss_coeff=0.01,
              clip_grad_norm=1.0, gae_lambda=0.95, minibatches=4, epochs=4, ratio_clip=0.2,
              linear_lr_schedule=True, normalize_advantage=True),
    sampler=dict(batch_T=64, batch_B=32, **_COMMON_SAMPLER),
    runner=dict(n_steps=500_000, log_interval_steps=10_240),
    # One torch thread: alone, 61k steps of RepeatPreviousEasy took 17-21 s on one thread or
    # two (2 cores); beside another such run, two threads each made the learning check take
    # 462 s instead of 31 (the per-step recurrence's small ops wait on each other's threads).
    affinity=dict(master_torch_threads=1),
)
PRESETS["ppo"]["popgym"] = _POPGYM_PPO
# A2C and R2D1 on POPGym: their discrete presets (untuned on POPGym), A2C made recurrent.
PRESETS["a2c"]["popgym"] = deep_merge(PRESETS["a2c"]["discrete"], dict(
    agent=dict(model_kwargs=dict(hidden_sizes=[64], lstm_size=128), recurrent=True, core="gru")))

PRESETS.update(QPG_PRESETS)

# Multi-agent (pz:<module>, one batch column per agent), MAPPO's settings for the MPE tasks:
# Yu et al., "The Surprising Effectiveness of PPO in Cooperative Multi-Agent Games"
# (NeurIPS 2022 Datasets and Benchmarks, arXiv:2103.01955), Appendix (MPE hyperparameters)
# and its code's MPE Spread script (marlbenchmark/on-policy,
# onpolicy/scripts/train_mpe_scripts/train_mpe_spread.sh): 128 rollout threads of 25-step
# episodes, one minibatch, 10 PPO epochs, lr 7e-4 (Adam eps 1e-5), clip 0.2, entropy 0.01,
# value loss coefficient 1, gradient norm 10, gamma 0.99, GAE lambda 0.95, 64x64 ReLU MLPs
# with input LayerNorm ("feature normalization"), policy output gain 0.01, parameter
# sharing, a centralised critic on the agent-specific global state. The `mappo` preset adds
# the code's value normalization (ValueNorm) and Huber value loss (delta 10): on Spread (N=3,
# 499,200 steps, seeds 0-2, run interleaved by scripts/bench/bench_mappo_options.py) they
# ended at -18.22 / -18.67 / -19.46 against -19.73 / -20.18 / -21.09 without them, better on
# every seed (mean +1.55; random -27.4). The `ppo` and `a2c` multiagent presets keep both off
# (not measured).
_MAPPO = dict(
    agent=dict(model_kwargs=dict(hidden_sizes=[64, 64], feature_norm=True), greedy_eval=True,
               recurrent=False, shared=True),
    algo=dict(discount=0.99, learning_rate=7e-4, value_loss_coeff=1.0, entropy_loss_coeff=0.01,
              clip_grad_norm=10.0, gae_lambda=0.95, minibatches=1, epochs=10, ratio_clip=0.2,
              linear_lr_schedule=False, normalize_advantage=True, optim_kwargs=dict(eps=1e-5),
              central_critic=True),
    sampler=dict(batch_T=25, batch_B=128, max_decorrelation_steps=0, eval_n_envs=8,
                 eval_max_steps=8 * 500, eval_max_trajectories=8),
    runner=dict(n_steps=1_000_000, log_interval_steps=32_000),
)
PRESETS["r2d1"]["popgym"] = deep_merge({}, PRESETS["r2d1"]["discrete"])
PRESETS["mappo"] = dict(multiagent=deep_merge(_MAPPO, dict(algo=dict(value_norm=True,
                                                                   value_loss="huber"))))
# Parameter-shared PPO with a decentralised critic (each agent's value from its own
# observation): MAPPO's settings otherwise.
PRESETS["ppo"]["multiagent"] = deep_merge(_MAPPO, dict(algo=dict(central_critic=False)))
PRESETS["a2c"]["multiagent"] = dict(
    agent=dict(_MAPPO["agent"]),
    algo=dict(discount=0.99, learning_rate=7e-4, value_loss_coeff=0.5, entropy_loss_coeff=0.01,
              clip_grad_norm=0.5, gae_lambda=0.95, normalize_advantage=True,
              central_critic=False),
    sampler=dict(batch_T=25, batch_B=32, max_decorrelation_steps=0, eval_n_envs=8,
                 eval_max_steps=8 * 500, eval_max_trajectories=8),
    runner=dict(n_steps=1_000_000, log_interval_steps=32_000),
)

# Independent DQN-family agents on pz: envs (one batch column per agent, parameters shared,
# the agent id in the input; agent.shared=False for one network per agent): the classic
# DQN preset above with 64x64 networks for the small MPE observations. The replay schedule
# counts agent transitions (every column is one agent), so min_steps_learn, eps_steps and
# replay_size are agent steps: 8 envs of 3 agents x 5 steps = 120 per iteration.
_MA_DQN_AGENT = deep_merge(_DQN_AGENT, dict(model_kwargs=dict(hidden_sizes=[64, 64]),
                                            eps_final=0.05, shared=True))
_MA_DQN_ALGO = deep_merge(_DQN_ALGO, dict(replay_size=100_000, replay_ratio=16,
                                          min_steps_learn=2000, eps_steps=30_000,
                                          target_update_interval=200, learning_rate=5e-4))
_MA_DQN_SAMPLER = dict(batch_T=5, batch_B=8, max_decorrelation_steps=0, eval_n_envs=8,
                       eval_max_steps=8 * 500, eval_max_trajectories=8)
_MA_RUN = dict(n_steps=200_000, log_interval_steps=10_000)
PRESETS["dqn"]["multiagent"] = dict(agent=_MA_DQN_AGENT, algo=_MA_DQN_ALGO,
                                    sampler=_MA_DQN_SAMPLER, runner=_MA_RUN)
PRESETS["cat_dqn"]["multiagent"] = dict(
    agent=deep_merge(_MA_DQN_AGENT, dict(n_atoms=51)),
    algo=deep_merge(_MA_DQN_ALGO, dict(V_min=-100.0, V_max=0.0)),
    sampler=_MA_DQN_SAMPLER, runner=_MA_RUN)
PRESETS["rainbow"]["multiagent"] = dict(
    agent=deep_merge(_MA_DQN_AGENT, dict(n_atoms=51, eps_init=0.0, eps_final=0.0,
                                         model_kwargs=dict(dueling=True, noisy=True))),
    algo=deep_merge(_MA_DQN_ALGO, dict(V_min=-100.0, V_max=0.0, **_RAINBOW)),
    sampler=_MA_DQN_SAMPLER, runner=_MA_RUN)

# ---- settings every configuration exposes ---------------------------------------------------
# Each at the default of the class that takes it (the multi-rank timeout: the constant that
# the runners' signatures name), except where a comment says why not.
# The async runner's own settings (``--set async.sampler_throttle=False``), see AsyncRlBase:
# who copies batches into replay, at the runner's default; and a throttled sampler, since the
# presets hold the replay ratio (their tuning assumes it), where the runner's default is a
# free-running one.
ASYNC_DEFAULTS = dict(class_defaults(AsyncRl, "copier"), sampler_throttle=True)
# Multi-rank (SyncRl) settings (``--set distributed.dist_timeout=600``): seconds a collective
# may wait on another rank before the run fails, see rlfast.runners.rank_group.RankGroup.
DISTRIBUTED_DEFAULTS = dict(dist_timeout=DEFAULT_DIST_TIMEOUT_S)
# Sampler safety settings every preset exposes (``--set sampler.check_finite=False``).
SAMPLER_SAFETY = class_defaults(BaseSampler, "check_finite", "worker_timeout",
                                "max_worker_restarts")
# The runner's: ``--set runner.stop_return=X`` ends training at the first evaluation averaging
# X or more; ``runner.log_traj_window`` training episodes are averaged in a row's training
# return (TrainReturnWindow with evaluation).
RUNNER_DEFAULTS = class_defaults(MinibatchRlEval, "stop_return", "log_traj_window")

