"""Tests for FloatBox: both input forms, bounded and unbounded sampling, null values."""
import numpy as np
import pytest

from rlfast.spaces import FloatBox


def test_scalar_bounds_with_shape():
    space = FloatBox(-1.0, 1.0, (3, 4))
    assert space.shape == (3, 4) and space.dtype == np.float32
    draws = np.stack([space.sample() for _ in range(200)])
    assert draws.dtype == np.float32
    assert draws.min() >= -1.0 and draws.max() <= 1.0
    assert draws.min() < -0.9 and draws.max() > 0.9  # covers the range, not a constant
    assert abs(draws.mean()) < 0.05


def test_array_bounds_infer_shape():
    low, high = np.array([-1.0, -2.0]), np.array([2.0, 4.0])
    space = FloatBox(low, high)
    assert space.shape == (2,)
    draws = np.stack([space.sample() for _ in range(500)])
    assert np.all(draws >= low) and np.all(draws <= high)
    np.testing.assert_allclose(draws.mean(axis=0), (low + high) / 2, atol=0.3)


def test_infinite_and_half_bounded_sampling():
    low = np.array([-np.inf, 0.0, -np.inf, -1.0])
    high = np.array([np.inf, np.inf, 5.0, 1.0])
    space = FloatBox(low, high, dtype="float64")
    draws = np.stack([space.sample() for _ in range(2000)])
    assert np.all(np.isfinite(draws))
    assert np.all(draws >= low) and np.all(draws <= high)
    assert abs(draws[:, 0].mean()) < 0.1 and abs(draws[:, 0].std() - 1.0) < 0.1  # N(0, 1)
    assert draws[:, 0].min() < -1.0  # really unbounded below, not clipped


def test_null_value_and_contains():
    space = FloatBox(-2.0, 2.0, shape=(3,), null_value=0.5)
    null = space.null_value()
    np.testing.assert_array_equal(null, [0.5, 0.5, 0.5])
    assert null.dtype == np.float32
    assert space.contains(null)
    assert not space.contains(np.array([0.0, 3.0, 0.0]))
    assert not space.contains(np.zeros(4))
    assert FloatBox(-1.0, 1.0, shape=(2,)).null_value().tolist() == [0.0, 0.0]


def test_reproducible_under_global_and_private_seed():
    space = FloatBox(-np.inf, np.inf, shape=(3,))
    np.random.seed(4)
    a = space.sample()
    np.random.seed(4)
    np.testing.assert_array_equal(a, space.sample())
    space.seed(11)
    b = space.sample()
    space.seed(11)
    np.random.seed(1234)
    np.testing.assert_array_equal(b, space.sample())


@pytest.mark.parametrize("args, kwargs, match", [
    ((1.0, -1.0, (2,)), {}, "high >= low"),
    ((np.zeros(2), np.ones(3)), {}, "same shape"),
    ((0.0, 1.0, (2,)), {"dtype": "int32"}, "float dtype"),
    ((np.nan, 1.0, (2,)), {}, "NaN"),
])
def test_bad_arguments(args, kwargs, match):
    with pytest.raises(ValueError, match=match):
        FloatBox(*args, **kwargs)
