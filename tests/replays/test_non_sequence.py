import numpy as np
import pytest
import torch

from rlfast.replays import (PrioritizedReplayBuffer, PrioritizedReplayFrameBuffer,
                            SamplesFromReplay, SamplesFromReplayPri, UniformReplayBuffer,
                            UniformReplayFrameBuffer)
from tests.replays._stream import Stream, global_of_row, valid_start

ALL = [UniformReplayBuffer, UniformReplayFrameBuffer, PrioritizedReplayBuffer,
       PrioritizedReplayFrameBuffer]


def off_forward(cls, C):
    return max(1, C - 1) if cls.frame_based else 1


def fill(buffer, stream, rng, n_appended, upto, max_T_in):
    while n_appended < upto:
        T_in = int(min(rng.randint(1, max_T_in + 1), upto - n_appended))
        buffer.append_samples(stream.chunk(n_appended, n_appended + T_in))
        n_appended += T_in
    return n_appended


def check_batch(batch, stream, n, discount, n_appended, T, off_f):
    """Every field of a SamplesFromReplay against the stream's per-element references."""
    g, b = stream.global_step(batch.action.numpy())
    for i in range(len(g)):
        gi, bi = int(g[i]), int(b[i])
        assert valid_start(gi, n_appended, T, n, off_f), (gi, n_appended)
        np.testing.assert_array_equal(batch.agent_inputs.observation[i].numpy(),
                                      stream.observation[gi, bi])
        pa, pr = stream.prev(gi, bi)
        assert int(batch.agent_inputs.prev_action[i]) == pa
        assert float(batch.agent_inputs.prev_reward[i]) == pytest.approx(pr)
        ret, done_n = stream.n_step(gi, bi, n, discount)
        assert float(batch.return_[i]) == pytest.approx(ret, rel=1e-5, abs=1e-5)
        assert bool(batch.done_n[i]) == done_n
        assert bool(batch.done[i]) == bool(stream.done[gi, bi])
        np.testing.assert_array_equal(batch.target_inputs.observation[i].numpy(),
                                      stream.observation[gi + n, bi])
        pa, pr = stream.prev(gi + n, bi)
        assert int(batch.target_inputs.prev_action[i]) == pa
        assert float(batch.target_inputs.prev_reward[i]) == pytest.approx(pr)


@pytest.mark.parametrize("cls", ALL)
@pytest.mark.parametrize("n_step", [1, 3])
def test_sampled_batches_match_reference_across_wrap(cls, n_step):
    C = 4 if cls.frame_based else 2
    stream = Stream(total=150, B=3, n_frames=C, p_done=0.2, seed=n_step)
    buffer = cls(stream.example(), size=60, B=3, discount=0.9, n_step_return=n_step)
    assert buffer.T == 20
    rng = np.random.RandomState(0)
    n_appended = 0
    torch.manual_seed(0)
    np.random.seed(0)
    while n_appended < 150:
        n_appended = fill(buffer, stream, rng, n_appended, min(150, n_appended + 7), 7)
        if n_appended <= n_step:
            continue
        batch = buffer.sample_batch(32)
        prioritized = "Prioritized" in cls.__name__
        assert type(batch) is (SamplesFromReplayPri if prioritized else SamplesFromReplay)
        assert batch.return_.shape == (32,) and batch.agent_inputs.observation.shape[0] == 32
        check_batch(batch, stream, n_step, 0.9, n_appended, buffer.T, off_forward(cls, C))
        if prioritized:
            buffer.update_batch_priorities(torch.rand(32) + 0.1)


def test_n_step_returns_in_buffer_across_wrap():
    """samples_return_ / samples_done_n of every complete step against per-element loops."""
    stream = Stream(total=200, B=2, p_done=0.25, seed=7)
    buffer = UniformReplayBuffer(stream.example(), size=34, B=2, discount=0.95, n_step_return=4)
    rng = np.random.RandomState(1)
    n_appended = 0
    while n_appended < 200:
        n_appended = fill(buffer, stream, rng, n_appended, min(200, n_appended + 5), 9)
        for row in range(buffer.T):
            g = global_of_row(row, n_appended, buffer.T)
            if g < 0 or g + 4 > n_appended:  # window not complete yet
                continue
            for b in range(2):
                ret, done_n = stream.n_step(g, b, 4, 0.95)
                assert buffer.samples_return_[row, b] == pytest.approx(ret, rel=1e-5, abs=1e-5)
                assert bool(buffer.samples_done_n[row, b]) == done_n


