"""Replay buffers shared between processes: a buffer built in the parent, appended to in a
forked child, samples in the parent exactly as a plain buffer fed the same data (and the other
way round); concurrent appends and samples never mix rows; batches never alias shared memory;
the factory maps ``async_=True`` to the Async classes; nothing is left in /dev/shm."""
from __future__ import annotations

import gc
import multiprocessing as mp
import time
from collections import namedtuple

import numpy as np
import pytest
import torch

import rlfast.replays as replays
from rlfast.replays import (AsyncPrioritizedReplayBuffer, AsyncReplayBuffer, AsyncSumTree,
                            AsyncUniformReplayBuffer, SumTree, make_replay_buffer,
                            replay_buffer_class)
from rlfast.utils.buffer import SharedArray
from tests._leaks import new_shm_entries, shm_entries
from tests.replays._stream import Stream, Tl, tl_id_fields

FORK = mp.get_context("fork")
ASYNC_NAMES = [
    "AsyncUniformReplayBuffer", "AsyncPrioritizedReplayBuffer", "AsyncUniformReplayFrameBuffer",
    "AsyncPrioritizedReplayFrameBuffer", "AsyncUniformSequenceReplayBuffer",
    "AsyncPrioritizedSequenceReplayBuffer", "AsyncUniformSequenceReplayFrameBuffer",
    "AsyncPrioritizedSequenceReplayFrameBuffer", "AsyncTlUniformReplayBuffer",
    "AsyncTlPrioritizedReplayBuffer",
]
ASYNC_CLASSES = [getattr(replays, name) for name in ASYNC_NAMES]
CHUNK_SIZES = [5, 7, 3, 8, 6, 1, 8, 4, 7, 8, 5, 8, 6, 8, 6]  # 90 steps: the ring wraps ~4 times
B = 3


# ------------------------------------------------------------------------- helpers
def in_child(target, *args, timeout: float = 60) -> None:
    """Run ``target(*args)`` in a forked child and require exit code 0 (an assertion or error
    in the child prints its traceback and exits with 1)."""
    proc = FORK.Process(target=target, args=args)
    proc.start()
    proc.join(timeout)
    if proc.is_alive():
        proc.terminate()
        proc.join()
        pytest.fail(f"child {target.__name__} still running after {timeout} s")
    assert proc.exitcode == 0, f"child {target.__name__} exited with code {proc.exitcode}"


def _tl_chunks(total: int, seed: int = 0) -> list:
    fields = tl_id_fields(total, B, seed)
    return [Tl(*(x[s] for x in fields)) for s in _slices(total)]


def _slices(total: int) -> list[slice]:
    bounds = np.concatenate([[0], np.cumsum(CHUNK_SIZES)])
    assert bounds[-1] == total
    return [slice(int(a), int(z)) for a, z in zip(bounds[:-1], bounds[1:])]


def setup_case(async_cls: type, total: int = 90) -> tuple[dict, list]:
    """Constructor kwargs and ``[T_in, B]`` chunks for the buffer an Async class wraps."""
    plain = async_cls.BufferCls
    name = plain.__name__
    if name.startswith("Tl"):
        chunks = _tl_chunks(total)
        example = Tl(*(x[0, 0] for x in chunks[0]))
        kwargs = dict(example=example, size=B * 24, B=B, discount=0.9, n_step_return=3)
    else:
        sequence = "Sequence" in name
        stream = Stream(total=total, B=B, n_frames=3 if plain.frame_based else 1, p_done=0.1,
                        seed=3, life_loss_fraction=0.3)
        chunks = [stream.chunk(s.start, s.stop, with_rnn=sequence) for s in _slices(total)]
        kwargs = dict(example=stream.example(with_rnn=sequence), size=B * 24, B=B,
                      discount=0.9, n_step_return=2)
        if sequence:
            kwargs.update(rnn_state_interval=4, batch_T=5)
    if "Prioritized" in name:
        kwargs.update(alpha=0.7, beta=0.5)
    return kwargs, chunks


