"""Synthetic sampler batches for the A2C / PPO tests, and plain-Python references.

A small agent steps through random observations exactly as a sampler would (so the batch holds
its real ``dist_info``, values and recurrent states); its parameters are then perturbed, so the
current policy differs from the one that sampled and ratios, KL estimates and clip fractions are
not trivial. The references loop over individual ``(t, b)`` elements in float64 Python and use
nothing from rlfast's algorithms or distributions.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from rlfast.agents import CategoricalPgAgent, MujocoFfAgent, RecurrentCategoricalPgAgent
from rlfast.envs import EnvSpaces
from rlfast.samplers.collections import AgentSamplesBsv, BatchSpec, EnvSamples, Samples
from rlfast.spaces import FloatBox, IntBox
from rlfast.utils.collections import namedarraytuple

EnvInfo = namedarraytuple("EnvInfo", ["timeout"])  # as samplers store env_info
OBS_DIM, N_ACTIONS, ACTION_DIM = 3, 3, 2
SPACES = {
    "categorical": EnvSpaces(observation=FloatBox(-1, 1, shape=(OBS_DIM,)),
                             action=IntBox(0, N_ACTIONS)),
    "recurrent": EnvSpaces(observation=FloatBox(-1, 1, shape=(OBS_DIM,)),
                           action=IntBox(0, N_ACTIONS)),
    "gaussian": EnvSpaces(observation=FloatBox(-1, 1, shape=(OBS_DIM,)),
                          action=FloatBox(-2, 2, shape=(ACTION_DIM,))),
}
KINDS = tuple(SPACES)


def make_agent(kind: str, seed: int = 0):
    torch.manual_seed(seed)
    if kind == "categorical":
        agent = CategoricalPgAgent(model_kwargs=dict(hidden_sizes=[8]))
    elif kind == "recurrent":
        agent = RecurrentCategoricalPgAgent(model_kwargs=dict(hidden_sizes=[8], lstm_size=6))
    else:
        agent = MujocoFfAgent(model_kwargs=dict(hidden_sizes=[8]))
    agent.initialize(SPACES[kind])
    return agent


def make_samples(agent, kind: str, T: int = 7, B: int = 3, seed: int = 0, p_done: float = 0.3):
    """A sampler-style batch: the agent acts on random observations; rewards, dones and
    timeouts (a subset of the dones) are random."""
    rng = np.random.RandomState(seed)
    torch.manual_seed(seed)
    obs = torch.as_tensor(rng.uniform(-1, 1, size=(T, B, OBS_DIM)), dtype=torch.float32)
    reward = torch.as_tensor(rng.randn(T, B), dtype=torch.float32)
    done = torch.as_tensor(rng.rand(T, B) < p_done)
    timeout = done & torch.as_tensor(rng.rand(T, B) < 0.5)
    actions, prev_actions, prev_rewards, agent_info = act_through(agent, obs, reward, done,
                                                                  gaussian=kind == "gaussian")
    bootstrap_value = torch.as_tensor(rng.randn(1, B), dtype=torch.float32)
    return Samples(
        agent=AgentSamplesBsv(action=actions, prev_action=prev_actions,
                              agent_info=agent_info, bootstrap_value=bootstrap_value),
        env=EnvSamples(observation=obs, reward=reward, prev_reward=prev_rewards,
                       done=done, env_info=EnvInfo(timeout=timeout)))


def act_through(agent, obs, reward, done, gaussian: bool) -> tuple:
    """Step ``agent`` through ``[T, B]`` observations as a sampler would (previous action and
    reward zeroed after a done, recurrent state reset there); returns the stacked
    ``(action, prev_action, prev_reward, agent_info)``."""
    T, B = reward.shape
    agent.sample_mode(0)
    agent.reset()
    actions, prev_actions, prev_rewards, infos = [], [], [], []
    prev_action = torch.zeros((B, ACTION_DIM)) if gaussian else torch.zeros(B, dtype=torch.long)
    prev_reward = torch.zeros(B)
    for t in range(T):
        step = agent.step(obs[t], prev_action, prev_reward)
        actions.append(step.action)
        prev_actions.append(prev_action)
        prev_rewards.append(prev_reward)
        infos.append(step.agent_info)
        keep = (~done[t]).to(torch.float32)
        prev_action = step.action * (keep[:, None] if gaussian else keep).to(step.action.dtype)
        prev_reward = reward[t] * keep
        if agent.recurrent:
            for b in torch.nonzero(done[t]).flatten().tolist():
                agent.reset_one(b)
    return (torch.stack(actions), torch.stack(prev_actions), torch.stack(prev_rewards),
            _stack(infos))


def _stack(items):
    if hasattr(items[0], "_fields"):
        return type(items[0])(*(_stack([getattr(i, f) for i in items]) for f in items[0]._fields))
    return torch.stack(items)


def perturb(agent, seed: int = 1, scale: float = 0.15) -> None:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in agent.model.parameters():
            p.add_(scale * torch.randn(p.shape, generator=g))


def setup(algo, kind: str, T: int = 7, B: int = 3, seed: int = 0, mid_batch_reset: bool = True):
    agent = make_agent(kind, seed)
    samples = make_samples(agent, kind, T, B, seed)
    perturb(agent, seed + 1)
    agent.train_mode(0)
    algo.initialize(agent, n_itr=10, batch_spec=BatchSpec(T, B), mid_batch_reset=mid_batch_reset)
    return agent, samples


def current_outputs(agent, samples):
    """The current policy's ``dist_info`` and value on the batch. Recurrent: one step at a
    time from the state the sampler had at the batch start, the state zeroed by hand after
    each done (where the sampler reset it), as the losses must see it."""
    inputs = (samples.env.observation, samples.agent.prev_action, samples.env.prev_reward)
    with torch.no_grad():
        if not agent.recurrent:
            return agent(*inputs)
        state = samples.agent.agent_info.prev_rnn_state[0]
        state = type(state)(*(s.transpose(0, 1).contiguous() for s in state))
        done = samples.env.done
        infos, values = [], []
        for t in range(done.shape[0]):
            if t > 0:
                keep = (~done[t - 1]).to(torch.float32).view(1, -1, 1)
                state = type(state)(*(s * keep for s in state))
            dist_info, value, state = agent(*(x[t:t + 1] for x in inputs), state)
            infos.append(dist_info)
            values.append(value)
    return type(infos[0])(*(torch.cat(f) for f in zip(*infos))), torch.cat(values)


# ---------------------------------------------------------------- references (float64 loops)
def ref_returns(samples, discount, gae_lambda, bootstrap_timelimit=True):
    """``(return_, advantage)`` as nested lists ``[T][B]``: GAE (plain discounting when
    ``gae_lambda == 1``); a timeout step's return is its value estimate and the step before
    bootstraps from it; any other done is terminal."""
    r = samples.env.reward.double().tolist()
    v = samples.agent.agent_info.value.double().tolist()
    d = samples.env.done.tolist()
    to = samples.env.env_info.timeout.tolist()
    boot = samples.agent.bootstrap_value[0].double().tolist()
    T, B = len(r), len(r[0])
    ret = [[0.0] * B for _ in range(T)]
    adv = [[0.0] * B for _ in range(T)]
    for b in range(B):
        next_value, next_adv, next_ret = boot[b], 0.0, boot[b]
        for t in reversed(range(T)):
            if bootstrap_timelimit and to[t][b]:
                ret[t][b], adv[t][b] = v[t][b], 0.0
            elif gae_lambda == 1:
                ret[t][b] = r[t][b] + (0.0 if d[t][b] else discount * next_ret)
                adv[t][b] = ret[t][b] - v[t][b]
            else:
                nd = 0.0 if d[t][b] else 1.0
                delta = r[t][b] + discount * next_value * nd - v[t][b]
                adv[t][b] = delta + discount * gae_lambda * nd * next_adv
                ret[t][b] = adv[t][b] + v[t][b]
            next_value, next_adv, next_ret = v[t][b], adv[t][b], ret[t][b]
    return ret, adv


def ref_valid(samples, mid_batch_reset, recurrent, bootstrap_timelimit=True):
    """``[T][B]`` 0/1: timeouts never count; without mid-batch resets nothing after the first
    done of a column counts either (recurrent agents alike: with mid-batch resets their
    losses reset the state where an episode starts, so every step counts)."""
    d = samples.env.done.tolist()
    to = samples.env.env_info.timeout.tolist()
    T, B = len(d), len(d[0])
    valid = [[1.0] * B for _ in range(T)]
    for b in range(B):
        ended = False
        for t in range(T):
            if ended and not mid_batch_reset:
                valid[t][b] = 0.0
            if bootstrap_timelimit and to[t][b]:
                valid[t][b] = 0.0
            ended = ended or d[t][b]
    return valid


def log_prob(kind, dist_info, action, t, b) -> float:
    """log pi(a|s) of element (t, b), by hand."""
    if kind == "gaussian":
        mean = dist_info.mean[t, b].double().tolist()
        log_std = dist_info.log_std[t, b].double().tolist()
        x = action[t, b].double().tolist()
        return sum(-0.5 * ((xi - m) / math.exp(ls)) ** 2 - ls - 0.5 * math.log(2 * math.pi)
                   for xi, m, ls in zip(x, mean, log_std))
    return math.log(float(dist_info.prob[t, b, int(action[t, b])]))


def entropy(kind, dist_info, t, b) -> float:
    if kind == "gaussian":
        return sum(ls + 0.5 * math.log(2 * math.pi * math.e)
                   for ls in dist_info.log_std[t, b].double().tolist())
    return -sum(p * math.log(p) for p in dist_info.prob[t, b].double().tolist() if p > 0)


def valid_mean(values, valid) -> float:
    total = sum(x * w for row_x, row_w in zip(values, valid) for x, w in zip(row_x, row_w))
    return total / sum(sum(row) for row in valid)


def explained_variance(return_, value, valid) -> float:
    y = np.array([x for rx, rw in zip(return_, valid) for x, w in zip(rx, rw) if w])
    v = np.array([x for rx, rw in zip(value, valid) for x, w in zip(rx, rw) if w])
    return float(1 - np.var(y - v) / np.var(y))


def reference_inputs(algo, agent, samples, mid_batch_reset: bool = True):
    """What every hand-computed PG loss starts from: reference returns and advantages, the
    validity mask, the current outputs, the sampler's dist_info and the actions."""
    ret, adv = ref_returns(samples, algo.discount, algo.gae_lambda)
    valid = ref_valid(samples, mid_batch_reset, agent.recurrent)
    dist_info, value = current_outputs(agent, samples)
    return (ret, adv, valid, dist_info, value, samples.agent.agent_info.dist_info,
            samples.agent.action)
