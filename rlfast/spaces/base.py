"""Base class shared by every rlfast space."""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import numpy as np

SeedLike = int | np.random.SeedSequence | None


class Space(ABC):
    """Common interface for observation and action spaces: ``sample()``, ``null_value()`` and
    ``seed()``. Sampling draws from numpy's global RNG (``np.random``) by default, so that one
    call to ``rlfast.utils.seed.set_seed`` makes a whole run reproducible; calling ``seed(s)``
    gives this space its own ``np.random.Generator`` instead, independent of the global state.
    Subclasses draw random numbers only through the ``_integers``/``_uniform``/``_normal``/
    ``_exponential`` helpers so that both sources behave the same way."""

    _rng: np.random.Generator | None = None

    @abstractmethod
    def sample(self) -> Any:
        """Return one uniformly random element of this space."""

    @abstractmethod
    def null_value(self) -> Any:
        """Return the value used to fill in for the absence of an element (e.g. the previous
        action at the first step of an episode)."""

    def seed(self, seed: SeedLike = None) -> None:
        """Give this space a private random generator seeded with ``seed`` (an int or a
        ``np.random.SeedSequence``); ``seed(None)`` returns to numpy's global RNG."""
        if seed is not None and not isinstance(seed, (int, np.integer, np.random.SeedSequence)):
            raise TypeError(f"seed must be an int, a numpy SeedSequence or None, got {seed!r}")
        self._rng = None if seed is None else np.random.default_rng(seed)

    # Random draws from the private generator if seeded, else from np.random's global state.
    def _integers(self, low: Any, high: Any, size: tuple, dtype: np.dtype) -> np.ndarray:
        if self._rng is None:
            return np.random.randint(low, high, size=size, dtype=dtype)
        return self._rng.integers(low, high, size=size, dtype=dtype)

    def _uniform(self, low: Any, high: Any, size: tuple) -> np.ndarray:
        if self._rng is None:
            return np.random.uniform(low, high, size=size)
        return self._rng.uniform(low, high, size=size)

    def _normal(self, size: tuple) -> np.ndarray:
        if self._rng is None:
            return np.random.standard_normal(size=size)
        return self._rng.standard_normal(size=size)

    def _exponential(self, size: tuple) -> np.ndarray:
        if self._rng is None:
            return np.random.standard_exponential(size=size)
        return self._rng.standard_exponential(size=size)