def state_of(buffer) -> dict:
    """Every mutable scalar of a buffer (plain or async)."""
    storage, scheme = buffer.storage, buffer.scheme
    state = dict(t=storage.t, full=storage.full, n_appended=storage.n_appended)
    if storage.frames is not None:
        state["written"] = storage.frames._written
    tree = buffer.priority_tree
    if tree is not None:
        state.update(rows_started=scheme._rows_started, beta=scheme.beta, tree_t=tree.t,
                     tree_full=tree.full)
    return state


def arrays_of(buffer) -> dict[str, np.ndarray]:
    """Every array holding a buffer's state, by name."""
    storage, scheme = buffer.storage, buffer.scheme
    found = {}

    def add(name, x):
        if x is None:
            return
        if hasattr(x, "_fields"):
            for field in x._fields:
                add(f"{name}.{field}", getattr(x, field))
        else:
            found[name] = x

    add("samples", storage.samples)
    add("samples_return_", storage.samples_return_)
    add("samples_done_n", storage.samples_done_n)
    add("rnn_states", storage.rnn_states)
    add("storage._cells", storage._cells)
    if storage.frames is not None:
        add("frames.frames", storage.frames.frames)
        add("frames.history_ok", storage.frames.history_ok)
        add("frames._cells", storage.frames._cells)
    tree = buffer.priority_tree
    if tree is not None:
        add("scheme._counts", scheme._counts)
        add("scheme._beta_cell", scheme._beta_cell)
        add("tree.tree", tree.tree)
        add("tree._kept", tree._kept)
        add("tree._cells", tree._cells)
    windows = getattr(buffer, "windows", None)
    if windows is not None:
        add("windows.timeout_n", windows.timeout_n)
        add("windows.steps_n", windows.steps_n)
    return found


def assert_same_arrays(a, b) -> None:
    arrays_a, arrays_b = arrays_of(a), arrays_of(b)
    assert arrays_a.keys() == arrays_b.keys()
    for name in arrays_a:
        np.testing.assert_array_equal(arrays_a[name], arrays_b[name], err_msg=name)


def assert_same_batch(a, b, where: str = "batch") -> None:
    """Same structure, and every tensor leaf identical (dtype, shape and values)."""
    if a is None or b is None:
        assert a is None and b is None, where
        return
    if hasattr(a, "_fields"):
        assert type(a).__name__ == type(b).__name__ and a._fields == b._fields, where
        for field in a._fields:
            assert_same_batch(getattr(a, field), getattr(b, field), f"{where}.{field}")
        return
    assert isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor), where
    assert a.dtype == b.dtype and a.shape == b.shape, where
    assert torch.equal(a, b), where


def batch_leaves(batch) -> list[torch.Tensor]:
    if batch is None:
        return []
    if hasattr(batch, "_fields"):
        return [leaf for x in batch for leaf in batch_leaves(x)]
    return [batch]


def _append_all(buffer, chunks) -> None:
    for chunk in chunks:
        buffer.append_samples(chunk)


def _sample_and_update(buffer, seed: int, priorities: np.ndarray) -> None:
    np.random.seed(seed)
    buffer.sample_batch(len(priorities))
    buffer.update_batch_priorities(priorities)


def _wait_then_compare(event, shared, plain, chunks, seeds) -> None:
    """Child: once the parent appended ``chunks`` to the shared buffer, feed them to this
    process's copy of the plain buffer and require identical batches."""
    assert event.wait(30), "parent never signalled"
    _append_all(plain, chunks)
    assert state_of(shared) == state_of(plain)
    for seed in seeds:
        np.random.seed(seed)
        a = shared.sample_batch(5)
        np.random.seed(seed)
        b = plain.sample_batch(5)
        assert_same_batch(a, b)


