"""Recurrent multi-agent PG agents: one memory state per agent column, reset where that
agent's episode ends (in the model, in the sampler, and in the loss's replay), and the
agent choice for ``pz:`` runs with ``agent.recurrent=True``."""
from __future__ import annotations

import functools

import numpy as np
import pytest
import torch

pytest.importorskip("pettingzoo")

from rlfast.agents.pg.multiagent import (AlternatingRecurrentMultiAgentPgAgent,  # noqa: E402
                                         RecurrentMultiAgentPgAgent)
from rlfast.algos.utils import episode_starts  # noqa: E402
from rlfast.envs.multiagent import MultiAgentTrajInfo  # noqa: E402
from rlfast.envs.pettingzoo import PettingZooEnv  # noqa: E402
from rlfast.experiments.config import ConfigError  # noqa: E402
from rlfast.experiments.presets import build_experiment, get_preset  # noqa: E402
from rlfast.models.memory import GruState  # noqa: E402
from rlfast.models.pg.multiagent_recurrent_model import MultiAgentRecurrentPgModel  # noqa: E402
from rlfast.samplers import SerialSampler  # noqa: E402

TOY = "tests.envs._pz_toy"


def _model(central_critic: bool = False, **kwargs) -> MultiAgentRecurrentPgModel:
    torch.manual_seed(0)
    layout = (3, 3, 2 if central_critic else 0)
    return MultiAgentRecurrentPgModel((sum(layout),), 3, layout, n_agents=3,
                                      central_critic=central_critic, core="gru", **kwargs)


