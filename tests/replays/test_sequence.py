from collections import namedtuple

import numpy as np
import pytest
import torch

from rlfast.replays import (PrioritiesSamplesToBuffer, PrioritizedSequenceReplayBuffer,
                            PrioritizedSequenceReplayFrameBuffer, SequenceSamplesFromReplay,
                            SequenceSamplesFromReplayPri, UniformSequenceReplayBuffer,
                            UniformSequenceReplayFrameBuffer)
from tests.replays._stream import Stream, global_of_row, valid_start

ALL = [UniformSequenceReplayBuffer, UniformSequenceReplayFrameBuffer,
       PrioritizedSequenceReplayBuffer, PrioritizedSequenceReplayFrameBuffer]


def off_forward(cls, C):
    return max(1, C - 1) if cls.frame_based else 1


def need_after(batch_T, n):
    """Later steps that must be written: the sequence's last row and its n-step window."""
    return batch_T + n - 1 + n - 1


def check_sequences(batch, stream, batch_T, n, discount, n_appended, T, off_f, interval,
                    state_is_gb=True):
    L = batch_T + n
    assert batch.action.shape[0] == L and batch.return_.shape[0] == L
    g0, b = stream.global_step(batch.action[0].numpy())
    for j in range(batch.action.shape[1]):
        gj, bj = int(g0[j]), int(b[j])
        assert valid_start(gj, n_appended, T, need_after(batch_T, n), off_f,
                           max(1, interval)), (gj, n_appended)
        if interval > 0 and state_is_gb:  # the stream stores (g, b) as the state of step g
            np.testing.assert_array_equal(batch.init_rnn_state[j].numpy(), [gj, bj])
        for i in range(L):
            g = gj + i
            assert int(batch.action[i, j]) == stream.action[g, bj]  # consecutive steps
            np.testing.assert_array_equal(batch.agent_inputs.observation[i, j].numpy(),
                                          stream.observation[g, bj])
            pa, pr = stream.prev(g, bj)
            assert int(batch.agent_inputs.prev_action[i, j]) == pa
            assert float(batch.agent_inputs.prev_reward[i, j]) == pytest.approx(pr)
            ret, done_n = stream.n_step(g, bj, n, discount)
            assert float(batch.return_[i, j]) == pytest.approx(ret, rel=1e-5, abs=1e-5)
            assert bool(batch.done_n[i, j]) == done_n
            assert bool(batch.done[i, j]) == bool(stream.done[g, bj])


@pytest.mark.parametrize("cls", ALL)
@pytest.mark.parametrize("interval,n", [(4, 2), (0, 3), (1, 1)])
def test_sequences_match_reference_and_start_at_stored_states(cls, interval, n):
    C = 3 if cls.frame_based else 1
    batch_T = 6
    stream = Stream(total=140, B=3, n_frames=C, p_done=0.1, seed=interval + n,
                    life_loss_fraction=0.3)
    buffer = cls(stream.example(with_rnn=True), size=3 * 23, B=3, rnn_state_interval=interval,
                 batch_T=batch_T, discount=0.9, n_step_return=n)
    assert buffer.T == (24 if interval == 4 else 23)
    rng = np.random.RandomState(interval)
    np.random.seed(1)
    n_appended = 0
    while n_appended < 140:
        T_in = int(min(rng.randint(1, 8), 140 - n_appended))
        buffer.append_samples(stream.chunk(n_appended, n_appended + T_in, with_rnn=True))
        n_appended += T_in
        if n_appended < need_after(batch_T, n) + 1:
            continue
        batch = buffer.sample_batch(8)
        prioritized = "Prioritized" in cls.__name__
        assert type(batch) is (SequenceSamplesFromReplayPri if prioritized
                               else SequenceSamplesFromReplay)
        assert batch.agent_inputs.observation.shape[:2] == (batch_T + n, 8)
        if interval == 0:
            assert batch.init_rnn_state is None
        else:
            assert batch.init_rnn_state.shape == (8, 2)
        check_sequences(batch, stream, batch_T, n, 0.9, n_appended, buffer.T,
                        off_forward(cls, C), interval)
        if prioritized:
            assert batch.is_weights.shape == (8,)
            buffer.update_batch_priorities(torch.rand(8) + 0.1)


def test_interval_zero_starts_anywhere():
    stream = Stream(total=60, B=2, seed=2)
    buffer = UniformSequenceReplayBuffer(stream.example(), size=2 * 50, B=2,
                                         rnn_state_interval=0, batch_T=4)
    buffer.append_samples(stream.chunk(0, 40))
    np.random.seed(0)
    T_idxs, _, _ = buffer.sample_idxs(500)
    assert set(T_idxs.tolist()) == set(range(0, 40 - 4))  # starts whose 5 steps are written


