"""A2C: the loss terms and diagnostics against hand computations over individual steps, the
returns with time-limit bootstrapping against a reference loop, and what optimize_agent logs."""
import math

import pytest
import torch

from rlfast.algos import A2C, PPO
from rlfast.algos.pg.base import OptInfo

from tests.algos import _pg_batch as pg


def _hand_loss(algo, kind, agent, samples, mid_batch_reset=True):
    """Every term of the A2C loss, computed element by element in float64."""
    ret, adv, valid, dist_info, value, old, action = pg.reference_inputs(
        algo, agent, samples, mid_batch_reset)
    T, B = samples.env.reward.shape
    pi_terms, value_terms, entropies, kl_terms = ([[0.0] * B for _ in range(T)] for _ in range(4))
    for t in range(T):
        for b in range(B):
            logp = pg.log_prob(kind, dist_info, action, t, b)
            log_ratio = logp - pg.log_prob(kind, old, action, t, b)
            pi_terms[t][b] = -logp * adv[t][b]
            value_terms[t][b] = 0.5 * (float(value[t, b]) - ret[t][b]) ** 2
            entropies[t][b] = pg.entropy(kind, dist_info, t, b)
            kl_terms[t][b] = math.expm1(log_ratio) - log_ratio
    pi_loss = pg.valid_mean(pi_terms, valid)
    value_loss = algo.value_loss_coeff * pg.valid_mean(value_terms, valid)
    entropy = pg.valid_mean(entropies, valid)
    return dict(pi_loss=pi_loss, value_loss=value_loss, entropy=entropy,
                loss=pi_loss + value_loss - algo.entropy_loss_coeff * entropy,
                approx_kl=pg.valid_mean(kl_terms, valid),
                explained_variance=pg.explained_variance(
                    ret, samples.agent.agent_info.value.double().tolist(), valid))


@pytest.mark.parametrize("kind", pg.KINDS)
@pytest.mark.parametrize("gae_lambda", [1, 0.9])
def test_loss_terms_match_hand_computation(kind, gae_lambda):
    algo = A2C(discount=0.9, gae_lambda=gae_lambda, value_loss_coeff=0.5,
               entropy_loss_coeff=0.05)
    agent, samples = pg.setup(algo, kind)
    expected = _hand_loss(algo, kind, agent, samples)
    loss, info = algo.minibatch_loss(algo.loss_batch(samples, flatten=False), None)
    assert loss.item() == pytest.approx(expected["loss"], rel=1e-5, abs=1e-6)
    assert info.piLoss.item() == pytest.approx(expected["pi_loss"], rel=1e-5, abs=1e-6)
    assert info.valueLoss.item() == pytest.approx(expected["value_loss"], rel=1e-5, abs=1e-6)
    assert info.entropy.item() == pytest.approx(expected["entropy"], rel=1e-5, abs=1e-6)
    assert info.approxKl.item() == pytest.approx(expected["approx_kl"], rel=1e-4, abs=1e-6)
    assert expected["approx_kl"] > 1e-4  # the perturbed policy moved away from the sampler's
    assert not any(t.requires_grad for t in info)
    assert loss.requires_grad


@pytest.mark.parametrize("kind", pg.KINDS)
def test_optimize_agent_logs_the_pre_step_loss_and_diagnostics(kind):
    algo = A2C(discount=0.95, gae_lambda=0.8)
    agent, samples = pg.setup(algo, kind)
    expected = _hand_loss(algo, kind, agent, samples)
    before = [p.detach().clone() for p in agent.parameters()]
    info = algo.optimize_agent(0, samples)
    assert type(info) is OptInfo and A2C.opt_info_fields == OptInfo._fields
    assert "clipFrac" not in A2C.opt_info_fields
    assert all(len(v) == 1 for v in info)
    assert info.loss[0] == pytest.approx(expected["loss"], rel=1e-5, abs=1e-6)
    assert info.entropy[0] == pytest.approx(expected["entropy"], rel=1e-5, abs=1e-6)
    assert info.approxKl[0] == pytest.approx(expected["approx_kl"], rel=1e-4, abs=1e-6)
    assert info.explainedVariance[0] == pytest.approx(expected["explained_variance"], rel=1e-6,
                                                        abs=1e-8)
    assert math.isfinite(info.gradNorm[0]) and info.gradNorm[0] > 0
    assert any(not torch.equal(a, p) for a, p in zip(before, agent.parameters()))
    assert algo.update_counter == 1


