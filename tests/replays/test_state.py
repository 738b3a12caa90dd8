"""Saving a replay buffer to an .npz and loading it into a freshly built one
(rlfast.replays.state), for every buffer kind make_replay_buffer builds.

The reference is the source buffer itself: after loading, the fresh buffer must hold the
same data and cursors (read through the buffers' own attributes, not only through
replay_arrays), draw the same batches under the same seeds, and stay identical to the
source when both get the same new samples and priority updates. A freshly built buffer
that was not loaded is checked to differ, so the equalities cannot hold by accident."""
import re
import zipfile

import numpy as np
import pytest
import torch

from rlfast.replays import PrioritiesSamplesToBuffer
from rlfast.replays.factory import make_replay_buffer
from rlfast.replays.state import (load_replay_arrays, load_replay_file, replay_arrays,
                                  save_replay_file)
from tests.replays._stream import Stream, TlStream

TOTAL = 130  # steps in each stream: the source gets 100 (several wraps), the rest come later
FIRST = 100


# name -> (make_replay_buffer options, constructor kwargs, stream kind)
CASES = {
    "uniform": (dict(), dict(size=60, B=3, discount=0.9, n_step_return=3), "plain"),
    "prioritized": (dict(prioritized=True),
                    dict(size=60, B=3, discount=0.9, n_step_return=2, alpha=0.7, beta=0.5),
                    "plain"),
    "prioritized-input": (dict(prioritized=True),
                          dict(size=60, B=3, n_step_return=2, input_priorities=True,
                               input_priority_shift=1), "priorities"),
    "frames": (dict(frames=True), dict(size=60, B=3, n_step_return=2), "frames"),
    "prioritized-frames": (dict(prioritized=True, frames=True),
                           dict(size=60, B=3, n_step_return=3), "frames"),
    "sequence": (dict(sequence=True),
                 dict(size=69, B=3, rnn_state_interval=4, batch_T=6, discount=0.9,
                      n_step_return=2), "rnn"),
    "prioritized-sequence": (dict(prioritized=True, sequence=True),
                             dict(size=69, B=3, rnn_state_interval=4, batch_T=6,
                                  n_step_return=2), "rnn"),
    "prioritized-sequence-frames": (dict(prioritized=True, sequence=True, frames=True),
                                    dict(size=69, B=3, rnn_state_interval=2, batch_T=5,
                                         n_step_return=1), "rnn-frames"),
    "time-limit": (dict(time_limit=True), dict(size=60, B=3, discount=0.9, n_step_return=3),
                   "tl"),
    "prioritized-time-limit": (dict(prioritized=True, time_limit=True),
                               dict(size=60, B=3, discount=0.9, n_step_return=2), "tl"),
    "async-uniform": (dict(async_=True), dict(size=60, B=3, n_step_return=2), "plain"),
    "async-prioritized-sequence": (dict(async_=True, prioritized=True, sequence=True),
                                   dict(size=69, B=3, rnn_state_interval=4, batch_T=6,
                                        n_step_return=2), "rnn"),
}


class Source:
    """One case: its stream of samples and how to build and fill its buffers."""

    def __init__(self, name, seed=0):
        self.options, self.kwargs, self.kind = CASES[name]
        self.prioritized = bool(self.options.get("prioritized"))
        B = self.kwargs["B"]
        if self.kind == "tl":
            self.stream = TlStream(TOTAL, B, seed)
        else:
            n_frames = 4 if "frames" in self.kind else 1
            self.stream = Stream(total=TOTAL, B=B, n_frames=n_frames, frame_shape=(5, 4),
                                 p_done=0.1, seed=seed)
        self.priorities = np.random.RandomState(seed + 1).rand(TOTAL, B) + 0.05

    def build(self, **overrides):
        kwargs = dict(self.kwargs, **overrides)
        if self.kind == "tl":
            example = self.stream.example()
        else:
            example = self.stream.example(with_rnn=self.kind.startswith("rnn"))
        return make_replay_buffer(example=example, **self.options, **kwargs)

    def chunk(self, start, stop):
        if self.kind == "tl":
            return self.stream.chunk(start, stop)
        samples = self.stream.chunk(start, stop, with_rnn=self.kind.startswith("rnn"))
        if self.kind == "priorities":
            return PrioritiesSamplesToBuffer(priorities=self.priorities[start:stop],
                                             samples=samples)
        return samples

    def fill(self, buffer, start, stop, seed):
        rng = np.random.RandomState(seed)
        while start < stop:
            n = int(min(rng.randint(1, 9), stop - start))
            buffer.append_samples(self.chunk(start, start + n))
            start += n


