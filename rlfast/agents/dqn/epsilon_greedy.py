"""Epsilon schedules for epsilon-greedy agents: annealing, evaluation, one epsilon per environment.

Sampling epsilon falls linearly from ``eps_init`` to ``eps_final`` between iterations
``eps_itr_min`` and ``eps_itr_max`` (DQN's exploration schedule; the DQN algorithms set the
iteration range from their step counts with ``set_epsilon_itr_min_max``).  With
``eps_final_min`` set, every environment of every sampler worker gets its own final epsilon,
log-spaced from ``eps_final_min`` to ``eps_final`` over all ``global_B`` environments (as in
Ape-X), and each collector keeps the entries of its own ``env_ranks``.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from rlfast.utils.checks import check_fraction, check_int
from rlfast.utils.schedules import linear_schedule

__all__ = ["EpsilonGreedyAgentMixin"]


class EpsilonGreedyAgentMixin:
    """Sets the agent's epsilon-greedy distribution's epsilon on every mode switch.

    ``sample_mode(itr)``: ``eps = eps_init + progress * (eps_final - eps_init)`` with
    ``progress = clip((itr - eps_itr_min) / (eps_itr_max - eps_itr_min), 0, 1)``; a vector
    (one value per local environment) when ``eps_final_min`` is set.  ``eval_mode(itr)``:
    ``eps_eval``, except 1 (uniformly random actions) for the evaluation at ``itr == 0`` before
    any training, unless the agent was built from an ``initial_model_state_dict``.  The agent
    class must create ``self.distribution`` (an ``EpsilonGreedy``) in ``initialize``.  Use as
    ``class MyAgent(EpsilonGreedyAgentMixin, BaseAgent)``.
    """

    def __init__(
        self,
        eps_init: float = 1,
        eps_final: float = 0.01,
        eps_final_min: float | None = None,
        eps_itr_min: int = 50,
        eps_itr_max: int = 1000,
        eps_eval: float = 0.001,
        *args,
        **kwargs,
    ):
        super().__init__(*args, **kwargs)
        owner = type(self).__name__
        self.eps_init = check_fraction(eps_init, "eps_init", owner=owner)
        self.eps_final_scalar = check_fraction(eps_final, "eps_final",
                                               allow_zero=eps_final_min is None, owner=owner)
        self.eps_final_min = (None if eps_final_min is None
                              else check_fraction(eps_final_min, "eps_final_min", allow_zero=False,
                                                  owner=owner))
        self.eps_eval = check_fraction(eps_eval, "eps_eval", owner=owner)
        self.set_epsilon_itr_min_max(eps_itr_min, eps_itr_max)
        # Scalar, or after make_vec_eps one value per local environment.
        self.eps_final: float | torch.Tensor = self.eps_final_scalar
        self.eps_sample: float | torch.Tensor = self.eps_init

    def set_epsilon_itr_min_max(self, eps_itr_min: int, eps_itr_max: int) -> None:
        """Anneal epsilon over iterations ``eps_itr_min`` .. ``eps_itr_max`` (the algorithm
        calls this)."""
        owner = type(self).__name__
        eps_itr_min = check_int(eps_itr_min, "eps_itr_min", minimum=0, owner=owner)
        eps_itr_max = check_int(eps_itr_max, "eps_itr_max", minimum=0, owner=owner)
        if eps_itr_max < eps_itr_min:
            raise ValueError(f"{owner}: need eps_itr_min <= eps_itr_max; got "
                             f"eps_itr_min={eps_itr_min!r}, eps_itr_max={eps_itr_max!r}")
        self.eps_itr_min, self.eps_itr_max = eps_itr_min, eps_itr_max

    def sampling_state(self) -> dict:
        """The epsilon schedule's iteration range, for sampler workers' agent copies."""
        return dict(super().sampling_state(), eps_itr_min=self.eps_itr_min,
                    eps_itr_max=self.eps_itr_max)

    def make_vec_eps(self, global_B: int, env_ranks: Sequence[int] | None) -> None:
        """Log-spaced final epsilons over all ``global_B`` environments; keep those of
        ``env_ranks``.

        Does nothing unless ``eps_final_min`` is set.  ``env_ranks=None`` keeps all of them.
        """
        if self.eps_final_min is None:
            return
        owner = type(self).__name__
        global_B = check_int(global_B, "global_B", minimum=1, owner=owner)
        ranks = list(range(int(global_B))) if env_ranks is None else [int(r) for r in env_ranks]
        bad = [r for r in ranks if not 0 <= r < global_B]
        if bad or not ranks:
            raise ValueError(f"{owner}: env_ranks must be a non-empty list of indexes in "
                             f"[0, {global_B}), got {env_ranks!r}.")
        global_eps = torch.logspace(math.log10(self.eps_final_min),
                                    math.log10(self.eps_final_scalar), int(global_B),
                                    dtype=torch.float64)
        self.eps_final = global_eps[ranks].to(torch.float32)

    def initialize(self, env_spaces, share_memory: bool = False, global_B: int = 1,
                   env_ranks: list | None = None) -> None:
        """Initialize the agent; with ``env_ranks``, also take their slice of a vector epsilon."""
        super().initialize(env_spaces, share_memory=share_memory, global_B=global_B,
                           env_ranks=env_ranks)
        if env_ranks is not None:
            self.make_vec_eps(global_B, env_ranks)

    def collector_initialize(self, global_B: int = 1, env_ranks: list | None = None) -> None:
        """In a sampler worker: take this collector's slice of the vector epsilon."""
        super().collector_initialize(global_B=global_B, env_ranks=env_ranks)
        self.make_vec_eps(global_B, env_ranks)

    def sampling_epsilon(self, itr: int) -> float | torch.Tensor:
        """The annealed sampling epsilon at iteration ``itr`` (float, or a per-environment
        vector)."""
        return linear_schedule(itr, self.eps_itr_min, self.eps_itr_max, self.eps_init,
                               self.eps_final)

    def evaluation_epsilon(self, itr: int) -> float:
        """``eps_eval``, or 1 for the pre-training evaluation of an untrained model at
        ``itr == 0``."""
        if itr == 0 and getattr(self, "initial_model_state_dict", None) is None:
            return 1.0
        return self.eps_eval

    def sample_mode(self, itr: int) -> None:
        """Sampling mode, with the annealed epsilon."""
        super().sample_mode(itr)
        self.eps_sample = self.sampling_epsilon(itr)
        self.distribution.set_epsilon(self.eps_sample)

    def eval_mode(self, itr: int) -> None:
        """Evaluation mode, with the evaluation epsilon."""
        super().eval_mode(itr)
        self.distribution.set_epsilon(self.evaluation_epsilon(itr))
