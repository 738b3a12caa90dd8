"""Moving an agent's parameters between processes and roles, a component beside the agent.

An agent is a model, a device, a policy and its state; how its parameters travel is the
process layout's business, which the runners and samplers compose from these pieces: DDP
wrapping of the trained models for synchronous multi-rank training, the shared CPU model
that parallel sampler workers act with, the overlapped runner's training twin and its
publication to the sampling agent, and the asynchronous runner's parameter board
(:class:`AsyncParams`, over :class:`~rlfast.agents.shared_params.SharedParams`). Which models
are trained is agent knowledge, read from ``agent.trained_model_names``; after replacing
models the functions here call ``agent.on_models_replaced()`` so the agent drops its caches.
"""
from __future__ import annotations

import copy
from typing import TYPE_CHECKING

import torch

from rlfast.agents.shared_params import SharedParams
from rlfast.models.utils import strip_ddp_state_dict
from rlfast.utils.torch_compat import wrap_ddp

if TYPE_CHECKING:
    from rlfast.agents.base import BaseAgent

__all__ = ["AsyncParams", "publish_to", "sync_shared_model", "training_twin",
           "unwrap_data_parallel", "use_own_cpu_model", "wrap_data_parallel"]

_DDP = torch.nn.parallel.DistributedDataParallel


def wrap_data_parallel(agent: BaseAgent) -> torch.device:
    """Wrap every trained model of ``agent`` (``agent.trained_model_names``, in that order)
    in DistributedDataParallel on the agent's device, so that every backward pass all-reduces
    (averages) its gradients over the ranks; torch.distributed must be initialized. Target
    copies follow their models by averaging and are not wrapped. Buffers are synchronized
    once, at wrapping (see :func:`~rlfast.utils.torch_compat.wrap_ddp`). Returns the agent's
    device."""
    for name in agent.trained_model_names:
        setattr(agent, name, wrap_ddp(getattr(agent, name), agent.device))
    agent.on_models_replaced()
    return agent.device


def unwrap_data_parallel(agent: BaseAgent) -> None:
    """Unwrap every DistributedDataParallel model of ``agent`` (the trained parameters
    stay): before the process group is destroyed, so that the wrappers' reducers (which hold
    the group and its pending work) are freed while the interpreter is fully alive, not
    during its teardown, where freeing them can abort the process."""
    replaced = False
    for name, value in list(vars(agent).items()):
        if isinstance(value, _DDP):
            setattr(agent, name, value.module)
            replaced = True
    if replaced:
        agent.on_models_replaced()


def sync_shared_model(agent: BaseAgent) -> None:
    """Copy the trained model's parameters into the agent's shared CPU model, the one the
    parallel sampler workers act with (a no-op when the two are the same module, or when
    there is no shared model). Only the model is copied: target networks and critics stay
    with the learner, whatever the agent's ``state_dict`` holds."""
    shared = agent.shared_model
    if shared is not None and shared is not agent.model:
        shared.load_state_dict(strip_ddp_state_dict(agent.model.state_dict()))


def use_own_cpu_model(agent: BaseAgent, share_memory: bool = True) -> None:
    """In the asynchronous sampler process: the sampler acts with its own CPU model (the
    forked copy of the master's), put in shared memory when ``share_memory`` so that the
    sampler's worker processes act with the parameters it pulls from the board."""
    if share_memory:
        agent.model.share_memory()
        agent.shared_model = agent.model
    agent.share_memory = share_memory


def training_twin(agent: BaseAgent) -> BaseAgent:
    """A copy of ``agent`` for a learner that trains while ``agent`` samples (the overlapped
    runner): the same settings and parameters on the same device, in models of its own
    (private memory, not shared with the sampler's workers), so that updates never touch
    the parameters the sampler acts with; :func:`publish_to` copies the trained parameters
    back between batches. Taken after the sampler built the model and before any DDP
    wrapping."""
    if agent.model is None:
        raise ValueError(f"training_twin({type(agent).__name__}) needs a built model "
                         f"(after the sampler's initialize)")
    if isinstance(agent.model, _DDP):
        raise ValueError("training_twin() is taken before the model is wrapped in "
                         "DistributedDataParallel")
    twin = copy.deepcopy(agent)  # module tensors are cloned into private memory
    twin.shared_model = None
    twin.share_memory = False
    return twin


def publish_to(learner: BaseAgent, sampling_agent: BaseAgent) -> None:
    """Copy ``learner``'s parameters and buffers into ``sampling_agent``'s models in place
    (shared memory stays shared) and hand over the algorithm-set sampling settings
    (``sampling_state``)."""
    with torch.no_grad():
        sampling_agent.load_state_dict(learner.state_dict())
    sampling_agent.load_sampling_state(learner.sampling_state())


class AsyncParams:
    """The asynchronous runners' parameter board: the optimizer sends its model's state, the
    sampler process receives it before each batch when a new version appeared.

    Made in the master from the agent's model before the sampler process forks (its shared
    memory and lock are inherited, so it travels to the sampler process beside the agent).
    Each process keeps its own record of the version its model holds and, on the sampler
    side, of the optimizer update count those parameters follow (``sampler_updates``, for
    the policy lag the runner logs).
    """

    def __init__(self, agent: BaseAgent, ctx=None):
        self.board = SharedParams(agent.model, ctx)
        self._sampler_updates = 0

    def send(self, agent: BaseAgent, updates: int = 0, wait: bool = True) -> None:
        """Optimizer side: publish ``agent``'s trained parameters (copied to shared CPU memory
        under the write lock; the version moves). ``updates``: the update count they follow.
        ``wait=False`` with the model on a GPU: stage them without waiting for the device and
        publish at a later call (:meth:`SharedParams.publish_async`); a call with ``wait``
        publishes the current parameters at once (and drops a staged, older copy)."""
        if not wait and agent.device.type == "cuda":
            self.board.publish_async(agent.model, updates)
            return
        self.board.flush()
        self.board.publish(agent.model, updates)

    def recv(self, agent: BaseAgent) -> bool:
        """Sampler side: copy the published parameters into ``agent``'s model (under the read
        lock) if a new version appeared since this process last copied; returns whether it
        did. ``sampler_updates`` then says which optimizer update they follow."""
        updates = self.board.pull(agent.model)
        if updates is None:
            return False
        self._sampler_updates = updates
        return True

    @property
    def sampler_updates(self) -> int:
        """The optimizer update count of the parameters this process last received (0 before
        any: the initial parameters)."""
        return self._sampler_updates
