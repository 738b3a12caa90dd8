"""Tests for rlfast.utils.buffer: allocation, structure-preserving maps and shared memory."""
import multiprocessing as mp
import os
import pickle
import sys
from collections import namedtuple
from multiprocessing.reduction import ForkingPickler

import numpy as np
import pytest
import torch

from rlfast.utils.buffer import (SharedArray, buffer_from_example, buffer_func, buffer_method,
                                 buffer_to, build_array, get_leading_dims, np_mp_array,
                                 numpify_buffer, torchify_buffer)
from rlfast.utils.collections import (NamedArrayTuple, NamedTupleSchema, is_namedarraytuple,
                                      namedarraytuple)

_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
import _buffer_spawn_helpers  # noqa: E402

# Module-level types, so pickle can find them by reference.
Inner = namedtuple("Inner", ["flag", "count", "missing"])
Outer = namedtuple("Outer", ["observation", "reward", "inner"])
InnerNat = namedarraytuple("InnerNat", ["flag"])
StepNat = namedarraytuple("StepNat", ["observation", "reward", "inner"])


def _example():
    return Outer(observation=np.zeros(3, dtype=np.float32), reward=np.float32(0.0),
                 inner=Inner(flag=True, count=np.int16(0), missing=None))


def _data_ptr(arr):
    return arr.__array_interface__["data"][0]


# ---- np_mp_array / build_array ----------------------------------------------------------------

@pytest.mark.parametrize("shape, expected", [(5, (5,)), ((2, 3), (2, 3)), ([4, 1, 2], (4, 1, 2)),
                                             (np.int64(3), (3,)), ((0,), (0,))])
def test_np_mp_array_shape_dtype_zeros(shape, expected):
    arr = np_mp_array(shape, np.float64)
    assert isinstance(arr, SharedArray)
    assert arr.shape == expected and arr.dtype == np.float64
    assert np.all(arr == 0)
    assert arr._raw is not None
    if arr.size:
        arr[...] = 7.5
        assert np.all(arr == 7.5)


@pytest.mark.parametrize("dtype", [np.uint8, np.int32, np.int64, np.float32, np.float64, bool])
def test_np_mp_array_dtypes_lie_in_the_raw_block(dtype):
    arr = np_mp_array((3, 5), dtype)
    assert arr.dtype == np.dtype(dtype)
    raw_base = _data_ptr(np.frombuffer(arr._raw, dtype=np.uint8))
    assert _data_ptr(arr) == raw_base
    assert len(arr._raw) >= arr.nbytes
    # Writes go to the raw block itself, not to a copy.
    arr[2, 4] = 1
    raw_view = np.frombuffer(arr._raw, dtype=np.uint8)[: arr.nbytes].view(np.dtype(dtype))
    assert raw_view.reshape(3, 5)[2, 4] == 1


def test_np_mp_arrays_are_distinct_memory():
    a, b = np_mp_array(4, np.int64), np_mp_array(4, np.int64)
    a[:] = 3
    assert np.all(b == 0)


def test_build_array_shapes_dtypes_and_sharing():
    ex = np.ones((2, 3), dtype=np.int16)
    out = build_array(ex, (4, 5))
    assert out.shape == (4, 5, 2, 3) and out.dtype == np.int16
    assert np.all(out == 0) and not isinstance(out, SharedArray)
    out = build_array(ex, 7, share_memory=True)
    assert out.shape == (7, 2, 3) and out.dtype == np.int16 and isinstance(out, SharedArray)
    # Scalars, python values and tensors as examples.
    assert build_array(np.float32(1), 3).dtype == np.float32
    assert build_array(True, 3).dtype == np.bool_
    assert build_array(2.5, (1, 2)).shape == (1, 2)
    t = build_array(torch.ones(2, dtype=torch.float16), 3)
    assert isinstance(t, np.ndarray) and t.dtype == np.float16 and t.shape == (3, 2)


def test_build_array_rejects_object_dtype():
    with pytest.raises(TypeError, match="object"):
        build_array(np.array([None, "x"], dtype=object), 2)


# ---- buffer_from_example ----------------------------------------------------------------------

