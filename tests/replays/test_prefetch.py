"""PrefetchingReplay on the CPU: its batches are the buffer's own at the indexes its thread drew
(every buffer kind, plain and async); priorities given through it land at the right leaves
(against a reference tree updated directly); a held batch is never overwritten before the next
sample_batch; a failure in the thread reaches sample_batch with its cause; close() leaves no
thread behind and never hangs; the consumer's thread reads no host value. Also the explicit-leaf
priority updates it relies on (SumTree / PrioritizedSampling / AsyncReplayBuffer)."""
from __future__ import annotations

import copy
import gc
import threading
import time

import numpy as np
import pytest
import torch

from rlfast.replays import (AsyncPrioritizedReplayBuffer, AsyncUniformReplayBuffer,
                            PrioritizedReplayBuffer, PrioritizedReplayFrameBuffer,
                            PrioritizedSequenceReplayBuffer, SamplesFromReplay,
                            SamplesFromReplayPri, SamplesFromReplayTL, SamplesFromReplayTLPri,
                            SequenceSamplesFromReplay, SequenceSamplesFromReplayPri, SumTree,
                            TlPrioritizedReplayBuffer, TlUniformReplayBuffer, UniformReplayBuffer,
                            UniformSequenceReplayBuffer)
from rlfast.replays.prefetch import PrefetchingReplay
from rlfast.utils.buffer import torchify_buffer
from rlfast.utils.host_sync import HostSyncCounter
from tests.replays._stream import Stream, Tl, tl_id_fields

B = 3
BATCH_B = 6
TOTAL = 60
WAIT_S = 10  # every wait in this module ends after this long: a failure, never a hang
WITH_WEIGHTS = {SamplesFromReplay: SamplesFromReplayPri,
                SamplesFromReplayTL: SamplesFromReplayTLPri,
                SequenceSamplesFromReplay: SequenceSamplesFromReplayPri}
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="the CUDA branch (streams, events, pinned memory)"))]


# ------------------------------------------------------------------------- helpers
def prefetch_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("PrefetchingReplay")]


@pytest.fixture(autouse=True)
def no_thread_left():
    yield
    deadline = time.monotonic() + WAIT_S
    while prefetch_threads() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not prefetch_threads(), "a PrefetchingReplay thread outlived its test"


def tl_chunks(total: int, seed: int = 0) -> list:
    fields = tl_id_fields(total, B, seed)
    return [Tl(*(x[s:s + 10] for x in fields)) for s in range(0, total, 10)]


def make_filled(cls: type, **extra) -> tuple:
    """A buffer of class ``cls`` holding ``TOTAL`` steps (the ring wraps), and its stream."""
    name = cls.__name__ if not hasattr(cls, "BufferCls") else cls.BufferCls.__name__
    kwargs = dict(size=B * 24, B=B, discount=0.9, n_step_return=2, **extra)
    if name.startswith("Tl"):
        chunks = tl_chunks(TOTAL)
        buffer = cls(example=Tl(*(x[0, 0] for x in chunks[0])), **kwargs)
        stream = None
    else:
        sequence = "Sequence" in name
        stream = Stream(total=TOTAL, B=B, n_frames=3 if cls.frame_based else 1, seed=3)
        if sequence:
            kwargs.update(rnn_state_interval=4, batch_T=5)
        buffer = cls(example=stream.example(with_rnn=sequence), **kwargs)
        chunks = [stream.chunk(s, s + 10, with_rnn=sequence) for s in range(0, TOTAL, 10)]
    for chunk in chunks:
        buffer.append_samples(chunk)
    return buffer, stream


def record_draws(buffer) -> list:
    """Wrap ``buffer.sample_idxs`` (on the instance) to keep every draw, in order."""
    draws = []
    sample_idxs = buffer.sample_idxs

    def recording(batch_B):
        drawn = sample_idxs(batch_B)
        draws.append(drawn)
        return drawn

    buffer.sample_idxs = recording
    return draws


def expected_batch(buffer, T_idxs, B_idxs, is_weights):
    """What the buffer's own sample_batch returns at these draws."""
    batch = buffer.extract_batch(T_idxs, B_idxs)
    if is_weights is not None:
        batch = WITH_WEIGHTS[type(batch)](*batch, is_weights)
    return torchify_buffer(batch)


