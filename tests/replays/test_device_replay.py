"""Device replay buffers (device="cpu" here) against their numpy twins, fed the same data.

Every check compares a Device* buffer with the numpy buffer built with the same arguments and
given the same appends (numpy arrays and torch tensors, chunks of random length, several
wraps): the stored arrays after every append, the batches extracted at every valid index,
the indexes (and importance weights) drawn when both schemes get the same draws, and the
priorities after the same updates. Sampling and priority updates on the device buffers must
read nothing on the host (HostSyncCounter). The numpy buffers are the reference: they have
their own tests against per-step loops over global time."""
from collections import namedtuple

import numpy as np
import pytest
import torch

from rlfast.replays import (DevicePrioritizedReplayBuffer, DevicePrioritizedReplayFrameBuffer,
                            DeviceUniformReplayBuffer, DeviceUniformReplayFrameBuffer,
                            PrioritiesSamplesToBuffer, PrioritizedReplayBuffer,
                            PrioritizedReplayFrameBuffer, SamplesFromReplay, SamplesFromReplayPri,
                            UniformReplayBuffer, UniformReplayFrameBuffer, make_replay_buffer,
                            replay_buffer_class)
from rlfast.replays.base import ReplayBufferBase
from rlfast.replays.device_buffers import priority_alarm
from rlfast.replays.draw_alarm import ZeroPriorityError
from rlfast.replays.ring import valid_rows
from rlfast.replays.state import load_replay_file, replay_arrays, save_replay_file
from rlfast.utils.buffer import torchify_buffer
from rlfast.utils.host_sync import HostSyncCounter
from tests.replays._stream import Stream, Tl

TOTAL = 130  # steps appended: size 60 / B 3 gives T = 20, so more than six wraps


# ------------------------------------------------------------------ shared comparisons
def assert_same(expected, got, where="value", exact=True):
    """``got`` (torch) equals ``expected`` (numpy or torch) leaf by leaf, dtypes included."""
    if expected is None or got is None:
        assert expected is None and got is None, where
        return
    if hasattr(expected, "_fields"):
        assert tuple(got._fields) == tuple(expected._fields), where
        for field in expected._fields:
            assert_same(getattr(expected, field), getattr(got, field), f"{where}.{field}", exact)
        return
    if not isinstance(expected, torch.Tensor):
        expected = torch.from_numpy(np.ascontiguousarray(expected))
    assert isinstance(got, torch.Tensor), (where, type(got))
    assert got.dtype == expected.dtype, (where, got.dtype, expected.dtype)
    got = got.cpu()
    if exact:
        assert torch.equal(expected, got), where
    else:
        torch.testing.assert_close(got, expected, rtol=1e-6, atol=0, msg=where)


def assert_storages_equal(numpy_storage, device_storage):
    """Cursor, every stored array, n-step returns, frames and recurrent states."""
    a, b = numpy_storage, device_storage
    assert (a.T, a.B, a.size, a.off_forward) == (b.T, b.B, b.size, b.off_forward)
    assert (a.t, a.full, a.n_appended) == (b.t, b.full, b.n_appended)
    assert_same(a.samples, b.samples, "samples")
    assert_same(a.samples_return_, b.samples_return_, "samples_return_")
    assert_same(a.samples_done_n, b.samples_done_n, "samples_done_n")
    assert (a.frames is None) == (b.frames is None)
    if a.frames is not None:
        assert_same(a.frames.frames, b.frames.frames, "frames")
        assert_same(a.frames.history_ok, b.frames.history_ok, "history_ok")
    assert_same(a.rnn_states, b.rnn_states, "rnn_states")
    assert a.nbytes == b.nbytes


def valid_starts(storage, off_backward, stride=1):
    """Host (T_idxs, B_idxs) of every start the buffers may replay now."""
    rows = np.arange(0, storage.T, stride)
    rows = rows[valid_rows(rows, storage.t, storage.full, storage.T, off_backward,
                           storage.off_forward)]
    T_idxs = np.repeat(rows, storage.B)
    B_idxs = np.tile(np.arange(storage.B), len(rows))
    return T_idxs, B_idxs


