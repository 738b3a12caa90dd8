"""The cross-entropy method with a diagonal Gaussian ("noisy CEM", Szita & Lőrincz 2006).

Each generation samples ``x_i = mean + std * N(0, I)``, keeps the highest-return fraction as
elites and refits the Gaussian to them. Refitting alone shrinks the variance too fast (the
search collapses before it finds the optimum); the paper's remedy is to add extra variance
that decays over the generations, which ``extra_noise_init`` / ``extra_noise_decay_gens``
provide. ``alpha`` < 1 smooths the refit toward the previous distribution.
"""
from __future__ import annotations

import numbers
from typing import Any

import numpy as np

from rlfast.es.base import BaseES

__all__ = ["CEM"]


class CEM(BaseES):
    """Cross-entropy method, diagonal Gaussian, maximizing. The initial std is ``sigma0`` in
    every dimension. The update after the ``t``-th tell (``t`` = 0 for the first) is::

        elites    = the n_elite candidates with the highest returns (ties: earlier row first),
                    n_elite = max(1, round(elite_frac * popsize))   (Python's round)
        new_mean  = mean(elites)
        new_var   = var(elites, ddof=0) + extra_noise_init * max(0, 1 - t / extra_noise_decay_gens)
        mean      = alpha * new_mean         + (1 - alpha) * mean
        std       = alpha * sqrt(new_var)    + (1 - alpha) * std

    so the extra noise (a variance, in squared parameter units) decays linearly from
    ``extra_noise_init`` at the first update to 0 at update ``extra_noise_decay_gens``.
    Defaults: ``elite_frac=0.2``, ``extra_noise_init=0.0`` (plain CEM),
    ``extra_noise_decay_gens=1``, ``alpha=1.0`` (no smoothing), ``tol_std=1e-12``: ``stop()``
    reports ``tolstd`` once :attr:`sigma` (the root-mean-square std) falls below it."""

    def __init__(self, x0: Any, sigma0: float, popsize: int, seed: int | None = None,
                 elite_frac: float = 0.2, extra_noise_init: float = 0.0,
                 extra_noise_decay_gens: int = 1, alpha: float = 1.0, tol_std: float = 1e-12):
        super().__init__(x0, sigma0, popsize, seed)
        for name, value in (("elite_frac", elite_frac), ("alpha", alpha)):
            if isinstance(value, bool) or not isinstance(value, numbers.Real) \
                    or not 0 < value <= 1:
                raise ValueError(f"{name} must be in (0, 1]; got {value!r}")
        for name, value in (("extra_noise_init", extra_noise_init), ("tol_std", tol_std)):
            if isinstance(value, bool) or not isinstance(value, numbers.Real) \
                    or not np.isfinite(value) or value < 0:
                raise ValueError(f"{name} must be a finite number >= 0; got {value!r}")
        if isinstance(extra_noise_decay_gens, bool) \
                or not isinstance(extra_noise_decay_gens, numbers.Integral) \
                or extra_noise_decay_gens < 1:
            raise ValueError(f"extra_noise_decay_gens must be an integer >= 1; got "
                             f"{extra_noise_decay_gens!r}")
        self.elite_frac = float(elite_frac)
        self.n_elite = max(1, int(round(self.elite_frac * self.popsize)))
        self.extra_noise_init = float(extra_noise_init)
        self.extra_noise_decay_gens = int(extra_noise_decay_gens)
        self.alpha = float(alpha)
        self.tol_std = float(tol_std)
        self._mean = np.array(x0, dtype=np.float64)
        self._std = np.full(self.dim, self.sigma0)

    def extra_noise(self, t: int) -> float:
        """The variance added at the update after the ``t``-th tell (0-based)."""
        return self.extra_noise_init * max(0.0, 1.0 - t / self.extra_noise_decay_gens)

    def _ask(self) -> np.ndarray:
        # x_i = mean + std * z_i,  z_i ~ N(0, I)
        return self._mean + self._std * self._rng.standard_normal((self.popsize, self.dim))

    def _tell(self, solutions: np.ndarray, returns: np.ndarray) -> None:
        order = np.argsort(-returns, kind="stable")  # best first; ties keep row order
        elites = solutions[order[:self.n_elite]]
        new_mean = elites.mean(axis=0)
        # var = population variance of the elites + decaying extra noise (Szita & Lőrincz)
        new_var = elites.var(axis=0) + self.extra_noise(self._generation)
        new_std = np.sqrt(new_var)
        # smoothing: theta <- alpha * theta_new + (1 - alpha) * theta_old
        self._mean = self.alpha * new_mean + (1.0 - self.alpha) * self._mean
        self._std = self.alpha * new_std + (1.0 - self.alpha) * self._std

    def _center(self) -> np.ndarray:
        return self._mean.copy()

    @property
    def std(self) -> np.ndarray:
        """The per-dimension standard deviation (a copy)."""
        return self._std.copy()

    @property
    def sigma(self) -> float:
        """Root-mean-square of the per-dimension std."""
        return float(np.sqrt(np.mean(self._std ** 2)))

    def stop(self) -> dict:
        """``{'tolstd': sigma}`` once :attr:`sigma` is below ``tol_std``, else ``{}``."""
        sigma = self.sigma
        return {"tolstd": sigma} if sigma < self.tol_std else {}

    def _state(self) -> dict:
        return dict(mean=self._mean.copy(), std=self._std.copy())

    def _load_state(self, state: dict) -> None:
        self._mean = np.array(state["mean"], dtype=np.float64)
        self._std = np.array(state["std"], dtype=np.float64)
