"""Tests for rlfast.utils.buffer.buffer_copy_: in-place copies of (nested) namedarraytuple
buffers of tensors or numpy arrays, without reallocation, and structure checks."""
from collections import namedtuple

import numpy as np
import pytest
import torch

from rlfast.utils.buffer import buffer_copy_, buffer_from_example
from rlfast.utils.collections import NamedArrayTuple, namedarraytuple

Step = namedarraytuple("Step", ["observation", "reward", "done"])
Info = namedarraytuple("Info", ["value", "extra"])
Outer = namedarraytuple("Outer", ["step", "info"])
Short = namedarraytuple("Short", ["observation", "reward"])
ExampleInner = namedtuple("ExampleInner", ["value", "flag"])
Example = namedtuple("Example", ["observation", "inner"])


def _ptr(x):
    if isinstance(x, torch.Tensor):
        return x.data_ptr()
    return x.__array_interface__["data"][0]


def _leaves(buf):
    if buf is None:
        return []
    if isinstance(buf, tuple):
        return [leaf for b in buf for leaf in _leaves(b)]
    return [buf]


def _tensor_step(seed, T=3, B=2):
    g = torch.Generator().manual_seed(seed)
    return Step(observation=torch.randn(T, B, 4, generator=g),
                reward=torch.randn(T, B, generator=g),
                done=torch.rand(T, B, generator=g) < 0.5)


def _numpy_step(seed, T=3, B=2):
    rng = np.random.RandomState(seed)
    return Step(observation=rng.randn(T, B, 4).astype(np.float32),
                reward=rng.randn(T, B),
                done=rng.rand(T, B) < 0.5)


def test_tensors_copied_in_place_and_dst_returned():
    dst = Step(observation=torch.zeros(3, 2, 4), reward=torch.zeros(3, 2),
               done=torch.zeros(3, 2, dtype=torch.bool))
    src = _tensor_step(0)
    expected = Step(*(leaf.clone() for leaf in src))
    ptrs = [_ptr(leaf) for leaf in dst]
    leaves = list(dst)
    out = buffer_copy_(dst, src)
    assert out is dst
    assert [_ptr(leaf) for leaf in dst] == ptrs  # nothing reallocated
    assert all(a is b for a, b in zip(dst, leaves))  # the very same tensor objects
    for d, s in zip(dst, expected):
        assert d.dtype == s.dtype and torch.equal(d, s)
    assert dst.done.any() and not dst.done.all()  # the bool leaf really got the mask
    # A copy, not an alias: changing the source afterwards leaves dst alone.
    src.observation.add_(1.0)
    assert torch.equal(dst.observation, expected.observation)


def test_numpy_arrays_copied_in_place_keeping_dtypes():
    dst = Step(observation=np.zeros((3, 2, 4), np.float32), reward=np.zeros((3, 2)),
               done=np.zeros((3, 2), bool))
    src = _numpy_step(1)
    ptrs = [_ptr(leaf) for leaf in dst]
    out = buffer_copy_(dst, src)
    assert out is dst
    assert [_ptr(leaf) for leaf in dst] == ptrs
    assert [leaf.dtype for leaf in dst] == [np.float32, np.float64, np.bool_]
    for d, s in zip(dst, src):
        np.testing.assert_array_equal(d, s)
    src.reward[:] = 7.0
    assert not np.any(dst.reward == 7.0)


def test_tensor_destination_from_numpy_source():
    dst = Step(observation=torch.zeros(3, 2, 4), reward=torch.zeros(3, 2, dtype=torch.float64),
               done=torch.zeros(3, 2, dtype=torch.bool))
    src = _numpy_step(2)
    ptrs = [_ptr(leaf) for leaf in dst]
    buffer_copy_(dst, src)
    assert [_ptr(leaf) for leaf in dst] == ptrs
    for d, s in zip(dst, src):
        np.testing.assert_array_equal(d.numpy(), s)