def assert_batches_equal(got, want, same_type: bool = True) -> None:
    """Every field of ``want`` (recursively) equals ``got``'s exactly; ``same_type=False``
    lets ``got`` have more fields (``is_weights``)."""
    if same_type:
        assert type(got) is type(want)
    for field in want._fields:
        g, w = getattr(got, field), getattr(want, field)
        if hasattr(w, "_fields"):
            assert_batches_equal(g, w, same_type)
        elif w is None:
            assert g is None, field
        else:
            assert g.dtype == w.dtype and g.shape == w.shape, field
            torch.testing.assert_close(g.cpu(), w, rtol=0, atol=0, msg=field)


def wait_until(condition, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.005)


# ------------------------------------------------------------------------- batches
KINDS = [UniformReplayBuffer, PrioritizedReplayFrameBuffer, UniformSequenceReplayBuffer,
         PrioritizedSequenceReplayBuffer, TlUniformReplayBuffer, TlPrioritizedReplayBuffer]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("cls", KINDS, ids=lambda c: c.__name__)
def test_batches_are_the_buffers_own_at_the_drawn_indexes(cls, device):
    buffer, _ = make_filled(cls)
    draws = record_draws(buffer)
    np.random.seed(0)
    with PrefetchingReplay(buffer, BATCH_B, device, depth=2, timeout=WAIT_S) as prefetcher:
        for k in range(10):
            batch = prefetcher.sample_batch(BATCH_B)
            assert batch.action.device.type == device
            T_idxs, B_idxs, is_weights = draws[k]  # handed out in the order drawn
            np.testing.assert_array_equal(prefetcher.last_indexes[0], T_idxs)
            np.testing.assert_array_equal(prefetcher.last_indexes[1], B_idxs)
            assert_batches_equal(batch, expected_batch(buffer, T_idxs, B_idxs, is_weights))


def test_appends_beside_the_thread_keep_every_batch_consistent():
    """Appends on the consumer's thread while the thread samples: each batch is one
    consistent gather (its observations are those of the steps its actions name)."""
    stream = Stream(total=200, B=B, seed=5)
    buffer = UniformReplayBuffer(stream.example(), size=B * 24, B=B, n_step_return=2)
    buffer.append_samples(stream.chunk(0, 10))
    with PrefetchingReplay(buffer, BATCH_B, depth=3, timeout=WAIT_S) as prefetcher:
        for start in range(10, 200, 5):
            prefetcher.append_samples(stream.chunk(start, start + 5))
            batch = prefetcher.sample_batch(BATCH_B)
            g, b = stream.global_step(batch.action.numpy())
            np.testing.assert_array_equal(batch.agent_inputs.observation.numpy(),
                                          stream.observation[g, b])
            np.testing.assert_array_equal(batch.target_inputs.observation.numpy(),
                                          stream.observation[g + 2, b])


@pytest.mark.parametrize("device", DEVICES)
def test_a_held_batch_is_not_overwritten_until_the_next_sample_batch(device):
    """Documented lifetime: a batch stays as returned until the next sample_batch, even with
    the thread idle after filling every other slot; the depth + 1 slots then rotate."""
    buffer, _ = make_filled(PrioritizedReplayBuffer)
    depth = 2
    pointers = []
    with PrefetchingReplay(buffer, BATCH_B, device, depth=depth, timeout=WAIT_S) as prefetcher:
        for _ in range(9):
            batch = prefetcher.sample_batch(BATCH_B)
            kept = copy.deepcopy(batch)
            wait_until(lambda: prefetcher.n_ready >= depth, "the free slots to be refilled")
            time.sleep(0.02)
            assert_batches_equal(batch, kept)
            T_idxs, B_idxs = prefetcher.last_indexes
            want = torchify_buffer(buffer.extract_batch(T_idxs, B_idxs))
            assert_batches_equal(batch, want, same_type=False)
            pointers.append(batch.action.data_ptr())
    assert len(set(pointers)) == depth + 1
    assert pointers[:depth + 1] * 2 == pointers[depth + 1:3 * (depth + 1)]


# ------------------------------------------------------------------------- priorities
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("cls", [PrioritizedReplayBuffer, PrioritizedSequenceReplayBuffer],
                         ids=lambda c: c.__name__)