# ------------------------------------------------------------------------- every class
@pytest.mark.parametrize("async_cls", ASYNC_CLASSES, ids=ASYNC_NAMES)
def test_all_state_is_shared_and_plain_buffers_stay_private(async_cls):
    kwargs, _ = setup_case(async_cls)
    shared = async_cls(**kwargs)
    plain = async_cls.BufferCls(**kwargs)
    assert isinstance(shared.buffer, async_cls.BufferCls)
    assert shared.frame_based == async_cls.BufferCls.frame_based == type(shared).frame_based
    for name, array in arrays_of(shared).items():
        assert isinstance(array, SharedArray), f"{name} is not on shared memory"
    for name, array in arrays_of(plain).items():
        assert not isinstance(array, SharedArray), f"plain buffer's {name} is shared"
    if shared.priority_tree is not None:
        assert type(shared.priority_tree) is AsyncSumTree
        assert type(plain.priority_tree) is SumTree
    assert shared.nbytes == plain.nbytes and shared.T == plain.T and shared.size == plain.size


@pytest.mark.parametrize("async_cls", ASYNC_CLASSES, ids=ASYNC_NAMES)
def test_child_appends_parent_samples_like_a_plain_buffer(async_cls):
    kwargs, chunks = setup_case(async_cls)
    first, rest = chunks[:11], chunks[11:]
    shared = async_cls(**kwargs)
    plain = async_cls.BufferCls(**kwargs)
    in_child(_append_all, shared, first)
    _append_all(plain, first)
    assert state_of(shared) == state_of(plain)
    assert shared.storage.n_appended == sum(CHUNK_SIZES[:11]) and shared.storage.full
    assert_same_arrays(shared, plain)
    for seed in range(3):
        np.random.seed(seed)
        a = shared.sample_batch(6)
        np.random.seed(seed)
        b = plain.sample_batch(6)
        assert_same_batch(a, b)

    if shared.priority_tree is not None:
        new = np.linspace(0.1, 3.0, 6)
        total_before = shared.priority_tree.total
        in_child(_sample_and_update, shared, 11, new)
        _sample_and_update(plain, 11, new)
        assert shared.priority_tree.total != total_before
        assert shared.priority_tree.total == plain.priority_tree.total
        np.testing.assert_array_equal(shared.priority_tree.leaves, plain.priority_tree.leaves)
        in_child(shared.set_beta, 0.9)
        plain.set_beta(0.9)
        assert shared.beta == 0.9
        np.random.seed(5)
        a = shared.sample_batch(6)
        np.random.seed(5)
        assert_same_batch(a, plain.sample_batch(6))

    # The other way round: the parent appends while a child (forked before) samples.
    event = FORK.Event()
    proc = FORK.Process(target=_wait_then_compare, args=(event, shared, plain, rest, (7, 8)))
    proc.start()
    try:
        _append_all(shared, rest)
        event.set()
        proc.join(60)
    finally:
        if proc.is_alive():
            proc.terminate()
            proc.join()
    assert proc.exitcode == 0, f"sampling child exited with code {proc.exitcode}"


@pytest.mark.parametrize("async_cls", ASYNC_CLASSES, ids=ASYNC_NAMES)
def test_batches_do_not_alias_shared_memory(async_cls):
    kwargs, chunks = setup_case(async_cls)
    buffer = async_cls(**kwargs)
    _append_all(buffer, chunks)
    before = {name: np.array(a) for name, a in arrays_of(buffer).items()}
    batch = buffer.sample_batch(6)
    for leaf in batch_leaves(batch):
        as_numpy = leaf.numpy()
        for name, array in arrays_of(buffer).items():
            assert not np.shares_memory(as_numpy, array), f"batch aliases {name}"
        leaf.fill_(7)
    for name, array in arrays_of(buffer).items():
        np.testing.assert_array_equal(array, before[name], err_msg=f"{name} changed")


