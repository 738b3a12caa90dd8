"""Device sequence replay buffers (device="cpu" here) against their numpy twins: the same
appends give the same stored arrays and recurrent states, the same sequences at every valid
start, the same starts for the same draws and the same priorities after the same updates;
sampling and priority updates read nothing on the host. See test_device_replay.py."""
from collections import namedtuple

import numpy as np
import pytest
import torch

from rlfast.replays import (DevicePrioritizedSequenceReplayBuffer,
                            DevicePrioritizedSequenceReplayFrameBuffer,
                            DeviceUniformSequenceReplayBuffer,
                            DeviceUniformSequenceReplayFrameBuffer, PrioritiesSamplesToBuffer,
                            PrioritizedSequenceReplayBuffer, PrioritizedSequenceReplayFrameBuffer,
                            SequenceSamplesFromReplay, SequenceSamplesFromReplayPri,
                            UniformSequenceReplayBuffer, UniformSequenceReplayFrameBuffer)
from rlfast.replays.state import load_replay_file, save_replay_file
from tests.replays._stream import Stream
from tests.replays.test_device_replay import (assert_no_host_reads, assert_same,
                                              assert_storages_equal, assert_trees_equal,
                                              run_twins)

RnnState = namedtuple("RnnState", ["h", "c"])
TOTAL = 130

PAIRS = [(UniformSequenceReplayBuffer, DeviceUniformSequenceReplayBuffer),
         (UniformSequenceReplayFrameBuffer, DeviceUniformSequenceReplayFrameBuffer),
         (PrioritizedSequenceReplayBuffer, DevicePrioritizedSequenceReplayBuffer),
         (PrioritizedSequenceReplayFrameBuffer, DevicePrioritizedSequenceReplayFrameBuffer)]


def _nested_state(samples):
    """The stream's [.., 2] state as a nested (h, c) state, to check nested fields."""
    state = samples.prev_rnn_state
    return samples._replace(prev_rnn_state=RnnState(h=state, c=-2 * state))


@pytest.mark.parametrize("pair", PAIRS, ids=lambda p: p[1].__name__)
@pytest.mark.parametrize("interval,n_step", [(4, 3), (2, 1), (0, 3)])
def test_sequence_twins_store_extract_and_draw_alike(pair, interval, n_step):
    cls, device_cls = pair
    frame_based = cls.frame_based
    stream = Stream(total=TOTAL, B=3, n_frames=4 if frame_based else 1, frame_shape=(5, 4),
                    p_done=0.12, seed=interval + n_step, life_loss_fraction=0.3,
                    p_silent_reset=0.05 if frame_based else 0.0)
    nested = interval == 2  # a nested (h, c) recurrent state
    example = stream.example(with_rnn=True)
    if nested:
        example = _nested_state(example)

    def chunk(start, stop):
        samples = stream.chunk(start, stop, with_rnn=True)
        return _nested_state(samples) if nested else samples

    batch_T = 5
    kwargs = dict(size=66, B=3, rnn_state_interval=interval, batch_T=batch_T, discount=0.9,
                  n_step_return=n_step)
    reference = cls(example, **kwargs)
    device = device_cls(example, device="cpu", **kwargs)
    assert device.T == reference.T and device.rnn_state_interval == interval
    np.random.seed(2)
    off_backward = batch_T + 2 * n_step - 2
    run_twins(reference, device, chunk, TOTAL, off_backward=off_backward,
              stride=max(1, interval), batch_B=8)
    batch = assert_no_host_reads(device, 8)
    prioritized = reference.priority_tree is not None
    assert type(batch) is (SequenceSamplesFromReplayPri if prioritized
                           else SequenceSamplesFromReplay)
    assert batch.action.shape == (batch_T + n_step, 8)
    if interval == 0:
        assert batch.init_rnn_state is None
    else:  # stored states are those of steps at multiples of the interval
        h = batch.init_rnn_state.h if nested else batch.init_rnn_state
        assert (h[:, 0] % interval == 0).all()


def test_prioritized_sequence_twins_with_input_priorities():
    stream = Stream(total=TOTAL, B=3, p_done=0.1, seed=9)
    priorities = np.random.RandomState(3).rand(TOTAL, 3) + 0.05
    kwargs = dict(size=66, B=3, rnn_state_interval=2, batch_T=4, n_step_return=2, alpha=0.5,
                  input_priorities=True, input_priority_shift=2)
    reference = PrioritizedSequenceReplayBuffer(stream.example(with_rnn=True), **kwargs)
    device = DevicePrioritizedSequenceReplayBuffer(stream.example(with_rnn=True), **kwargs)

    def chunk(start, stop):
        return PrioritiesSamplesToBuffer(priorities=priorities[start:stop:2],
                                         samples=stream.chunk(start, stop, with_rnn=True))

    # Chunks of even length: one priority row per new start.
    rng = np.random.RandomState(0)
    start = 0
    while start < TOTAL:
        stop = min(TOTAL, start + 2 * rng.randint(1, 5))
        samples = chunk(start, stop)
        reference.append_samples(samples)
        device.append_samples(samples)
        start = stop
        assert_storages_equal(reference.storage, device.storage)
        assert_trees_equal(reference, device)
    assert_no_host_reads(device, 8)


def test_snapshot_round_trip_of_a_device_sequence_buffer(tmp_path):
    stream = Stream(total=TOTAL, B=3, n_frames=4, frame_shape=(5, 4), p_done=0.1, seed=4)
    kwargs = dict(size=66, B=3, rnn_state_interval=2, batch_T=4, n_step_return=2)
    example = stream.example(with_rnn=True)
    source = DevicePrioritizedSequenceReplayFrameBuffer(example, **kwargs)
    for start in range(0, 100, 10):
        source.append_samples(stream.chunk(start, start + 10, with_rnn=True))
    source.sample_batch(4)
    source.update_batch_priorities(torch.rand(4) + 0.1)
    path = tmp_path / "replay.npz"
    with open(path, "wb") as f:
        save_replay_file(source, f)
    fresh = DevicePrioritizedSequenceReplayFrameBuffer(example, **kwargs)
    load_replay_file(fresh, path)
    assert_storages_equal(source.storage, fresh.storage)
    assert_same(source.priority_tree.tree, fresh.priority_tree.tree, "tree")
    assert_same(source.sample_batch(4), fresh.sample_batch(4), "batch")


def test_uniform_sequence_draws_reach_every_stored_state_start():
    stream = Stream(total=60, B=2, p_done=0.1, seed=1)
    device = DeviceUniformSequenceReplayBuffer(stream.example(with_rnn=True), size=40, B=2,
                                               rnn_state_interval=4, batch_T=3,
                                               n_step_return=2)
    for start in range(0, 47, 5):  # T = 20: the cursor ends mid-ring, past a wrap
        device.append_samples(stream.chunk(start, min(47, start + 5), with_rnn=True))
    T_idxs, B_idxs, _ = device.sample_idxs(2000)
    s = device.storage
    ages = (s.t - 1 - T_idxs) % s.T
    expected = {row for row in range(0, s.T, 4)
                if 3 + 2 * 2 - 2 <= (s.t - 1 - row) % s.T <= s.T - 1 - s.off_forward}
    assert set(T_idxs.tolist()) == expected and set(B_idxs.tolist()) == {0, 1}
    assert int(ages.min()) >= 5
