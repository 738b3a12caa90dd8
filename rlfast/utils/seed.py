"""Seeding of every random number generator a run touches.

``set_seed`` seeds Python's ``random``, numpy's global RNG and torch (CPU and, when
present, every CUDA device) in one call, so a run is reproducible from one integer.
``make_seed`` draws a fresh seed from timing jitter, giving different values to
processes started at the same moment.
"""

from __future__ import annotations

import hashlib
import operator
import os
import random
import time

import numpy as np
import torch

__all__ = ["set_seed", "make_seed"]

_MAX_SEED = 2 ** 32 - 1  # numpy's global RNG accepts seeds in [0, 2**32 - 1]


def set_seed(seed: int) -> None:
    """Seed ``random``, ``np.random``, ``torch`` and (if available) all CUDA devices."""
    try:
        seed = operator.index(seed)
    except TypeError:
        raise TypeError(f"seed must be an integer; got {seed!r} of type "
                        f"{type(seed).__name__}.") from None
    if not 0 <= seed <= _MAX_SEED:
        raise ValueError(f"seed must be in [0, {_MAX_SEED}]; got {seed}.")
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)


def make_seed() -> int:
    """Return a seed in ``[0, 10000]`` derived from timing jitter.

    Durations of a few tiny workloads, timed with ``perf_counter_ns``, vary unpredictably
    in their low digits; hashing them together with the process id and the clock gives
    well-spread values that differ between processes seeding at the same moment.
    """
    digest = hashlib.blake2b(digest_size=8)
    digest.update(f"{os.getpid()}:{time.perf_counter_ns()}:{time.time_ns()}".encode())
    acc = 0
    for i in range(16):
        start = time.perf_counter_ns()
        for j in range(50 + i):
            acc = (acc * 31 + j) % 1_000_003
        digest.update((time.perf_counter_ns() - start).to_bytes(8, "little", signed=True))
    digest.update(acc.to_bytes(4, "little"))
    return int.from_bytes(digest.digest(), "little") % 10001
