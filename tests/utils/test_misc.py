import numpy as np
import pytest
import torch

from rlfast.utils.collections import NamedArrayTupleSchema, namedarraytuple
from rlfast.utils.misc import empty, extract_sequences, iterate_mb_idxs, zeros

Seq = namedarraytuple("Seq", ["obs", "act", "none"])


@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("length,mb", [(10, 3), (12, 4), (5, 5), (3, 8), (1, 1), (0, 2)])
def test_iterate_mb_idxs_covers_every_index_once(length, mb, shuffle):
    batches = list(iterate_mb_idxs(length, mb, shuffle=shuffle))
    assert len(batches) == -(-length // mb)  # ceil division
    for i, batch in enumerate(batches):
        assert isinstance(batch, np.ndarray) and np.issubdtype(batch.dtype, np.integer)
        expected_size = mb if i < len(batches) - 1 else length - mb * (len(batches) - 1)
        assert len(batch) == expected_size
    flat = np.concatenate(batches) if batches else np.array([], dtype=int)
    assert sorted(flat.tolist()) == list(range(length))
    if not shuffle:
        assert flat.tolist() == list(range(length))


def test_iterate_mb_idxs_shuffle_follows_global_seed_and_permutes():
    np.random.seed(3)
    first = np.concatenate(list(iterate_mb_idxs(50, 7, shuffle=True)))
    np.random.seed(3)
    second = np.concatenate(list(iterate_mb_idxs(50, 7, shuffle=True)))
    assert first.tolist() == second.tolist()
    assert first.tolist() != list(range(50))


def test_iterate_mb_idxs_rejects_bad_sizes():
    with pytest.raises(ValueError, match="minibatch_size"):
        list(iterate_mb_idxs(10, 0))
    with pytest.raises(ValueError, match="data_length"):
        list(iterate_mb_idxs(-1, 2))
    with pytest.raises(TypeError, match="minibatch_size"):
        list(iterate_mb_idxs(10, 2.5))


@pytest.mark.parametrize("fn", [zeros, empty])
def test_zeros_empty_pick_library_from_dtype(fn):
    t = fn((2, 3), torch.float16)
    assert isinstance(t, torch.Tensor) and t.shape == (2, 3) and t.dtype == torch.float16
    t = fn(4, None)
    assert isinstance(t, torch.Tensor) and t.dtype == torch.get_default_dtype()
    for dtype in (np.int32, "uint8", np.dtype("float64"), bool):
        a = fn((3, 1), dtype)
        assert isinstance(a, np.ndarray) and a.shape == (3, 1) and a.dtype == np.dtype(dtype)
    with pytest.raises(TypeError, match="dtype"):
        fn(3, object())


def test_zeros_are_zero():
    assert torch.count_nonzero(zeros((3, 2), torch.int64)) == 0
    assert not np.any(zeros((3, 2), "float32"))


def _loop_reference(array, T_idx, B_idx, T):
    """Straightforward per-element gather with explicit wrap-around."""
    T_buffer = array.shape[0]
    out = []
    for t in range(T):
        row = [array[(t0 + t) % T_buffer, b] for t0, b in zip(T_idx, B_idx)]
        out.append(np.stack([np.asarray(r) for r in row]))
    return np.stack(out)


@pytest.mark.parametrize("use_torch", [False, True])
def test_extract_sequences_matches_loop_reference_with_wrap(use_torch):
    rng = np.random.default_rng(0)
    data = rng.normal(size=(7, 4, 3)).astype(np.float32)
    T_idx = np.array([0, 3, 5, 6, 6])  # the last three wrap for T=4
    B_idx = np.array([1, 0, 3, 2, 2])
    T = 4
    source = torch.from_numpy(data) if use_torch else data
    out = extract_sequences(source, T_idx, B_idx, T)
    assert type(out) is type(source) and tuple(out.shape) == (T, len(B_idx), 3)
    np.testing.assert_array_equal(np.asarray(out), _loop_reference(data, T_idx, B_idx, T))
    out_list = extract_sequences(source, T_idx.tolist(), B_idx.tolist(), T)  # plain lists
    np.testing.assert_array_equal(np.asarray(out_list), np.asarray(out))
    out[:] = 0  # a copy, not a view into the buffer
    assert np.any(data != 0)


def test_extract_sequences_full_length_and_2d():
    data = np.arange(15).reshape(5, 3)
    out = extract_sequences(data, [2], [1], 5)
    assert out.shape == (5, 1)
    assert out[:, 0].tolist() == [data[t % 5, 1] for t in range(2, 7)]


def test_extract_sequences_on_named_array_tuples():
    data = Seq(obs=np.arange(24.0).reshape(6, 2, 2), act=torch.arange(12).reshape(6, 2),
               none=None)
    out = extract_sequences(data, [4, 1], [1, 0], 3)
    assert type(out) is Seq and out.none is None
    np.testing.assert_array_equal(out.obs, _loop_reference(data.obs, [4, 1], [1, 0], 3))
    assert out.act.tolist() == _loop_reference(data.act.numpy(), [4, 1], [1, 0], 3).tolist()
    schema = NamedArrayTupleSchema("S", ["a"])
    out = extract_sequences(schema(np.arange(12).reshape(6, 2)), [5], [0], 2)
    assert out._typename == "S" and out.a[:, 0].tolist() == [10, 0]


def test_extract_sequences_input_checks():
    data = np.zeros((5, 2))
    with pytest.raises(ValueError, match="T must be"):
        extract_sequences(data, [0], [0], 6)
    with pytest.raises(ValueError, match="equal length"):
        extract_sequences(data, [0, 1], [0], 2)
    with pytest.raises(ValueError, match="T_idx"):
        extract_sequences(data, [5], [0], 2)
    with pytest.raises(ValueError, match="leading dims"):
        extract_sequences(np.zeros(5), [0], [0], 2)