def test_priorities_reach_the_tree_at_the_drawn_leaves(cls, device):
    buffer, _ = make_filled(cls, alpha=0.7)
    stride = buffer.scheme.stride
    reference: SumTree = copy.deepcopy(buffer.priority_tree)
    draws = record_draws(buffer)
    gen = torch.Generator().manual_seed(0)
    with PrefetchingReplay(buffer, BATCH_B, device, depth=3, timeout=WAIT_S) as prefetcher:
        for k in range(12):
            prefetcher.sample_batch(BATCH_B)
            p = torch.rand(BATCH_B, generator=gen) * 3 + 0.01
            prefetcher.update_batch_priorities(p.to(device))
            T_idxs, B_idxs, _ = draws[k]
            leaves = (T_idxs // stride) * B + B_idxs
            reference.update_priorities(leaves, p.numpy().astype(np.float64) ** 0.7)
        prefetcher.flush()
        tree = buffer.priority_tree
        np.testing.assert_array_equal(tree.tree, reference.tree)
        np.testing.assert_array_equal(tree._kept, reference._kept)
        last = dict(zip(leaves.tolist(), (p.numpy().astype(np.float64) ** 0.7).tolist()))
        for leaf, value in last.items():  # the last batch's leaves (all rows still valid)
            assert tree.leaves.reshape(-1)[leaf] == value


def test_priorities_handed_over_before_close_are_applied():
    buffer, _ = make_filled(PrioritizedReplayBuffer, alpha=1.0)
    prefetcher = PrefetchingReplay(buffer, BATCH_B, timeout=WAIT_S)
    prefetcher.sample_batch(BATCH_B)
    T_idxs, B_idxs = prefetcher.last_indexes
    prefetcher.update_batch_priorities(torch.full((BATCH_B,), 7.5))
    prefetcher.close()
    assert np.all(buffer.priority_tree.leaves[T_idxs, B_idxs] == 7.5)


def test_update_batch_priorities_errors():
    buffer, _ = make_filled(PrioritizedReplayBuffer)
    with PrefetchingReplay(buffer, BATCH_B, timeout=WAIT_S) as prefetcher:
        with pytest.raises(RuntimeError, match="before any sample_batch"):
            prefetcher.update_batch_priorities(torch.ones(BATCH_B))
        prefetcher.sample_batch(BATCH_B)
        with pytest.raises(ValueError, match=f"expected {BATCH_B} priorities.*got 4"):
            prefetcher.update_batch_priorities(torch.ones(4))
        prefetcher.update_batch_priorities(-torch.ones(BATCH_B))  # checked by the thread
        with pytest.raises(RuntimeError, match="once per sample_batch"):
            prefetcher.update_batch_priorities(torch.ones(BATCH_B))
        with pytest.raises(RuntimeError, match="ValueError: priorities must be finite and >= 0"):
            prefetcher.flush()  # (or a later sample_batch: batches prepared before come first)
        with pytest.raises(RuntimeError, match="priorities must be finite"):
            prefetcher.sample_batch(BATCH_B)
    uniform, _ = make_filled(UniformReplayBuffer)
    with PrefetchingReplay(uniform, BATCH_B, timeout=WAIT_S) as prefetcher:
        prefetcher.sample_batch(BATCH_B)
        with pytest.raises(TypeError, match="not prioritized"):
            prefetcher.update_batch_priorities(torch.ones(BATCH_B))


@pytest.mark.parametrize("device", DEVICES)
def test_no_host_reads_on_the_consumer_thread(device):
    buffer, _ = make_filled(PrioritizedReplayBuffer)
    with PrefetchingReplay(buffer, BATCH_B, device, timeout=WAIT_S) as prefetcher:
        with HostSyncCounter() as syncs:  # the thread starts inside: it must not be counted
            for _ in range(6):
                batch = prefetcher.sample_batch(BATCH_B)
                prefetcher.update_batch_priorities(batch.is_weights * 2 + 0.1)
        prefetcher.flush()
    assert syncs.count == 0, syncs.report()


# ------------------------------------------------------------------------- failures, lifetime
def test_a_failure_in_the_thread_reaches_sample_batch_with_its_cause():
    buffer, _ = make_filled(UniformReplayBuffer)

    def broken_extract(T_idxs, B_idxs):
        raise ValueError("boom: extract_batch failed")

    buffer.extract_batch = broken_extract
    prefetcher = PrefetchingReplay(buffer, BATCH_B, timeout=WAIT_S)
    with pytest.raises(RuntimeError, match="ValueError: boom: extract_batch failed") as info:
        prefetcher.sample_batch(BATCH_B)
    assert isinstance(info.value.__cause__, ValueError)
    assert "broken_extract" in str(info.value)  # the thread's traceback
    with pytest.raises(RuntimeError, match="boom"):  # and again, not a hang
        prefetcher.sample_batch(BATCH_B)
    prefetcher.close()
    assert not prefetch_threads()


def test_sampling_too_early_names_the_cause():
    stream = Stream(total=10, B=B)
    buffer = UniformReplayBuffer(stream.example(), size=B * 24, B=B, n_step_return=2)
    with PrefetchingReplay(buffer, BATCH_B, timeout=WAIT_S) as prefetcher:
        prefetcher.append_samples(stream.chunk(0, 2))  # 2 steps: none has its 2-step future
        with pytest.raises(RuntimeError, match="not enough data to sample"):
            prefetcher.sample_batch(BATCH_B)


def test_a_stuck_thread_times_out_and_close_does_not_hang():
    buffer, _ = make_filled(UniformReplayBuffer)
    release = threading.Event()
    extract = buffer.extract_batch

    def stuck_extract(T_idxs, B_idxs):
        release.wait(WAIT_S)
        return extract(T_idxs, B_idxs)

    buffer.extract_batch = stuck_extract
    prefetcher = PrefetchingReplay(buffer, BATCH_B, timeout=0.3, join_timeout=0.2)
    with pytest.raises(TimeoutError, match="no batch ready after 0.3 s"):
        prefetcher.sample_batch(BATCH_B)
    start = time.monotonic()
    with pytest.warns(RuntimeWarning, match="did not stop"):
        prefetcher.close()
    assert time.monotonic() - start < 2
    release.set()  # the daemon thread then ends (checked by the autouse fixture)


def test_close_is_idempotent_and_final():
    buffer, _ = make_filled(UniformReplayBuffer)
    with PrefetchingReplay(buffer, BATCH_B, timeout=WAIT_S) as prefetcher:
        prefetcher.sample_batch(BATCH_B)
        assert len(prefetch_threads()) == 1
    assert not prefetch_threads()
    prefetcher.close()
    with pytest.raises(RuntimeError, match="closed"):
        prefetcher.sample_batch(BATCH_B)
    PrefetchingReplay(buffer, BATCH_B).close()  # never started: nothing to stop


def test_garbage_collection_stops_the_thread():
    buffer, _ = make_filled(UniformReplayBuffer)
    prefetcher = PrefetchingReplay(buffer, BATCH_B, timeout=WAIT_S)
    prefetcher.sample_batch(BATCH_B)
    assert len(prefetch_threads()) == 1
    del prefetcher
    gc.collect()
    assert not prefetch_threads()


def test_arguments_and_delegation():
    buffer, _ = make_filled(PrioritizedReplayBuffer, alpha=0.5, beta=0.3)
    with pytest.raises(TypeError, match="wraps a replay buffer"):
        PrefetchingReplay(object(), BATCH_B)
    with pytest.raises(ValueError, match="depth must be an integer >= 1"):
        PrefetchingReplay(buffer, BATCH_B, depth=0)
    with pytest.raises(ValueError, match="device must be 'cpu' or 'cuda"):
        PrefetchingReplay(buffer, BATCH_B, device="meta")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA is not available"):
            PrefetchingReplay(buffer, BATCH_B, device="cuda")
    with PrefetchingReplay(buffer, BATCH_B, timeout=WAIT_S) as prefetcher:
        with pytest.raises(ValueError, match=f"batch_B={BATCH_B}; got batch_B=5"):
            prefetcher.sample_batch(5)
        assert (prefetcher.T, prefetcher.B, prefetcher.size) == (buffer.T, B, buffer.size)
        assert prefetcher.nbytes == buffer.nbytes and prefetcher.storage is buffer.storage
        assert prefetcher.priority_tree is buffer.priority_tree
        assert prefetcher.t == buffer.t and prefetcher.alpha == 0.5  # t via __getattr__
        prefetcher.set_beta(0.9)
        assert prefetcher.beta == buffer.beta == 0.9
        with pytest.raises(AttributeError):
            prefetcher.no_such_attribute
        T_idxs, B_idxs, weights = prefetcher.sample_idxs(4)
        assert weights.shape == (4,)
        assert_batches_equal(torchify_buffer(prefetcher.extract_batch(T_idxs, B_idxs)),
                             torchify_buffer(buffer.extract_batch(T_idxs, B_idxs)))


# ------------------------------------------------------------------------- async buffers
@pytest.mark.parametrize("cls", [AsyncUniformReplayBuffer, AsyncPrioritizedReplayBuffer],
                         ids=lambda c: c.__name__)
def test_async_buffers_in_process(cls):
    buffer, _ = make_filled(cls, **({"alpha": 1.0} if "Prioritized" in cls.__name__ else {}))
    prioritized = buffer.priority_tree is not None
    before = None if not prioritized else buffer.priority_tree.leaves.copy()
    expected = {}
    with PrefetchingReplay(buffer, BATCH_B, depth=2, timeout=WAIT_S) as prefetcher:
        for k in range(8):
            batch = prefetcher.sample_batch(BATCH_B)
            T_idxs, B_idxs = prefetcher.last_indexes
            want = torchify_buffer(buffer.extract_batch(T_idxs, B_idxs))
            assert_batches_equal(batch, want, same_type=False)
            if prioritized:
                p = torch.arange(BATCH_B, dtype=torch.float32) + k + 1
                prefetcher.update_batch_priorities(p)
                expected.update(zip(zip(T_idxs.tolist(), B_idxs.tolist()), p.tolist()))
        prefetcher.flush()
    if prioritized:
        after = buffer.priority_tree.leaves
        for (t, b), value in expected.items():
            assert after[t, b] == value
        untouched = np.ones(after.shape, bool)
        untouched[tuple(np.array(list(expected)).T)] = False
        np.testing.assert_array_equal(after[untouched], before[untouched])


def test_async_update_priorities_on_a_uniform_buffer_is_refused():
    buffer = AsyncUniformReplayBuffer(Stream(total=1, B=B).example(), size=B * 24, B=B)
    with pytest.raises(TypeError, match="not prioritized"):
        buffer.update_priorities(np.array([0]), np.array([0]), [1.0])


# ------------------------------------------------------------------------- explicit leaves
def test_sum_tree_update_priorities_rules():
    tree = SumTree(T=8, B=2, off_backward=1, off_forward=1)
    tree.advance(6)  # rows 0..5 written; 5 (backward window) and 7 (forward) invalid
    tree.update_priorities([0, 3, 3, 10], [2.0, 5.0, 6.0, 9.0])  # leaf 3 twice: last wins
    assert tree.leaves[0, 0] == 2.0 and tree.leaves[1, 1] == 6.0
    assert tree.leaves[5, 0] == 0.0  # leaf 10 = row 5: invalid now, left at zero
    assert tree.total == pytest.approx(np.sum(tree.leaves))
    with pytest.raises(ValueError, match=r"leaves must lie in \[0, T \* B\) = \[0, 16\)"):
        tree.update_priorities([16], [1.0])
    with pytest.raises(TypeError, match="leaves must be integers"):
        tree.update_priorities([0.5], [1.0])
    with pytest.raises(ValueError, match="expected 2 priorities"):
        tree.update_priorities([0, 1], [1.0])
    with pytest.raises(ValueError, match=">= 0"):
        tree.update_priorities([0], [-1.0])
    tree.sample(3)
    tree.update_batch_priorities([4.0, 4.0, 4.0])  # still the last sample's leaves
    assert set(np.unique(tree.leaves[tree.leaves > 0])) <= {1.0, 2.0, 4.0, 6.0}


def test_scheme_update_priorities_maps_starts_to_leaves():
    buffer, _ = make_filled(PrioritizedSequenceReplayBuffer, alpha=0.5)
    scheme, stride = buffer.scheme, buffer.scheme.stride
    T_idxs, B_idxs, _ = buffer.sample_idxs(4)
    scheme.update_priorities(T_idxs, B_idxs, torch.full((4,), 16.0))
    assert np.all(buffer.priority_tree.leaves[T_idxs // stride, B_idxs] == 4.0)
    with pytest.raises(ValueError, match=f"multiples of the stride {stride}"):
        scheme.update_priorities(np.array([1]), np.array([0]), [1.0])
    with pytest.raises(ValueError, match=r"B_idxs must lie in \[0, 3\)"):
        scheme.update_priorities(np.array([0]), np.array([3]), [1.0])
    with pytest.raises(ValueError, match="same shape"):
        scheme.update_priorities(np.array([0, 4]), np.array([0]), [1.0, 1.0])