def assert_extract_equal(reference, device, T_idxs, B_idxs):
    """Both buffers' extract_batch at the same indexes."""
    expected = torchify_buffer(reference.extract_batch(T_idxs, B_idxs))
    got = device.extract_batch(torch.from_numpy(T_idxs), torch.from_numpy(B_idxs))
    assert type(got) is type(expected)
    assert_same(expected, got, "batch")


def assert_draws_equal(reference, device, n, rng):
    """The same draws give the same starts (and weights): uniform ages and envs, or the
    uniforms of a descent of the sum tree."""
    if device.priority_tree is None:
        state = np.random.get_state()
        T_ref, B_ref, _ = reference.scheme.sample(n)
        np.random.set_state(state)  # the numpy scheme's own draws, fed to the device scheme
        ages = (reference.t - 1 - T_ref) % reference.T
        T_got, B_got, w = device.scheme.sample(n, ages=torch.from_numpy(ages),
                                               B_idxs=torch.from_numpy(B_ref))
        assert w is None
        assert_same(T_ref, T_got, "T_idxs")
        assert_same(B_ref, B_got, "B_idxs")
        return T_ref, B_ref
    uniforms = rng.rand(n)
    T_ref, B_ref, w_ref = reference.scheme.sample(n, uniforms=uniforms)
    T_got, B_got, w_got = device.scheme.sample(n, uniforms=torch.from_numpy(uniforms))
    assert_same(T_ref, T_got, "T_idxs")
    assert_same(B_ref, B_got, "B_idxs")
    assert_same(w_ref, w_got, "is_weights", exact=False)
    return T_ref, B_ref


def assert_trees_equal(reference, device):
    tree_a, tree_b = reference.priority_tree, device.priority_tree
    assert (tree_a is None) == (tree_b is None)
    if tree_a is not None:
        assert (tree_a.t, tree_a.full) == (tree_b.t, tree_b.full)
        torch.testing.assert_close(tree_b.tree.cpu(), torch.from_numpy(tree_a.tree),
                                   rtol=1e-12, atol=0)
        torch.testing.assert_close(tree_b._kept.cpu(), torch.from_numpy(tree_a._kept),
                                   rtol=1e-12, atol=0)


def assert_no_host_reads(device, batch_B):
    """A whole sample_batch (and update_batch_priorities) reads nothing on the host."""
    priorities = torch.rand(batch_B, dtype=torch.float32) + 0.05
    with HostSyncCounter() as syncs:
        batch = device.sample_batch(batch_B)
        if device.priority_tree is not None:
            device.update_batch_priorities(priorities)
    assert syncs.count == 0, syncs.report()
    return batch


def run_twins(reference, device, chunk, total, off_backward, stride=1, batch_B=16,
              seed=0, check=None):
    """Append the same chunks to both buffers (numpy and torch inputs in turn) and compare
    storage, extraction at every valid start, injected draws and priority updates after
    every append."""
    rng = np.random.RandomState(seed)
    start, n_checked = 0, 0
    while start < total:
        stop = min(total, start + rng.randint(1, 9))
        samples = chunk(start, stop)
        reference.append_samples(samples)
        device.append_samples(samples if rng.rand() < 0.5 else torchify_buffer(samples))
        start = stop
        assert_storages_equal(reference.storage, device.storage)
        if check is not None:
            check(reference, device)
        T_idxs, B_idxs = valid_starts(reference.storage, off_backward, stride)
        if T_idxs.size == 0:
            continue
        assert_extract_equal(reference, device, T_idxs, B_idxs)
        tree = reference.priority_tree
        if tree is not None and tree.n_valid_rows() == 0:
            continue  # the tree's windows are whole strides: none of its starts is valid yet
        assert_draws_equal(reference, device, batch_B, rng)
        if reference.priority_tree is not None:
            priorities = rng.rand(batch_B) + 0.05
            reference.update_batch_priorities(priorities)
            device.update_batch_priorities(torch.from_numpy(priorities))
            assert_trees_equal(reference, device)
        T_own, B_own, _ = device.sample_idxs(64)  # the device scheme's own draws are valid
        assert set(zip(T_own.tolist(), B_own.tolist())) <= set(zip(T_idxs.tolist(),
                                                                   B_idxs.tolist()))
        n_checked += 1
    assert n_checked > 10
    return n_checked


