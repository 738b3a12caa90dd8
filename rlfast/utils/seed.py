"""Seeding of every random number generator a run touches.

``set_seed`` seeds Python's ``random``, numpy's global RNG and torch (CPU and, when
present, every CUDA device) in one call, so a run is reproducible from one integer.
``get_rng_state`` / ``set_rng_state`` save and restore all of those generators (snapshots
hold them, so a resumed run draws the numbers the uninterrupted one would have drawn).
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

__all__ = ["set_seed", "make_seed", "get_rng_state", "set_rng_state"]

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


def get_rng_state() -> dict:
    """The state of every generator ``set_seed`` seeds, as plain data and tensors (what a
    ``weights_only`` snapshot can hold): Python's ``random``, numpy's global RNG, torch's
    CPU generator and, when CUDA is initialized, every device's."""
    version, internal, gauss = random.getstate()
    state = dict(python=(version, list(internal), gauss), numpy=np.random.get_state(),
                 torch=torch.get_rng_state())
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    """Restore what :func:`get_rng_state` returned. CUDA states are restored when this
    process has as many devices; otherwise they are left seeded as they are."""
    missing = [k for k in ("python", "numpy", "torch") if k not in state]
    if missing:
        raise ValueError(f"RNG state lacks {', '.join(missing)}")
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    np.random.set_state(tuple(state["numpy"]))
    torch.set_rng_state(state["torch"].cpu())
    cuda = state.get("cuda")
    if cuda and torch.cuda.is_available() and torch.cuda.device_count() == len(cuda):
        torch.cuda.set_rng_state_all([s.cpu() for s in cuda])