def test_nested_with_none_leaves_in_both():
    def make(seed):
        g = torch.Generator().manual_seed(seed)
        return Outer(step=Step(observation=torch.randn(3, 2, 4, generator=g),
                               reward=torch.randn(3, 2, generator=g), done=None),
                     info=Info(value=torch.randn(3, 2, generator=g), extra=None))

    dst, src = make(10), make(11)
    before = [leaf.clone() for leaf in _leaves(dst)]
    ptrs = [_ptr(leaf) for leaf in _leaves(dst)]
    out = buffer_copy_(dst, src)
    assert out is dst
    assert dst.step.done is None and dst.info.extra is None
    assert [_ptr(leaf) for leaf in _leaves(dst)] == ptrs
    for d, s, b in zip(_leaves(dst), _leaves(src), before):
        assert torch.equal(d, s) and not torch.equal(d, b)


def test_writes_through_a_view_into_a_larger_buffer():
    """Copying into ``buffer[t]`` (a namedarraytuple of views) fills that row of the buffer."""
    big = Step(observation=torch.zeros(5, 3, 2, 4), reward=torch.zeros(5, 3, 2),
               done=torch.zeros(5, 3, 2, dtype=torch.bool))
    src = _tensor_step(3)
    buffer_copy_(big[2], src)
    for d, s in zip(big, src):
        assert torch.equal(d[2], s)
        assert not d[[0, 1, 3, 4]].any()


def test_shared_memory_schema_buffers_stay_shared():
    """Sampler-style buffers (schema NamedArrayTuples on shared memory) are filled in place."""
    example = Example(observation=np.zeros(4, np.float32),
                      inner=ExampleInner(value=np.float32(0), flag=np.bool_(False)))
    dst = buffer_from_example(example, (3, 2), share_memory=True, use_NatSchema=True)
    assert isinstance(dst, NamedArrayTuple)
    rng = np.random.RandomState(4)
    src = buffer_from_example(example, (3, 2), use_NatSchema=True)
    src.observation[:] = rng.randn(3, 2, 4)
    src.inner.value[:] = rng.randn(3, 2)
    src.inner.flag[:] = rng.rand(3, 2) < 0.5
    ptrs = [_ptr(leaf) for leaf in _leaves(dst)]
    raws = [leaf._raw for leaf in _leaves(dst)]
    assert buffer_copy_(dst, src) is dst
    assert [_ptr(leaf) for leaf in _leaves(dst)] == ptrs
    assert [leaf._raw for leaf in _leaves(dst)] == raws
    for d, s in zip(_leaves(dst), _leaves(src)):
        np.testing.assert_array_equal(d, s)
    assert dst.inner.value.any()


@pytest.mark.parametrize("case", ["none_in_dst", "none_in_src"])
def test_a_none_leaf_on_one_side_only_is_a_value_error(case):
    full = _tensor_step(5)
    partial = Step(observation=torch.zeros(3, 2, 4), reward=torch.zeros(3, 2), done=None)
    dst, src = (partial, full) if case == "none_in_dst" else (full, partial)
    with pytest.raises(ValueError, match="structure"):
        buffer_copy_(dst, src)


def test_different_lengths_are_a_value_error():
    dst = Short(observation=torch.zeros(3, 2, 4), reward=torch.zeros(3, 2))
    with pytest.raises(ValueError, match="structure"):
        buffer_copy_(dst, _tensor_step(6))
    with pytest.raises(ValueError, match="structure"):
        buffer_copy_(_tensor_step(6), dst)


def test_structure_destination_with_a_leaf_source_is_a_value_error():
    dst = _tensor_step(7)
    with pytest.raises(ValueError, match="structure"):
        buffer_copy_(dst, torch.zeros(3, 2, 4))


def test_nested_mismatch_is_a_value_error():
    dst = Outer(step=_tensor_step(8), info=Info(value=torch.zeros(3, 2), extra=None))
    src = Outer(step=_tensor_step(9), info=Info(value=torch.zeros(3, 2), extra=torch.zeros(3, 2)))
    with pytest.raises(ValueError, match="structure"):
        buffer_copy_(dst, src)
