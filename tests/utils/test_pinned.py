"""Tests for rlfast.utils.pinned: page-locking bookkeeping, with a recording CUDA runtime."""
import gc

import numpy as np
import pytest

from rlfast.utils.buffer import np_block
from rlfast.utils.pinned import HostMemoryRegistration, HostRegisterError


class RecordingCudart:
    def __init__(self, code=0):
        self.code, self.calls = code, []

    def cudaHostRegister(self, ptr, nbytes, flags):  # noqa: N802
        self.calls.append(("register", ptr, nbytes, flags))
        return self.code

    def cudaHostUnregister(self, ptr):  # noqa: N802
        self.calls.append(("unregister", ptr))
        return 0


def _ptr(array):
    return array.__array_interface__["data"][0]


def test_register_then_close_unregisters_each_region_once():
    cudart = RecordingCudart()
    blocks = [np_block(5000, share_memory=True), np_block(100)]
    registration = HostMemoryRegistration(cudart)
    for block in blocks:
        registration.register(block)
    registration.register(blocks[0])  # already registered: no second call
    expected = [(_ptr(b), b.nbytes) for b in blocks]
    assert registration.registered == expected
    assert cudart.calls == [("register", p, n, 0) for p, n in expected]
    registration.close()
    registration.close()
    assert cudart.calls[2:] == [("unregister", p) for p, _ in expected]
    assert registration.registered == []


def test_dropping_the_registration_unregisters():
    cudart = RecordingCudart()
    block = np_block(10)
    registration = HostMemoryRegistration(cudart)
    registration.register(block)
    del registration
    gc.collect()
    assert cudart.calls[-1] == ("unregister", _ptr(block))


def test_refusals_raise_and_register_nothing():
    cudart = RecordingCudart(code=1)
    registration = HostMemoryRegistration(cudart)
    with pytest.raises(HostRegisterError, match="cudaError 1"):
        registration.register(np_block(10))
    assert registration.registered == []
    registration.close()
    assert [c[0] for c in cudart.calls] == ["register"]
    with pytest.raises(ValueError, match="C-contiguous"):
        registration.register(np.zeros((4, 4))[:, ::2])
