"""Structured buffers: allocation (optionally on OS shared memory) and structure-preserving maps.

A "buffer" is an arbitrary nesting of tuples, lists, namedtuples and namedarraytuples (classic or
schema-based) whose leaves are numpy arrays or torch tensors (or None). Every function here maps
over that structure and returns a new structure of the same kind; None leaves stay None.

Shared memory is allocated with ``multiprocessing.RawArray``: the backing file is unlinked at
creation, so nothing can leak in /dev/shm, forked workers inherit the mapping, and a spawned worker
receives it through the process-start pickling (see :class:`SharedArray`).
"""
from __future__ import annotations

import mmap
import multiprocessing as mp
from typing import Any, Callable, Sequence

import numpy as np
import torch

from rlfast.utils.collections import (
    NamedArrayTupleSchema_like,
    NamedTuple,
    namedarraytuple_like,
)


class SharedArray(np.ndarray):
    """A numpy array living in a ``multiprocessing.RawArray``.

    Pickling one (including any view of it) while a process is being started re-attaches the same
    memory in the child, so a spawned worker writes into memory the master reads. Outside process
    start, the underlying RawArray refuses to pickle, which keeps shared memory from being silently
    copied.
    """

    def __array_finalize__(self, obj: Any) -> None:
        self._raw = getattr(obj, "_raw", None)

    def __reduce__(self):
        raw = getattr(self, "_raw", None)
        if raw is None:
            return np.asarray(self).__reduce__()
        base_addr = np.frombuffer(raw, dtype=np.uint8).__array_interface__["data"][0]
        offset = self.__array_interface__["data"][0] - base_addr
        if not 0 <= offset < len(raw) or not _within(self, offset, len(raw)):
            # A derived array (e.g. the result of arithmetic) owns fresh memory: pickle by value.
            return np.array(self).__reduce__()
        return (_rebuild_shared, (raw, self.shape, self.dtype.str, self.strides, offset))


def _within(arr: np.ndarray, offset: int, nbytes: int) -> bool:
    """True when every element of ``arr`` (at ``offset``) lies inside a buffer of ``nbytes``."""
    if arr.size == 0:
        return True
    lo = offset + sum(s * (n - 1) for s, n in zip(arr.strides, arr.shape) if s < 0)
    hi = offset + sum(s * (n - 1) for s, n in zip(arr.strides, arr.shape) if s > 0) + arr.itemsize
    return lo >= 0 and hi <= nbytes


def _rebuild_shared(raw, shape, dtype_str, strides, offset) -> SharedArray:
    arr = np.ndarray(shape, dtype=np.dtype(dtype_str), buffer=raw, offset=offset,
                     strides=strides).view(SharedArray)
    arr._raw = raw
    return arr


def np_mp_array(shape: Sequence[int] | int, dtype: Any) -> SharedArray:
    """Allocate a zero-filled numpy array on OS shared memory (inherited by forked workers)."""
    shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(int(s) for s in shape)
    dtype = np.dtype(dtype)
    nbytes = max(int(np.prod(shape, dtype=np.int64)) * dtype.itemsize, 1)
    raw = mp.RawArray("b", nbytes)  # zero-initialized by multiprocessing
    flat = np.frombuffer(raw, dtype=np.uint8)
    n = int(np.prod(shape, dtype=np.int64))
    arr = flat[: n * dtype.itemsize].view(dtype).reshape(shape).view(SharedArray)
    arr._raw = raw
    return arr


