"""The evolution strategies: update rules against hand-computed numbers, the ask/tell
protocol, convergence on concave functions, snapshots, and input checks."""
from __future__ import annotations

import os

import numpy as np
import pytest

from rlfast.es import CEM, CMAES, BaseES, ESResult, OpenAIES
from rlfast.es.openai_es import centered_ranks


def neg_sq_dist(solutions: np.ndarray, target: float) -> np.ndarray:
    """f(x) = -|x - target|^2 per row: concave, maximum 0 at x = target."""
    return -((solutions - target) ** 2).sum(axis=1)


def run(es: BaseES, generations: int, target: float) -> list[np.ndarray]:
    asks = []
    for _ in range(generations):
        solutions = es.ask()
        asks.append(solutions.copy())
        es.tell(solutions, neg_sq_dist(solutions, target))
    return asks


# ---- CEM -----------------------------------------------------------------------------------
# D = 2, popsize = 4, elite_frac = 0.5 -> n_elite = round(2.0) = 2.
SOLUTIONS = np.array([[1.0, 2.0], [3.0, 0.0], [-1.0, 4.0], [5.0, 6.0]])
RETURNS = np.array([0.5, 2.0, -1.0, 1.0])
# Elites: rows 1 (return 2.0) and 3 (return 1.0): [3, 0] and [5, 6].
# mean = ([3, 0] + [5, 6]) / 2 = [4, 3]
# var (ddof=0) = [((3-4)^2 + (5-4)^2) / 2, ((0-3)^2 + (6-3)^2) / 2] = [1, 9] -> std = [1, 3]


def cem_tell(es: CEM) -> None:
    es.ask()
    es.tell(SOLUTIONS, RETURNS)


def test_cem_update_by_hand():
    es = CEM(np.zeros(2), sigma0=1.0, popsize=4, seed=0, elite_frac=0.5)
    assert es.n_elite == 2
    cem_tell(es)
    np.testing.assert_allclose(es.result.center, [4.0, 3.0])
    np.testing.assert_allclose(es.std, [1.0, 3.0])
    assert es.sigma == pytest.approx(np.sqrt(5.0))  # sqrt((1^2 + 3^2) / 2)
    assert es.result.best_return == 2.0
    np.testing.assert_array_equal(es.result.best_solution, [3.0, 0.0])


def test_cem_smoothing_by_hand():
    # alpha = 0.5 from mean [0, 0], std [1, 1] (sigma0 = 1):
    # mean = 0.5 * [4, 3] + 0.5 * [0, 0] = [2, 1.5];  std = 0.5 * [1, 3] + 0.5 * [1, 1] = [1, 2]
    es = CEM(np.zeros(2), sigma0=1.0, popsize=4, seed=0, elite_frac=0.5, alpha=0.5)
    cem_tell(es)
    np.testing.assert_allclose(es.result.center, [2.0, 1.5])
    np.testing.assert_allclose(es.std, [1.0, 2.0])
    # second update: mean = 0.5 * [4, 3] + 0.5 * [2, 1.5] = [3, 2.25]
    #                std  = 0.5 * [1, 3] + 0.5 * [1, 2]   = [1, 2.5]
    cem_tell(es)
    np.testing.assert_allclose(es.result.center, [3.0, 2.25])
    np.testing.assert_allclose(es.std, [1.0, 2.5])


def test_cem_extra_noise_by_hand():
    # extra_noise_init = 7, decay over 2 updates: extra(t) = 7 * max(0, 1 - t / 2)
    # t=0: var = [1, 9] + 7   = [8, 16]      -> std = [2 sqrt(2), 4]
    # t=1: var = [1, 9] + 3.5 = [4.5, 12.5]  -> std = [sqrt(4.5), sqrt(12.5)]
    # t=2: var = [1, 9] + 0   -> std = [1, 3]; the mean is [4, 3] every time.
    es = CEM(np.zeros(2), sigma0=1.0, popsize=4, seed=0, elite_frac=0.5,
             extra_noise_init=7.0, extra_noise_decay_gens=2)
    for expected_std in ([2 * np.sqrt(2.0), 4.0], [np.sqrt(4.5), np.sqrt(12.5)], [1.0, 3.0]):
        cem_tell(es)
        np.testing.assert_allclose(es.result.center, [4.0, 3.0])
        np.testing.assert_allclose(es.std, expected_std)


def test_cem_elite_count_and_ties():
    assert CEM([0.0], 1.0, popsize=32).n_elite == 6  # round(6.4)
    assert CEM([0.0], 1.0, popsize=2, elite_frac=0.1).n_elite == 1  # max(1, round(0.2))
    # tied returns: the earlier row is the elite
    es = CEM([0.0], 1.0, popsize=3, elite_frac=0.3)
    es.ask()
    es.tell([[1.0], [2.0], [3.0]], [5.0, 5.0, 0.0])
    np.testing.assert_allclose(es.result.center, [1.0])


