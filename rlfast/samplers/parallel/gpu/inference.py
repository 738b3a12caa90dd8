"""One worker group's inference in the action server: from its shared step-buffer rows to actions.

The action server holds one group object per worker group (and one for evaluation) and drives
each through ``begin_batch`` (once per batch), ``launch`` (start this step's actions),
``ready`` (are they back? never blocks), ``finish`` (wait until they are: the one host
synchronisation of a served step) and ``bootstrap`` (the batch's last value). Two kinds:

:class:`DeviceGroup`, for agents with a device step (``agent.device_step``: the policy-gradient
and DQN-family agents). Per step, with the model on CUDA::

    snapshot and consume the reset requests (host)
    one non_blocking copy: observation | reward | reset_snapshot | action   host -> device
    the device step, replayed from a CUDA graph (or eager), writing into fixed device tensors
    one non_blocking copy: action | agent_info                              device -> host
    record an event                 ... and ``finish`` synchronises on that event, once.

The inputs stay uint8 until the model; the recurrent state lives on the device in fixed
tensors, and an environment's reset is a mask applied to it on the device (``masked_fill``
before the step), not a Python branch, so recurrent agents are captured too. With the model on
the CPU nothing is copied: the step reads and writes the shared rows directly, and the
numerics are those of ``agent.step``.

The graph is captured at the first step of a batch whose settings differ from the captured
ones (the agent's ``device_step_graph_key()``, which is None where the step cannot be captured,
and the model's parameter storage), after warm-up runs on a side stream (the recurrent state
is restored after them). Where the agent declines, or capture raises, the same step runs
eagerly; which path a group takes is reported once through ``notify``.

:class:`HostGroup`, for every other agent (``RandomAgent``, the Q-value policy agents):
``agent.step`` on the shared rows, as before.
"""
from __future__ import annotations

import contextlib
import itertools
from typing import Any, Callable

import numpy as np
import torch

from rlfast.samplers.parallel.gpu.step_buffer import GroupStepBuffer
from rlfast.utils.buffer import buffer_func, numpify_buffer
from rlfast.utils.finite import raise_if_inputs_nonfinite

__all__ = ["DeviceGroup", "HostGroup", "has_device_step", "apply_agent_resets"]


def has_device_step(agent: Any) -> bool:
    """Whether ``agent``'s ``step`` is its ``device_step`` plus bookkeeping: the class that
    defines ``device_step`` is the one defining ``step`` or a subclass of it (an agent that
    overrides ``step`` alone keeps its own ``step``)."""
    mro = type(agent).__mro__

    def definer(name: str) -> int | None:
        return next((i for i, cls in enumerate(mro) if name in vars(cls)), None)

    device, step = definer("device_step"), definer("step")
    return device is not None and step is not None and device <= step


def apply_agent_resets(agent: Any, flags: np.ndarray) -> None:
    """Reset the agent's per-env state where ``flags`` (a row range's reset requests) are
    set, clearing only the flags applied (a worker may raise another meanwhile)."""
    if flags.any():
        for b in np.flatnonzero(flags):
            agent.reset_one(idx=int(b))
            flags[b] = False


def _copy_tree(dst: Any, src: Any) -> None:
    """Copy every tensor leaf of ``src`` into ``dst``'s (broadcasting as numpy assignment
    does); same structure, None where None."""
    if dst is None:
        return
    if isinstance(dst, torch.Tensor):
        dst.copy_(src)
        return
    for d, s in zip(dst, src):
        _copy_tree(d, s)


def _mirror(array: np.ndarray, block: np.ndarray, device_block: torch.Tensor) -> torch.Tensor:
    """The view of ``device_block`` that mirrors ``array``, a view of ``block``."""
    offset = array.__array_interface__["data"][0] - block.__array_interface__["data"][0]
    dtype = torch.from_numpy(np.empty(0, dtype=array.dtype)).dtype
    return device_block[offset:offset + array.nbytes].view(dtype).view(array.shape)


_UNSET = object()  # no settings seen yet: the next batch decides graph or eager


def _masked(state: torch.Tensor, reset: torch.Tensor) -> torch.Tensor:
    """``state`` ``[N, B, ...]`` with the columns of reset environments zeroed."""
    return state.masked_fill(reset.view((1, -1) + (1,) * (state.dim() - 2)), 0)


def _masked_in_place(state: torch.Tensor, reset: torch.Tensor) -> torch.Tensor:
    return state.masked_fill_(reset.view((1, -1) + (1,) * (state.dim() - 2)), 0)


