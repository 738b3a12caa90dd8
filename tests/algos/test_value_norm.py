"""MAPPO's value normalization (``value_norm``) and Huber value loss (``value_loss="huber"``)
for A2C and PPO: the normalizer against a by-hand NumPy reference of its debiased moving
averages, the Huber loss against a hand computation, normalized critic targets on a batch with
large returns, GAE on denormalized estimates, snapshots, and no extra host reads."""
from __future__ import annotations

import io

import numpy as np
import pytest
import torch

from rlfast.algos import A2C, PPO
from rlfast.algos.pg.value_norm import ValueNormalizer
from rlfast.utils.host_sync import HostSyncCounter

from tests.algos import _pg_batch
from tests.algos.test_host_syncs import MAX_SYNCS

BETA = 0.99999


class ReferenceNorm:
    """The MAPPO description in float64 NumPy, one scalar at a time: exponential moving
    averages of the batch mean and mean of squares and of 1 (the debiasing term); the
    statistics divide the first two by the third (floored at 1e-5); the variance is floored
    at 1e-2."""

    def __init__(self, beta: float = BETA):
        self.beta, self.m, self.sq, self.d = beta, 0.0, 0.0, 0.0

    def update(self, x: np.ndarray, valid: np.ndarray) -> None:
        chosen = x[valid > 0]
        if chosen.size == 0:
            return
        self.m = self.beta * self.m + (1 - self.beta) * chosen.mean()
        self.sq = self.beta * self.sq + (1 - self.beta) * (chosen ** 2).mean()
        self.d = self.beta * self.d + (1 - self.beta) * 1.0

    def mean_std(self) -> tuple[float, float]:
        d = max(self.d, 1e-5)
        mean = self.m / d
        return mean, float(np.sqrt(max(self.sq / d - mean ** 2, 1e-2)))


def test_the_normalizer_matches_the_debiased_moving_averages_by_hand():
    rng = np.random.RandomState(3)
    norm, ref = ValueNormalizer(beta=BETA), ReferenceNorm(BETA)
    mean, std = norm.mean_std()  # before any update: mean 0, the variance floor
    assert float(mean) == 0.0 and float(std) == pytest.approx(0.1)
    for i in range(6):
        x = rng.randn(5, 4) * (40.0 + 30 * i) + 200.0 * i
        valid = (rng.rand(5, 4) < 0.7).astype(np.float64)
        if i == 3:
            valid[:] = 0  # no valid step: the statistics stay as they were
        norm.update(torch.as_tensor(x, dtype=torch.float32), torch.as_tensor(valid))
        ref.update(x.astype(np.float32).astype(np.float64), valid)
        mean, std = norm.mean_std()
        ref_mean, ref_std = ref.mean_std()
        assert float(mean) == pytest.approx(ref_mean, rel=1e-9)
        assert float(std) == pytest.approx(ref_std, rel=1e-9)
        y = torch.as_tensor(rng.randn(3, 4), dtype=torch.float32)
        np.testing.assert_allclose(norm.normalize(y).numpy(), (y.numpy() - ref_mean) / ref_std,
                                   rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(norm.denormalize(y).numpy(), y.numpy() * ref_std + ref_mean,
                                   rtol=1e-5, atol=1e-3)
        assert norm.denormalize(norm.normalize(y)).dtype == torch.float32
    # The first update alone gives that batch's own mean and (population) variance.
    first = ValueNormalizer()
    x = torch.tensor([1.0, 3.0, 100.0, 8.0])
    first.update(x, torch.tensor([1.0, 1.0, 0.0, 1.0]))
    mean, std = first.mean_std()
    assert float(mean) == pytest.approx(4.0) and float(std) == pytest.approx(np.std([1, 3, 8]))


def test_an_update_pools_the_statistics_of_every_rank(monkeypatch):
    """Under SyncRl the update folds in the valid steps of every rank's batch: with an
    all-reduce standing in for a second rank's sums, the statistics are those of both
    ranks' steps together."""
    from rlfast.algos.pg import value_norm

    rng = np.random.RandomState(5)
    mine, other = rng.randn(4, 3) * 7 + 2, rng.randn(4, 3) * 3 - 20
    mine_valid, other_valid = np.ones((4, 3)), (rng.rand(4, 3) < 0.5).astype(np.float64)
    chosen = other[other_valid > 0]
    other_sums = torch.tensor([chosen.size, chosen.sum(), (chosen ** 2).sum()],
                              dtype=torch.float64)
    monkeypatch.setattr(value_norm, "all_reduce_sum", lambda sums: sums + other_sums)
    norm, ref = ValueNormalizer(), ReferenceNorm()
    norm.update(torch.as_tensor(mine), torch.as_tensor(mine_valid))
    ref.update(np.concatenate([mine.ravel(), other.ravel()]),
               np.concatenate([mine_valid.ravel(), other_valid.ravel()]))
    mean, std = norm.mean_std()
    assert float(mean) == pytest.approx(ref.mean_std()[0], rel=1e-9)
    assert float(std) == pytest.approx(ref.mean_std()[1], rel=1e-9)


def test_the_huber_value_loss_matches_a_hand_computation():
    delta = 2.0
    algo = PPO(value_loss="huber", huber_delta=delta)
    value = torch.tensor([0.0, 1.0, -3.0, 5.0, 2.0])
    return_ = torch.tensor([0.5, -1.0, 0.0, -5.0, 2.0])
    # errors 0.5, -2 (at delta), 3, -10, 0 -> 0.5 e^2 inside delta, delta (|e| - delta/2) out
    expected = [0.125, 2.0, 2.0 * (3 - 1.0), 2.0 * (10 - 1.0), 0.0]
    assert algo.value_error(value, return_).tolist() == pytest.approx(expected)
    mse = PPO().value_error(value, return_)
    assert mse.tolist() == pytest.approx([0.125, 2.0, 4.5, 50.0, 0.0])
    # the gradient is the clipped error: e inside, delta * sign(e) beyond
    value.requires_grad_(True)
    algo.value_error(value, return_).sum().backward()
    assert value.grad.tolist() == pytest.approx([-0.5, 2.0, -2.0, 2.0, 0.0])


@pytest.mark.parametrize("Algo", [PPO, A2C])
def test_the_huber_loss_reaches_the_logged_value_loss(Algo):
    algo = Algo(value_loss="huber", huber_delta=0.3, value_loss_coeff=0.5)
    agent, samples = _pg_batch.setup(algo, "categorical", T=6, B=3)
    batch = algo.loss_batch(samples, flatten=isinstance(algo, PPO))
    _, value = agent(*batch.inputs.agent_inputs)
    error = (value - batch.inputs.return_).detach().numpy().astype(np.float64)
    valid = batch.inputs.valid.numpy().astype(np.float64)
    size = np.abs(error)
    hand = np.where(size <= 0.3, 0.5 * error ** 2, 0.3 * (size - 0.15))
    _, info = algo.loss(*batch.inputs)
    assert float(info.valueLoss) == pytest.approx(0.5 * (hand * valid).sum() / valid.sum(),
                                                  rel=1e-5)


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(value_norm="yes"), TypeError, "value_norm must be True or False; got 'yes'"),
    (dict(value_loss="l1"), ValueError, "value_loss must be one of mse, huber; got 'l1'"),
    (dict(huber_delta=0), ValueError, "huber_delta must be a positive finite number; got 0"),
    (dict(huber_delta=True), ValueError, "huber_delta .* got True"),
    (dict(huber_delta=float("inf")), ValueError, "huber_delta .* got inf"),
])
@pytest.mark.parametrize("Algo", [PPO, A2C])
def test_bad_settings_are_refused_by_name(Algo, kwargs, error, match):
    with pytest.raises(error, match=f"{Algo.__name__}: {match}"):
        Algo(**kwargs)