def _batch_size(buffer):
    return 4 if hasattr(buffer, "batch_T") else 16


def _sample(buffer, seed):
    np.random.seed(seed)
    torch.manual_seed(seed)
    return buffer.sample_batch(_batch_size(buffer))


def _assert_batches_equal(a, b, where="batch"):
    if a is None or b is None:
        assert a is None and b is None, where
    elif hasattr(a, "_fields"):
        assert type(a) is type(b) and a._fields == b._fields, where
        for field in a._fields:
            _assert_batches_equal(getattr(a, field), getattr(b, field), f"{where}.{field}")
    else:
        assert isinstance(a, torch.Tensor) and a.dtype == b.dtype, where
        assert torch.equal(a, b), where


def _inner(buffer):
    return getattr(buffer, "buffer", buffer)  # an async buffer's inner buffer


def _assert_buffers_equal(a, b, skip_last_leaves=False):
    """Through the buffers' own attributes (independent of replay_arrays)."""
    ia, ib = _inner(a), _inner(b)
    sa, sb = ia.storage, ib.storage
    assert (sa.t, sa.full, sa.n_appended) == (sb.t, sb.full, sb.n_appended)
    for field in sa.samples._fields:
        _assert_tree_equal(getattr(sa.samples, field), getattr(sb.samples, field), field)
    np.testing.assert_array_equal(sa.samples_return_, sb.samples_return_)
    np.testing.assert_array_equal(sa.samples_done_n, sb.samples_done_n)
    if sa.frames is not None:
        np.testing.assert_array_equal(sa.frames.frames, sb.frames.frames)
        np.testing.assert_array_equal(sa.frames.history_ok, sb.frames.history_ok)
    if sa.rnn_states is not None:
        _assert_tree_equal(sa.rnn_states, sb.rnn_states, "rnn_states")
    tree_a, tree_b = getattr(ia.scheme, "tree", None), getattr(ib.scheme, "tree", None)
    assert (tree_a is None) == (tree_b is None)
    if tree_a is not None:
        np.testing.assert_array_equal(tree_a.tree, tree_b.tree)
        np.testing.assert_array_equal(tree_a.leaves, tree_b.leaves)
        assert (tree_a.t, tree_a.full) == (tree_b.t, tree_b.full)
        assert ia.scheme._rows_started == ib.scheme._rows_started
        assert ia.scheme.beta == ib.scheme.beta
    windows_a = getattr(ia, "windows", None)
    if windows_a is not None:
        np.testing.assert_array_equal(windows_a.timeout_n, ib.windows.timeout_n)
        np.testing.assert_array_equal(windows_a.steps_n, ib.windows.steps_n)
    arrays_a, arrays_b = replay_arrays(a), replay_arrays(b)
    extra = set(arrays_a) ^ set(arrays_b)
    if skip_last_leaves:  # only the source has sampled: it alone remembers its last batch
        assert all(k.endswith("._last_leaves") for k in extra), extra
    else:
        assert not extra
    for key in set(arrays_a) & set(arrays_b):
        np.testing.assert_array_equal(arrays_a[key], arrays_b[key], err_msg=key)
        assert arrays_a[key].dtype == arrays_b[key].dtype, key


def _assert_tree_equal(a, b, where):
    if hasattr(a, "_fields"):
        for field in a._fields:
            _assert_tree_equal(getattr(a, field), getattr(b, field), f"{where}.{field}")
    else:
        np.testing.assert_array_equal(a, b, err_msg=where)


def _save(buffer, path):
    with open(path, "wb") as f:
        save_replay_file(buffer, f)
    return path


def _filled_source(name, tmp_path):
    case = Source(name)
    source = case.build()
    case.fill(source, 0, FIRST, seed=1)
    if case.prioritized:
        source.set_beta(0.8)
        _sample(source, 0)
        source.update_batch_priorities(torch.rand(_batch_size(source)) * 3 + 0.1)
    path = _save(source, tmp_path / "replay.npz")
    return case, source, path