# ------------------------------------------------------------------ transitions
TRANSITIONS = [(UniformReplayBuffer, DeviceUniformReplayBuffer),
               (UniformReplayFrameBuffer, DeviceUniformReplayFrameBuffer),
               (PrioritizedReplayBuffer, DevicePrioritizedReplayBuffer),
               (PrioritizedReplayFrameBuffer, DevicePrioritizedReplayFrameBuffer)]


def _stream(frame_based, seed):
    # Frames: dones that keep the frames (lost lives) and resets without a done.
    return Stream(total=TOTAL, B=3, n_frames=4 if frame_based else 1, frame_shape=(5, 4),
                  p_done=0.15, seed=seed, life_loss_fraction=0.3,
                  p_silent_reset=0.05 if frame_based else 0.0)


@pytest.mark.parametrize("pair", TRANSITIONS, ids=lambda p: p[1].__name__)
@pytest.mark.parametrize("n_step", [1, 3])
def test_transition_twins_store_extract_and_draw_alike(pair, n_step):
    cls, device_cls = pair
    stream = _stream(cls.frame_based, seed=n_step)
    kwargs = dict(size=60, B=3, discount=0.9, n_step_return=n_step)
    reference = cls(stream.example(), **kwargs)
    device = device_cls(stream.example(), device="cpu", **kwargs)
    assert device.storage.samples.reward.dtype == torch.float32
    np.random.seed(1)
    run_twins(reference, device, stream.chunk, TOTAL, off_backward=n_step)
    batch = assert_no_host_reads(device, 16)
    assert type(batch) is (SamplesFromReplayPri if reference.priority_tree is not None
                           else SamplesFromReplay)
    assert batch.agent_inputs.observation.dtype == torch.uint8  # frames are never floats
    if cls.frame_based:
        assert batch.agent_inputs.observation.shape == (16, 4, 5, 4)


def test_prioritized_twins_with_input_priorities_and_shift():
    stream = _stream(False, seed=5)
    priorities = np.random.RandomState(6).rand(TOTAL, 3) + 0.05
    kwargs = dict(size=60, B=3, discount=0.95, n_step_return=2, alpha=0.7, beta=0.5,
                  input_priorities=True, input_priority_shift=1)
    reference = PrioritizedReplayBuffer(stream.example(), **kwargs)
    device = DevicePrioritizedReplayBuffer(stream.example(), device="cpu", **kwargs)

    def chunk(start, stop):
        return PrioritiesSamplesToBuffer(priorities=priorities[start:stop],
                                         samples=stream.chunk(start, stop))

    run_twins(reference, device, chunk, TOTAL, off_backward=2, check=assert_trees_equal)
    device.set_beta(0.8)
    assert device.beta == 0.8 and device.alpha == 0.7
    assert_no_host_reads(device, 8)


def test_uniform_device_draws_are_valid_and_reach_every_start():
    stream = _stream(False, seed=2)
    device = DeviceUniformReplayBuffer(stream.example(), size=60, B=3, n_step_return=3)
    for start in range(0, 50, 10):
        device.append_samples(stream.chunk(start, start + 10))
    T_idxs, B_idxs = valid_starts(device.storage, off_backward=3)
    allowed = set(zip(T_idxs.tolist(), B_idxs.tolist()))
    T_got, B_got, _ = device.sample_idxs(4000)
    assert T_got.dtype == torch.int64 and T_got.device == device.device
    drawn = set(zip(T_got.tolist(), B_got.tolist()))
    assert drawn == allowed  # nothing invalid, every valid start reached