class _Group:
    """What both kinds share: the agent, the group's buffer, workers, rows and state group.

    ``rows``: the group's slice of the sampler's ``batch_B`` (or evaluation) environments;
    ``rnn_group``: which of a two-state agent's recurrent states it uses (None: whichever the
    agent points at, for the one-group server).
    """

    def __init__(self, agent: Any, buffer: GroupStepBuffer, workers: list[int], rows: slice,
                 rnn_group: int | None, notify: Callable[[str], None], label: str):
        self.agent = agent
        self.buffer = buffer
        self.workers = list(workers)
        self.rows = rows
        self.rnn_group = rnn_group
        self.notify = notify
        self.label = label

    def _explain(self, error: Exception) -> None:
        pyt = self.buffer.pyt
        first = self.rows.start or 0
        raise_if_inputs_nonfinite(error, dict(observation=pyt.observation, reward=pyt.reward),
                                  env_ids=range(first, first + self.buffer.n))

    def ready(self) -> bool:
        """Whether the actions of the step launched last are back (never blocks)."""
        return True

    def finish(self) -> None:
        """Wait until the actions of the step launched last are in the shared rows."""

    def close(self) -> None:
        """Drop what the group holds on the device."""


class HostGroup(_Group):
    """``agent.step`` on the shared rows (agents without a device step)."""

    def begin_batch(self, ops: Any, use_graphs: bool) -> None:
        """Nothing to prepare: the agent moves its inputs itself."""

    def _select(self) -> None:
        use_group = getattr(self.agent, "use_group", None)
        if self.rnn_group is not None and use_group is not None:
            use_group(self.rnn_group)

    def launch(self) -> None:
        """Apply the reset requests and write this step's actions (synchronously)."""
        self._select()
        step_np, step_pyt = self.buffer.np, self.buffer.pyt
        apply_agent_resets(self.agent, step_np.reset)
        try:
            action, agent_info = self.agent.step(step_pyt.observation, step_pyt.action,
                                                 step_pyt.reward)
        except Exception as error:  # noqa: BLE001 - named below when an input caused it
            self._explain(error)
            raise
        step_np.action[:] = numpify_buffer(action)
        if agent_info is not None and step_np.agent_info is not None:
            step_np.agent_info[:] = numpify_buffer(agent_info)

    def bootstrap(self, value_out: np.ndarray | None) -> None:
        """Apply the reset requests; write the value of the rows' last observations."""
        self._select()
        step_np, step_pyt = self.buffer.np, self.buffer.pyt
        apply_agent_resets(self.agent, step_np.reset)
        if value_out is not None:
            value = self.agent.value(step_pyt.observation, step_pyt.action, step_pyt.reward)
            value_out[:] = value.numpy()


