"""Per-trajectory statistics that samplers accumulate step by step.

It lives with the environments (below the samplers) so environment-specific subclasses such as
``AtariTrajInfo`` can extend it; samplers re-export it as ``rlfast.samplers.TrajInfo``.
"""
from __future__ import annotations

from typing import Any

from rlfast.utils.collections import AttrDict


class TrajInfo(AttrDict):
    """Running statistics of one trajectory; the sampler calls ``step`` every env step.

    Keys starting with an underscore are bookkeeping and are not logged. ``_discount`` (for
    ``DiscountedReturn``) is a per-instance setting: samplers bind the runner's discount with
    ``functools.partial(TrajInfoCls, _discount=...)`` rather than mutating the class.
    """

    def __init__(self, _discount: float = 1.0, **kwargs: Any):
        super().__init__(**kwargs)
        self._discount = float(_discount)
        self.Length = 0
        self.Return = 0.0
        self.NonzeroRewards = 0
        self.DiscountedReturn = 0.0
        self._cur_discount = 1.0

    def step(self, observation, action, reward, done, agent_info, env_info) -> None:
        # Item access: attribute access on an AttrDict is a Python-level call per name, and
        # this runs at every environment step.
        reward = float(reward)
        self["Length"] += 1
        self["Return"] += reward
        self["NonzeroRewards"] += reward != 0
        discount = self["_cur_discount"]
        self["DiscountedReturn"] += discount * reward
        self["_cur_discount"] = discount * self["_discount"]

    def terminate(self, observation) -> "TrajInfo":
        return self
