"""The algorithm interface: turns sample batches into parameter updates of the agent."""
from __future__ import annotations

import abc
from collections.abc import Iterable, Mapping
from typing import Any

import torch

from rlfast.utils.finite import check_scalars_finite


class RLAlgorithm(abc.ABC):
    """Base class for algorithms; the runner calls ``initialize`` then ``optimize_agent``.

    ``opt_info_fields`` names the diagnostics returned (as lists) by ``optimize_agent``;
    ``bootstrap_value`` asks the sampler to store V(s_{T+1}) for each batch.
    """

    opt_info_fields: tuple = ()
    bootstrap_value = False
    on_policy = False  # learns from each batch once, right after it is sampled (PPO, A2C)
    update_counter = 0
    updates_per_sync = 1  # asynchronous runners: updates between parameter publications
    on_update: Any = None  # asynchronous runners: called with update_counter after each update
    world_size = 1  # optimizing ranks (SyncRl ranks, or AsyncRl optimizer ranks)
    replay_ranks = 1  # replay buffers the global replay is split over (one per SyncRl rank)

    def rank_share(self, total: int, name: str) -> int:
        """``total / world_size``: each rank's share of a global batch (it must divide)."""
        if total % self.world_size:
            raise ValueError(f"{type(self).__name__}: {name}={total} must divide evenly over "
                             f"{self.world_size} ranks (each rank samples {name} / ranks)")
        return total // self.world_size

    @property
    def rank_replay_size(self) -> int:
        """The capacity of this rank's replay buffer: the global ``replay_size`` split over
        ``replay_ranks`` (each SyncRl rank stores its own environments' steps)."""
        return max(1, int(self.replay_size) // self.replay_ranks)

    @abc.abstractmethod
    def initialize(self, agent: Any, n_itr: int, batch_spec: Any, mid_batch_reset: bool,
                   examples: Any, world_size: int = 1, rank: int = 0) -> None:
        """Bind the agent and build the optimizer (and replay buffer, if any) before training.

        The runner calls it once, after the sampler has produced ``examples`` of every sample
        field, so the algorithm can size its buffers and check that the collector suits it
        (``mid_batch_reset``).
        """

    def async_initialize(self, agent: Any, sampler_n_itr: int, batch_spec: Any,
                         mid_batch_reset: bool, examples: Any, world_size: int = 1,
                         shared_replay: bool = True) -> Any:
        """Set up for an asynchronous runner and return the shared-memory replay buffer the
        sampler's batches are copied into. Only replay-based algorithms (the DQN family,
        DDPG, TD3, SAC) have one; on-policy ones cannot learn from an asynchronous sampler
        and raise ``TypeError``."""
        raise TypeError(f"{type(self).__name__} does not support asynchronous runners: it "
                        f"learns on-policy from each batch once, so it has no replay buffer "
                        f"for an asynchronous sampler to fill; use a synchronous runner")

    def optim_initialize(self, rank: int = 0) -> None:
        """Build the optimizer once the agent is on its device (a no-op unless overridden)."""

    # ---- replay owned by an asynchronous run's optimizer -------------------------------------
    _deferred_replay: Any = None  # (examples, batch_spec) until the optimizer builds replay

    @property
    def replay_deferred(self) -> bool:
        """Whether the replay buffer waits for :meth:`build_deferred_replay` (an asynchronous
        run whose optimizer alone appends to and samples from it: it is built in the
        optimizer process, on the optimizer's device)."""
        return self._deferred_replay is not None

    def build_deferred_replay(self) -> None:
        """Build the replay :meth:`async_initialize` deferred (``shared_replay=False``), now
        that the agent is on its device; a no-op otherwise."""
        if self._deferred_replay is None:
            return
        examples, batch_spec = self._deferred_replay
        self._deferred_replay = None
        self.initialize_replay_buffer(examples, batch_spec, async_=False)

    @abc.abstractmethod
    def optimize_agent(self, itr: int, samples: Any = None, sampler_itr: int | None = None) -> Any:
        """Update the agent from one batch of samples; returns the diagnostics of the update.

        The result is a namedtuple whose fields are ``opt_info_fields``, each a list of the
        values seen during the update, which the runner logs as columns.
        """

    def check_finite(self, itr: int | None, values: Mapping[str, Any]) -> None:
        """Raise :class:`~rlfast.utils.finite.NonFiniteError` naming this algorithm, the first
        of ``values`` (losses, gradient norms: floats or 0-d tensors) that is NaN or inf, and
        the iteration. Call it before ``optimizer.step()``, so a non-finite update never
        reaches the weights, on values already on the host (no extra device sync)."""
        check_scalars_finite(values, type(self).__name__, itr)

    @property
    def compiled_loss(self) -> Any:
        """``loss`` under ``torch.compile`` when the algorithm's ``compile`` is on (compiled
        once, at first use), else ``loss`` itself."""
        if not getattr(self, "compile", False):
            return self.loss
        if getattr(self, "_compiled_loss", None) is None:
            self._compiled_loss = torch.compile(self.loss, dynamic=False)
        return self._compiled_loss

    def clipped_step(self, itr: int, loss: torch.Tensor, parameters: Iterable[torch.Tensor],
                     max_grad_norm: float) -> tuple[float, float]:
        """One guarded gradient step: backward, clip the gradient norm to ``max_grad_norm``,
        refuse a NaN / inf loss or gradient norm (:meth:`check_finite`), then step the
        optimizer. Returns ``(loss, gradient norm)`` as floats for the diagnostics; bringing
        them to the host before the step is the one device sync the check needs."""
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(parameters, max_grad_norm)
        loss_value, grad_norm_value = loss.item(), float(grad_norm)
        self.check_finite(itr, {"loss": loss_value, "gradNorm": grad_norm_value})
        self.optimizer.step()
        return loss_value, grad_norm_value

    def optim_state_dict(self) -> dict:
        """The optimizer's state, saved with the agent's parameters in snapshots."""
        return self.optimizer.state_dict()

    def load_optim_state_dict(self, state_dict: dict) -> None:
        """Restore the optimizer's state from :meth:`optim_state_dict`'s output."""
        self.optimizer.load_state_dict(state_dict)

    # ---- resume ------------------------------------------------------------------------------
    learn_after_itr = 0  # a run resumed without its replay learns again from this iteration

    def state_dict(self) -> dict:
        """The algorithm's counters and schedules beyond the optimizer (which
        :meth:`optim_state_dict` holds): the update counter, a learning-rate scheduler's
        position, and the iteration learning pauses until after a resume without replay.
        Schedules driven by the iteration (epsilon, PER beta) need nothing saved."""
        state = dict(update_counter=int(self.update_counter),
                     learn_after_itr=int(self.learn_after_itr))
        scheduler = getattr(self, "lr_scheduler", None)
        if scheduler is not None:
            state["lr_scheduler"] = scheduler.state_dict()
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output (after ``initialize``)."""
        self.update_counter = int(state["update_counter"])
        self.learn_after_itr = int(state.get("learn_after_itr", 0))
        scheduler = getattr(self, "lr_scheduler", None)
        if scheduler is not None and "lr_scheduler" in state:
            scheduler.load_state_dict(dict(state["lr_scheduler"]))

    def resume_without_replay(self, itr: int) -> None:
        """A run resumes at iteration ``itr`` with an empty replay buffer (its content was
        not saved): learning waits until the buffer again holds ``min_steps_learn`` steps,
        as at the start of a run. Algorithms without replay have nothing to refill."""
        min_itr_learn = getattr(self, "min_itr_learn", 0)
        self.learn_after_itr = int(itr) + int(min_itr_learn)

    def learning(self, itr: int) -> bool:
        """Whether iteration ``itr`` trains (replay algorithms: past ``min_itr_learn`` and
        any refill after a resume without replay)."""
        return itr >= getattr(self, "min_itr_learn", 0) and itr >= self.learn_after_itr
