"""Categorical DQN (C51): a distribution over returns on fixed atoms, trained by projecting the
Bellman-updated target distribution back onto the atoms. With dueling heads, double-Q,
n-step returns, prioritized replay and noisy nets it is Rainbow."""
from __future__ import annotations

from typing import Any

import torch

from rlfast.algos.dqn.dqn import DQN, masked_actions, weighted_mean
from rlfast.utils.tensor import select_at_indexes

EPS = 1e-6


def project_distribution(next_p: torch.Tensor, returns: torch.Tensor, not_done: torch.Tensor,
                         discount_n: float, z: torch.Tensor, v_min: float | None = None,
                         v_max: float | None = None) -> torch.Tensor:
    """Project p over atoms ``R + discount_n * not_done * z`` (clipped to [z_0, z_-1]) onto ``z``.

    ``next_p`` [B, P] target probabilities, ``returns`` and ``not_done`` [B]; returns [B, P].
    Each shifted atom's mass is split between its two neighbouring atoms in proportion to
    distance. ``v_min`` / ``v_max``: ``z[0]`` and ``z[-1]`` when the caller knows them (else
    they are read from ``z``, a host read on a GPU).
    """
    if v_min is None or v_max is None:
        v_min, v_max = float(z[0]), float(z[-1])
    delta_z = (v_max - v_min) / (len(z) - 1)
    tz = (returns.unsqueeze(-1) + discount_n * not_done.unsqueeze(-1) * z).clamp(v_min, v_max)
    b = (tz - v_min) / delta_z                      # fractional atom index, [B, P]
    # A NaN return must reach the loss as NaN (where the finite check names it), not become
    # an out-of-range index: index as atom 0, weight with the NaN b (identity when finite).
    index = b.nan_to_num(0.0)
    lower, upper = index.floor().long(), index.ceil().long()
    # Where b lands exactly on an atom, lower == upper: give it all the mass.
    lower_weight = (upper.float() - b) + (lower == upper).float()
    upper_weight = b - lower.float()
    projected = torch.zeros_like(next_p)
    projected.scatter_add_(-1, lower, next_p * lower_weight)
    projected.scatter_add_(-1, upper, next_p * upper_weight)
    return projected


class CategoricalDQN(DQN):
    """C51 on atoms ``linspace(V_min, V_max, n_atoms)`` (``n_atoms`` comes from the agent).

    Loss: cross-entropy between the projected target distribution and the online distribution
    of the taken action; with prioritized replay that per-sample loss is also the priority.
    """

    def __init__(self, V_min: float = -10.0, V_max: float = 10.0, **kwargs: Any):
        super().__init__(**kwargs)
        if not V_min < V_max:
            raise ValueError(f"V_min must be < V_max; got {V_min}, {V_max}")
        self.V_min, self.V_max = V_min, V_max
        if "eps" not in self.optim_kwargs and self.OptimCls is torch.optim.Adam:
            self.optim_kwargs["eps"] = 0.01 / self.batch_size  # the usual C51 / Rainbow setting

    def _setup(self, agent: Any, *args: Any, **kwargs: Any) -> None:
        """Tell the agent the support ``[V_min, V_max]``, then set up as DQN does (for
        :meth:`initialize` and :meth:`async_initialize` alike)."""
        agent.give_V_min_max(self.V_min, self.V_max)
        super()._setup(agent, *args, **kwargs)

    def loss(self, batch: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """``(loss, priorities)``: the cross-entropy of the online distribution of the taken
        action against the projected target distribution, per sample also the priority."""
        batch = self._to_device(batch)
        z = torch.linspace(self.V_min, self.V_max, self.agent.n_atoms, device=self.agent.device)
        with torch.no_grad():
            target_ps = self.agent.target(*batch.target_inputs)          # [B, A, P]
            chooser = self.agent(*batch.target_inputs) if self.double_dqn else target_ps
            next_action = (chooser * z).sum(-1).argmax(dim=-1)          # argmax of E[Z]
            next_p = select_at_indexes(next_action, target_ps)          # [B, P]
            target = project_distribution(next_p, batch.return_, 1.0 - batch.done_n.float(),
                                          self.discount ** self.n_step_return, z,
                                          self.V_min, self.V_max)
        action, weight = masked_actions(batch.action) if self.masked_steps else (batch.action,
                                                                                  None)
        ps = self.agent(*batch.agent_inputs)                             # [B, A, P]
        p = select_at_indexes(action, ps).clamp(EPS, 1.0)                # [B, P]
        # Cross-entropy  -sum_i m_i log p_i  (equals the KL up to the target's entropy).
        losses = -(target * p.log()).sum(-1)
        priorities = losses.detach().abs()
        if self.prioritized_replay:
            losses = losses * batch.is_weights
        if weight is not None:  # multi-agent masked steps: no loss, priority 0
            return weighted_mean(losses, weight), priorities * weight
        return losses.mean(), priorities
