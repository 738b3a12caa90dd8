"""Recurrent state that agents keep between sampler steps, and the mixins that switch it on.

``BaseAgent`` keeps an ``RnnStateStore`` when its class is recurrent and does the bookkeeping
(``prev_rnn_state``, ``advance_rnn_state``, ``reset``, ``reset_one`` and the stash across mode
switches), so samplers stay agnostic of it.  The mixins only say how many states to keep: one
(``RecurrentAgentMixin``) or one per group of environments that an alternating sampler steps
in turn (``AlternatingRecurrentAgentMixin``).  Neither overrides a mode switch, so the other
classes' mode switches (e.g. ``EpsilonGreedyAgentMixin``'s) always run.
"""
from __future__ import annotations

import torch

from rlfast.utils.buffer import buffer_func, buffer_method
from rlfast.utils.checks import check_int

__all__ = ["RnnStateStore", "RecurrentAgentMixin", "AlternatingRecurrentAgentMixin",
           "rnn_state_for_storage", "stored_rnn_state"]


class RnnStateStore:
    """The sampler's recurrent state, one per group of environments that the agent steps in
    turn (one group, or two for the alternating samplers), plus the stash that keeps the
    sampling states while the agent trains or evaluates.

    Each state is in cudnn layout ``[N, B, H]`` (any namedarraytuple of such tensors); ``None``
    means zeros. ``advance`` stores the state of the group that just stepped and moves on to
    the next group, so a one-group store simply replaces its state.
    """

    def __init__(self, n_groups: int):
        self.n_groups = check_int(n_groups, "n_groups", minimum=1, owner="RnnStateStore")
        self.stash: list = [None] * self.n_groups
        self.sampling = True  # whether ``states`` are the sampling states (else the stash)
        self.clear()

    def clear(self) -> None:
        """Forget every group's state (all start from zeros) and point at group 0."""
        self.states: list = [None] * self.n_groups
        self.group = 0

    @property
    def current(self):
        """The state of the group about to step."""
        return self.states[self.group]

    def use_group(self, group: int) -> None:
        """Point at ``group``'s state."""
        self.group = group

    def advance(self, new_state) -> None:
        """Store the state of the group that just stepped and point at the next group."""
        self.states[self.group] = new_state
        self.group = (self.group + 1) % self.n_groups

    def set_current(self, state) -> None:
        """Replace the state of the group about to step, staying on that group (the GPU
        action server keeps each group's state in fixed device tensors and hands them here)."""
        self.states[self.group] = state

    def zero_env(self, idx: int) -> None:
        """Zero one environment's slot, in place, in the current group's state."""
        if self.current is not None:
            buffer_func(self.current, _zero_column, idx)  # B is dim 1 of every leaf

    def switch_mode(self, old_mode: str | None, new_mode: str) -> None:
        """Leaving sample mode stashes the sampling states and training or evaluation starts
        from zeros; coming back to sample mode restores the stash (group 0 first)."""
        if new_mode == "sample":
            if old_mode != "sample":
                self.states, self.group = list(self.stash), 0
            self.sampling = True
            return
        if old_mode == "sample" or (old_mode is None and self.sampling):
            self.stash = self.states
        self.sampling = False
        self.clear()

    def sampling_state_dict(self) -> dict | None:
        """The sampling states (live or stashed) as plain data for a snapshot: per group
        None or ``{"type": name, "fields": {field: tensor}}``, with the group about to step;
        None when a state's type is not one of ``rlfast.models.memory``'s (it could not be
        rebuilt)."""
        from rlfast.models.memory import STATE_TYPES
        states = self.states if self.sampling else self.stash
        saved = []
        for state in states:
            if state is None:
                saved.append(None)
                continue
            name = type(state).__name__
            if STATE_TYPES.get(name) is not type(state):
                return None
            saved.append(dict(type=name, fields={f: getattr(state, f).detach().cpu().clone()
                                                 for f in state._fields}))
        return dict(states=saved, group=self.group if self.sampling else 0)

    def load_sampling_state_dict(self, saved: dict, device: torch.device | str) -> None:
        """Restore :meth:`sampling_state_dict`'s output as the sampling states (on ``device``)."""
        from rlfast.models.memory import STATE_TYPES
        if len(saved["states"]) != self.n_groups:
            raise ValueError(f"the snapshot holds {len(saved['states'])} recurrent-state groups, "
                             f"this agent keeps {self.n_groups}")
        states = []
        for entry in saved["states"]:
            if entry is None:
                states.append(None)
                continue
            cls = STATE_TYPES[entry["type"]]
            states.append(cls(*(entry["fields"][f].to(device) for f in cls._fields)))
        if self.sampling:
            self.states, self.group = states, saved["group"]
        else:
            self.stash = states


def _zero_column(x: torch.Tensor, idx: int) -> None:
    x[:, idx] = 0


class RecurrentAgentMixin:
    """Makes an agent keep one recurrent state between sampler steps.

    The state has cudnn layout ``[N, B, H]`` (any namedarraytuple of such tensors); ``None``
    means zeros. Sample-mode state is stashed while training or evaluating and restored after.
    Use as ``class MyAgent(RecurrentAgentMixin, MyBaseAgent)``.
    """

    recurrent = True
    rnn_groups = 1


class AlternatingRecurrentAgentMixin:
    """Two recurrent states, one per half of the environments, for alternating samplers.

    Each ``advance_rnn_state`` stores the new state for the group that just stepped and swaps
    in the other group's (``use_group`` points at one group directly), so the agent otherwise
    behaves like a ``RecurrentAgentMixin`` agent; the two mixins are alternatives, not layers.
    """

    recurrent = True
    alternating = True
    rnn_groups = 2

    def use_group(self, group: int) -> None:
        """Point the agent at one group's state (the action server calls this per group)."""
        self.rnn_states.use_group(group)


def rnn_state_for_storage(rnn_state):
    """[N, B, H] -> [B, N, H] so the state can be stored per environment in the samples buffer."""
    return buffer_method(rnn_state, "transpose", 0, 1)


def stored_rnn_state(prev_rnn_state, new_rnn_state):
    """The state a step started from, for ``agent_info``: ``[B, N, H]``, zeros shaped like
    ``new_rnn_state`` when the step started from ``None``."""
    if prev_rnn_state is None:
        prev_rnn_state = type(new_rnn_state)(*(torch.zeros_like(s) for s in new_rnn_state))
    return rnn_state_for_storage(prev_rnn_state)