@pytest.mark.parametrize("share_memory", [False, True])
@pytest.mark.parametrize("leading_dims, lead",
                         [(6, (6,)), ((4, 2), (4, 2)), ([3, 2, 1], (3, 2, 1))])
def test_buffer_from_example_nested_classic(share_memory, leading_dims, lead):
    buf = buffer_from_example(_example(), leading_dims, share_memory=share_memory)
    assert is_namedarraytuple(buf) and is_namedarraytuple(buf.inner)
    assert buf._fields == ("observation", "reward", "inner")
    assert buf.inner._fields == ("flag", "count", "missing")
    assert buf.observation.shape == lead + (3,) and buf.observation.dtype == np.float32
    assert buf.reward.shape == lead and buf.reward.dtype == np.float32
    assert buf.inner.flag.shape == lead and buf.inner.flag.dtype == np.bool_
    assert buf.inner.count.dtype == np.int16
    assert buf.inner.missing is None
    leaves = [buf.observation, buf.reward, buf.inner.flag, buf.inner.count]
    for leaf in leaves:
        assert np.all(leaf == 0)
        assert isinstance(leaf, SharedArray) == share_memory
    # Whole-structure indexed writes reach every leaf.
    idx = (0,) * len(lead)
    buf[idx] = Outer(np.arange(3, dtype=np.float32), np.float32(2.5),
                     Inner(True, np.int16(9), None))
    assert buf.observation[idx].tolist() == [0.0, 1.0, 2.0]
    assert buf.reward[idx] == 2.5 and buf.inner.flag[idx] and buf.inner.count[idx] == 9
    assert buf.reward.sum() == 2.5  # only that one element


def test_buffer_from_example_schema_and_override():
    schema_ex = NamedTupleSchema("Info", ["timeout", "level"])(False, np.int32(0))
    buf = buffer_from_example(schema_ex, (2, 3))
    assert isinstance(buf, NamedArrayTuple) and buf._typename == "Info"
    assert buf.timeout.dtype == np.bool_ and buf.level.dtype == np.int32
    assert buf.level.shape == (2, 3)
    # Forced schema from a classic namedtuple, and forced classic from a schema.
    forced = buffer_from_example(_example(), 2, use_NatSchema=True)
    assert isinstance(forced, NamedArrayTuple) and isinstance(forced.inner, NamedArrayTuple)
    classic = buffer_from_example(schema_ex, 2, use_NatSchema=False)
    assert not isinstance(classic, NamedArrayTuple) and is_namedarraytuple(classic)
    assert classic._fields == ("timeout", "level")


def test_buffer_from_example_leaves_none_and_errors():
    assert buffer_from_example(None, 3) is None
    leaf = buffer_from_example(np.zeros(2, dtype=np.uint8), (5,))
    assert isinstance(leaf, np.ndarray) and leaf.shape == (5, 2) and leaf.dtype == np.uint8
    with pytest.raises(TypeError, match="tuple"):
        buffer_from_example((np.zeros(2), np.zeros(2)), 3)
    with pytest.raises(TypeError):
        buffer_from_example(Outer(np.array([object()]), 0.0, None), 3)


def test_buffer_from_example_namedarraytuple_example():
    ex = StepNat(observation=np.zeros(2, dtype=np.float64), reward=np.float32(0),
                 inner=InnerNat(flag=False))
    buf = buffer_from_example(ex, 4)
    assert type(buf).__name__ == "StepNat" and is_namedarraytuple(buf)
    assert buf.observation.shape == (4, 2) and buf.inner.flag.shape == (4,)


# ---- maps over structures ---------------------------------------------------------------------

