"""Multi-agent environments: the PettingZoo wrapper, agent columns in the samplers' buffers,
masking of agents that leave, shared and per-agent parameters, the centralised critic's
input, and the errors for bad ids and spaces. All in this process (serial sampler)."""
from __future__ import annotations

import functools

import numpy as np
import pytest
import torch

pytest.importorskip("pettingzoo")
pytest.importorskip("mpe2")

from rlfast.agents import MultiAgentPgAgent  # noqa: E402
from rlfast.algos import PPO  # noqa: E402
from rlfast.envs.multiagent import MultiAgentTrajInfo, agents_per_env  # noqa: E402
from rlfast.envs.pettingzoo import PettingZooEnv, PettingZooError  # noqa: E402
from rlfast.experiments.config import ConfigError  # noqa: E402
from rlfast.experiments.presets import build_experiment, get_preset  # noqa: E402
from rlfast.models.pg.multiagent_model import MultiAgentPgModel  # noqa: E402
from rlfast.samplers import CpuWaitResetCollector, SerialSampler  # noqa: E402

TOY = "tests.envs._pz_toy"
SPREAD = "mpe2.simple_spread_v3"


def _serial(env_kwargs, batch_T=6, batch_B=2, collector=None, agent_kwargs=None, seed=0):
    sampler = SerialSampler(
        EnvCls=PettingZooEnv, env_kwargs=env_kwargs, batch_T=batch_T, batch_B=batch_B,
        max_decorrelation_steps=0, CollectorCls=collector,
        TrajInfoCls=functools.partial(MultiAgentTrajInfo, _agents=["a", "b", "c"]))
    agent = MultiAgentPgAgent(**(agent_kwargs or {}))
    sampler.initialize(agent, seed=seed, bootstrap_value=True)
    return sampler, agent


# ---- the wrapper and the buffers ------------------------------------------------------------
def test_spread_columns_are_environments_times_agents():
    env_kwargs = dict(env=SPREAD, env_kwargs=dict(N=3, max_cycles=25))
    assert agents_per_env(PettingZooEnv, env_kwargs) == 3
    sampler = SerialSampler(EnvCls=PettingZooEnv, env_kwargs=env_kwargs, batch_T=5,
                            batch_B=4, max_decorrelation_steps=0)
    sampler.initialize(MultiAgentPgAgent(), seed=1, bootstrap_value=True)
    try:
        assert sampler.batch_spec == (5, 12) and sampler.n_envs == 4
        assert sampler.env_steps_per_batch == 20  # the runner counts environment steps
        samples, _ = sampler.obtain_samples(0)
        obs_size = 18 + 3  # local observation, then the one-hot agent id
        assert samples.env.observation.shape == (5, 12, obs_size)
        for name in ("reward", "done", "prev_reward"):
            assert getattr(samples.env, name).shape == (5, 12)
        assert samples.agent.action.shape == (5, 12)
        assert samples.env.env_info.valid.shape == (5, 12)
        assert samples.agent.bootstrap_value.shape == (1, 12)
        # column e * 3 + k holds agent k of environment e: its one-hot id is k
        ids = samples.env.observation[..., 18:].argmax(-1)
        assert torch.equal(ids, torch.arange(12).remainder(3).expand(5, 12))
        # the three agents of one env share the global reward part: equal up to collisions
        assert samples.env.env_info.valid.all()
    finally:
        sampler.shutdown()


def test_leaving_agent_is_masked_and_never_stepped_again():
    sampler, _ = _serial(dict(env=TOY, env_kwargs=dict(leave_at=2, length=5)), batch_T=6,
                         batch_B=1)
    try:
        env = sampler.envs[0]
        samples, completed = sampler.obtain_samples(0)
        valid = samples.env.env_info.valid.numpy()
        done = samples.env.done.numpy()
        reward = samples.env.reward.numpy()
        obs = samples.env.observation.numpy()
        b = 1  # agent "b" terminates at its second step
        assert valid[:, b].tolist() == [True, True, False, False, False, True]
        assert done[:, b].tolist() == [False, True, True, True, True, False]
        assert done[:, 0].tolist() == [False, False, False, False, True, False]
        # a left agent earns nothing and observes zeros, with its agent id kept
        assert reward[2:5, b].tolist() == [0.0, 0.0, 0.0]
        assert np.all(obs[3:5, b, :3] == 0) and np.all(obs[3:5, b, 3:] == [0, 1, 0])
        assert reward[0, 0] >= 10 and reward[0, 2] >= 30
        # the env never got an action for "b" after it left (it raises if it does)
        history = env._env.history
        assert [sorted(h) for h in history[:5]] == [["a", "b", "c"]] * 2 + [["a", "c"]] * 3
        # the completed episode: 5 steps, per-agent returns, mean and sum
        (traj,) = completed
        assert traj["Length"] == 5
        per_agent = [traj["Return/a"], traj["Return/b"], traj["Return/c"]]
        assert per_agent == pytest.approx(reward[:5].sum(0).tolist())
        assert traj["Return"] == pytest.approx(np.mean(per_agent))
        assert traj["TeamReturn"] == pytest.approx(sum(per_agent))
        # PPO trains only on the valid steps (and bootstraps time-limit cuts)
        algo = PPO()
        algo.agent, algo.mid_batch_reset = sampler.agent, True
        algo.gae_lambda, algo.reward_normalizer = 0.95, None
        _, _, mask = algo.process_returns(samples)
        expected = valid & ~samples.env.env_info.timeout.numpy()
        assert mask.numpy().astype(bool).tolist() == expected.tolist()
    finally:
        sampler.shutdown()