@pytest.mark.parametrize("cls", ALL)
def test_property_never_samples_invalid_index(cls):
    """Random sizes, chunk lengths, dones and n: every sampled index is valid in global time,
    and uniform sampling of single transitions reaches every valid index."""
    rng = np.random.RandomState(ALL.index(cls))
    np.random.seed(0)
    for trial in range(50):
        B = int(rng.randint(1, 4))
        C = int(rng.randint(1, 5)) if cls.frame_based else 1
        n = int(rng.randint(1, 5))
        T = int(rng.randint(n + max(1, C - 1) + 1, 25))
        total = int(rng.randint(1, 3 * T))
        stream = Stream(total=total, B=B, n_frames=C, frame_shape=(1,), p_done=rng.rand() * 0.4,
                        seed=trial)
        buffer = cls(stream.example(), size=T * B - int(rng.randint(0, B)), B=B,
                     discount=0.99, n_step_return=n)
        assert buffer.T == T
        n_appended = 0
        while n_appended < total:
            n_appended = fill(buffer, stream, rng, n_appended,
                              min(total, n_appended + int(rng.randint(1, T + 1))), T)
            valid = {(g, b) for g in range(n_appended) for b in range(B)
                     if valid_start(g, n_appended, T, n, off_forward(cls, C))}
            if not valid:
                with pytest.raises(RuntimeError, match="no valid|not enough"):
                    buffer.sample_idxs(4)
                continue
            T_idxs, B_idxs, _ = buffer.sample_idxs(2000 if len(valid) < 40 else 64)
            sampled = {(global_of_row(int(t), n_appended, T), int(b))
                       for t, b in zip(T_idxs, B_idxs)}
            assert sampled <= valid, sorted(sampled - valid)
            if len(valid) < 40 and cls is UniformReplayBuffer:
                assert sampled == valid
            if "Prioritized" in cls.__name__:
                buffer.update_batch_priorities(rng.rand(len(T_idxs)) + 0.01)


@pytest.mark.parametrize("life_loss_fraction,p_silent_reset", [(0.0, 0.0), (0.5, 0.05)])
def test_frame_buffer_rebuilds_stacked_observations_exactly(life_loss_fraction, p_silent_reset):
    """Every valid step of a frame buffer, after many wraps with resets, against stacks built
    by hand from the fake env's frames: older frames zeroed after a reset, kept after a done
    without reset (a lost life with episodic lives), zeroed after a reset without done (a
    wait-reset collector)."""
    C = 4
    stream = Stream(total=180, B=3, n_frames=C, frame_shape=(5, 4), p_done=0.1, seed=11,
                    life_loss_fraction=life_loss_fraction, p_silent_reset=p_silent_reset)
    assert stream.reset.sum() > 10
    if life_loss_fraction:
        assert (stream.done & ~stream.reset).sum() > 10
        assert (stream.reset & ~stream.done).sum() > 10
    buffer = UniformReplayFrameBuffer(stream.example(), size=3 * 23, B=3, n_step_return=2)
    rng = np.random.RandomState(2)
    n_appended = 0
    while n_appended < 180:
        n_appended = fill(buffer, stream, rng, n_appended, min(180, n_appended + 6), 11)
        rows, envs, gs = [], [], []
        for row in range(buffer.T):
            g = global_of_row(row, n_appended, buffer.T)
            for b in range(3):
                if valid_start(g, n_appended, buffer.T, 2, C - 1):
                    rows.append(row)
                    envs.append(b)
                    gs.append(g)
        if not rows:
            continue
        batch = buffer.extract_batch(np.array(rows), np.array(envs))
        for i, (g, b) in enumerate(zip(gs, envs)):
            np.testing.assert_array_equal(batch.agent_inputs.observation[i],
                                          stream.observation[g, b])
            np.testing.assert_array_equal(batch.target_inputs.observation[i],
                                          stream.observation[g + 2, b])


def test_frame_buffer_memory_per_transition():
    """Bytes of all storage (frames, sum tree, returns) per transition vs one 104x80 frame."""
    from tests.replays._stream import SamplesToBuffer
    example = SamplesToBuffer(np.zeros((4, 104, 80), np.uint8), np.int64(0), np.float32(0),
                              False)
    frame_bytes = 104 * 80
    for cls in (UniformReplayFrameBuffer, PrioritizedReplayFrameBuffer):
        buffer = cls(example, size=8192, B=8, n_step_return=3)
        assert buffer.nbytes / buffer.size <= 1.1 * frame_bytes
    plain = UniformReplayBuffer(example, size=8192, B=8)
    assert plain.nbytes / plain.size > 4 * frame_bytes