def test_torchify_and_numpify_return_views_both_ways():
    buf = buffer_from_example(_example(), (3, 2))
    pyt = torchify_buffer(buf)
    assert isinstance(pyt.observation, torch.Tensor) and pyt.observation.dtype == torch.float32
    assert isinstance(pyt.inner.flag, torch.Tensor) and pyt.inner.flag.dtype == torch.bool
    assert pyt.inner.missing is None and type(pyt) is type(buf)
    pyt.observation[1, 0] = torch.tensor([1.0, 2.0, 3.0])
    assert buf.observation[1, 0].tolist() == [1.0, 2.0, 3.0]
    buf.reward[2, 1] = 4.0
    assert float(pyt.reward[2, 1]) == 4.0
    back = numpify_buffer(pyt)
    assert isinstance(back.observation, np.ndarray) and type(back) is type(buf)
    back.inner.count[0, 0] = 5
    assert int(pyt.inner.count[0, 0]) == 5 and buf.inner.count[0, 0] == 5
    assert np.shares_memory(back.observation, buf.observation)


def test_torchify_passes_tensors_through_and_numpify_passes_arrays():
    t = torch.arange(3)
    a = np.arange(3)
    out = torchify_buffer((t, [a, None]))
    assert out[0] is t and isinstance(out[1], list) and out[1][1] is None
    assert isinstance(out[1][0], torch.Tensor)
    out[1][0][0] = 10
    assert a[0] == 10
    back = numpify_buffer([a, t])
    assert back[0] is a and isinstance(back[1], np.ndarray)
    back[1][2] = -1
    assert int(t[2]) == -1
    assert torchify_buffer(None) is None and numpify_buffer(None) is None


def test_torchify_shared_array_is_shared_view():
    arr = np_mp_array((2, 2), np.float32)
    t = torchify_buffer(arr)
    t[0, 1] = 3.0
    assert arr[0, 1] == 3.0


def test_buffer_to_device():
    buf = torchify_buffer(buffer_from_example(_example(), 2))
    assert buffer_to(buf, None) is buf
    same = buffer_to(buf, "cpu")
    assert type(same) is type(buf) and same.inner.missing is None
    assert same.observation.data_ptr() == buf.observation.data_ptr()
    moved = buffer_to(buf, "meta")
    assert moved.observation.device.type == "meta" and moved.inner.flag.device.type == "meta"
    assert moved.inner.missing is None and buf.observation.device.type == "cpu"


def test_buffer_method_and_buffer_func():
    buf = torchify_buffer(buffer_from_example(_example(), (2, 3)))
    buf.reward[:] = torch.arange(6.0).reshape(2, 3)
    flat = buffer_method(buf, "flatten", 0, 1)
    assert flat.reward.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    assert flat.observation.shape == (6, 3) and flat.inner.flag.shape == (6,)
    summed = buffer_method(buf, "sum", dim=0)
    assert summed.reward.tolist() == [3.0, 5.0, 7.0] and summed.inner.missing is None
    assert summed.observation.shape == (3, 3)
    transposed = buffer_method(buf, "transpose", 0, 1)
    assert transposed.reward.shape == (3, 2) and transposed.observation.shape == (3, 2, 3)
    assert transposed.reward[2, 1] == buf.reward[1, 2]
    calls = []

    def record(x, scale, offset=0):
        calls.append(tuple(x.shape))
        return x * scale + offset

    nested = (np.ones(2), [np.ones(3), None], Inner(np.ones(1), np.ones(4), None))
    out = buffer_func(nested, record, 2, offset=1)
    assert isinstance(out, tuple) and isinstance(out[1], list) and isinstance(out[2], Inner)
    assert out[0].tolist() == [3.0, 3.0] and out[1][1] is None and out[2].missing is None
    assert out[2].count.tolist() == [3.0] * 4
    assert sorted(calls) == [(1,), (2,), (3,), (4,)]
    assert buffer_func(None, record, 1) is None and buffer_method(None, "sum") is None


def test_buffer_method_reshape_flattens_leading_dims():
    buf = buffer_from_example(NamedTupleSchema("S", "a b")(np.zeros(4), np.int8(0)), (2, 3))
    buf.a[1, 2] = np.arange(4)
    flat = buffer_method(buf, "reshape", (6, -1))
    assert flat.a.shape == (6, 4) and flat.b.shape == (6, 1)
    assert flat.a[5].tolist() == [0.0, 1.0, 2.0, 3.0]


