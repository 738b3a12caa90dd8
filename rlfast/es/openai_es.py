"""OpenAI-ES (Salimans et al. 2017): a search-gradient ascent on the center, with antithetic
sampling, centered-rank fitness shaping, weight decay and Adam.

The noise std is fixed; only the center ``theta`` moves. Antithetic pairs (``+eps``,
``-eps``) cancel the gradient estimate's even-order noise, and centered ranks make the
update invariant to the scale of the returns and robust to outliers.
"""
from __future__ import annotations

import numbers
from typing import Any

import numpy as np

from rlfast.es.base import BaseES

__all__ = ["OpenAIES", "centered_ranks"]


def centered_ranks(returns: Any) -> np.ndarray:
    """Shape 1-D ``returns`` into centered ranks in [-0.5, 0.5]: the lowest return gets
    -0.5, the highest +0.5, equally spaced between (``rank / (n - 1) - 0.5`` with ranks
    0..n-1). Tied returns get distinct ranks, the earlier entry the lower one."""
    returns = np.asarray(returns, dtype=np.float64)
    if returns.ndim != 1 or returns.size < 2:
        raise ValueError(f"centered_ranks needs a 1-D array of at least 2 returns; got shape "
                         f"{returns.shape}")
    ranks = np.empty(returns.size, dtype=np.float64)
    ranks[np.argsort(returns, kind="stable")] = np.arange(returns.size)
    return ranks / (returns.size - 1) - 0.5


class OpenAIES(BaseES):
    """OpenAI-ES, maximizing. ``ask`` draws ``popsize / 2`` noise vectors ``eps_j ~ N(0, I)``
    and returns rows ``2j = theta + sigma * eps_j`` and ``2j + 1 = theta - sigma * eps_j``
    (``popsize`` must be even); ``tell`` (given exactly those rows) takes the step::

        s_i   = centered_ranks(returns)_i
        g     = 1 / (popsize * sigma) * sum_i s_i * eps_i      (eps_i = +-eps_j of row i)
        g     = g - l2_coeff * theta                           (weight decay)
        theta = theta + Adam(g)                                (ascent, bias-corrected)

    ``sigma`` stays ``sigma0``. Defaults: ``learning_rate=0.01``, ``l2_coeff=0.005``,
    ``beta1=0.9``, ``beta2=0.999``, ``epsilon=1e-8``. ``stop()`` is always ``{}``."""

    def __init__(self, x0: Any, sigma0: float, popsize: int, seed: int | None = None,
                 learning_rate: float = 0.01, l2_coeff: float = 0.005, beta1: float = 0.9,
                 beta2: float = 0.999, epsilon: float = 1e-8):
        super().__init__(x0, sigma0, popsize, seed)
        if self.popsize % 2:
            raise ValueError(f"OpenAIES samples antithetic pairs, so popsize must be even; got "
                             f"{popsize}")
        for name, value, low, high, low_inclusive in (
                ("learning_rate", learning_rate, 0.0, np.inf, False),
                ("epsilon", epsilon, 0.0, np.inf, False),
                ("l2_coeff", l2_coeff, 0.0, np.inf, True),
                ("beta1", beta1, 0.0, 1.0, True), ("beta2", beta2, 0.0, 1.0, True)):
            valid = (not isinstance(value, bool) and isinstance(value, numbers.Real)
                     and (low <= value if low_inclusive else low < value) and value < high)
            if not valid:
                interval = f"{'[' if low_inclusive else '('}{low:g}, {high:g})"
                raise ValueError(f"{name} must be in {interval}; got {value!r}")
        self.learning_rate = float(learning_rate)
        self.l2_coeff = float(l2_coeff)
        self.beta1, self.beta2, self.epsilon = float(beta1), float(beta2), float(epsilon)
        self._theta = np.array(x0, dtype=np.float64)
        self._adam_m = np.zeros(self.dim)
        self._adam_v = np.zeros(self.dim)
        self._adam_t = 0
        self._noise: np.ndarray | None = None  # [popsize / 2, D] of the pending ask

    def _ask(self) -> np.ndarray:
        self._noise = self._rng.standard_normal((self.popsize // 2, self.dim))
        solutions = np.empty((self.popsize, self.dim))
        solutions[0::2] = self._theta + self.sigma0 * self._noise
        solutions[1::2] = self._theta - self.sigma0 * self._noise
        return solutions

    def _tell(self, solutions: np.ndarray, returns: np.ndarray) -> None:
        asked = self._asked
        if not np.allclose(solutions, asked, rtol=1e-5, atol=1e-8):
            worst = int(np.argmax(np.abs(solutions - asked).max(axis=1)))
            raise ValueError("OpenAIES.tell needs the candidates of the latest ask() (its "
                             f"update uses their noise); row {worst} differs: got "
                             f"{solutions[worst]!r}, asked {asked[worst]!r}")
        signed_noise = np.empty((self.popsize, self.dim))
        signed_noise[0::2], signed_noise[1::2] = self._noise, -self._noise
        # g = 1/(n sigma) sum_i s_i eps_i - l2 theta
        shaped = centered_ranks(returns)
        grad = shaped @ signed_noise / (self.popsize * self.sigma0)
        grad = grad - self.l2_coeff * self._theta
        # Adam ascent: m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
        # theta += lr * m_hat / (sqrt(v_hat) + eps), m_hat = m / (1-b1^t), v_hat = v / (1-b2^t)
        self._adam_t += 1
        self._adam_m = self.beta1 * self._adam_m + (1.0 - self.beta1) * grad
        self._adam_v = self.beta2 * self._adam_v + (1.0 - self.beta2) * grad ** 2
        m_hat = self._adam_m / (1.0 - self.beta1 ** self._adam_t)
        v_hat = self._adam_v / (1.0 - self.beta2 ** self._adam_t)
        self._theta = self._theta + self.learning_rate * m_hat / (np.sqrt(v_hat) + self.epsilon)
        self._noise = None

    def _center(self) -> np.ndarray:
        return self._theta.copy()

    @property
    def sigma(self) -> float:
        """The fixed noise std, ``sigma0``."""
        return self.sigma0

    def stop(self) -> dict:
        """Always ``{}``: OpenAI-ES has no convergence test of its own."""
        return {}

    def _state(self) -> dict:
        return dict(theta=self._theta.copy(), adam_m=self._adam_m.copy(),
                    adam_v=self._adam_v.copy(), adam_t=self._adam_t,
                    noise=None if self._noise is None else self._noise.copy())

    def _load_state(self, state: dict) -> None:
        self._theta = np.array(state["theta"], dtype=np.float64)
        self._adam_m = np.array(state["adam_m"], dtype=np.float64)
        self._adam_v = np.array(state["adam_v"], dtype=np.float64)
        self._adam_t = int(state["adam_t"])
        noise = state["noise"]
        self._noise = None if noise is None else np.array(noise, dtype=np.float64)