def test_importance_weights_formula():
    stream = Stream(total=40, B=2, p_done=0.2, seed=3)
    alpha, beta = 0.7, 0.5
    buffer = PrioritizedReplayBuffer(stream.example(), size=2 * 16, B=2, n_step_return=2,
                                     alpha=alpha, beta=beta, input_priorities=True)
    priorities = np.random.RandomState(4).rand(40, 2) + 0.05
    for start in range(0, 40, 5):
        buffer.append_samples(_with_priorities(stream.chunk(start, start + 5),
                                               priorities[start:start + 5]))
    n_appended, T = 40, buffer.T
    valid = [(g, b) for g in range(n_appended) for b in range(2)
             if valid_start(g, n_appended, T, 2, 1)]
    p_alpha = {v: priorities[v] ** alpha for v in valid}
    total = sum(p_alpha.values())
    np.random.seed(0)
    batch = buffer.sample_batch(64)
    g, b = stream.global_step(batch.action.numpy())
    w_ref = np.array([(len(valid) * p_alpha[(gi, bi)] / total) ** -beta for gi, bi in zip(g, b)])
    w_ref /= w_ref.max()
    np.testing.assert_allclose(batch.is_weights.numpy(), w_ref, rtol=1e-5)
    assert batch.is_weights.dtype == torch.float32
    buffer.set_beta(0.0)
    assert torch.all(buffer.sample_batch(8).is_weights == 1)


def _with_priorities(samples, priorities):
    from rlfast.replays import PrioritiesSamplesToBuffer
    return PrioritiesSamplesToBuffer(priorities=priorities, samples=samples)


def test_priorities_stored_with_alpha_and_updates_take_effect():
    stream = Stream(total=30, B=2, p_done=0.0, seed=5)
    buffer = PrioritizedReplayBuffer(stream.example(), size=80, B=2, alpha=0.5,
                                     default_priority=4.0)
    buffer.append_samples(stream.chunk(0, 30))
    leaves = buffer.priority_tree.leaves
    assert np.all(leaves[:29] == 2.0) and np.all(leaves[29:] == 0)  # 4 ** 0.5; last: n-step
    np.random.seed(1)
    batch = buffer.sample_batch(6)
    g, b = stream.global_step(batch.action.numpy())
    new = torch.tensor([9.0, 16.0, 25.0, 36.0, 49.0, 64.0])
    buffer.update_batch_priorities(new)
    expected = {}
    for gi, bi, p in zip(g, b, new.numpy()):
        expected[(gi, bi)] = np.sqrt(p)
    for (gi, bi), v in expected.items():
        assert leaves[gi, bi] == pytest.approx(v)
    # Make one transition dominate (sqrt(1e12) vs at most 58 * 2): it is drawn almost always.
    batch = buffer.sample_batch(1)
    gi, bi = stream.global_step(batch.action.numpy())
    buffer.update_batch_priorities(np.array([1e12]))
    hits = stream.global_step(buffer.sample_batch(200).action.numpy())
    assert np.mean((hits[0] == gi[0]) & (hits[1] == bi[0])) > 0.97


def test_input_priorities_field_and_shift():
    stream = Stream(total=12, B=2, p_done=0.0, seed=6)
    buffer = PrioritizedReplayBuffer(stream.example(), size=40, B=2, alpha=1.0,
                                     input_priorities=True, input_priority_shift=2)
    from collections import namedtuple
    WithP = namedtuple("WithP", ["observation", "action", "reward", "done", "priorities"])
    for start in range(0, 12, 4):
        c = stream.chunk(start, start + 4)
        buffer.append_samples(WithP(*c, priorities=np.full((4, 2), 10.0 + start)))
    leaves = buffer.priority_tree.leaves
    # Priorities given with step k belong to step k - 2 (those of steps 0, 1 are dropped).
    np.testing.assert_array_equal(leaves[:2, 0], [10, 10])
    np.testing.assert_array_equal(leaves[2:6, 0], [14, 14, 14, 14])
    np.testing.assert_array_equal(leaves[6:10, 0], [18, 18, 18, 18])
    assert leaves[10, 0] == 1  # default until its shifted priority arrives
    assert np.all(leaves[11:] == 0)  # newest step (n-step window) and unwritten rows


