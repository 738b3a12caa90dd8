"""Tests for what IntBox and FloatBox share (rlfast.spaces.box)."""
import numpy as np

from rlfast.spaces import FloatBox, IntBox
from rlfast.spaces.box import Box


def test_both_boxes_share_null_value_equality_and_repr():
    int_box, float_box = IntBox(0, 3, shape=(2,)), FloatBox(0.0, 3.0, shape=(2,))
    assert isinstance(int_box, Box) and isinstance(float_box, Box)
    assert int_box != float_box and float_box != int_box
    assert int_box == IntBox(0, 3, shape=(2,)) and float_box == FloatBox(0.0, 3.0, shape=(2,))
    assert repr(int_box) == "IntBox(low=0, high=3, shape=(2,), dtype=int32)"
    assert repr(float_box) == "FloatBox(low=0.0, high=3.0, shape=(2,), dtype=float32)"
    np.testing.assert_array_equal(IntBox(0, 3, shape=2, null_value=2).null_value(), [2, 2])
    assert FloatBox(-1.0, 1.0, shape=3).null_value().dtype == np.float32


def test_contains_uses_each_boxs_bounds_and_kinds():
    assert IntBox(0, 3).contains(np.int64(2)) and not IntBox(0, 3).contains(np.int64(3))
    assert not IntBox(0, 3).contains(1.0)  # integer arrays only
    assert FloatBox(0.0, 3.0, shape=()).contains(3.0)
    assert FloatBox(0.0, 3.0, shape=()).contains(np.int64(1))
    assert not FloatBox(0.0, 3.0, shape=()).contains(3.5)