# ------------------------------------------------------------------ dtypes, errors, factory
Act = namedtuple("Act", ["discrete", "continuous"])
Odd = namedtuple("Odd", ["observation", "action", "reward", "done", "prev_action", "prev_reward"])


@pytest.mark.parametrize("reward_dtype", [np.int32, np.float64])
def test_twins_agree_on_nested_actions_stored_prev_inputs_and_reward_dtypes(reward_dtype):
    """Integer rewards (returns computed in float64, stored float32), float64 rewards,
    float dones, a nested action and stored prev_action / prev_reward fields."""
    rng = np.random.RandomState(0)
    total, B = 90, 2

    def field(*shape, dtype=np.float32):
        return rng.randint(-5, 6, size=(total, B) + shape).astype(dtype)

    data = Odd(observation=field(3), action=Act(field(dtype=np.int64), field(2)),
               reward=field(dtype=reward_dtype), done=(rng.rand(total, B) < 0.2).astype(
                   np.float32), prev_action=Act(field(dtype=np.int64), field(2)),
               prev_reward=field(dtype=reward_dtype))

    def chunk(start, stop):
        return Odd(*(type(x)(*(y[start:stop] for y in x)) if hasattr(x, "_fields")
                     else x[start:stop] for x in data))

    example = Odd(*(type(x)(*(y[0, 0] for y in x)) if hasattr(x, "_fields") else x[0, 0]
                    for x in data))
    kwargs = dict(size=40, B=B, discount=0.7, n_step_return=3)
    reference = UniformReplayBuffer(example, **kwargs)
    device = DeviceUniformReplayBuffer(example, **kwargs)
    expected_dtype = torch.float32 if reward_dtype is np.int32 else torch.float64
    assert device.samples_return_.dtype == expected_dtype
    np.random.seed(0)
    run_twins(reference, device, chunk, total, off_backward=3, seed=1)


def test_comparison_fails_on_one_changed_value():
    """The twin checks above can fail: one changed frame byte or return is caught."""
    stream = _stream(True, seed=0)
    kwargs = dict(size=60, B=3, discount=0.9, n_step_return=3)
    reference = UniformReplayFrameBuffer(stream.example(), **kwargs)
    device = DeviceUniformReplayFrameBuffer(stream.example(), **kwargs)
    for buffer in (reference, device):
        buffer.append_samples(stream.chunk(0, 15))
        buffer.append_samples(stream.chunk(15, 30))
    assert_storages_equal(reference.storage, device.storage)
    device.storage.frames.frames[5, 1, 0, 0] += 1
    with pytest.raises(AssertionError):
        assert_storages_equal(reference.storage, device.storage)
    device.storage.frames.frames[5, 1, 0, 0] -= 1
    device.samples_return_[3, 2] += 1e-3
    with pytest.raises(AssertionError):
        assert_storages_equal(reference.storage, device.storage)


