"""The ask/tell interface every evolution strategy of ``rlfast.es`` shares.

A strategy proposes a population with :meth:`BaseES.ask`, is told one fitness per candidate
with :meth:`BaseES.tell` (higher is better: every strategy here maximizes), and reports
where it stands through :attr:`BaseES.result`, :attr:`BaseES.sigma` and :meth:`BaseES.stop`.
The base class owns what is the same for all of them: checking the constructor's common
arguments and tell's arguments, the best-so-far candidate, the generation and evaluation
counters, and the common part of the snapshot (:meth:`BaseES.state_dict`). A strategy
fills in the sampling (``_ask``), the update (``_tell``) and its own state.
"""
from __future__ import annotations

import abc
import numbers
from typing import Any, NamedTuple

import numpy as np

__all__ = ["BaseES", "ESResult"]


class ESResult(NamedTuple):
    """Where a strategy stands: the best candidate told so far and its fitness (``-inf``
    and ``x0`` before the first tell), the distribution's center (the solution a user
    deploys), and how many generations and fitnesses have been told."""
    best_solution: np.ndarray
    best_return: float
    center: np.ndarray
    generation: int
    evaluations: int


def _check_positive_float(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) \
            or not np.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a finite number > 0; got {value!r}")
    return float(value)


def _check_int(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}; got {value!r}")
    return int(value)


class BaseES(abc.ABC):
    """An evolution strategy over ``D``-dimensional real vectors that maximizes the returns
    it is told. ``x0`` (1-D, finite) is the initial center, ``sigma0`` (> 0) the initial
    step size, ``popsize`` (>= 2) the number of candidates per generation and ``seed`` (a
    non-negative int, or None for fresh entropy) seeds the strategy's own
    ``np.random.Generator(PCG64(seed))``, so that seeded runs repeat and no global random
    state is touched. Every ``tell`` must follow an ``ask`` and give back its candidates."""

    def __init__(self, x0: Any, sigma0: float, popsize: int, seed: int | None = None):
        x0 = np.array(x0, dtype=np.float64)
        if x0.ndim != 1 or x0.size == 0 or not np.all(np.isfinite(x0)):
            raise ValueError(f"x0 must be a non-empty 1-D array of finite numbers; got shape "
                             f"{x0.shape} with values {x0!r}")
        self.sigma0 = _check_positive_float("sigma0", sigma0)
        self.popsize = _check_int("popsize", popsize, 2)
        if seed is not None:
            seed = _check_int("seed", seed, 0)
        self.seed = seed
        self.dim = x0.size
        self._rng = np.random.Generator(np.random.PCG64(seed))
        self._best_solution = x0.copy()
        self._best_return = -np.inf
        self._generation = 0
        self._evaluations = 0
        self._asked: np.ndarray | None = None  # the population of the latest ask, until told

    # ---- what a strategy provides -------------------------------------------------------
    @abc.abstractmethod
    def _ask(self) -> np.ndarray:
        """Sample this generation's ``[popsize, D]`` candidates."""

    @abc.abstractmethod
    def _tell(self, solutions: np.ndarray, returns: np.ndarray) -> None:
        """Update the distribution from checked candidates and their (finite) returns."""

    @abc.abstractmethod
    def _center(self) -> np.ndarray:
        """The distribution's center (a copy)."""

    @abc.abstractmethod
    def _state(self) -> dict:
        """The strategy's own state as plain data (copies); the base saves the generator."""

    @abc.abstractmethod
    def _load_state(self, state: dict) -> None:
        """Restore what ``_state`` returned."""

    @property
    @abc.abstractmethod
    def sigma(self) -> float:
        """The current step size, for logging."""

    @abc.abstractmethod
    def stop(self) -> dict:
        """The stop conditions that hold now, by name; ``{}`` means keep going."""

    # ---- the shared interface -----------------------------------------------------------
    def ask(self) -> np.ndarray:
        """Return this generation's candidates: a fresh float64 array ``[popsize, D]``, one
        candidate per row. Asking again before telling replaces the pending population."""
        solutions = np.array(self._ask(), dtype=np.float64)
        self._asked = solutions.copy()
        return solutions

    def tell(self, solutions: Any, returns: Any) -> None:
        """Update the strategy with the latest ``ask``'s candidates and one finite return per
        candidate (higher is better). Wrong shapes, non-finite values or a tell without a
        pending ask raise, so that a mixed-up population fails loudly instead of silently
        steering the search."""
        if self._asked is None:
            raise RuntimeError("tell() needs the population of a preceding ask(); call ask() "
                               "first, and tell each population once.")
        solutions = np.asarray(solutions, dtype=np.float64)
        returns = np.asarray(returns, dtype=np.float64)
        if solutions.shape != (self.popsize, self.dim):
            raise ValueError(f"solutions must have shape (popsize, D) = ({self.popsize}, "
                             f"{self.dim}), as ask() returned them; got shape {solutions.shape}")
        if returns.shape != (self.popsize,):
            raise ValueError(f"returns must have shape (popsize,) = ({self.popsize},), one per "
                             f"candidate; got shape {returns.shape}")
        if not np.all(np.isfinite(returns)):
            bad = np.flatnonzero(~np.isfinite(returns))
            raise ValueError(f"returns must all be finite; got {returns[bad].tolist()} at rows "
                             f"{bad.tolist()}")
        if not np.all(np.isfinite(solutions)):
            raise ValueError("solutions must all be finite; got non-finite values in rows "
                             f"{np.flatnonzero(~np.isfinite(solutions).all(axis=1)).tolist()}")
        self._tell(solutions, returns)
        best = int(np.argmax(returns))
        if returns[best] > self._best_return:
            self._best_return = float(returns[best])
            self._best_solution = solutions[best].copy()
        self._generation += 1
        self._evaluations += self.popsize
        self._asked = None

    @property
    def result(self) -> ESResult:
        """The best candidate so far, the center and the counters (copies)."""
        return ESResult(best_solution=self._best_solution.copy(),
                        best_return=float(self._best_return), center=self._center(),
                        generation=self._generation, evaluations=self._evaluations)

    def state_dict(self) -> dict:
        """Everything needed to resume: the shared bookkeeping plus the strategy's own state
        (its distribution and random generator), as plain data that snapshots can hold.
        The arrays are copies, so the dict stays valid while the run goes on."""
        return dict(strategy=type(self).__name__, dim=self.dim, popsize=self.popsize,
                    best_solution=self._best_solution.copy(),
                    best_return=float(self._best_return), generation=self._generation,
                    evaluations=self._evaluations,
                    asked=None if self._asked is None else self._asked.copy(),
                    rng_state=self._rng.bit_generator.state, **self._state())

    def load_state_dict(self, state: dict) -> None:
        """Restore a :meth:`state_dict` of the same strategy, dimension and population size;
        afterwards ``ask`` continues exactly as the saved object would have."""
        expected = (type(self).__name__, self.dim, self.popsize)
        found = (state.get("strategy"), state.get("dim"), state.get("popsize"))
        if found != expected:
            raise ValueError(f"state_dict is for (strategy, dim, popsize) = {found}; this object "
                             f"is {expected}")
        self._best_solution = np.array(state["best_solution"], dtype=np.float64)
        self._best_return = float(state["best_return"])
        self._generation = int(state["generation"])
        self._evaluations = int(state["evaluations"])
        asked = state["asked"]
        self._asked = None if asked is None else np.array(asked, dtype=np.float64)
        self._rng.bit_generator.state = state["rng_state"]
        self._load_state(state)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(dim={self.dim}, popsize={self.popsize}, "
                f"sigma={self.sigma:.4g}, generation={self._generation})")