def np_block(nbytes: int, share_memory: bool = False, align: int = mmap.PAGESIZE) -> np.ndarray:
    """A zero-filled uint8 array of ``nbytes`` rounded up to whole ``align`` units, starting at
    an ``align``-aligned address (OS shared memory with ``share_memory``). With the default
    page alignment no other allocation shares a page with it, which is what page-locking it
    in place (``cudaHostRegister``) needs."""
    size = -(-max(int(nbytes), 1) // align) * align
    if share_memory:
        raw = mp.RawArray("b", size + align)  # zero-initialized by multiprocessing
        flat = np.frombuffer(raw, dtype=np.uint8)
    else:
        raw, flat = None, np.zeros(size + align, dtype=np.uint8)
    pad = (-flat.__array_interface__["data"][0]) % align
    block = flat[pad:pad + size]
    if raw is not None:
        block = block.view(SharedArray)
        block._raw = raw
    return block


def build_array(example: Any, leading_dims: Sequence[int] | int,
                share_memory: bool = False) -> np.ndarray:
    """Allocate a zeroed array matching ``example``'s dtype and shape behind ``leading_dims``."""
    shape, dtype = _example_leaf(example, leading_dims)
    if share_memory:
        return np_mp_array(shape, dtype)
    return np.zeros(shape, dtype=dtype)


def _example_leaf(example: Any, leading_dims: Sequence[int] | int) -> tuple[tuple, np.dtype]:
    """(shape with ``leading_dims`` in front, dtype) of the array ``build_array`` would make."""
    if isinstance(leading_dims, (int, np.integer)):
        leading_dims = (int(leading_dims),)
    if isinstance(example, torch.Tensor):
        example = example.detach().cpu().numpy()
    example = np.asarray(example)
    if example.dtype == object:
        raise TypeError(f"Cannot build an array buffer from an object-dtype example: {example!r}")
    return tuple(int(d) for d in leading_dims) + example.shape, example.dtype


def packed_buffers(examples: Sequence[Any], leading_dims: Sequence[int] | int,
                   share_memory: bool = False, align: int = 64) -> tuple[list, np.ndarray, list]:
    """One buffer per entry of ``examples`` (as :func:`buffer_from_example` makes it; None
    stays None), all inside ONE contiguous block, in the order given, every leaf starting at
    an ``align``-aligned offset.

    Returns ``(buffers, block, spans)``: ``block`` is the page-aligned uint8 array (see
    :func:`np_block`) the leaves are views of, and ``spans[i] = (start, stop)`` the byte range
    of ``block`` that ``buffers[i]`` occupies (empty for None). Fields laid out next to each
    other cross a host-device boundary in one copy of the span that covers them, and the block
    is one region to page-lock.
    """
    layout: list = []  # (shape, dtype, offset) per leaf, in traversal order
    spans: list = []
    offset = 0

    def measure(example):
        nonlocal offset
        shape, dtype = _example_leaf(example, leading_dims)
        offset = -(-offset // align) * align
        layout.append((shape, dtype, offset))
        offset += int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        return None

    for example in examples:
        start = -(-offset // align) * align
        _map_example(example, measure)
        spans.append((start, offset) if example is not None else (start, start))
    block = np_block(offset, share_memory=share_memory)
    leaves = iter(layout)

    def carve(example):
        shape, dtype, at = next(leaves)
        n = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        return block[at:at + n].view(dtype).reshape(shape)

    buffers = [_map_example(example, carve) for example in examples]
    return buffers, block, spans


def _map_example(example: Any, leaf: Callable, use_NatSchema: bool | None = None) -> Any:
    """The buffer structure of ``example`` with ``leaf(example_leaf)`` at every array leaf."""
    if example is None:
        return None
    if hasattr(example, "_fields"):
        use_schema = isinstance(example, NamedTuple) if use_NatSchema is None else use_NatSchema
        buffer_type = (NamedArrayTupleSchema_like(example) if use_schema
                       else namedarraytuple_like(example))
        return buffer_type(*(_map_example(v, leaf, use_NatSchema) for v in example))
    if _is_structure(example):
        raise TypeError("buffer_from_example needs a namedtuple/namedarraytuple or an array-like "
                        f"leaf; got a plain {type(example).__name__}")
    return leaf(example)


def _is_structure(x: Any) -> bool:
    return isinstance(x, (tuple, list))


def _rebuild(like: Any, contents: list) -> Any:
    """Make a container of the same kind as ``like`` holding ``contents``."""
    if hasattr(like, "_fields"):
        return like._make(contents)
    return type(like)(contents)


def buffer_from_example(example: Any, leading_dims: Sequence[int] | int, share_memory: bool = False,
                        use_NatSchema: bool | None = None) -> Any:
    """Allocate a namedarraytuple buffer shaped like ``example`` with ``leading_dims`` in front.

    ``example`` is a (nested) namedtuple/namedarraytuple of single examples without leading dims.
    Classic namedtuple examples give classic namedarraytuples; schema-based ones (or
    ``use_NatSchema=True``) give ``NamedArrayTuple`` instances, which pickle under ``spawn``.
    """
    return _map_example(example, lambda leaf: build_array(leaf, leading_dims, share_memory),
                        use_NatSchema)


def buffer_func(buffer_: Any, func: Callable, *args, **kwargs) -> Any:
    """Apply ``func(leaf, *args, **kwargs)`` to every non-None leaf, preserving structure."""
    if buffer_ is None:
        return None
    if _is_structure(buffer_):
        return _rebuild(buffer_, [buffer_func(b, func, *args, **kwargs) for b in buffer_])
    return func(buffer_, *args, **kwargs)


def buffer_method(buffer_: Any, method_name: str, *args, **kwargs) -> Any:
    """Call ``leaf.method_name(*args, **kwargs)`` on every non-None leaf, preserving structure."""
    if buffer_ is None:
        return None
    if _is_structure(buffer_):
        return _rebuild(buffer_, [buffer_method(b, method_name, *args, **kwargs) for b in buffer_])
    return getattr(buffer_, method_name)(*args, **kwargs)


def buffer_copy_(dst: Any, src: Any) -> Any:
    """Copy every leaf of ``src`` into the matching leaf of ``dst`` (same structure and
    shapes; tensors or arrays) in place, allocating nothing; returns ``dst``."""
    if dst is None or src is None:
        if dst is not src:
            raise ValueError("buffer_copy_: the buffers differ in structure (a None leaf)")
        return dst
    if _is_structure(dst):
        if not _is_structure(src) or len(dst) != len(src):
            raise ValueError("buffer_copy_: the buffers differ in structure")
        for d, s in zip(dst, src):
            buffer_copy_(d, s)
        return dst
    if _is_structure(src):
        raise ValueError("buffer_copy_: the buffers differ in structure (a leaf against a "
                         "tuple)")
    if tuple(dst.shape) != tuple(src.shape):
        raise ValueError(f"buffer_copy_: shapes differ: {tuple(dst.shape)} against "
                         f"{tuple(src.shape)}")
    if isinstance(dst, torch.Tensor):
        dst.copy_(torch.as_tensor(src))
    else:
        np.copyto(dst, src)
    return dst


def _to_tensor(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return x
    if isinstance(x, np.ndarray):
        return torch.from_numpy(x)
    return torch.as_tensor(x)


def _to_numpy(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        x = x.detach()  # free: still a view; views of parameters keep requires_grad
        return x.numpy() if x.device.type == "cpu" else x.cpu().numpy()
    return x


def torchify_buffer(buffer_: Any) -> Any:
    """Numpy leaves become torch tensors sharing their memory (views, no copy)."""
    return buffer_func(buffer_, _to_tensor)


def numpify_buffer(buffer_: Any) -> Any:
    """CPU tensor leaves become numpy arrays sharing their memory (views, no copy)."""
    return buffer_func(buffer_, _to_numpy)


def buffer_to(buffer_: Any, device: torch.device | str | None = None) -> Any:
    """Move every tensor leaf to ``device`` (a no-op for tensors already there)."""
    if device is None:
        return buffer_
    return buffer_func(buffer_, lambda x: x.to(device))


def get_leading_dims(buffer_: Any, n_dim: int = 1) -> tuple:
    """Return the first ``n_dim`` dims shared by every leaf; raise if leaves disagree."""
    found: list[tuple] = []

    def visit(x):
        if x is None:
            return
        if _is_structure(x):
            for v in x:
                visit(v)
        else:
            found.append(tuple(x.shape[:n_dim]))

    visit(buffer_)
    if not found:
        raise ValueError("get_leading_dims: the buffer holds no arrays or tensors")
    if any(dims != found[0] for dims in found):
        raise ValueError(f"get_leading_dims: leaves disagree on leading dims: {sorted(set(found))}")
    return found[0]