def _large_return_samples(algo, scale: float = 1000.0):
    agent, samples = _pg_batch.setup(algo, "categorical", T=16, B=4)
    samples.env.reward.mul_(scale).add_(5 * scale)
    samples.agent.bootstrap_value.mul_(scale)
    return agent, samples


@pytest.mark.parametrize("Algo", [PPO, A2C])
def test_with_value_norm_the_critic_regresses_on_normalized_returns(Algo):
    algo = Algo(value_norm=True, discount=0.9)
    agent, samples = _large_return_samples(algo)
    raw_return, _, _ = algo.process_returns(samples)
    batch = algo.loss_batch(samples, flatten=False)
    valid = batch.inputs.valid > 0
    assert raw_return[valid].mean() > 1e3  # rewards of order 5000, short episodes
    target = batch.inputs.return_[valid]  # the first update: the batch's own statistics
    assert float(target.mean()) == pytest.approx(0.0, abs=1e-4)
    assert float(target.std(unbiased=False)) == pytest.approx(1.0, rel=1e-4)
    _, info = algo.loss(*batch.inputs)
    assert 0 < float(info.valueLoss) < 5  # of order one (the critic starts near zero)
    plain = Algo(discount=0.9)
    _, plain_samples = _large_return_samples(plain)
    _, plain_info = plain.loss(*plain.loss_batch(plain_samples, flatten=False).inputs)
    assert float(plain_info.valueLoss) > 1e6
    # a whole update, advantages standardized: every step's loss is of order one
    algo = Algo(value_norm=True, discount=0.9, normalize_advantage=True)
    _, samples = _large_return_samples(algo)
    assert 0 < max(algo.optimize_agent(0, samples).loss) < 10


