"""The algorithm interface: turns sample batches into parameter updates of the agent."""
from __future__ import annotations


class RLAlgorithm:
    """Base class for algorithms; the runner calls ``initialize`` then ``optimize_agent``.

    ``opt_info_fields`` names the diagnostics returned (as lists) by ``optimize_agent``;
    ``bootstrap_value`` asks the sampler to store V(s_{T+1}) for each batch.
    """

    opt_info_fields: tuple = ()
    bootstrap_value = False
    update_counter = 0

    def initialize(self, agent, n_itr, batch_spec, mid_batch_reset, examples, world_size=1, rank=0):
        raise TypeError(f"{type(self).__name__} must define initialize()")

    def async_initialize(self, agent, sampler_n_itr, batch_spec, mid_batch_reset, examples,
                         world_size=1):
        raise TypeError(f"{type(self).__name__} does not support asynchronous runners")

    def optim_initialize(self, rank: int = 0) -> None:
        pass

    def optimize_agent(self, itr: int, samples=None, sampler_itr=None):
        raise TypeError(f"{type(self).__name__} must define optimize_agent()")

    def optim_state_dict(self) -> dict:
        return self.optimizer.state_dict()

    def load_optim_state_dict(self, state_dict: dict) -> None:
        self.optimizer.load_state_dict(state_dict)