@pytest.mark.parametrize("name", list(CASES))
def test_loaded_buffer_equals_source_and_stays_equal(tmp_path, name):
    case, source, path = _filled_source(name, tmp_path)
    target = case.build()
    control = case.build()
    before = {k: v for k, v in replay_arrays(target).items() if not k.startswith("scalar:")}
    load_replay_file(target, path)

    # (a) the same content, cursors and priorities; written in place (same array objects).
    _assert_buffers_equal(source, target, skip_last_leaves=True)
    after = replay_arrays(target)
    for key, array in before.items():
        assert after[key] is array, key
    assert _inner(target).storage.n_appended == FIRST
    assert _inner(target).storage.full  # the 100 steps wrapped the ring

    # (b) the same batches from the same seeds (control: a buffer that was not loaded,
    # filled with other data, gives other batches).
    case.fill(control, 0, 40, seed=5)
    for seed in (3, 4):
        expected = _sample(source, seed)
        _assert_batches_equal(expected, _sample(target, seed))
        with pytest.raises(AssertionError):
            _assert_batches_equal(expected, _sample(control, seed))

    # (c) the same new samples and priority updates keep them identical.
    rng = np.random.RandomState(7)
    start = FIRST
    while start < TOTAL:
        n = int(min(rng.randint(1, 9), TOTAL - start))
        chunk = case.chunk(start, start + n)
        source.append_samples(chunk)
        target.append_samples(chunk)
        start += n
        if case.prioritized:
            _sample(source, start)
            _sample(target, start)
            new = torch.rand(_batch_size(source)) + 0.01
            source.update_batch_priorities(new)
            target.update_batch_priorities(new)
        _assert_buffers_equal(source, target)
    assert _inner(target).storage.n_appended == TOTAL
    _assert_batches_equal(_sample(source, 11), _sample(target, 11))


def test_file_holds_replay_arrays_without_pickles(tmp_path):
    case, source, path = _filled_source("prioritized-sequence", tmp_path)
    arrays = replay_arrays(source)
    with np.load(path, allow_pickle=False) as npz:
        assert set(npz.files) == set(arrays)
        for key in npz.files:
            np.testing.assert_array_equal(npz[key], arrays[key], err_msg=key)
    with zipfile.ZipFile(path) as z:  # uncompressed, as documented
        assert all(info.compress_type == zipfile.ZIP_STORED for info in z.infolist())
    # Cursors are named: the storage's t / full / n_appended cells, the tree's.
    assert arrays["storage._cells"].tolist() == [source.storage.t, int(source.storage.full),
                                                 source.storage.n_appended]
    assert "scheme.tree.tree" in arrays and "storage.samples.observation" in arrays
    assert "storage.rnn_states" in arrays


def test_replay_arrays_are_the_buffers_own():
    case = Source("uniform")
    buffer = case.build()
    arrays = replay_arrays(buffer)
    assert arrays["storage.samples.reward"] is buffer.samples.reward
    # Public scalars are the buffer's settings, kept by the rebuilt buffer, not saved.
    assert not any(k.startswith("scalar:") and not k.rsplit(".", 1)[-1].startswith("_")
                   for k in arrays)
    assert "scalar:storage.T" not in arrays and "scalar:storage.discount" not in arrays


def test_load_replay_arrays_from_a_dict_sets_scalars():
    case = Source("prioritized")
    source = case.build()
    case.fill(source, 0, 50, seed=0)
    arrays = {k: np.array(v, copy=True) for k, v in replay_arrays(source).items()}
    target = case.build()
    load_replay_arrays(target, arrays)
    _assert_buffers_equal(source, target)


# ------------------------------------------------------------------------- refusals

def _snapshot_arrays(buffer):
    return {k: np.array(v, copy=True) for k, v in replay_arrays(buffer).items()}


def _assert_unchanged(buffer, before):
    after = replay_arrays(buffer)
    assert set(after) == set(before)
    for key in before:
        np.testing.assert_array_equal(after[key], before[key], err_msg=key)


@pytest.mark.parametrize("name,other", [("uniform", dict(size=90)),
                                        ("uniform", dict(B=2, size=40)),
                                        ("prioritized-frames", dict(size=90)),
                                        ("sequence", dict(size=93))])