def test_cem_stop_tolstd():
    es = CEM(np.zeros(2), sigma0=1.0, popsize=4, seed=0, elite_frac=0.25, tol_std=1e-6)
    assert es.stop() == {}
    cem_tell(es)  # one elite: variance 0
    assert es.stop() == {"tolstd": 0.0}


def test_cem_converges():
    es = CEM(np.zeros(5), sigma0=0.5, popsize=32, seed=0, extra_noise_init=0.25,
             extra_noise_decay_gens=30)
    run(es, 80, target=1.0)
    np.testing.assert_allclose(es.result.center, np.ones(5), atol=0.1)
    assert es.result.best_return > -0.05
    assert es.result.generation == 80 and es.result.evaluations == 80 * 32


# ---- OpenAI-ES -------------------------------------------------------------------------------
def test_centered_ranks_by_hand():
    # sorted: -2 (rank 0), 5 (1), 7 (2), 10 (3); shaped = rank / 3 - 0.5
    np.testing.assert_allclose(centered_ranks([10.0, -2.0, 5.0, 7.0]),
                               [0.5, -0.5, -1 / 6, 1 / 6])
    # ties keep their order: the first 1.0 gets rank 1, the second rank 2
    np.testing.assert_allclose(centered_ranks([1.0, 1.0, 0.0]), [0.0, 0.5, -0.5])


class FixedNoise:
    """Stands in for the generator: standard_normal returns the queued arrays in turn."""

    def __init__(self, *arrays):
        self.arrays = list(arrays)

    def standard_normal(self, shape):
        out = np.asarray(self.arrays.pop(0), dtype=np.float64)
        assert out.shape == tuple(shape)
        return out


def test_openai_es_update_by_hand():
    lr, l2, sigma = 0.01, 0.005, 0.1
    theta0 = np.array([1.0, -2.0])
    eps1 = np.array([[1.0, 0.0], [0.0, 2.0]])
    eps2 = np.array([[0.5, -1.0], [2.0, 1.0]])
    es = OpenAIES(theta0, sigma0=sigma, popsize=4, learning_rate=lr, l2_coeff=l2)
    es._rng = FixedNoise(eps1, eps2)

    solutions = es.ask()
    # rows: theta +- 0.1 * eps1_j, pairs adjacent
    np.testing.assert_allclose(solutions, [[1.1, -2.0], [0.9, -2.0], [1.0, -1.8], [1.0, -2.2]])
    returns = np.array([3.0, 1.0, 0.0, 2.0])
    # ranks [3, 1, 0, 2] -> shaped [0.5, -1/6, -0.5, 1/6]; signed eps rows
    # [1, 0], [-1, 0], [0, 2], [0, -2]:
    # sum = [0.5 + 1/6, -0.5 * 2 - 1/6 * 2] = [2/3, -4/3]; g = sum / (4 * 0.1) = [5/3, -10/3]
    # weight decay: g - 0.005 * [1, -2] = [5/3 - 0.005, -10/3 + 0.01]
    g1 = np.array([5 / 3 - 0.005, -10 / 3 + 0.01])
    es.tell(solutions, returns)
    # first Adam step with bias correction: m_hat = g, v_hat = g^2, step = lr * g / (|g| + 1e-8)
    theta1 = es.result.center
    np.testing.assert_allclose(theta1, theta0 + lr * np.sign(g1), atol=1e-9)  # [1.01, -2.01]
    np.testing.assert_allclose(theta1, theta0 + lr * g1 / (np.abs(g1) + 1e-8), rtol=0, atol=1e-15)

    # second step, against a direct computation of the same equations
    solutions = es.ask()
    returns = np.array([0.0, 1.0, 3.0, 2.0])
    es.tell(solutions, returns)
    shaped = np.array([-0.5, -1 / 6, 0.5, 1 / 6])
    signed = np.array([eps2[0], -eps2[0], eps2[1], -eps2[1]])
    g2 = shaped @ signed / (4 * sigma) - l2 * theta1
    m = 0.9 * (0.1 * g1) + 0.1 * g2
    v = 0.999 * (0.001 * g1 ** 2) + 0.001 * g2 ** 2
    m_hat, v_hat = m / (1 - 0.9 ** 2), v / (1 - 0.999 ** 2)
    np.testing.assert_allclose(es.result.center, theta1 + lr * m_hat / (np.sqrt(v_hat) + 1e-8),
                               rtol=1e-12)
    assert es.sigma == sigma and es.stop() == {}


