"""The shared helpers of issue 11: checks, the linear schedule, deep_merge, available_cpus."""
from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from rlfast.utils.checks import check_choice, check_fraction, check_int, check_positive
from rlfast.utils.misc import available_cpus, deep_merge
from rlfast.utils.schedules import linear_schedule


def test_check_int():
    assert check_int(3, "n") == 3 and check_int(np.int64(4), "n", minimum=4) == 4
    assert check_int(5.0, "n") == 5
    for bad in (True, 2.5, "3", None):
        with pytest.raises(TypeError, match="n must be an integer"):
            check_int(bad, "n")
    with pytest.raises(ValueError, match=r"Foo: n must be an integer >= 1; got 0"):
        check_int(0, "n", minimum=1, owner="Foo")


def test_check_positive_fraction_choice():
    assert check_positive(0.5, "lr") == 0.5 and check_positive(2, "k", integer=True) == 2
    for bad in (0, -1.0, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="lr"):
            check_positive(bad, "lr")
    with pytest.raises(TypeError, match="lr"):
        check_positive("x", "lr")
    assert check_fraction(0, "p") == 0.0 and check_fraction(1, "p", allow_zero=False) == 1.0
    for bad in (-0.1, 1.1, float("nan")):
        with pytest.raises(ValueError, match=r"p must be in \[0, 1\]"):
            check_fraction(bad, "p")
    with pytest.raises(ValueError, match=r"\(0, 1\]"):
        check_fraction(0, "p", allow_zero=False)
    assert check_choice("a", "mode", ("a", "b")) == "a"
    with pytest.raises(ValueError, match=r"mode must be one of \['a', 'b'\]; got 'c'"):
        check_choice("c", "mode", ("a", "b"))


@pytest.mark.parametrize("itr", [-3, 0, 5, 10, 17, 20, 25, 100])
def test_linear_schedule_against_reference(itr):
    start, end, i0, i1 = 1.0, 0.05, 5, 20
    if itr <= i0:
        expected = start
    elif itr >= i1:
        expected = end
    else:
        p = (itr - i0) / (i1 - i0)
        expected = start * (1 - p) + end * p
    assert linear_schedule(itr, i0, i1, start, end) == pytest.approx(expected, abs=1e-15)


def test_linear_schedule_edges_and_tensors():
    assert linear_schedule(0, 0, 10, 1.0, 0.1) == 1.0
    assert linear_schedule(10, 0, 10, 1.0, 0.1) == 0.1
    assert linear_schedule(4, 3, 3, 1.0, 0.0) == 0.0 and linear_schedule(2, 3, 3, 1.0, 0.0) == 1.0
    assert linear_schedule(7, 0, 10, 0.9, 0.9) == 0.9  # constant stays exact
    end = torch.tensor([0.1, 0.01])
    out = linear_schedule(5, 0, 10, 1.0, end)
    assert torch.allclose(out, 0.5 * 1.0 + 0.5 * end)


def test_deep_merge():
    base = {"a": {"b": 1, "c": [1, 2]}, "d": 3}
    out = deep_merge(base, {"a": {"b": 2}, "e": 4})
    assert out == {"a": {"b": 2, "c": [1, 2]}, "d": 3, "e": 4}
    assert base == {"a": {"b": 1, "c": [1, 2]}, "d": 3}  # inputs untouched
    out["a"]["c"].append(9)
    assert base["a"]["c"] == [1, 2]  # deep-copied
    with pytest.raises(KeyError, match=r"Variant key 'a.x' is not in the default config; valid "
                                       r"keys at a: \['b', 'c'\]"):
        deep_merge(base, {"a": {"x": 1}}, strict=True, label="Variant key")


def test_available_cpus():
    cpus = available_cpus()
    assert cpus == sorted(os.sched_getaffinity(0)) and len(cpus) >= 1