def test_file_from_buffer_of_another_size_is_refused_by_entry(tmp_path, name, other):
    case, source, path = _filled_source(name, tmp_path)
    target = case.build(**other)
    before = _snapshot_arrays(target)
    with pytest.raises(ValueError, match="has shape") as info:
        load_replay_file(target, path)
    message = str(info.value)
    entry = re.search(r"(\S+) has shape", message).group(1)
    assert entry in replay_arrays(target), message
    assert str(path) in message
    _assert_unchanged(target, before)  # refused before anything was written


def test_file_of_another_dtype_is_refused(tmp_path):
    case, source, path = _filled_source("uniform", tmp_path)
    with np.load(path) as npz:
        arrays = {k: npz[k] for k in npz.files}
    arrays["storage.samples.reward"] = arrays["storage.samples.reward"].astype(np.float64)
    np.savez(tmp_path / "other.npz", **arrays)
    target = case.build()
    with pytest.raises(ValueError, match=r"storage\.samples\.reward has shape .* dtype float64"):
        load_replay_file(target, tmp_path / "other.npz")


def test_file_missing_entries_is_refused_by_name(tmp_path):
    case, source, path = _filled_source("prioritized", tmp_path)
    with np.load(path) as npz:
        arrays = {k: npz[k] for k in npz.files if k != "scheme.tree.tree"}
    np.savez(tmp_path / "missing.npz", **arrays)
    target = case.build()
    before = _snapshot_arrays(target)
    with pytest.raises(ValueError, match=r"lacks scheme\.tree\.tree") as info:
        load_replay_file(target, tmp_path / "missing.npz")
    assert "missing.npz" in str(info.value)
    _assert_unchanged(target, before)


def test_file_from_another_kind_of_buffer_is_refused(tmp_path):
    _, _, path = _filled_source("uniform", tmp_path)
    target = Source("prioritized").build()
    with pytest.raises(ValueError, match="lacks .*scheme"):
        load_replay_file(target, path)


def _damage_checks(tmp_path, mutate):
    case, source, path = _filled_source("uniform", tmp_path)
    data = bytearray(path.read_bytes())
    damaged = tmp_path / "damaged.npz"
    damaged.write_bytes(bytes(mutate(data)))
    target = case.build()
    before = _snapshot_arrays(target)
    with pytest.raises(ValueError) as info:
        load_replay_file(target, damaged)
    assert str(damaged) in str(info.value)
    _assert_unchanged(target, before)


@pytest.mark.parametrize("keep", [0.5, 0.9, 0.0])
def test_truncated_file_is_refused_naming_it(tmp_path, keep):
    _damage_checks(tmp_path, lambda data: data[:int(len(data) * keep)])


def test_file_with_flipped_bytes_is_refused_naming_it(tmp_path):
    def flip(data):
        # Inside the largest entry's data: the zip's CRC no longer matches.
        start = len(data) // 3
        for i in range(start, start + 16):
            data[i] ^= 0xFF
        return data
    _damage_checks(tmp_path, flip)


def test_file_that_is_not_an_npz_is_refused_naming_it(tmp_path):
    _damage_checks(tmp_path, lambda data: b"this is not a replay file\n" * 20)


_unpickled = []


def _mark(value):
    _unpickled.append(value)
    return value


class Payload:
    def __reduce__(self):
        return _mark, ("code ran",)


@pytest.mark.parametrize("replace", [True, False])
def test_object_array_is_refused_without_unpickling(tmp_path, replace):
    case, source, path = _filled_source("uniform", tmp_path)
    with np.load(path) as npz:
        arrays = {k: npz[k] for k in npz.files}
    evil = np.empty(1, dtype=object)
    evil[0] = Payload()
    if replace:
        arrays["storage.samples.action"] = evil
    else:
        arrays["extra"] = evil
    np.savez(tmp_path / "pickled.npz", **arrays)  # numpy pickles object arrays on save
    target = case.build()
    before = _snapshot_arrays(target)
    _unpickled.clear()
    with pytest.raises(ValueError, match="pickle"):
        load_replay_file(target, tmp_path / "pickled.npz")
    assert _unpickled == []
    _assert_unchanged(target, before)