def test_approx_kl_is_zero_on_fresh_samples():
    """A2C trains on the policy that sampled: the ratio is 1 and the KL estimate ~0."""
    algo = A2C()
    agent = pg.make_agent("categorical")
    samples = pg.make_samples(agent, "categorical")
    agent.train_mode(0)
    algo.initialize(agent, n_itr=1, batch_spec=pg.BatchSpec(7, 3), mid_batch_reset=True)
    info = algo.optimize_agent(0, samples)
    assert abs(info.approxKl[0]) < 1e-6


@pytest.mark.parametrize("kind", ["categorical", "recurrent"])
@pytest.mark.parametrize("mid_batch_reset", [True, False])
@pytest.mark.parametrize("gae_lambda", [1, 0.95])
@pytest.mark.parametrize("algo_cls", [A2C, PPO])
def test_process_returns_bootstraps_at_time_limits(kind, mid_batch_reset, gae_lambda, algo_cls):
    algo = algo_cls(discount=0.9, gae_lambda=gae_lambda)
    agent, samples = pg.setup(algo, kind, T=9, B=4, seed=3, mid_batch_reset=mid_batch_reset)
    assert samples.env.env_info.timeout.any() and \
        (samples.env.done & ~samples.env.env_info.timeout).any()
    return_, advantage, valid = algo.process_returns(samples)
    ret, adv = pg.ref_returns(samples, 0.9, gae_lambda)
    torch.testing.assert_close(return_, torch.tensor(ret, dtype=torch.float32))
    torch.testing.assert_close(advantage, torch.tensor(adv, dtype=torch.float32))
    expected_valid = pg.ref_valid(samples, mid_batch_reset, agent.recurrent)
    assert valid.tolist() == expected_valid


def test_process_returns_without_timelimit_bootstrap_treats_timeouts_as_terminal():
    algo = A2C(discount=0.9, bootstrap_timelimit=False)
    agent, samples = pg.setup(algo, "categorical", T=9, B=4, seed=3)
    return_, advantage, valid = algo.process_returns(samples)
    ret, _ = pg.ref_returns(samples, 0.9, 1, bootstrap_timelimit=False)
    torch.testing.assert_close(return_, torch.tensor(ret, dtype=torch.float32))
    assert valid.tolist() == pg.ref_valid(samples, True, False, bootstrap_timelimit=False)


def test_normalized_advantage_has_zero_mean_unit_std_over_valid_steps():
    algo = A2C(discount=0.9, gae_lambda=0.9, normalize_advantage=True)
    _, samples = pg.setup(algo, "categorical", T=9, B=4, seed=3)
    _, advantage, valid = algo.process_returns(samples)
    kept = advantage[valid.bool()].double()
    assert kept.mean().item() == pytest.approx(0.0, abs=1e-6)
    assert kept.std(unbiased=False).item() == pytest.approx(1.0, abs=1e-4)


def test_defaults_and_shared_hyperparameters():
    a2c, ppo = A2C(), PPO()
    assert a2c.value_loss_coeff == 0.5 and ppo.value_loss_coeff == 1.0
    for algo in (a2c, ppo):
        assert (algo.discount, algo.learning_rate, algo.entropy_loss_coeff, algo.clip_grad_norm,
                algo.gae_lambda, algo.normalize_advantage, algo.bootstrap_timelimit) == \
            (0.99, 0.001, 0.01, 1.0, 1, False, True)
        assert algo.OptimCls is torch.optim.Adam and algo.optim_kwargs == {}