def test_bad_input_gets_a_clear_error():
    stream = _stream(False, seed=0)
    buffer = DeviceUniformReplayBuffer(stream.example(), size=60, B=3, n_step_return=2)
    with pytest.raises(RuntimeError, match="not enough data"):
        buffer.sample_batch(4)
    wrong_B = stream.chunk(0, 4)._replace(reward=np.zeros((4, 2), np.float32))
    with pytest.raises(ValueError, match=r"B=3.*\(4, 2\)"):
        buffer.append_samples(wrong_B)
    too_long = Stream(total=25, B=3, seed=1).chunk(0, 25)
    with pytest.raises(ValueError, match="at most T=20.*T_in=25"):
        buffer.append_samples(too_long)
    with pytest.raises(ValueError, match="lack field 'done'"):
        buffer.append_samples(namedtuple("S", "observation action reward")(
            *stream.chunk(0, 2)[:3]))
    bad_action = stream.chunk(0, 4)._replace(action=np.zeros((4, 3, 2), np.int64))
    with pytest.raises(ValueError, match="samples.action"):
        buffer.append_samples(bad_action)
    buffer.append_samples(stream.chunk(0, 10))
    with pytest.raises(ValueError, match=r"ages must be \[n\]=\[4\] integers"):
        buffer.scheme.sample(4, ages=torch.zeros(3, dtype=torch.int64))
    with pytest.raises(TypeError, match="not prioritized.*update_batch_priorities"):
        buffer.update_batch_priorities(torch.ones(4))
    with pytest.raises(ValueError, match="device must be a torch device.*'cuda:0'"):
        DeviceUniformReplayBuffer(stream.example(), size=60, B=3, device="gpu7")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA.*device='cpu'"):
            DeviceUniformReplayBuffer(stream.example(), size=60, B=3, device="cuda")
    with pytest.raises(ValueError, match="too short"):
        DeviceUniformReplayBuffer(stream.example(), size=6, B=3, n_step_return=3)


COMBINATIONS = [dict(prioritized=p, frames=f, sequence=s, time_limit=t)
                for p in (False, True) for f, s, t in
                [(False, False, False), (True, False, False), (False, True, False),
                 (True, True, False), (False, False, True)]]


def _factory_arguments(options):
    """``(example, kwargs)`` for ``make_replay_buffer`` with these options."""
    if options["time_limit"]:
        example = Tl(np.zeros(3, np.float32), np.zeros(1, np.float32), np.float32(0), False,
                     False, np.zeros(3, np.float32))
    else:
        example = _stream(options["frames"], 0).example(with_rnn=options["sequence"])
    kwargs = dict(size=60, B=3, n_step_return=1)
    if options["sequence"]:
        kwargs.update(rnn_state_interval=2, batch_T=4)
    return example, kwargs


@pytest.mark.parametrize("options", COMBINATIONS, ids=lambda o: "-".join(
    k for k, v in o.items() if v) or "uniform")
def test_factory_builds_the_device_twin_of_each_combination(options):
    numpy_cls = replay_buffer_class(**options)
    device_cls = replay_buffer_class(device="cpu", **options)
    assert device_cls.__name__ == "Device" + numpy_cls.__name__
    assert issubclass(device_cls, ReplayBufferBase) and device_cls.frame_based == \
        numpy_cls.frame_based
    assert replay_buffer_class(device=None, **options) is numpy_cls
    with pytest.raises(ValueError, match="one process"):
        replay_buffer_class(async_=True, device="cpu", **options)
    example, kwargs = _factory_arguments(options)
    buffer = make_replay_buffer(example=example, device=torch.device("cpu"), **options,
                                **kwargs)
    assert type(buffer) is device_cls and buffer.device == torch.device("cpu")
    assert type(make_replay_buffer(example=example, **options, **kwargs)) is numpy_cls
    with pytest.raises(ValueError, match="one process"):
        make_replay_buffer(example=example, async_=True, device="cpu", **options, **kwargs)
    with pytest.raises(ValueError, match="share_memory"):
        make_replay_buffer(example=example, device="cpu", share_memory=True, **options,
                           **kwargs)


@pytest.mark.parametrize("options", COMBINATIONS, ids=lambda o: "-".join(
    k for k, v in o.items() if v) or "uniform")