def test_wait_reset_collector_idles_the_finished_environment():
    sampler, _ = _serial(dict(env=TOY, env_kwargs=dict(leave_at=2, length=3)), batch_T=5,
                         batch_B=2, collector=CpuWaitResetCollector)
    try:
        samples, completed = sampler.obtain_samples(0)
        done = samples.env.done.numpy()
        assert len(completed) == 2
        # after the episode ends (step 3) the environments idle: zero rewards, no dones
        assert np.all(done[2]) and not np.any(done[3:])
        assert np.all(samples.env.reward.numpy()[3:] == 0)
        samples, completed = sampler.obtain_samples(1)  # reset at the batch end
        assert samples.env.env_info.valid.numpy()[0].all()
    finally:
        sampler.shutdown()


def test_global_state_is_appended_to_every_agent():
    env = PettingZooEnv(TOY, dict(leave_at=2, length=5), global_state=True)
    assert env.observation_space.layout == (3, 3, 2)
    obs = env.reset()
    assert obs.shape == (3, 8)
    assert np.all(obs[:, 6:] == [0, 3])  # state(): [t, live agents]
    o, _, _, _ = env.step(np.zeros(3, np.int64))
    assert np.all(o[:, 6:] == [1, 3])
    o, _, d, _ = env.step(np.zeros(3, np.int64))  # "b" leaves
    o, _, d, _ = env.step(np.zeros(3, np.int64))
    assert np.all(o[[0, 2], 6:] == [3, 2]) and np.all(o[1] == [0, 0, 0, 0, 1, 0, 0, 0])
    env.close()


def test_spread_state_is_the_env_state():
    env = PettingZooEnv(SPREAD, dict(N=2, max_cycles=25), global_state=True, seed=3)
    obs = env.reset()
    local, ids, state = env.observation_space.layout
    assert (local, ids) == (12, 2) and state == env._env.state_space.shape[0]
    np.testing.assert_allclose(obs[0, local + ids:], env._env.state(), rtol=0, atol=0)
    env.close()


# ---- parameters ------------------------------------------------------------------------------
def _reference_mlp(x, layers, agent):
    for i, layer in enumerate(layers):
        x = x @ layer.weight[agent] + layer.bias[agent]
        if i < len(layers) - 1:
            x = torch.relu(x)
    return x


def test_separate_parameters_match_one_network_per_agent():
    torch.manual_seed(0)
    model = MultiAgentPgModel((4 + 3,), 5, layout=(4, 3, 0), n_agents=3, shared=False,
                              feature_norm=False)
    shared = MultiAgentPgModel((4 + 3,), 5, layout=(4, 3, 0), n_agents=3, shared=True,
                               feature_norm=False)
    n_shared = sum(p.numel() for p in shared.parameters())
    assert sum(p.numel() for p in model.parameters()) == 3 * n_shared
    agent = torch.tensor([0, 2, 1, 2, 0])
    obs = torch.cat([torch.randn(5, 4), torch.eye(3)[agent]], dim=-1)
    pi, value = model(obs)
    for i in range(5):  # independent reference: agent k's own weights, plain ops
        logits = _reference_mlp(obs[i:i + 1], model.pi.layers, int(agent[i]))
        torch.testing.assert_close(pi[i], torch.softmax(logits, -1)[0])
        v = _reference_mlp(obs[i:i + 1], model.value.layers, int(agent[i]))
        torch.testing.assert_close(value[i], v[0, 0])
    # a loss on agent 2's rows moves only agent 2's parameters
    pi[agent == 2].sum().backward()
    grads = model.pi.layers[0].weight.grad
    assert grads[2].abs().sum() > 0 and grads[0].abs().sum() == 0 and grads[1].abs().sum() == 0
    # the agents start from different weights (each is initialised on its own)
    assert not torch.equal(model.pi.layers[0].weight[0], model.pi.layers[0].weight[1])