class DeviceGroup(_Group):
    """The agent's device step on the group's rows, staged on the device (see the module
    docstring). ``state_example``: one environment's recurrent state (``[N, H]`` leaves of the
    agent's state tuple), None for feedforward agents."""

    def __init__(self, agent: Any, buffer: GroupStepBuffer, workers: list[int], rows: slice,
                 rnn_group: int | None, notify: Callable[[str], None], label: str,
                 state_example: Any = None):
        super().__init__(agent, buffer, workers, rows, rnn_group, notify, label)
        self.state_example = state_example
        self._ops = None
        self._device: torch.device | None = None
        self._inputs = self._outputs = self._state = None
        self._to_device = self._from_device = None
        self._event = None
        self._pending = False
        self._graph = None
        self._graph_key = _UNSET
        self._capture_failed = False
        self.captures = 0  # graphs captured so far (tests read it)

    # ---- per batch ------------------------------------------------------------------------
    def begin_batch(self, ops: Any, use_graphs: bool) -> None:
        """Build the device staging when the agent's device (or ``ops``) changed, and drop a
        captured graph whose settings no longer hold."""
        device = torch.device(self.agent.device)
        if ops is not self._ops or device != self._device:
            self._build(device, ops)
        if ops is None:
            return
        key = self._settings_key() if use_graphs else None
        if key == self._graph_key:
            return
        self._graph, self._capture_failed, self._graph_key = None, False, key
        if key is None:
            why = ("CUDA graphs are off" if not use_graphs else
                   f"{type(self.agent).__name__}.device_step_graph_key() is None: its step "
                   "cannot be captured in this mode")
            self.notify(f"{self.label}: eager inference on {device} ({why})")

    def _settings_key(self) -> tuple | None:
        settings = getattr(self.agent, "device_step_graph_key", None)
        settings = settings() if settings is not None else None
        if settings is None:
            return None
        model = self.agent.model
        storage = tuple(t.data_ptr() for t in itertools.chain(model.parameters(),
                                                              model.buffers()))
        return settings, id(model), storage

    def _build(self, device: torch.device, ops: Any) -> None:
        self.close()
        self._ops, self._device = ops, device
        with self._stream():  # allocated on the stream that uses them
            self._allocate(device, ops)

    def _allocate(self, device: torch.device, ops: Any) -> None:
        buffer = self.buffer
        host = buffer.pyt
        if ops is None:  # the model is on the CPU: the step reads and writes the shared rows
            self._inputs = (host.observation, host.action, host.reward,
                            buffer.reset_snapshot_pyt)
            self._outputs = (host.action, host.agent_info)
        else:
            block = buffer.block
            device_block = ops.device_block(block.nbytes)

            def mirror(array):
                return _mirror(array, block, device_block)

            self._inputs = (buffer_func(buffer.np.observation, mirror),
                            buffer_func(buffer.np.action, mirror), mirror(buffer.np.reward),
                            mirror(buffer.reset_snapshot))
            self._outputs = (buffer_func(buffer.np.action, mirror),
                             buffer_func(buffer.np.agent_info, mirror))
            host_block = torch.from_numpy(block)
            (a, b), (c, d) = buffer.to_device, buffer.from_device
            self._to_device = (device_block[a:b], host_block[a:b])
            self._from_device = (host_block[c:d], device_block[c:d])
            self._event = ops.new_event()
        n = buffer.n
        self._state = buffer_func(self.state_example, lambda leaf: torch.zeros(
            (leaf.shape[0], n) + tuple(leaf.shape[1:]), device=device,
            dtype=torch.from_numpy(np.empty(0, dtype=leaf.dtype)).dtype))

    def close(self) -> None:
        """Drop the device staging and the captured graph."""
        self._graph, self._graph_key, self._capture_failed = None, _UNSET, False
        self._inputs = self._outputs = self._state = None
        self._to_device = self._from_device = self._event = None
        self._ops = self._device = None
        self._pending = False

    # ---- the step -------------------------------------------------------------------------
    def _stream(self):
        return self._ops.stream_context() if self._ops is not None else contextlib.nullcontext()

    def _take_resets(self) -> None:
        """Snapshot the reset requests into the staged mask and clear the ones taken."""
        buffer = self.buffer
        np.copyto(buffer.reset_snapshot, buffer.np.reset)
        np.putmask(buffer.np.reset, buffer.reset_snapshot, False)

    def _state_from_agent(self) -> Any:
        """Point the agent's state store at this group and bring its state into the fixed
        device state (a state the store holds elsewhere is copied in; none is all-reset)."""
        store = self.agent.rnn_states
        store.use_group(self.rnn_group if self.rnn_group is not None else store.group)
        current = store.current
        if current is None:
            self.buffer.reset_snapshot[:] = True  # zeros, through the mask
        elif current is not self._state:
            _copy_tree(self._state, current)
        return store

    def launch(self) -> None:
        """Start this step: stage the inputs, run the device step, copy the actions back
        (asynchronous with the model on CUDA; ``finish`` waits)."""
        self._take_resets()
        ops = self._ops
        store = None
        with self._stream():
            if self._state is not None:
                store = self._state_from_agent()
            if ops is not None:
                ops.copy(*self._to_device)
            self._run()
            if ops is not None:
                ops.copy(*self._from_device)
                self._event.record()
                self._pending = True
        if store is not None:
            store.advance(self._state)  # the store now holds the fixed device state

    def ready(self) -> bool:
        """Whether the actions copied back at the last launch have arrived."""
        return not self._pending or self._event.query()

    def finish(self) -> None:
        """The one host synchronisation of a step: wait for the last launch's event."""
        if self._pending:
            self._event.synchronize()
            self._pending = False

    def _run(self) -> None:
        if (self._graph is None and self._ops is not None and not self._capture_failed
                and self._graph_key is not None and self._graph_key is not _UNSET):
            self._graph = self._capture()
            # The warm-up runs wrote actions into the rows the previous actions are read from.
            self._ops.copy(*self._to_device)
        if self._graph is not None:
            self._graph.replay()
        else:
            self._infer()

    def _capture(self) -> Any:
        state = self._state
        saved = buffer_func(state, torch.clone)  # warm-up runs advance the state
        try:
            graph = self._ops.capture(self._infer)
        except Exception as error:  # noqa: BLE001 - any capture failure means: run eagerly
            self._capture_failed = True
            self.notify(f"{self.label}: eager inference on {self._device} (CUDA graph "
                        f"capture failed: {type(error).__name__}: {error})")
            graph = None
        finally:
            _copy_tree(state, saved)
        if graph is not None:
            self.captures += 1
            self.notify(f"{self.label}: inference in a CUDA graph on {self._device}")
        return graph

    def _infer(self) -> None:
        """The device step from the staged inputs into the fixed outputs (and state): what a
        graph captures. No host reads, no allocation outside the step itself."""
        observation, prev_action, prev_reward, reset = self._inputs
        state = self._state
        state_in = None if state is None else buffer_func(state, _masked, reset)
        try:
            action, agent_info, next_state = self.agent.device_step(
                observation, prev_action, prev_reward, state_in)
        except Exception as error:  # noqa: BLE001 - named below when an input caused it
            self._explain(error)
            raise
        if state is not None:
            _copy_tree(state, next_state)
        out_action, out_info = self._outputs
        _copy_tree(out_action, action)
        _copy_tree(out_info, agent_info)

    def bootstrap(self, value_out: np.ndarray | None) -> None:
        """Apply the reset requests to the state; write the value of the rows' last
        observations (one read of the value per batch)."""
        self._take_resets()
        with self._stream():
            store = self._state_from_agent() if self._state is not None else None
            if self._ops is not None:
                self._ops.copy(*self._to_device)
            observation, prev_action, prev_reward, reset = self._inputs
            if store is not None:
                buffer_func(self._state, _masked_in_place, reset)
                store.set_current(self._state)
            if value_out is not None:
                value = self.agent.value(observation, prev_action, prev_reward)
                value_out[:] = value.numpy()