def test_get_leading_dims():
    buf = buffer_from_example(_example(), (4, 3))
    assert get_leading_dims(buf) == (4,)
    assert get_leading_dims(buf, n_dim=2) == (4, 3)
    assert get_leading_dims([torch.zeros(5, 2), None, (np.zeros((5, 1)),)]) == (5,)
    with pytest.raises(ValueError, match="disagree"):
        get_leading_dims((np.zeros((4, 3)), np.zeros((4, 2))), n_dim=2)
    with pytest.raises(ValueError, match="disagree"):
        get_leading_dims(Outer(np.zeros((4, 3)), np.zeros(5), None))
    with pytest.raises(ValueError):
        get_leading_dims((None, [None]))


# ---- shared memory across processes -----------------------------------------------------------

def _run_child(ctx, target, args, timeout=60):
    result_queue = ctx.Queue()
    proc = ctx.Process(target=target, args=(*args, result_queue))
    proc.start()
    try:
        result = result_queue.get(timeout=timeout)
    finally:
        proc.join(timeout=timeout)
        if proc.is_alive():
            proc.terminate()
            proc.join()
    assert proc.exitcode == 0, result
    assert "error" not in result, result
    return result


@pytest.mark.skipif("fork" not in mp.get_all_start_methods(), reason="needs fork")
def test_forked_workers_write_shared_namedarraytuple_slices():
    ctx = mp.get_context("fork")
    buf = buffer_from_example(_example(), (3, 4), share_memory=True)
    ptrs = [_data_ptr(buf.observation), _data_ptr(buf.reward), _data_ptr(buf.inner.flag)]
    for start, offset in ((0, 100.0), (2, 200.0)):
        _run_child(ctx, _buffer_spawn_helpers.write_buffer_slice,
                   (buf[:, start:start + 2], offset))
    # Same memory as before (nothing was replaced or copied), now holding the workers' writes.
    assert ptrs == [_data_ptr(buf.observation), _data_ptr(buf.reward), _data_ptr(buf.inner.flag)]
    for t in range(3):
        assert buf.reward[t].tolist() == [100 + 10 * t, 101 + 10 * t, 200 + 10 * t, 201 + 10 * t]
        assert buf.observation[t, 3].tolist() == [200 + t + 3, 200 + t + 4, 200 + t + 5]
    assert buf.inner.flag.all()
    assert np.all(buf.inner.count == 0)


@pytest.mark.skipif("fork" not in mp.get_all_start_methods(), reason="needs fork")
def test_forked_worker_does_not_share_private_buffer():
    ctx = mp.get_context("fork")
    buf = buffer_from_example(_example(), (3, 4), share_memory=False)
    _run_child(ctx, _buffer_spawn_helpers.write_buffer_slice, (buf[:, :2], 100.0))
    assert np.all(buf.reward == 0)  # the control: private memory is copied on fork


def test_spawned_worker_writes_shared_array_and_views():
    ctx = mp.get_context("spawn")
    base = np_mp_array((4, 6), np.float64)
    base[...] = np.arange(24.0).reshape(4, 6)
    row_slice = base[1:3]           # contiguous slice view
    strided = base[3, ::2]          # strided view into the last row
    derived = base[0] + 1           # fresh memory: travels by value
    ints = np_mp_array(5, np.int32)
    ints[:] = np.arange(5)
    reversed_view = ints[::-1][1:4]  # negative strides, offset inside the block
    result = _run_child(ctx, _buffer_spawn_helpers.write_arrays,
                        ([base[0], row_slice, strided, derived, reversed_view],
                         [-1.0, np.full((2, 6), -2.0), np.array([-3.0, -4.0, -5.0]), 99.0,
                          np.array([30, 20, 10], dtype=np.int32)]))
    seen = result["seen"]
    assert [s[0] for s in seen] == ["SharedArray"] * 3 + ["ndarray", "SharedArray"]
    assert seen[1][1] == (2, 6) and seen[1][3][0] == [6.0, 7.0, 8.0, 9.0, 10.0, 11.0]
    assert seen[2][1] == (3,) and seen[2][3] == [18.0, 20.0, 22.0]
    assert seen[3][3] == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    assert seen[4][2] == "int32" and seen[4][3] == [3, 2, 1]
    assert base[0].tolist() == [-1.0] * 6
    assert base[1:3].tolist() == [[-2.0] * 6] * 2
    assert base[3].tolist() == [-3.0, 19.0, -4.0, 21.0, -5.0, 23.0]
    assert derived.tolist() == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]  # the child's copy was private
    assert ints.tolist() == [0, 10, 20, 30, 4]