def test_shared_parameters_treat_agents_alike_but_for_their_id():
    torch.manual_seed(0)
    model = MultiAgentPgModel((4 + 3,), 5, layout=(4, 3, 0), n_agents=3, shared=True)
    local = torch.randn(1, 4).expand(3, 4)
    pi, _ = model(torch.cat([local, torch.eye(3)], -1))
    assert not torch.allclose(pi[0], pi[1])  # the id is an input
    no_id = MultiAgentPgModel((4,), 5, layout=(4, 0, 0), n_agents=3, shared=True)
    pi, _ = no_id(torch.randn(1, 4).expand(3, 4))
    torch.testing.assert_close(pi[0], pi[1])


def test_agent_shared_false_from_the_command_line_config():
    config = get_preset("ppo", f"pz:{TOY}")
    config["agent"]["shared"] = False
    config["sampler"].update(batch_B=2, batch_T=4, eval_n_envs=0)
    runner = build_experiment("ppo", f"pz:{TOY}", config, sampler="serial", seed=0)
    assert isinstance(runner.agent, MultiAgentPgAgent) and runner.agent.shared is False


def test_central_critic_reads_the_state_not_the_local_observation():
    torch.manual_seed(0)
    model = MultiAgentPgModel((4 + 3 + 6,), 5, layout=(4, 3, 6), n_agents=3,
                              central_critic=True)
    assert model.value_input == 6 + 3 and model.pi_input == 4 + 3
    obs = torch.randn(8, 13)
    pi, value = model(obs)
    changed_local = obs.clone()
    changed_local[:, :4] += 1.0
    pi2, value2 = model(changed_local)
    torch.testing.assert_close(value2, value)  # the critic does not read the local part
    assert not torch.allclose(pi2, pi)
    changed_state = obs.clone()
    changed_state[:, 7:] += 1.0
    pi3, value3 = model(changed_state)
    torch.testing.assert_close(pi3, pi)  # the policy does not read the state
    assert not torch.allclose(value3, value)


def test_central_critic_setting_turns_on_the_global_state():
    config = get_preset("mappo", f"pz:{TOY}")
    assert config["algo"]["central_critic"] is True
    config["sampler"].update(batch_B=2, batch_T=4, eval_n_envs=0)
    runner = build_experiment("mappo", f"pz:{TOY}", config, sampler="serial", seed=0)
    assert runner.agent.central_critic is True
    assert runner.sampler.env_kwargs["global_state"] is True
    config["algo"]["central_critic"] = False
    runner = build_experiment("mappo", f"pz:{TOY}", config, sampler="serial", seed=0)
    assert runner.agent.central_critic is False
    assert runner.sampler.env_kwargs["global_state"] is False


# ---- errors ----------------------------------------------------------------------------------
def test_bad_id_is_one_line_with_a_suggestion():
    with pytest.raises(ConfigError) as info:
        get_preset("ppo", "pz:mpe2.simple_sprad_v3")
    message = str(info.value)
    assert "\n" not in message and "mpe2.simple_spread_v3" in message
    with pytest.raises(ConfigError, match="not a PettingZoo environment"):
        get_preset("ppo", "pz:numpy")


def test_different_spaces_are_refused_unless_padded():
    with pytest.raises(PettingZooError) as info:
        PettingZooEnv("tests.envs._pz_mixed")
    assert "\n" not in str(info.value) and "env.pad=True" in str(info.value)
    env = PettingZooEnv("tests.envs._pz_mixed", pad=True)
    assert env.observation_space.layout == (5, 3, 0) and env.action_space.n == 4
    obs = env.reset()
    assert np.all(obs[0, 3:5] == 0)  # padded
    env.step(np.array([3, 3, 3]))
    assert env._env.history[-1] == {"a": 2, "b": 2, "c": 3}  # clipped to each agent's space
    env.close()


def test_algorithms_without_a_multiagent_preset_are_refused_for_pettingzoo():
    # recurrent agents are accepted: tests/agents/test_multiagent_recurrent.py; the DQN
    # family too: tests/agents/test_multiagent_dqn.py
    with pytest.raises(ValueError, match="ppo"):
        get_preset("ddpg", f"pz:{TOY}")


def test_aec_only_envs_go_through_aec_to_parallel():
    env = PettingZooEnv("tests.envs._pz_aec", dict(leave_at=2, length=4))
    assert env.n_agents == 3 and env.reset().shape == (3, 6)
    rewards = [env.step(np.array([1, 1, 1]))[1] for _ in range(3)]
    assert rewards[0].tolist() == [11.0, 21.0, 31.0] and rewards[2].tolist() == [11.0, 0.0, 31.0]
    env.close()
    with pytest.raises(PettingZooError) as info:  # not parallelizable: PettingZoo refuses
        PettingZooEnv("pettingzoo.classic.tictactoe_v3")
    assert "\n" not in str(info.value) and "cannot be converted" in str(info.value)
