"""Helpers for comparing the GPU-agent samplers with SerialSampler.

``StaggeredEnv`` is a small deterministic rlfast Env whose episode lengths differ between
instances (its seed) and between episodes (its reset count), so resets happen at different
time steps in different environments of one batch -- the case where a per-environment agent
reset applied to the wrong environment, or at the wrong time, changes the data. Its
observation depends on the actions taken, so any difference in actions shows up in the
observations too. The greedy agents take the most likely action in every mode, so sampled data
depend only on the parameters, the seeds and the environments: two samplers fed the same ones
must produce the same batches. Defined in a module so worker processes find them by reference.
"""
from __future__ import annotations

from collections import namedtuple

import numpy as np
import torch

from rlfast.agents import (AlternatingRecurrentCategoricalPgAgent, CategoricalPgAgent,
                           RecurrentCategoricalPgAgent)
from rlfast.envs import Env, EnvStep
from rlfast.models.pg import CategoricalPgFfModel, CategoricalPgLstmModel
from rlfast.spaces import FloatBox, IntBox

StaggeredInfo = namedtuple("StaggeredInfo", ["traj_done", "position"])

OBS_DIM = 4
FF_MODEL_KWARGS = dict(hidden_sizes=[16])
LSTM_MODEL_KWARGS = dict(hidden_sizes=[16], lstm_size=8)


class StaggeredEnv(Env):
    """Deterministic env with per-instance, per-episode lengths in ``[min_len, max_len]``.

    Observation ``[t / 4, position / 4, sin(0.37 seed + 1.3 resets), life]``, where
    ``position`` moves +1 / -1 with action 1 / 0. Reward ``1 + action + t / 4``. An episode
    has ``lives`` lives; each ends with ``done``, only the last also with ``env_info.traj_done``.
    """

    def __init__(self, min_len: int = 3, max_len: int = 9, lives: int = 1):
        if not 1 <= min_len <= max_len:
            raise ValueError(f"need 1 <= min_len <= max_len; got {min_len}, {max_len}")
        self._observation_space = FloatBox(-1e3, 1e3, shape=(OBS_DIM,))
        self._action_space = IntBox(0, 2, dtype="int64")
        self.min_len, self.max_len, self.lives = int(min_len), int(max_len), int(lives)
        self.tag = 0
        self.n_resets = 0
        self.t = self.life = self.in_life = 0
        self.position = 0.0
        self.life_len = self.min_len

    def seed(self, seed):
        self.tag = int(seed)

    def _next_life_len(self) -> int:
        span = self.max_len - self.min_len + 1
        return self.min_len + (3 * self.tag + 5 * self.n_resets + 2 * self.life) % span

    def _obs(self):
        episode_tag = np.sin(0.37 * self.tag + 1.3 * self.n_resets)
        return np.array([self.t / 4, self.position / 4, episode_tag, self.life], dtype=np.float32)

    def reset(self):
        self.n_resets += 1
        self.t = self.life = self.in_life = 0
        self.position = 0.0
        self.life_len = self._next_life_len()
        return self._obs()

    def step(self, action):
        action = int(action)
        if action not in (0, 1):
            raise ValueError(f"StaggeredEnv got invalid action {action!r}; valid: 0, 1")
        self.t += 1
        self.in_life += 1
        self.position += 1.0 if action else -1.0
        reward = 1.0 + action + self.t / 4
        done = self.in_life >= self.life_len
        traj_done = False
        if done:
            self.life += 1
            self.in_life = 0
            traj_done = self.life >= self.lives
            self.life_len = self._next_life_len()
        return EnvStep(self._obs(), reward, done, StaggeredInfo(traj_done, self.position))


# ---- deterministic agents ---------------------------------------------------------------------
class GreedyCategoricalPgAgent(CategoricalPgAgent):
    """Most likely action in every mode (sampling included)."""

    def _select(self, dist_info):
        return self.greedy_action(dist_info)


class GreedyRecurrentCategoricalPgAgent(RecurrentCategoricalPgAgent):
    """Recurrent agent taking the most likely action in every mode."""

    def _select(self, dist_info):
        return self.greedy_action(dist_info)


class GreedyAlternatingRecurrentCategoricalPgAgent(AlternatingRecurrentCategoricalPgAgent):
    """Two-state (alternating) recurrent agent taking the most likely action in every mode."""

    def _select(self, dist_info):
        return self.greedy_action(dist_info)


def decisive_state_dict(recurrent: bool, observation_dim: int = OBS_DIM, action_size: int = 2,
                        seed: int = 1234, core: str = "lstm") -> dict:
    """Seeded model parameters with a sharpened policy head.

    The models initialize the policy output near uniform (gain 0.01), where the greedy action
    is a near tie that a last-bit difference between two forward passes could flip; scaling
    the head makes the greedy choice clear-cut while still depending on the observation.
    """
    gen_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        if recurrent:
            model = CategoricalPgLstmModel(observation_shape=(observation_dim,),
                                           action_size=action_size, **LSTM_MODEL_KWARGS,
                                           **core_kwargs(core))
            head = model.pi
        else:
            model = CategoricalPgFfModel(observation_shape=(observation_dim,),
                                         action_size=action_size, **FF_MODEL_KWARGS)
            head = model.pi.model[-1]
    finally:
        torch.random.set_rng_state(gen_state)
    with torch.no_grad():
        head.weight.mul_(300.0)
    return {k: v.clone() for k, v in model.state_dict().items()}


def core_kwargs(core: str) -> dict:
    """Model keyword arguments for a memory core (the LSTM: none, the models' default)."""
    return {} if core == "lstm" else dict(core=core, memory_len=3)


def make_agent(kind: str, state_dict: dict, core: str = "lstm"):
    """``kind``: "ff", "recurrent" or "alternating"; all start from ``state_dict``; ``core``:
    the recurrent agents' memory core."""
    classes = {"ff": (GreedyCategoricalPgAgent, FF_MODEL_KWARGS),
               "recurrent": (GreedyRecurrentCategoricalPgAgent, LSTM_MODEL_KWARGS),
               "alternating": (GreedyAlternatingRecurrentCategoricalPgAgent, LSTM_MODEL_KWARGS)}
    if kind not in classes:
        raise ValueError(f"kind must be one of {sorted(classes)}; got {kind!r}")
    AgentCls, model_kwargs = classes[kind]
    if kind != "ff":
        model_kwargs = dict(model_kwargs, **core_kwargs(core))
    return AgentCls(model_kwargs=dict(model_kwargs), initial_model_state_dict=state_dict)


# ---- comparing sampled batches ------------------------------------------------------------
def leaves(tree, prefix: str = "") -> dict:
    """``{"agent.agent_info.value": tensor, ...}`` for every leaf of a (nested) namedarraytuple."""
    if tree is None:
        return {}
    if hasattr(tree, "_fields"):
        out = {}
        for name in tree._fields:
            out.update(leaves(getattr(tree, name), f"{prefix}.{name}" if prefix else name))
        return out
    return {prefix: tree}


def traj_summary(traj_infos: list) -> list:
    """Sorted ``(Length, Return)`` of completed trajectories: a multiset, order-free."""
    return sorted((int(t.Length), float(t.Return)) for t in traj_infos)
