"""Tests for rlfast.utils.tensor, checked against plain loops / direct indexing."""
import pytest
import torch

from rlfast.utils.tensor import (
    from_onehot,
    infer_leading_dims,
    restore_leading_dims,
    select_at_indexes,
    to_onehot,
    valid_mean,
)


@pytest.mark.parametrize(
    "shape, dim, expected",
    [
        ((4,), 1, (0, 1, 1, (4,))),
        ((3, 4), 1, (1, 1, 3, (4,))),
        ((5, 3, 4), 1, (2, 5, 3, (4,))),
        ((5, 3, 2, 7, 7), 3, (2, 5, 3, (2, 7, 7))),
        ((6,), 0, (1, 1, 6, ())),
        ((), 0, (0, 1, 1, ())),
    ],
)
def test_infer_leading_dims(shape, dim, expected):
    lead_dim, T, B, data_shape = infer_leading_dims(torch.zeros(shape), dim)
    assert (lead_dim, T, B, tuple(data_shape)) == expected


@pytest.mark.parametrize("shape, dim", [((2, 3, 4, 5), 1), ((4,), 2)])
def test_infer_leading_dims_rejects_bad_rank(shape, dim):
    with pytest.raises(ValueError, match="between"):
        infer_leading_dims(torch.zeros(shape), dim)


@pytest.mark.parametrize("lead_shape", [(), (3,), (5, 3)])
def test_restore_round_trip(lead_shape):
    x = torch.randn(lead_shape + (4,))
    lead_dim, T, B, _ = infer_leading_dims(x, 1)
    flat = x.reshape(T * B, 4)
    a, b = restore_leading_dims((flat * 2, flat.sum(-1)), lead_dim, T, B)
    assert a.shape == lead_shape + (4,)
    assert b.shape == lead_shape
    assert torch.equal(a, x * 2)
    assert torch.allclose(b, x.sum(-1))
    single = restore_leading_dims(flat, lead_dim, T, B)
    assert isinstance(single, torch.Tensor) and torch.equal(single, x)
    as_list = restore_leading_dims([flat], lead_dim, T, B)
    assert isinstance(as_list, list) and torch.equal(as_list[0], x)


def test_restore_leading_dims_lead0_requires_batch_one():
    with pytest.raises(ValueError):
        restore_leading_dims(torch.zeros(2, 3), 0)


def test_select_at_indexes_matches_loop():
    torch.manual_seed(0)
    T, B, A = 4, 3, 5
    values = torch.randn(T, B, A, 2)
    idx = torch.randint(A, (T, B))
    out = select_at_indexes(idx, values)
    assert out.shape == (T, B, 2)
    for t in range(T):
        for b in range(B):
            assert torch.equal(out[t, b], values[t, b, idx[t, b]])
    # No leading dims.
    assert torch.equal(select_at_indexes(torch.tensor(2), values[0, 0]), values[0, 0, 2])


def test_onehot_round_trip():
    idx = torch.tensor([[0, 2], [1, 3]])
    onehot = to_onehot(idx, 4, dtype=torch.float)
    assert onehot.shape == (2, 2, 4) and onehot.dtype == torch.float
    expected = torch.zeros(2, 2, 4)
    for i in range(2):
        for j in range(2):
            expected[i, j, idx[i, j]] = 1
    assert torch.equal(onehot, expected)
    assert to_onehot(idx, 4).dtype == idx.dtype
    back = from_onehot(onehot, dtype=torch.int32)
    assert back.dtype == torch.int32 and torch.equal(back.long(), idx)
    assert torch.equal(from_onehot(onehot.transpose(0, 2), dim=0), idx.t())


def test_valid_mean():
    x = torch.tensor([[1.0, 2.0], [3.0, 10.0]])
    valid = torch.tensor([[1, 1], [1, 0]])
    assert valid_mean(x).item() == pytest.approx(4.0)
    assert valid_mean(x, valid).item() == pytest.approx(2.0)
    assert torch.allclose(valid_mean(x, valid, dim=0), torch.tensor([2.0, 2.0]))
    assert torch.allclose(valid_mean(x, dim=1), torch.tensor([1.5, 6.5]))
    # Mask with fewer dims broadcasts over trailing dims.
    y = torch.arange(12.0).reshape(2, 3, 2)
    mask = torch.tensor([[1.0, 0.0, 1.0], [0.0, 0.0, 1.0]])
    ref = torch.stack([y[0, 0], y[0, 2], y[1, 2]]).mean()
    assert valid_mean(y, mask).item() == pytest.approx(ref.item())
    # All-invalid gives 0, not NaN.
    assert valid_mean(x, torch.zeros(2, 2)).item() == 0.0
