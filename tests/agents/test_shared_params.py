"""SharedParams: what an async optimizer publishes reaches a forked sampler whole."""
from __future__ import annotations

import multiprocessing as mp
import time

import pytest
import torch

from rlfast.agents.shared_params import SharedParams


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(32, 64)
        self.b = torch.nn.Linear(64, 8)
        self.register_buffer("count", torch.zeros(3, dtype=torch.int64))


def _fill(model: torch.nn.Module, value: float) -> None:
    with torch.no_grad():
        for tensor in model.state_dict(keep_vars=True).values():
            tensor.fill_(value)


def _values(model: torch.nn.Module) -> set[float]:
    return {float(v) for t in model.state_dict().values() for v in t.flatten().unique()}


def test_publish_then_pull_copies_every_tensor_and_reports_updates():
    optimizer, sampler = Net(), Net()
    board = SharedParams(optimizer)
    assert board.version == 0 and board.pull(sampler) is None  # nothing new yet
    _fill(optimizer, 3.0)
    board.publish(optimizer, updates=12)
    assert board.version == 1 and board.published_updates == 12
    assert board.pull(sampler) == 12
    assert _values(sampler) == {3.0}
    assert board.pull(sampler) is None  # the same version is not copied twice


def test_a_model_of_another_shape_is_refused():
    board = SharedParams(Net())
    with pytest.raises(ValueError, match="does not match"):
        board.publish(torch.nn.Linear(2, 2), updates=1)


def _child_pulls(board: SharedParams, out) -> None:
    model = Net()
    deadline = time.monotonic() + 10
    while board.pull(model) is None and time.monotonic() < deadline:
        time.sleep(0.01)
    out.put(sorted(_values(model)))


def test_a_forked_child_pulls_what_the_parent_publishes():
    ctx = mp.get_context("fork")
    optimizer = Net()
    board = SharedParams(optimizer, ctx)
    out = ctx.Queue()
    child = ctx.Process(target=_child_pulls, args=(board, out))
    child.start()
    _fill(optimizer, 5.0)
    board.publish(optimizer, updates=1)
    assert out.get(timeout=20) == [5.0]
    child.join(10)
    assert child.exitcode == 0


def _publish_loop(board: SharedParams, seconds: float) -> None:
    model = Net()
    end = time.monotonic() + seconds
    value = 0
    while time.monotonic() < end:
        value += 1
        _fill(model, float(value))
        board.publish(model, updates=value)


def test_concurrent_publish_and_pull_never_tear():
    """A child publishes sets whose every element equals the update count, as fast as it
    can, for 2 s; every set the parent pulls meanwhile must be one value throughout and
    match the update count it came with."""
    ctx = mp.get_context("fork")
    board = SharedParams(Net(), ctx)
    child = ctx.Process(target=_publish_loop, args=(board, 2.0))
    child.start()
    model, pulls = Net(), 0
    while child.is_alive():
        updates = board.pull(model)
        if updates is not None:
            assert _values(model) == {float(updates)}
            pulls += 1
    child.join()
    assert child.exitcode == 0
    assert pulls > 20


class _FakeEvent:
    """A CUDA event stand-in: 'not done' to ``busy`` queries, then done."""

    def __init__(self, busy: int):
        self.busy, self.recorded, self.waited = busy, False, False

    def record(self) -> None:
        self.recorded = True

    def query(self) -> bool:
        self.busy -= 1
        return self.busy < 0

    def synchronize(self) -> None:
        self.waited = True
        self.busy = -1


def _async_board(model, busy: int = 1):
    """A board whose publish_async runs its CUDA branch on the CPU: plain staging memory and
    fake events that report the copy under way for ``busy`` queries."""
    board = SharedParams(model)
    events = []

    def new_event():
        events.append(_FakeEvent(busy))
        return events[-1]

    board.staging_tensor = lambda like: torch.empty(like.shape, dtype=like.dtype)
    board.new_event = new_event
    return board, events


def test_publish_async_stages_then_publishes_once_the_copy_is_done():
    optimizer, sampler = Net(), Net()
    board, events = _async_board(optimizer, busy=1)
    _fill(optimizer, 1.0)
    assert board.publish_async(optimizer, updates=5) is False  # staged: no version yet
    assert board.publishing and board.version == 0 and events[0].recorded
    _fill(optimizer, 2.0)  # later updates do not change what was staged
    assert board.publish_async(optimizer, updates=6) is False  # the copy is still under way
    assert board.publish_async(optimizer, updates=7) is True  # done: version 1, the staged state
    assert board.version == 1 and board.published_updates == 5
    assert board.pull(sampler) == 5 and _values(sampler) == {1.0}


def test_publish_async_waits_for_the_sampler_to_pull_before_staging_again():
    optimizer, sampler = Net(), Net()
    board, events = _async_board(optimizer, busy=0)
    board.publish_async(optimizer, updates=1)
    assert board.publish_async(optimizer, updates=2) is True  # version 1 out
    assert board.publish_async(optimizer, updates=3) is False and not board.publishing
    assert len(events) == 1  # nothing staged while the sampler has not pulled version 1
    board.pull(sampler)
    board.publish_async(optimizer, updates=4)
    assert board.publishing and len(events) == 2


def test_flush_publishes_the_staged_copy_waiting_for_it():
    optimizer = Net()
    board, events = _async_board(optimizer, busy=100)
    _fill(optimizer, 4.0)
    board.publish_async(optimizer, updates=9)
    board.flush()
    assert events[0].waited and board.version == 1 and board.published_updates == 9
    assert not board.publishing
    board.flush()  # nothing staged: nothing happens
    assert board.version == 1