def test_priority_alarm_only_for_prioritized_device_buffers_and_names_them(options):
    example, kwargs = _factory_arguments(options)
    device_buffer = make_replay_buffer(example=example, device="cpu", **options, **kwargs)
    host_buffer = make_replay_buffer(example=example, **options, **kwargs)
    alarm = priority_alarm(device_buffer)
    assert priority_alarm(host_buffer) is None  # the numpy tree raises on the host
    if not options["prioritized"]:
        assert alarm is None
        return
    assert alarm.owner == type(device_buffer).__name__
    assert alarm.flag is device_buffer.priority_tree.draw_fault
    with pytest.raises(ZeroPriorityError, match=f"^{type(device_buffer).__name__}: every"):
        alarm.check(2.0)


def test_all_zero_device_buffer_draws_nan_weights_and_its_alarm_raises():
    """default_priority=0 and no priorities written back: every valid priority is 0. The
    batch comes back without a read (its weights NaN) and the alarm names the buffer."""
    stream = _stream(False, seed=3)
    buffer = DevicePrioritizedReplayBuffer(stream.example(), size=60, B=3, default_priority=0)
    buffer.append_samples(stream.chunk(0, 12))
    with HostSyncCounter() as syncs:
        batch = buffer.sample_batch(8)
    assert syncs.count == 0, syncs.report()
    assert torch.isnan(batch.is_weights).all()
    with pytest.raises(ZeroPriorityError, match="DevicePrioritizedReplayBuffer: every valid "
                       "priority is 0"):
        priority_alarm(buffer).check_now()


# ------------------------------------------------------------------ snapshots
def check_snapshot_round_trip(device_cls, stream, tmp_path):
    """Save a filled device buffer, load it into a fresh one: same content, generators and
    tree; the next batches and appends agree; a buffer of another size is refused."""
    kwargs = dict(size=60, B=3, discount=0.9, n_step_return=2)
    source = device_cls(stream.example(), **kwargs)
    for start in range(0, 100, 9):
        source.append_samples(stream.chunk(start, min(100, start + 9)))
    source.sample_batch(8)  # moves the generators
    if source.priority_tree is not None:
        source.update_batch_priorities(torch.rand(8) + 0.1)
        source.set_beta(0.7)
    path = tmp_path / "replay.npz"
    with open(path, "wb") as f:
        save_replay_file(source, f)
    saved = np.load(path)
    assert any(k.startswith("state:scheme") for k in saved.files)
    fresh = device_cls(stream.example(), **kwargs)
    untouched = device_cls(stream.example(), **kwargs)
    load_replay_file(fresh, path)
    for buffer in (fresh, untouched):
        same = all(np.array_equal(replay_arrays(source)[k], v)
                   for k, v in replay_arrays(buffer).items())
        assert same is (buffer is fresh)  # a fresh, unloaded buffer differs
    assert_storages_equal(source.storage, fresh.storage)
    if source.priority_tree is not None:
        assert fresh.beta == 0.7
        assert_same(source.priority_tree.tree, fresh.priority_tree.tree, "tree")
        assert source.scheme._rows_started == fresh.scheme._rows_started
    if hasattr(source, "windows"):
        assert_same(source.windows.timeout_n, fresh.windows.timeout_n, "timeout_n")
        assert_same(source.windows.steps_n, fresh.windows.steps_n, "steps_n")
    # The same generator states: the next batches and appends agree.
    for start in range(100, TOTAL, 10):
        batches = [b.sample_batch(8) for b in (source, fresh)]
        assert_same(batches[0], batches[1], "batch")
        for buffer in (source, fresh):
            buffer.append_samples(stream.chunk(start, start + 10))
        assert_storages_equal(source.storage, fresh.storage)
    other = device_cls(stream.example(), size=90, B=3, n_step_return=2)
    with pytest.raises(ValueError, match="has shape"):
        load_replay_file(other, path)


@pytest.mark.parametrize("device_cls", [DevicePrioritizedReplayFrameBuffer,
                                        DeviceUniformReplayBuffer], ids=lambda c: c.__name__)
def test_snapshot_round_trip_of_a_device_buffer(device_cls, tmp_path):
    check_snapshot_round_trip(device_cls, _stream(device_cls.frame_based, seed=7), tmp_path)