def test_spawned_child_appends_too():
    """The wrapper pickles at process start, so a spawn-started child shares it as well."""
    spawn = mp.get_context("spawn")
    kwargs, chunks = setup_case(AsyncPrioritizedReplayBuffer)
    buffer = AsyncPrioritizedReplayBuffer(ctx=spawn, **kwargs)
    plain = AsyncPrioritizedReplayBuffer.BufferCls(**kwargs)
    proc = spawn.Process(target=_append_all, args=(buffer, chunks[:4]))
    proc.start()
    proc.join(120)
    if proc.is_alive():
        proc.terminate()
        proc.join()
    assert proc.exitcode == 0, f"spawned child exited with code {proc.exitcode}"
    _append_all(plain, chunks[:4])
    assert state_of(buffer) == state_of(plain)
    np.random.seed(2)
    a = buffer.sample_batch(6)
    np.random.seed(2)
    assert_same_batch(a, plain.sample_batch(6))


# ------------------------------------------------------------------------- sum tree
def _advance_tree(tree, steps) -> None:
    for T_in, priorities in steps:
        tree.advance(T_in, priorities=priorities)
    tree.sample(3)  # remembered in this process only


def test_async_sum_tree_advanced_in_child_samples_like_sum_tree():
    kwargs = dict(T=10, B=3, off_backward=2, off_forward=1, default_value=0.5,
                  enable_input_priorities=True, input_priority_shift=1)
    shared, plain = AsyncSumTree(**kwargs), SumTree(**kwargs)
    assert isinstance(shared.tree, SharedArray) and isinstance(shared._kept, SharedArray)
    rng = np.random.RandomState(0)
    steps = [(n, rng.rand(n, 3) + 0.1) for n in (3, 4, 2, 5, 1, 4)]
    in_child(_advance_tree, shared, steps)
    assert shared._last_leaves is None  # the child's sample stays the child's
    for T_in, priorities in steps:
        plain.advance(T_in, priorities=priorities)
    assert (shared.t, shared.full) == (plain.t, plain.full) == (19 % 10, True)
    np.testing.assert_array_equal(shared.tree, plain.tree)
    np.testing.assert_array_equal(shared._kept, plain._kept)
    for unique in (False, True):
        np.random.seed(4)
        a = shared.sample(6, unique=unique)
        np.random.seed(4)
        b = plain.sample(6, unique=unique)
        for x, y in zip(a, b):
            np.testing.assert_array_equal(x, y)
    assert not isinstance(SumTree(**kwargs).tree, SharedArray)


# ------------------------------------------------------------------------- concurrency
Row = namedtuple("Row", ["observation", "action", "reward", "done"])
CB, N, GAMMA, T_IN = 4, 2, 0.5, 8  # envs, n-step, discount, steps per append


def _ids_chunk(g0: int) -> Row:
    """Rows whose every field encodes the transition id ``g * CB + b + 1``."""
    g = np.arange(g0, g0 + T_IN)[:, None]
    ids = g * CB + np.arange(CB)[None, :] + 1
    observation = np.repeat(ids[..., None], 3, axis=-1).astype(np.float64)
    return Row(observation, ids.astype(np.int64), ids.astype(np.float64), ids % 7 == 0)


def _append_for(buffer, seconds: float, stop) -> None:
    """Child: append back to back (pausing 50 us after each so the lock's readers get turns
    on a busy machine too) for ``seconds``, or until the parent sets ``stop``."""
    g0, deadline = 0, time.monotonic() + seconds
    while time.monotonic() < deadline and not stop.is_set():
        buffer.append_samples(_ids_chunk(g0))
        g0 += T_IN
        time.sleep(5e-5)


def _sample_for(buffer, seconds: float, stop, drawn) -> None:
    """Child: a second sampling process (prioritized), updating the priorities it drew, for
    ``seconds`` or until the parent sets ``stop``; ``drawn`` counts its batches."""
    rng = np.random.RandomState(1)
    deadline = time.monotonic() + seconds
    n_batches = 0
    while time.monotonic() < deadline and not stop.is_set():
        if buffer.storage.n_appended < 4 * T_IN:
            time.sleep(0.001)
            continue
        batch = buffer.sample_batch(16)
        check_whole(batch)
        buffer.update_batch_priorities(rng.rand(16) + 0.1)
        n_batches += 1
        drawn.value = n_batches
    assert n_batches >= 20, f"second sampler drew only {n_batches} batches"


