"""Tests for IntBox: bounds, shapes, dtypes, sampling, null values and seeding."""
import numpy as np
import pytest

from rlfast.spaces import IntBox


def test_scalar_bounds_categorical():
    space = IntBox(0, 5)
    assert space.shape == ()
    assert space.n == 5 and isinstance(space.n, int)
    assert space.dtype == np.int32
    draws = np.array([space.sample() for _ in range(500)])
    assert draws.dtype == np.int32
    assert set(draws.tolist()) == {0, 1, 2, 3, 4}  # high is exclusive, every value reachable


def test_shape_and_dtype_with_scalar_bounds():
    space = IntBox(0, 256, shape=(3, 4), dtype="uint8")
    sample = space.sample()
    assert sample.shape == (3, 4) and sample.dtype == np.uint8
    assert space.contains(sample)
    assert space.n == 256


def test_array_bounds_per_dimension():
    space = IntBox(np.array([0, 2, -3]), np.array([2, 5, 0]), dtype="int64")
    assert space.shape == (3,)
    np.testing.assert_array_equal(space.n, [2, 3, 3])
    draws = np.stack([space.sample() for _ in range(400)])
    assert draws.min(axis=0).tolist() == [0, 2, -3]
    assert draws.max(axis=0).tolist() == [1, 4, -1]


def test_null_value_default_low_and_given():
    np.testing.assert_array_equal(IntBox(2, 7, shape=(2,)).null_value(), [2, 2])
    assert IntBox(2, 7).null_value() == 2
    assert IntBox(2, 7).null_value().dtype == np.int32
    np.testing.assert_array_equal(IntBox(0, 4, shape=(3,), null_value=-1).null_value(), [-1] * 3)
    np.testing.assert_array_equal(
        IntBox(np.array([1, 3]), np.array([5, 6])).null_value(), [1, 3])


def test_contains():
    space = IntBox(1, 4, shape=(2,))
    assert space.contains(np.array([1, 3]))
    assert not space.contains(np.array([1, 4]))  # high exclusive
    assert not space.contains(np.array([0, 2]))
    assert not space.contains(np.array([1, 2, 3]))  # wrong shape
    assert not space.contains(np.array([1.0, 2.0]))  # not integer


def test_reproducible_under_global_seed():
    space = IntBox(0, 1000, shape=(5,))
    np.random.seed(123)
    first = [space.sample() for _ in range(3)]
    np.random.seed(123)
    second = [space.sample() for _ in range(3)]
    for a, b in zip(first, second):
        np.testing.assert_array_equal(a, b)


def test_private_seed_independent_of_global_rng():
    space = IntBox(0, 10**6, shape=(4,))
    space.seed(7)
    np.random.seed(0)
    first = space.sample()
    space.seed(7)
    np.random.seed(99)  # must not matter once seeded
    second = space.sample()
    np.testing.assert_array_equal(first, second)
    space.seed(None)  # back to the global RNG
    np.random.seed(5)
    a = space.sample()
    np.random.seed(5)
    np.testing.assert_array_equal(a, space.sample())


@pytest.mark.parametrize("low, high, kwargs, match", [
    (3, 3, {}, "high > low"),
    (0, 300, {"dtype": "uint8"}, "do not fit dtype"),
    (0, 2, {"dtype": "float32"}, "integer or bool dtype"),
    (0.5, 2, {}, "integer-valued"),
    (np.zeros(3), np.ones(2), {}, "do not broadcast"),
])
def test_bad_arguments(low, high, kwargs, match):
    with pytest.raises(ValueError, match=match):
        IntBox(low, high, **kwargs)