@pytest.mark.parametrize("cls", ALL)
def test_property_never_samples_invalid_sequence(cls):
    rng = np.random.RandomState(ALL.index(cls))
    np.random.seed(0)
    for trial in range(40):
        B = int(rng.randint(1, 4))
        C = int(rng.randint(1, 4)) if cls.frame_based else 1
        n = int(rng.randint(1, 4))
        batch_T = int(rng.randint(1, 6))
        interval = int(rng.randint(0, 5))
        min_T = need_after(batch_T, n) + max(1, C - 1) + 1
        T = int(rng.randint(min_T, min_T + 20))
        if interval:
            T = -(-T // interval) * interval
        total = int(rng.randint(1, 3 * T))
        stream = Stream(total=total, B=B, n_frames=C, frame_shape=(1,),
                        p_done=rng.rand() * 0.4, seed=trial)
        try:
            buffer = cls(stream.example(with_rnn=True), size=T * B, B=B,
                         rnn_state_interval=interval, batch_T=batch_T, n_step_return=n)
        except ValueError as err:  # the tree's windows round up to whole strides
            assert "Prioritized" in cls.__name__ and "priority tree" in str(err)
            continue
        assert buffer.T == T
        n_appended = 0
        while n_appended < total:
            T_in = int(min(rng.randint(1, T + 1), total - n_appended))
            buffer.append_samples(stream.chunk(n_appended, n_appended + T_in, with_rnn=True))
            n_appended += T_in
            valid = {(g, b) for g in range(n_appended) for b in range(B)
                     if valid_start(g, n_appended, T, need_after(batch_T, n),
                                    off_forward(cls, C), max(1, interval))}
            try:
                T_idxs, B_idxs, _ = buffer.sample_idxs(1000 if len(valid) < 20 else 64)
            except RuntimeError:
                continue  # nothing valid (a prioritized tree may be one stride conservative)
            sampled = {(global_of_row(int(t), n_appended, T), int(b))
                       for t, b in zip(T_idxs, B_idxs)}
            assert sampled <= valid, sorted(sampled - valid)
            if cls is UniformSequenceReplayBuffer:
                assert sampled == valid or len(valid) >= 20
            if "Prioritized" in cls.__name__:
                buffer.update_batch_priorities(rng.rand(len(T_idxs)) + 0.01)


def test_prioritized_sequence_input_priorities_with_shift():
    """R2D1 layout: state every 4 steps, 4-step appends with one priority per env; the
    priority that comes with append k belongs to the sequence starting at append k - 2."""
    stream = Stream(total=48, B=2, p_done=0.0, seed=3)
    alpha = 0.5
    buffer = PrioritizedSequenceReplayBuffer(
        stream.example(with_rnn=True), size=2 * 40, B=2, rnn_state_interval=4, batch_T=6,
        n_step_return=1, alpha=alpha, default_priority=9.0, input_priorities=True,
        input_priority_shift=2)
    given = []
    for k in range(12):
        p = np.array([k + 1.0, 100.0 + k])
        given.append(p)
        buffer.append_samples(PrioritiesSamplesToBuffer(
            priorities=p, samples=stream.chunk(4 * k, 4 * k + 4, with_rnn=True)))
        leaves = buffer.priority_tree.leaves
        n_appended = 4 * (k + 1)
        for slot in range(buffer.T // 4):
            g = global_of_row(4 * slot, n_appended, buffer.T)
            if leaves[slot, 0] == 0:
                continue
            # Only valid starts have mass, and the mass is the shifted input priority.
            assert valid_start(g, n_appended, buffer.T, need_after(6, 1), 1, 4)
            src = g // 4 + 2
            expected = given[src] if src <= k else np.array([9.0, 9.0])
            np.testing.assert_allclose(leaves[slot], expected ** alpha)
    assert np.count_nonzero(leaves[:, 0]) > 3


def test_nested_rnn_state_and_frame_sequences():
    """An LSTM-like (h, c) state is stored and returned field by field."""
    State = namedtuple("State", ["h", "c"])
    stream = Stream(total=50, B=2, n_frames=4, frame_shape=(3, 2), p_done=0.15, seed=9)
    Ex = namedtuple("Ex", ["observation", "action", "reward", "done", "prev_rnn_state"])
    ex = stream.example()
    example = Ex(*ex, prev_rnn_state=State(np.zeros((1, 3), np.float32),
                                           np.zeros((1, 3), np.float32)))
    buffer = UniformSequenceReplayFrameBuffer(example, size=2 * 30, B=2, rnn_state_interval=5,
                                              batch_T=4, n_step_return=2)
    for start in range(0, 50, 10):
        c = stream.chunk(start, start + 10)
        g = np.arange(start, start + 10, dtype=np.float32)[:, None, None, None]
        h = np.broadcast_to(g, (10, 2, 1, 3)).copy()
        buffer.append_samples(Ex(*c, prev_rnn_state=State(h, -h)))
    np.random.seed(0)
    batch = buffer.sample_batch(6)
    g0, _ = stream.global_step(batch.action[0].numpy())
    np.testing.assert_array_equal(batch.init_rnn_state.h[:, 0, 0].numpy(), g0)
    np.testing.assert_array_equal(batch.init_rnn_state.c[:, 0, 0].numpy(), -g0)
    check_sequences(batch, stream, 4, 2, 1.0, 50, buffer.T, 3, 5, state_is_gb=False)


def test_sequence_input_checks():
    stream = Stream(total=10, B=2, seed=0)
    with pytest.raises(ValueError, match="prev_rnn_state"):
        UniformSequenceReplayBuffer(stream.example(), size=40, B=2, rnn_state_interval=4,
                                    batch_T=3)
    with pytest.raises(ValueError, match="too short"):
        UniformSequenceReplayBuffer(stream.example(), size=20, B=2, rnn_state_interval=0,
                                    batch_T=9)
    with pytest.raises(ValueError, match="batch_T"):
        PrioritizedSequenceReplayBuffer(stream.example(), size=20, B=2, rnn_state_interval=0,
                                        batch_T=0)
    buffer = UniformSequenceReplayBuffer(stream.example(with_rnn=True), size=40, B=2,
                                         rnn_state_interval=4, batch_T=3)
    assert buffer.T == 20
    with pytest.raises(ValueError, match="multiples of rnn_state_interval"):
        buffer.storage.rnn_state(np.array([3]), np.array([0]))