def test_input_checks_and_uniform_has_no_priorities():
    stream = Stream(total=10, B=2, seed=0)
    with pytest.raises(ValueError, match="lacks fields"):
        UniformReplayBuffer(_missing_done(stream), 10, 2)
    with pytest.raises(ValueError, match="too short"):
        UniformReplayBuffer(stream.example(), size=6, B=2, n_step_return=3)
    with pytest.raises(ValueError, match="discount"):
        UniformReplayBuffer(stream.example(), size=20, B=2, discount=1.5)
    buffer = UniformReplayBuffer(stream.example(), size=20, B=2)
    with pytest.raises(ValueError, match="B=2"):
        buffer.append_samples(stream.chunk(0, 3)._replace(reward=np.zeros((3, 3), np.float32)))
    assert buffer.append_samples(stream.chunk(0, 0))[0] == 0
    with pytest.raises(ValueError, match="T_in"):
        buffer.append_samples(Stream(total=12, B=2).chunk(0, 11))
    with pytest.raises(RuntimeError, match="not enough"):
        buffer.sample_batch(2)
    with pytest.raises(TypeError, match="not prioritized"):
        buffer.update_batch_priorities(np.ones(2))
    with pytest.raises(ValueError, match="input priorities"):
        buffer.append_samples(_with_priorities(stream.chunk(0, 2), np.ones(2)))
    pri = PrioritizedReplayBuffer(stream.example(), size=20, B=2)
    with pytest.raises(ValueError, match="input_priorities=False"):
        pri.append_samples(_with_priorities(stream.chunk(0, 2), np.ones(2)))
    with pytest.raises(ValueError, match="beta"):
        pri.set_beta(2.0)


def _missing_done(stream):
    from collections import namedtuple
    S = namedtuple("S", ["observation", "action", "reward"])
    e = stream.example()
    return S(e.observation, e.action, e.reward)


def test_torch_samples_are_accepted_and_append_returns_rows():
    stream = Stream(total=30, B=2, seed=1)
    buffer = UniformReplayBuffer(stream.example(), size=20, B=2, n_step_return=2)
    chunk = stream.chunk(0, 8)
    torch_chunk = type(chunk)(*(torch.as_tensor(x) for x in chunk))
    T_in, rows = buffer.append_samples(torch_chunk)
    assert T_in == 8 and list(rows) == list(range(8))
    T_in, rows = buffer.append_samples(stream.chunk(8, 15))
    assert list(rows) == [8, 9, 0, 1, 2, 3, 4] and buffer.t == 5
    # Rows 0..4 now hold steps 10..14; rows 5..9 still hold steps 5..9.
    np.testing.assert_array_equal(buffer.samples.action[:8],
                                  np.concatenate([stream.action[10:15], stream.action[5:8]]))


@pytest.mark.parametrize("cls", [UniformReplayFrameBuffer, PrioritizedReplayFrameBuffer])
def test_stored_prev_action_and_reward_are_replayed_as_given(cls):
    """With prev_action / prev_reward in the example (needed when resets are not flagged by
    done, e.g. wait-reset collectors), replay returns them instead of deriving them."""
    from collections import namedtuple
    Ex = namedtuple("Ex", ["observation", "action", "reward", "done", "prev_action",
                           "prev_reward"])
    stream = Stream(total=60, B=2, n_frames=2, p_done=0.2, seed=8)
    prev_action = -stream.action  # distinct from anything derivable
    prev_reward = stream.reward * 10 + 3
    e = stream.example()
    buffer = cls(Ex(*e, prev_action=e.action, prev_reward=e.reward), size=2 * 25, B=2,
                 n_step_return=2)
    for start in range(0, 60, 12):
        c = stream.chunk(start, start + 12)
        buffer.append_samples(Ex(*c, prev_action=prev_action[start:start + 12],
                                 prev_reward=prev_reward[start:start + 12]))
    np.random.seed(0)
    batch = buffer.sample_batch(40)
    g, b = stream.global_step(batch.action.numpy())
    np.testing.assert_array_equal(batch.agent_inputs.prev_action.numpy(), prev_action[g, b])
    np.testing.assert_allclose(batch.agent_inputs.prev_reward.numpy(), prev_reward[g, b])
    np.testing.assert_array_equal(batch.target_inputs.prev_action.numpy(), prev_action[g + 2, b])
