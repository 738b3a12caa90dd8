"""Tests for Composite: namedtuple samples, null values, shapes, names, seeding, pickling."""
import pickle
from collections import namedtuple

import numpy as np
import pytest

from rlfast.spaces import Composite, FloatBox, IntBox
from rlfast.utils.collections import NamedTupleSchema

Pair = namedtuple("Pair", ["position", "mode"])


def make_space(cls=Pair):
    return Composite([FloatBox(-1.0, 1.0, (2,)), IntBox(0, 3)], cls)


@pytest.mark.parametrize("cls", [Pair, NamedTupleSchema("PairSchema", ["position", "mode"])])
def test_sample_null_shape_names(cls):
    space = make_space(cls)
    sample = space.sample()
    assert sample._fields == ("position", "mode")
    assert sample.position.shape == (2,) and sample.position.dtype == np.float32
    assert 0 <= int(sample.mode) < 3
    assert space.contains(sample)
    null = space.null_value()
    np.testing.assert_array_equal(null.position, [0.0, 0.0])
    assert null.mode == 0
    assert tuple(space.shape) == ((2,), ())
    assert space.shape.position == (2,)
    assert space.names == ("position", "mode")
    assert len(space.spaces) == 2 and isinstance(space.spaces[1], IntBox)


def test_schema_sample_pickles():
    space = make_space(NamedTupleSchema("PairSchema", ["position", "mode"]))
    sample = space.sample()
    back = pickle.loads(pickle.dumps(sample))
    assert back._fields == sample._fields
    np.testing.assert_array_equal(back.position, sample.position)


def test_seed_reproducible_and_global():
    space = make_space()
    space.seed(3)
    first = [space.sample() for _ in range(3)]
    space.seed(3)
    second = [space.sample() for _ in range(3)]
    for a, b in zip(first, second):
        np.testing.assert_array_equal(a.position, b.position)
        assert a.mode == b.mode
    space.seed(None)
    np.random.seed(8)
    a = space.sample()
    np.random.seed(8)
    np.testing.assert_array_equal(a.position, space.sample().position)


def test_mismatched_fields_rejected():
    with pytest.raises(ValueError, match="fields"):
        Composite([IntBox(0, 2)], Pair)
    with pytest.raises(TypeError, match="rlfast Space"):
        Composite([IntBox(0, 2), "not a space"], Pair)