def test_spawned_worker_writes_shared_schema_buffer_slice():
    ctx = mp.get_context("spawn")
    buf = buffer_from_example(_example(), (3, 4), share_memory=True, use_NatSchema=True)
    _run_child(ctx, _buffer_spawn_helpers.write_buffer_slice, (buf[:, 2:4], 50.0))
    assert buf.reward[:, 2:].tolist() == [[50.0, 51.0], [60.0, 61.0], [70.0, 71.0]]
    assert np.all(buf.reward[:, :2] == 0)
    assert buf.inner.flag[:, 2:].all() and not buf.inner.flag[:, :2].any()


def test_shared_array_pickling_outside_process_start():
    shared = np_mp_array((2, 3), np.float32)
    shared[...] = 2.0
    derived = shared + 1
    assert isinstance(derived, SharedArray)  # subclass propagates, but memory is fresh
    for dumps in (pickle.dumps, ForkingPickler.dumps):
        restored = pickle.loads(dumps(derived))
        assert isinstance(restored, np.ndarray) and not isinstance(restored, SharedArray)
        assert restored.dtype == np.float32 and restored.tolist() == [[3.0] * 3] * 2
    # The shared memory itself (or a view of it) refuses to be silently copied.
    for obj in (shared, shared[1]):
        with pytest.raises((pickle.PicklingError, RuntimeError)):
            pickle.dumps(obj)
        with pytest.raises(RuntimeError):
            ForkingPickler.dumps(obj)


# ---- packed buffers: one page-aligned block --------------------------------------------------

def test_packed_buffers_lay_out_fields_in_order_in_one_aligned_block():
    import mmap

    from rlfast.utils.buffer import np_block, packed_buffers

    examples = [np.zeros((2, 3), np.uint8), np.float32(0.0), None, _example()]
    (frames, reward, nothing, nested), block, spans = packed_buffers(examples, 5,
                                                                     share_memory=True)
    assert nothing is None and isinstance(block, SharedArray)
    assert _data_ptr(block) % mmap.PAGESIZE == 0 and block.nbytes % mmap.PAGESIZE == 0
    assert frames.shape == (5, 2, 3) and frames.dtype == np.uint8
    assert nested.observation.shape == (5, 3) and nested.inner.count.dtype == np.int16
    leaves = [frames, reward, nested.observation, nested.reward, nested.inner.flag,
              nested.inner.count]
    offsets = [_data_ptr(leaf) - _data_ptr(block) for leaf in leaves]
    assert offsets == sorted(offsets) and all(o % 64 == 0 for o in offsets)
    assert all(o + leaf.nbytes <= block.nbytes for o, leaf in zip(offsets, leaves))
    assert spans[0] == (0, 30) and spans[1] == (64, 84) and spans[2][0] == spans[2][1]
    assert spans[3][0] == offsets[2] and spans[3][1] == offsets[-1] + nested.inner.count.nbytes
    frames[...] = 7  # views of the block, not copies
    assert block[:30].tolist() == [7] * 30
    private = np_block(10)
    assert not isinstance(private, SharedArray) and _data_ptr(private) % mmap.PAGESIZE == 0


def test_spawned_worker_writes_into_a_packed_buffer_slice():
    """Views carved out of the block travel to a spawned child as the same shared memory."""
    from rlfast.utils.buffer import packed_buffers

    (buf,), _, _ = packed_buffers([_example()], (3, 4), share_memory=True)
    _run_child(mp.get_context("spawn"), _buffer_spawn_helpers.write_buffer_slice,
               (buf[:, 2:4], 50.0))
    assert buf.reward[:, 2:].tolist() == [[50.0, 51.0], [60.0, 61.0], [70.0, 71.0]]
    assert np.all(buf.reward[:, :2] == 0)
