"""R2D1 with every memory core: burn-in from a stored state reproduces the sampler's state."""
import pytest
import torch

from rlfast.agents import R2d1Agent
from rlfast.algos.dqn.r2d1 import R2D1
from rlfast.envs import EnvSpaces
from rlfast.models.memory import CORES
from rlfast.replays import AgentInputs, SequenceSamplesFromReplay
from rlfast.spaces import FloatBox, IntBox

OBS, A, B = 3, 3, 4
WARM, TRAIN, N_STEP = 4, 5, 2


def _agent(core):
    torch.manual_seed(7)
    agent = R2d1Agent(model_kwargs=dict(hidden_sizes=[8], lstm_size=8, head_size=8, core=core,
                                        memory_len=3))
    agent.initialize(EnvSpaces(observation=FloatBox(-1, 1, shape=(OBS,)), action=IntBox(0, A)))
    agent.sample_mode(0)
    return agent


def _sampled(agent, length):
    """Step the agent as a sampler does, recording each step's inputs and stored state."""
    g = torch.Generator().manual_seed(3)
    obs = torch.randn(length, B, OBS, generator=g)
    prev_action = torch.zeros(length, B, dtype=torch.long)
    prev_reward = torch.zeros(length, B)
    actions, states = [], []
    agent.reset()
    for t in range(length):
        step = agent.step(obs[t], prev_action[t], prev_reward[t])
        actions.append(step.action)
        states.append(step.agent_info.prev_rnn_state)  # [B, N, H], the state before step t
        if t + 1 < length:
            prev_action[t + 1] = step.action
            prev_reward[t + 1] = torch.randn(B, generator=g)
    return obs, prev_action, prev_reward, torch.stack(actions), states


def _batch(obs, prev_action, prev_reward, action, start, length, state):
    sl = slice(start, start + length)
    g = torch.Generator().manual_seed(5)
    ret = torch.randn(obs.shape[0], B, generator=g)
    done = torch.zeros(obs.shape[0], B, dtype=torch.bool)
    return SequenceSamplesFromReplay(
        agent_inputs=AgentInputs(obs[sl], prev_action[sl], prev_reward[sl]), action=action[sl],
        return_=ret[sl], done=done[sl], done_n=done[sl], init_rnn_state=state)


@pytest.mark.parametrize("core", list(CORES))
def test_burn_in_reaches_the_state_the_sampler_stored(core):
    agent = _agent(core)
    length = WARM + TRAIN + N_STEP
    obs, prev_action, prev_reward, action, states = _sampled(agent, length)
    agent.train_mode(0)
    shapes = [tuple(s.shape) for s in states[0]]
    assert all([tuple(s.shape) for s in st] == shapes for st in states)  # fixed state shapes
    kwargs = dict(batch_T=TRAIN, batch_B=B, n_step_return=N_STEP, double_dqn=True,
                  prioritized_replay=False, delta_clip=None)
    burned = R2D1(warmup_T=WARM, **kwargs)
    burned.agent = agent
    # From the state stored at step 0, burning in over WARM steps ...
    loss_burned, pri_burned = burned.loss(_batch(obs, prev_action, prev_reward, action, 0, length,
                                                 states[0]))
    # ... equals starting at step WARM from the state the sampler stored there.
    direct = R2D1(warmup_T=0, **kwargs)
    direct.agent = agent
    loss_direct, pri_direct = direct.loss(_batch(obs, prev_action, prev_reward, action, WARM,
                                                 TRAIN + N_STEP, states[WARM]))
    assert torch.allclose(loss_burned, loss_direct, atol=1e-5)
    assert torch.allclose(pri_burned, pri_direct, atol=1e-5)
    # Burn-in matters: starting the trained steps from zeros gives another loss.
    zeros = type(states[WARM])(*(torch.zeros_like(s) for s in states[WARM]))
    loss_zero, _ = direct.loss(_batch(obs, prev_action, prev_reward, action, WARM, TRAIN + N_STEP,
                                      zeros))
    assert not torch.allclose(loss_zero, loss_direct, atol=1e-6)
    loss_burned.backward()
    assert all(p.grad is not None for p in agent.model.body.core.parameters())