def _prev_id(ids: np.ndarray) -> np.ndarray:
    """The previous step's id as the agent saw it: 0 after a done or before the start."""
    prev = ids - CB
    return np.where((prev > 0) & (prev % 7 != 0), prev, 0)


def check_whole(batch) -> None:
    """Every sampled transition is one written whole: all fields agree with one id, and the
    target inputs come from the step n later."""
    ids = batch.action.numpy()
    inputs, target = batch.agent_inputs, batch.target_inputs
    assert (inputs.observation.numpy() == ids[:, None]).all()
    done = ids % 7 == 0
    assert (batch.done.numpy() == done).all()
    nxt = ids + CB
    np.testing.assert_array_equal(batch.return_.numpy(), ids + np.where(done, 0, GAMMA * nxt))
    np.testing.assert_array_equal(batch.done_n.numpy(), done | (nxt % 7 == 0))
    np.testing.assert_array_equal(inputs.prev_action.numpy(), _prev_id(ids))
    np.testing.assert_array_equal(inputs.prev_reward.numpy(), _prev_id(ids))
    assert (target.observation.numpy() == (ids + N * CB)[:, None]).all()
    np.testing.assert_array_equal(target.prev_action.numpy(), _prev_id(ids + N * CB))


@pytest.mark.parametrize("prioritized,unique", [(False, False), (True, False), (True, True)],
                         ids=["uniform", "prioritized", "prioritized-unique"])
def test_concurrent_appends_and_samples_never_mix_rows(prioritized, unique, capsys):
    # At most this long; the processes stop as soon as every count asserted below is reached
    # (well within it when the machine is not overloaded).
    seconds = 10 / 3
    shm_before = shm_entries()
    example = Row(*(x[0, 0] for x in _ids_chunk(0)))
    kwargs = dict(example=example, size=CB * 256, B=CB, discount=GAMMA, n_step_return=N)
    if prioritized:
        buffer = AsyncPrioritizedReplayBuffer(unique=unique, **kwargs)
    else:
        buffer = AsyncUniformReplayBuffer(**kwargs)
    rng = np.random.RandomState(0)
    n_batches = n_checked = n_updates = 0
    ids_seen = set()
    stop, drawn = FORK.Event(), FORK.RawValue("i", 0)
    proc = FORK.Process(target=_append_for, args=(buffer, seconds, stop))
    # Prioritized: a second sampler too (unique draws zero leaves for a moment, so two
    # samplers must not overlap; a restored zero would leave a valid leaf empty).
    sampler = (FORK.Process(target=_sample_for, args=(buffer, seconds, stop, drawn))
               if prioritized else None)
    t0 = time.monotonic()
    proc.start()
    if sampler is not None:
        sampler.start()
    try:
        while proc.is_alive() or n_batches == 0:
            if buffer.storage.n_appended < 4 * T_IN:
                time.sleep(0.001)
                continue
            batch = buffer.sample_batch(32)
            check_whole(batch)
            n_batches += 1
            n_checked += len(batch.action)
            ids_seen.update(batch.action.numpy().tolist())
            if prioritized:
                weights = batch.is_weights.numpy()
                assert np.all(weights > 0) and np.all(weights <= 1)
                buffer.update_batch_priorities(rng.rand(32) + 0.1)
                n_updates += 1
            if (n_batches >= 200 and buffer.storage.n_appended >= 200 * T_IN
                    and len(ids_seen) >= 1000 and (sampler is None or drawn.value >= 20)):
                stop.set()  # every count below is reached: more of the same proves little
        proc.join(30)
        if sampler is not None:
            sampler.join(30)
        elapsed = time.monotonic() - t0
    finally:
        for child in (proc, sampler):
            if child is not None and child.is_alive():
                child.terminate()
                child.join()
    assert proc.exitcode == 0, f"appending child exited with code {proc.exitcode}"
    if sampler is not None:
        assert sampler.exitcode == 0, f"sampling child exited with code {sampler.exitcode}"
    n_appends = buffer.storage.n_appended // T_IN
    with capsys.disabled():
        print(f"\n[{'prioritized' if prioritized else 'uniform'}{'-unique' if unique else ''}] "
              f"{n_appends} appends ({n_appends * T_IN * CB} transitions), {n_batches} batches "
              f"sampled, {n_checked} transitions checked ({len(ids_seen)} distinct), "
              f"{n_updates} priority updates in {elapsed:.1f} s")
    assert n_appends >= 200 and n_batches >= 200 and len(ids_seen) >= 1000
    if prioritized:  # the tree stayed consistent: sums hold, valid leaves all positive
        tree = buffer.priority_tree
        assert tree.total == pytest.approx(float(tree.leaves.sum()), rel=1e-9)
        valid = tree.leaves.sum(axis=1) > 0
        assert valid.sum() == tree.n_valid_rows()
        assert np.all(tree.leaves[valid] > 0)
    del buffer, batch, proc, sampler, stop, drawn
    gc.collect()
    assert not new_shm_entries(shm_before, prefixes=("",)), "shared memory left in /dev/shm"