def test_gae_reads_the_estimates_in_the_returns_units():
    """With statistics (mean m, std s) in place, the stored values and the bootstrap value
    are normalized outputs: the returns and advantages equal those of a plain algorithm fed
    ``v * s + m`` for both."""
    algo = PPO(value_norm=True, gae_lambda=0.95, discount=0.97)
    _, samples = _pg_batch.setup(algo, "categorical", T=9, B=3)
    algo.value_normalizer.load_state_dict(dict(mean=torch.tensor(3.0), mean_sq=torch.tensor(
        3.0 ** 2 + 4.0 ** 2), debias=torch.tensor(1.0)))  # mean 3, std 4
    return_, advantage, valid = algo.process_returns(samples)
    plain = PPO(gae_lambda=0.95, discount=0.97)
    _pg_batch.setup(plain, "categorical", T=9, B=3)
    info = samples.agent.agent_info
    by_hand = samples._replace(agent=samples.agent._replace(
        agent_info=info._replace(value=info.value * 4 + 3),
        bootstrap_value=samples.agent.bootstrap_value * 4 + 3))
    ref_return, ref_advantage, ref_valid = plain.process_returns(by_hand)
    torch.testing.assert_close(return_, ref_return)
    torch.testing.assert_close(advantage, ref_advantage)
    assert torch.equal(valid, ref_valid)


@pytest.mark.parametrize("Algo", [PPO, A2C])
def test_the_statistics_survive_a_snapshot(Algo):
    algo = Algo(value_norm=True)
    _, samples = _large_return_samples(algo, scale=50.0)
    algo.optimize_agent(0, samples)
    algo.optimize_agent(1, samples)
    buffer = io.BytesIO()
    torch.save(algo.state_dict(), buffer)
    buffer.seek(0)
    fresh = Algo(value_norm=True)
    _pg_batch.setup(fresh, "categorical", T=16, B=4)
    assert float(fresh.value_normalizer.mean_std()[0]) == 0.0
    fresh.load_state_dict(torch.load(buffer, weights_only=False))
    for name in ("mean", "mean_sq", "debias"):
        assert torch.equal(getattr(fresh.value_normalizer, name),
                           getattr(algo.value_normalizer, name))
    assert float(algo.value_normalizer.mean_std()[0]) > 100
    assert "value_normalizer" not in Algo().state_dict()


@pytest.mark.parametrize("make_algo", [
    lambda **kw: PPO(minibatches=8, epochs=3, **kw), lambda **kw: A2C(**kw)],
    ids=["ppo", "a2c"])
@pytest.mark.parametrize("kind", _pg_batch.KINDS)
def test_the_options_add_no_host_read(make_algo, kind):
    counts = []
    for kwargs in (dict(), dict(value_norm=True, value_loss="huber")):
        algo = make_algo(**kwargs)
        _, samples = _pg_batch.setup(algo, kind, T=16, B=4)
        algo.optimize_agent(0, samples)
        with HostSyncCounter() as syncs:
            algo.optimize_agent(1, samples)
        counts.append(syncs.count)
    assert counts[1] == counts[0] <= MAX_SYNCS, counts


def test_the_keys_reach_the_configuration_with_set():
    from rlfast.experiments.assembly import resolve_config
    from rlfast.experiments.presets import get_preset

    spread = "pz:mpe2.simple_spread_v3"
    for algo_name, env_id in (("ppo", "CartPole-v1"), ("a2c", "CartPole-v1"), ("ppo", spread),
                              ("a2c", spread)):
        base = get_preset(algo_name, env_id)
        assert (base["algo"]["value_norm"], base["algo"]["value_loss"],
                base["algo"]["huber_delta"]) == (False, "mse", 10.0), (algo_name, env_id)
    # the mappo preset turns both on (measured better on Spread: preset_data.py)
    base = get_preset("mappo", spread)
    assert (base["algo"]["value_norm"], base["algo"]["value_loss"],
            base["algo"]["huber_delta"]) == (True, "huber", 10.0)
    config = resolve_config(get_preset("ppo", "CartPole-v1"),
                            overrides=["algo.value_norm=True", "algo.value_loss=huber",
                                       "algo.huber_delta=5"])
    assert (config["algo"]["value_norm"], config["algo"]["value_loss"],
            config["algo"]["huber_delta"]) == (True, "huber", 5)


def test_the_step_program_trains_on_the_normalized_returns():
    """With ``compile``'s step program (here its eager path) the normalized targets of every
    batch are copied into the program's buffers: the updates equal the plain learner's, bit
    for bit, over several batches whose statistics move."""
    from rlfast.algos import graph_step

    def run(capture):
        algo = PPO(value_norm=True, value_loss="huber", huber_delta=1.0, minibatches=2,
                   epochs=2)
        algo.program_capture = capture
        agent, samples = _large_return_samples(algo, scale=30.0)
        torch.manual_seed(11)
        infos = [tuple(algo.optimize_agent(i, samples)) for i in range(3)]
        return algo, infos, {k: v.clone() for k, v in agent.state_dict().items()}

    _, plain_infos, plain_weights = run(None)
    algo, infos, weights = run(graph_step.eager_program)
    assert algo._program is not None and algo._program.path == "eager"
    assert infos == plain_infos
    assert all(torch.equal(weights[k], plain_weights[k]) for k in plain_weights)