def test_openai_es_antithetic_pairs():
    theta = np.array([0.5, -1.0, 2.0])
    es = OpenAIES(theta, sigma0=0.3, popsize=6, seed=3)
    solutions = es.ask()
    np.testing.assert_allclose(solutions[0::2] + solutions[1::2], np.tile(2 * theta, (3, 1)))
    assert not np.allclose(solutions[0::2], solutions[1::2])


def test_openai_es_refuses_other_solutions():
    es = OpenAIES(np.zeros(2), sigma0=0.1, popsize=4, seed=0)
    solutions = es.ask()
    with pytest.raises(ValueError, match="latest ask"):
        es.tell(solutions + 1.0, np.arange(4.0))
    es.tell(solutions.astype(np.float32), np.arange(4.0))  # float32 rounding is accepted


def test_openai_es_converges():
    es = OpenAIES(np.zeros(5), sigma0=0.1, popsize=32, seed=0, learning_rate=0.02)
    run(es, 300, target=1.0)
    np.testing.assert_allclose(es.result.center, np.ones(5), atol=0.02)


# ---- CMA-ES ---------------------------------------------------------------------------------
def test_cmaes_maximizes_and_tracks_best(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    es = CMAES(np.zeros(3), sigma0=0.5, popsize=8, seed=1)
    assert es.result.best_return == -np.inf and es.result.generation == 0
    best = -np.inf
    for _ in range(100):
        solutions = es.ask()
        assert solutions.shape == (8, 3) and solutions.dtype == np.float64
        returns = neg_sq_dist(solutions, 3.0)
        best = max(best, returns.max())
        es.tell(solutions, returns)
        assert es.result.best_return == best
        assert neg_sq_dist(es.result.best_solution[None], 3.0)[0] == best
    np.testing.assert_allclose(es.result.center, np.full(3, 3.0), atol=1e-3)
    assert es.sigma < 0.5
    assert os.listdir(tmp_path) == []  # verbose=-9 writes no files


def test_cmaes_library_stop_conditions():
    es = CMAES(np.zeros(2), sigma0=0.5, popsize=6, seed=0, cma_options={"tolfun": 1e-3})
    for _ in range(200):
        solutions = es.ask()
        es.tell(solutions, neg_sq_dist(solutions, 0.5))
        if es.stop():
            break
    assert "tolfun" in es.stop()
    assert es.result.generation < 200


def test_cmaes_budget_conditions_only_when_set():
    es = CMAES(np.zeros(2), sigma0=0.5, popsize=6, seed=0)
    run(es, 1, target=0.5)
    es._es.countiter = 10 ** 6  # past cma's default maxiter, which we did not set
    assert "maxiter" in es._es.stop() and "maxiter" not in es.stop()
    es = CMAES(np.zeros(2), sigma0=0.5, popsize=6, seed=0, cma_options={"maxiter": 3})
    run(es, 3, target=0.5)
    assert "maxiter" in es.stop()


def test_cmaes_rejects_options():
    with pytest.raises(ValueError, match="popsize"):
        CMAES(np.zeros(2), 0.5, 6, cma_options={"popsize": 10})
    with pytest.raises(ValueError, match="popsiz"):
        CMAES(np.zeros(2), 0.5, 6, cma_options={"popsiz": 10})


# ---- all strategies -------------------------------------------------------------------------
STRATEGIES = [
    (CEM, dict(sigma0=0.5, popsize=8)),
    (CMAES, dict(sigma0=0.5, popsize=8)),
    (OpenAIES, dict(sigma0=0.1, popsize=8, learning_rate=0.05)),
]
IDS = [cls.__name__ for cls, _ in STRATEGIES]


@pytest.mark.parametrize("cls,kwargs", STRATEGIES, ids=IDS)
def test_seeded_runs_repeat_and_do_not_interfere(cls, kwargs):
    a, b = cls(np.zeros(3), seed=5, **kwargs), cls(np.zeros(3), seed=5, **kwargs)
    for _ in range(3):  # interleaved: each object draws from its own generator
        xa, xb = a.ask(), b.ask()
        np.testing.assert_array_equal(xa, xb)
        a.tell(xa, neg_sq_dist(xa, 1.0))
        b.tell(xb, neg_sq_dist(xb, 1.0))
    other = cls(np.zeros(3), seed=6, **kwargs)
    assert not np.array_equal(cls(np.zeros(3), seed=5, **kwargs).ask(), other.ask())
    assert not np.array_equal(cls(np.zeros(3), seed=None, **kwargs).ask(),
                              cls(np.zeros(3), seed=None, **kwargs).ask())


@pytest.mark.parametrize("cls,kwargs", STRATEGIES, ids=IDS)
def test_improves_on_concave_function(cls, kwargs):
    es = cls(np.zeros(4), seed=0, **kwargs)
    start = neg_sq_dist(es.result.center[None], 2.0)[0]  # -16
    run(es, 60, target=2.0)
    # a wrong sign would walk away (below start); plain CEM with 2 elites of 8 stalls early,
    # so the bar is a quarter of the way (test_cem_converges shows noisy CEM reaching it)
    assert neg_sq_dist(es.result.center[None], 2.0)[0] > 0.75 * start
    assert isinstance(es.result, ESResult) and es.result.evaluations == 60 * 8


@pytest.mark.parametrize("cls,kwargs", STRATEGIES, ids=IDS)
def test_state_dict_round_trip(cls, kwargs):
    es = cls(np.zeros(3), seed=0, **kwargs)
    run(es, 5, target=1.0)
    state = es.state_dict()
    allowed = (np.ndarray, float, int, bytes, str, dict, type(None))
    assert all(isinstance(value, allowed) for value in state.values()), state
    later_asks = run(es, 4, target=1.0)  # the saved state must not follow the run

    fresh = cls(np.zeros(3), seed=123, **kwargs)
    fresh.load_state_dict(state)
    assert fresh.result.generation == 5
    for expected in later_asks:
        solutions = fresh.ask()
        np.testing.assert_array_equal(solutions, expected)
        fresh.tell(solutions, neg_sq_dist(solutions, 1.0))
    for field in ESResult._fields:
        np.testing.assert_array_equal(getattr(fresh.result, field), getattr(es.result, field))
    assert fresh.sigma == es.sigma
    np.testing.assert_array_equal(fresh.ask(), es.ask())

    with pytest.raises(ValueError, match="popsize"):
        cls(np.zeros(3), seed=0, **dict(kwargs, popsize=10)).load_state_dict(state)


@pytest.mark.parametrize("cls,kwargs", STRATEGIES, ids=IDS)
def test_bad_constructor_arguments(cls, kwargs):
    with pytest.raises(ValueError, match=r"popsize must be an integer >= 2; got 1"):
        cls(np.zeros(2), **dict(kwargs, popsize=1))
    for sigma0 in (0.0, -0.5, float("nan")):
        with pytest.raises(ValueError, match=rf"sigma0 must be .*> 0; got {sigma0}"):
            cls(np.zeros(2), **dict(kwargs, sigma0=sigma0))
    with pytest.raises(ValueError, match="x0 must be"):
        cls(np.zeros((2, 2)), **kwargs)
    with pytest.raises(ValueError, match="seed must be"):
        cls(np.zeros(2), seed=-1, **kwargs)


def test_strategy_specific_arguments():
    with pytest.raises(ValueError, match="popsize must be even; got 7"):
        OpenAIES(np.zeros(2), 0.1, popsize=7)
    with pytest.raises(ValueError, match=r"learning_rate must be in \(0, inf\); got 0"):
        OpenAIES(np.zeros(2), 0.1, popsize=4, learning_rate=0)
    with pytest.raises(ValueError, match=r"elite_frac must be in \(0, 1\]; got 1.5"):
        CEM(np.zeros(2), 0.1, popsize=4, elite_frac=1.5)
    with pytest.raises(ValueError, match=r"alpha must be in \(0, 1\]; got 0"):
        CEM(np.zeros(2), 0.1, popsize=4, alpha=0)
    with pytest.raises(ValueError, match="extra_noise_decay_gens must be an integer >= 1; got 0"):
        CEM(np.zeros(2), 0.1, popsize=4, extra_noise_decay_gens=0)


@pytest.mark.parametrize("cls,kwargs", STRATEGIES, ids=IDS)
def test_bad_tell_arguments(cls, kwargs):
    es = cls(np.zeros(2), seed=0, **kwargs)
    with pytest.raises(RuntimeError, match="ask"):
        es.tell(np.zeros((8, 2)), np.zeros(8))
    solutions = es.ask()
    with pytest.raises(ValueError, match=r"shape \(popsize, D\) = \(8, 2\).*got shape \(7, 2\)"):
        es.tell(solutions[:7], np.zeros(7))
    with pytest.raises(ValueError, match=r"returns must have shape .*\(8,\).*got shape \(8, 1\)"):
        es.tell(solutions, np.zeros((8, 1)))
    bad = np.zeros(8)
    bad[3] = np.nan
    with pytest.raises(ValueError, match=r"finite; got \[nan\] at rows \[3\]"):
        es.tell(solutions, bad)
    assert es.result.generation == 0  # nothing was told
    es.tell(solutions, np.zeros(8))
    assert es.result.generation == 1