# ------------------------------------------------------------------------- factory & API
FLAGS = ("prioritized", "frames", "sequence", "time_limit")


@pytest.mark.parametrize("async_cls", ASYNC_CLASSES, ids=ASYNC_NAMES)
def test_factory_async_gives_each_async_class(async_cls):
    plain = async_cls.BufferCls
    name = plain.__name__
    options = dict(prioritized="Prioritized" in name, frames=plain.frame_based,
                   sequence="Sequence" in name, time_limit=name.startswith("Tl"))
    assert replay_buffer_class(**options) is plain
    assert replay_buffer_class(**options, async_=True) is async_cls
    kwargs, chunks = setup_case(async_cls)
    buffer = make_replay_buffer(async_=True, **options, **kwargs)
    assert type(buffer) is async_cls
    buffer.append_samples(chunks[0])
    buffer.append_samples(chunks[1])
    assert buffer.t == 12 and isinstance(buffer.storage.samples.reward, SharedArray)


@pytest.mark.parametrize("frames,sequence", [(True, False), (False, True), (True, True)])
def test_factory_async_invalid_combination_raises(frames, sequence):
    for prioritized in (False, True):
        with pytest.raises(ValueError, match="time_limit=True"):
            replay_buffer_class(prioritized=prioritized, frames=frames, sequence=sequence,
                                time_limit=True, async_=True)


def test_delegation_and_argument_checks():
    kwargs, chunks = setup_case(replays.AsyncPrioritizedSequenceReplayBuffer)
    buffer = replays.AsyncPrioritizedSequenceReplayBuffer(**kwargs)
    assert buffer.batch_T == 5 and buffer.rnn_state_interval == 4
    assert buffer.alpha == 0.7 and buffer.beta == 0.5 and buffer.discount == 0.9
    buffer.set_beta(0.75)
    assert buffer.beta == 0.75 == buffer.scheme.beta
    with pytest.raises(ValueError, match="beta"):
        buffer.set_beta(1.5)
    _append_all(buffer, chunks[:4])
    T_idxs, B_idxs, weights = buffer.sample_idxs(4)
    assert weights.shape == (4,)
    batch = buffer.extract_batch(T_idxs, B_idxs)
    assert batch.action.shape == (5 + 2, 4)
    tl_kwargs, _ = setup_case(replays.AsyncTlUniformReplayBuffer)
    tl = replays.AsyncTlUniformReplayBuffer(**tl_kwargs)
    assert tl.has_final_observation and isinstance(tl.windows.steps_n, SharedArray)
    with pytest.raises(TypeError, match="not prioritized"):
        tl.set_beta(0.5)
    with pytest.raises(AttributeError):
        tl.no_such_attribute  # noqa: B018
    with pytest.raises(TypeError, match="share_memory"):
        AsyncUniformReplayBuffer(share_memory=False, **setup_case(AsyncUniformReplayBuffer)[0])
    with pytest.raises(TypeError, match="BufferCls"):
        AsyncReplayBuffer(**kwargs)
