"""The algorithm interface: turns sample batches into parameter updates of the agent."""
from __future__ import annotations

import abc
from typing import Any


class RLAlgorithm(abc.ABC):
    """Base class for algorithms; the runner calls ``initialize`` then ``optimize_agent``.

    ``opt_info_fields`` names the diagnostics returned (as lists) by ``optimize_agent``;
    ``bootstrap_value`` asks the sampler to store V(s_{T+1}) for each batch.
    """

    opt_info_fields: tuple = ()
    bootstrap_value = False
    update_counter = 0

    @abc.abstractmethod
    def initialize(self, agent: Any, n_itr: int, batch_spec: Any, mid_batch_reset: bool,
                   examples: Any, world_size: int = 1, rank: int = 0) -> None:
        """Bind the agent and build the optimizer (and replay buffer, if any) before training.

        The runner calls it once, after the sampler has produced ``examples`` of every sample
        field, so the algorithm can size its buffers and check that the collector suits it
        (``mid_batch_reset``).
        """

    def async_initialize(self, agent: Any, sampler_n_itr: int, batch_spec: Any,
                         mid_batch_reset: bool, examples: Any, world_size: int = 1) -> None:
        """Set up for an asynchronous runner; algorithms that support one override this."""
        raise TypeError(f"{type(self).__name__} does not support asynchronous runners")

    def optim_initialize(self, rank: int = 0) -> None:
        """Build the optimizer once the agent is on its device (a no-op unless overridden)."""

    @abc.abstractmethod
    def optimize_agent(self, itr: int, samples: Any = None, sampler_itr: int | None = None) -> Any:
        """Update the agent from one batch of samples; returns the diagnostics of the update.

        The result is a namedtuple whose fields are ``opt_info_fields``, each a list of the
        values seen during the update, which the runner logs as columns.
        """

    def optim_state_dict(self) -> dict:
        """The optimizer's state, saved with the agent's parameters in snapshots."""
        return self.optimizer.state_dict()

    def load_optim_state_dict(self, state_dict: dict) -> None:
        """Restore the optimizer's state from :meth:`optim_state_dict`'s output."""
        self.optimizer.load_state_dict(state_dict)
