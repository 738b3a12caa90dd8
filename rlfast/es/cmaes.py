"""CMA-ES (Hansen) through the ``cma`` package, behind the ``rlfast.es`` ask/tell interface.

The wrapper only translates: ``cma`` minimizes, so the returns are negated; its sampling is
fed by this object's own seeded generator; its stop conditions pass through. All of the
adaptation (step size, covariance, recombination weights) is ``cma``'s.
"""
from __future__ import annotations

import pickle
from typing import Any

import numpy as np

from rlfast.es.base import BaseES

__all__ = ["CMAES"]

# Options this wrapper sets itself, from its constructor arguments.
_OWN_OPTIONS = ("popsize", "seed", "randn")
# Budget conditions reported only when the user set them: cma's default maxiter would
# otherwise end runs that the runner's own n_generations / n_steps budget governs.
_BUDGET_CONDITIONS = ("maxiter", "maxfevals")


def _import_cma() -> Any:
    """The ``cma`` package (the optional extra ``rlfast[es]``), or an ImportError that says
    how to install it."""
    try:
        import cma
    except ImportError as e:
        raise ImportError("CMAES needs the cma package: pip install 'rlfast[es]' (or pip "
                          "install cma)") from e
    return cma


class _GeneratorRandn:
    """``cma``'s ``randn(lam, N)`` drawn from a ``np.random.Generator``; a module-level class
    (not a closure) so that the ``cma`` object, generator included, pickles."""

    def __init__(self, rng: np.random.Generator):
        self.rng = rng

    def __call__(self, *shape: int) -> np.ndarray:
        return self.rng.standard_normal(shape)


class CMAES(BaseES):
    """CMA-ES, maximizing: a thin wrapper over ``cma.CMAEvolutionStrategy(x0, sigma0,
    options)`` with ``popsize`` and ``verbose=-9`` (silent) plus ``cma_options`` passed
    through (cma's own option names; ``popsize``, ``seed`` and ``randn`` belong to this
    wrapper). Seeding: ``cma`` seeds and draws from numpy's *global* random state, which any
    other code shares; instead its ``randn`` option is this object's
    ``Generator(PCG64(seed))`` and its ``seed`` option is NaN ("do nothing"), so a given
    ``seed`` (0 included) always repeats and two objects never disturb each other. ``seed``
    None draws fresh entropy, as ``cma``'s default does. :attr:`sigma` is ``cma``'s sigma,
    the center is ``cma``'s distribution mean (in phenotype space), and ``stop()`` is
    ``cma``'s ``stop()`` without ``maxiter`` / ``maxfevals`` unless ``cma_options`` set
    them."""

    def __init__(self, x0: Any, sigma0: float, popsize: int, seed: int | None = None,
                 cma_options: dict | None = None):
        super().__init__(x0, sigma0, popsize, seed)
        cma_options = dict(cma_options or {})
        for key in _OWN_OPTIONS:
            if key in cma_options:
                raise ValueError(f"cma_options may not set {key!r}: {list(_OWN_OPTIONS)} come "
                                 "from the constructor's popsize and seed arguments")
        self.cma_options = cma_options
        options = dict(verbose=-9, **cma_options)
        options.update(popsize=self.popsize, seed=np.nan, randn=_GeneratorRandn(self._rng))
        try:
            self._es = _import_cma().CMAEvolutionStrategy(np.array(x0, dtype=np.float64),
                                                          self.sigma0, options)
        except ValueError as e:  # cma names an unknown option and the valid ones
            raise ValueError(f"cma rejected cma_options={cma_options!r}: {e}") from e

    def _ask(self) -> np.ndarray:
        return np.asarray(self._es.ask(), dtype=np.float64)

    def _tell(self, solutions: np.ndarray, returns: np.ndarray) -> None:
        # cma minimizes: f = -return
        self._es.tell(list(solutions), list(-returns))

    def _center(self) -> np.ndarray:
        return np.array(self._es.result.xfavorite, dtype=np.float64)

    @property
    def sigma(self) -> float:
        """``cma``'s overall step size."""
        return float(self._es.sigma)

    def stop(self) -> dict:
        """``cma``'s stop conditions that hold now (e.g. ``tolfun``, ``tolx``), less the
        ``maxiter`` / ``maxfevals`` budgets that ``cma_options`` did not set."""
        conditions = dict(self._es.stop())
        for key in _BUDGET_CONDITIONS:
            if key not in self.cma_options:
                conditions.pop(key, None)
        return conditions

    def _state(self) -> dict:
        # The pickled cma object carries the covariance, paths and the generator it samples from.
        return dict(cma_pickle=pickle.dumps(self._es))

    def _load_state(self, state: dict) -> None:
        self._es = pickle.loads(state["cma_pickle"])
        self._rng = self._es.opts["randn"].rng