def _inputs(model, T: int, B: int, seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    obs = torch.randn(T, B, model.observation_shape[0], generator=g)
    prev_action = torch.nn.functional.one_hot(torch.randint(3, (T, B), generator=g), 3).float()
    prev_reward = torch.randn(T, B, generator=g)
    return obs, prev_action, prev_reward


def test_model_resets_one_column_and_keeps_the_others():
    model = _model()
    T, B, k = 6, 3, 3
    obs, prev_action, prev_reward = _inputs(model, T, B)
    reset = torch.zeros(T, B, dtype=torch.bool)
    reset[k, 1] = True  # column 1's agent starts a new episode at step k
    with torch.no_grad():
        pi, value, _ = model(obs, prev_action, prev_reward, None, reset)
        pi_free, value_free, _ = model(obs, prev_action, prev_reward, None, None)
        pi_new, value_new, _ = model(obs[k:, 1:2], prev_action[k:, 1:2], prev_reward[k:, 1:2])
    # the other columns keep their memory: the reset of column 1 changes nothing there
    for col in (0, 2):
        torch.testing.assert_close(pi[:, col], pi_free[:, col])
        torch.testing.assert_close(value[:, col], value_free[:, col])
    # column 1: as before until step k, then as if its sequence started at step k
    torch.testing.assert_close(pi[:k, 1], pi_free[:k, 1])
    torch.testing.assert_close(pi[k:, 1], pi_new[:, 0])
    torch.testing.assert_close(value[k:, 1], value_new[:, 0])
    assert not torch.allclose(pi[k:, 1], pi_free[k:, 1])  # the memory did matter


def test_central_critic_reads_the_global_state_and_policy_has_memory():
    model = _model(central_critic=True)
    obs, prev_action, prev_reward = _inputs(model, 4, 2)
    with torch.no_grad():
        _, value, state = model(obs, prev_action, prev_reward)
        changed = obs.clone()
        changed[..., :3] += 1.0  # the local observation: not the critic's input
        _, value_local, _ = model(changed, prev_action, prev_reward)
        changed = obs.clone()
        changed[..., 6:] += 1.0  # the global state
        _, value_state, _ = model(changed, prev_action, prev_reward)
    torch.testing.assert_close(value, value_local)
    assert not torch.allclose(value, value_state)
    assert isinstance(state, GruState) and state.h.shape == (1, 2, 64)


def test_separate_parameters_are_refused_with_the_setting_named():
    with pytest.raises(ValueError, match="shared=False"):
        MultiAgentRecurrentPgModel((6,), 3, (3, 3, 0), n_agents=3, shared=False)


def _sampler(batch_T: int = 6):
    sampler = SerialSampler(
        EnvCls=PettingZooEnv, env_kwargs=dict(env=TOY, env_kwargs=dict(leave_at=2, length=5)),
        batch_T=batch_T, batch_B=1, max_decorrelation_steps=0,
        TrajInfoCls=functools.partial(MultiAgentTrajInfo, _agents=["a", "b", "c"]))
    agent = RecurrentMultiAgentPgAgent(model_kwargs=dict(core="gru", lstm_size=16))
    sampler.initialize(agent, seed=3, bootstrap_value=True)
    return sampler, agent


def test_sampler_resets_each_agent_state_at_its_own_done():
    sampler, agent = _sampler()
    try:
        samples, _ = sampler.obtain_samples(0)
        done = samples.env.done.numpy()
        b = 1  # agent "b" terminates at its second step; "a" and "c" run 5 steps
        assert done[:, b].tolist() == [False, True, True, True, True, False]
        assert done[:, 0].tolist() == [False, False, False, False, True, False]
        h = samples.agent.agent_info.prev_rnn_state.h  # [T, B, N, H]: the state before step t
        norm = h.abs().sum(dim=(-2, -1)).numpy()
        assert np.all(norm[0] == 0)  # the run starts from zeros
        assert np.all(norm[1] > 0)   # every agent remembers its first step
        # "b" left after step 1: its state is zero from then on, the others keep theirs
        assert np.all(norm[2:5, b] == 0)
        assert np.all(norm[2:5, [0, 2]] > 0)
        assert np.all(norm[5] == 0)  # the episode ended for all after step 4: all reset
    finally:
        sampler.shutdown()


def test_loss_replay_from_the_batch_start_matches_the_sampler():
    """The algorithm replays whole columns from the stored first state, zeroing each column
    where its agent's episode starts (``episode_starts(done)``): that reproduces every step's
    action distribution and value as the sampler computed them, across a departure and an
    episode end in the middle of the batch."""
    sampler, agent = _sampler(batch_T=8)
    try:
        sampler.obtain_samples(0)  # the second batch starts from a nonzero state
        samples, _ = sampler.obtain_samples(1)
        first = samples.agent.agent_info.prev_rnn_state[0]
        assert first.h.abs().sum() > 0
        agent.train_mode(1)
        init = type(first)(*(s.transpose(0, 1).contiguous() for s in first))
        with torch.no_grad():
            dist_info, value, _ = agent(samples.env.observation, samples.agent.prev_action,
                                        samples.env.prev_reward, init_rnn_state=init,
                                        reset=episode_starts(samples.env.done))
        torch.testing.assert_close(dist_info.prob, samples.agent.agent_info.dist_info.prob)
        torch.testing.assert_close(value, samples.agent.agent_info.value)
        # without the per-agent resets the replay goes wrong after the first done
        with torch.no_grad():
            dist_free, _, _ = agent(samples.env.observation, samples.agent.prev_action,
                                    samples.env.prev_reward, init_rnn_state=init)
        assert not torch.allclose(dist_free.prob, samples.agent.agent_info.dist_info.prob)
    finally:
        sampler.shutdown()


def test_pz_config_picks_the_recurrent_multiagent_agent():
    config = get_preset("mappo", f"pz:{TOY}")
    config["agent"].update(recurrent=True, core="gru")
    runner = build_experiment("mappo", f"pz:{TOY}", config, sampler="serial")
    assert type(runner.agent) is RecurrentMultiAgentPgAgent
    assert runner.agent.central_critic and runner.agent.model_kwargs["core"] == "gru"
    config = get_preset("ppo", f"pz:{TOY}")
    config["agent"].update(recurrent=True, shared=False)
    runner = build_experiment("ppo", f"pz:{TOY}", config, sampler="alternating")
    assert type(runner.agent) is AlternatingRecurrentMultiAgentPgAgent
    with pytest.raises(ValueError, match="shared=False"):
        runner.agent.initialize(_toy_spaces())


def _toy_spaces():
    env = PettingZooEnv(TOY, dict(leave_at=2, length=5))
    try:
        return env.spaces
    finally:
        env.close()


def test_recurrent_agents_on_pettingzoo_atari_are_refused():
    from rlfast.experiments.pettingzoo_family import pettingzoo_agent_class
    from rlfast.experiments import catalog
    with pytest.raises(ConfigError, match="recurrent"):
        pettingzoo_agent_class("atari", True, catalog.sampler("serial"))
