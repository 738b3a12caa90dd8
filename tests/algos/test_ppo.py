"""PPO: the clipped-surrogate loss, its terms, the approximate KL, the clip fraction and the
explained variance against hand computations over individual steps; the minibatch loop's
bookkeeping and diagnostics."""
import math

import pytest
import torch

from rlfast.algos import PPO
from rlfast.algos.pg.ppo import LossInputs, PpoOptInfo
from rlfast.algos.utils import episode_starts
from rlfast.utils.buffer import buffer_func

from tests.algos import _pg_batch as pg


def _hand_loss(algo, kind, agent, samples, mid_batch_reset=True):
    """Every term of the PPO loss on the whole batch, element by element in float64."""
    ret, adv, valid, dist_info, value, old, action = pg.reference_inputs(
        algo, agent, samples, mid_batch_reset)
    eps = algo.ratio_clip
    T, B = samples.env.reward.shape
    terms = {k: [[0.0] * B for _ in range(T)] for k in ("pi", "value", "entropy", "kl", "clip")}
    for t in range(T):
        for b in range(B):
            log_ratio = (pg.log_prob(kind, dist_info, action, t, b)
                         - pg.log_prob(kind, old, action, t, b))
            ratio = math.exp(log_ratio)
            a = adv[t][b]
            terms["pi"][t][b] = -min(ratio * a, min(max(ratio, 1 - eps), 1 + eps) * a)
            terms["value"][t][b] = 0.5 * (float(value[t, b]) - ret[t][b]) ** 2
            terms["entropy"][t][b] = pg.entropy(kind, dist_info, t, b)
            terms["kl"][t][b] = (ratio - 1) - log_ratio
            terms["clip"][t][b] = float(abs(ratio - 1) > eps)
    mean = {k: pg.valid_mean(v, valid) for k, v in terms.items()}
    value_loss = algo.value_loss_coeff * mean["value"]
    return dict(pi_loss=mean["pi"], value_loss=value_loss, entropy=mean["entropy"],
                loss=mean["pi"] + value_loss - algo.entropy_loss_coeff * mean["entropy"],
                approx_kl=mean["kl"], clip_frac=mean["clip"],
                explained_variance=pg.explained_variance(
                    ret, samples.agent.agent_info.value.double().tolist(), valid))


def _loss_on_batch(algo, agent, samples):
    return_, advantage, valid = algo.process_returns(samples)
    inputs = LossInputs(agent_inputs=(samples.env.observation, samples.agent.prev_action,
                                      samples.env.prev_reward),
                        action=samples.agent.action, return_=return_, advantage=advantage,
                        valid=valid, old_dist_info=samples.agent.agent_info.dist_info)
    if not agent.recurrent:
        return algo.loss(*inputs)
    init_rnn_state = buffer_func(samples.agent.agent_info.prev_rnn_state[0],
                                 lambda s: s.transpose(0, 1).contiguous())
    return algo.loss(*inputs, init_rnn_state=init_rnn_state,
                     reset=episode_starts(samples.env.done))


@pytest.mark.parametrize("kind", pg.KINDS)
@pytest.mark.parametrize("gae_lambda", [1, 0.9])
def test_loss_terms_match_hand_computation(kind, gae_lambda):
    algo = PPO(discount=0.9, gae_lambda=gae_lambda, value_loss_coeff=0.7,
               entropy_loss_coeff=0.05, ratio_clip=0.1)
    agent, samples = pg.setup(algo, kind)
    expected = _hand_loss(algo, kind, agent, samples)
    loss, info = _loss_on_batch(algo, agent, samples)
    assert loss.item() == pytest.approx(expected["loss"], rel=1e-5, abs=1e-6)
    assert info.piLoss.item() == pytest.approx(expected["pi_loss"], rel=1e-5, abs=1e-6)
    assert info.valueLoss.item() == pytest.approx(expected["value_loss"], rel=1e-5, abs=1e-6)
    assert info.entropy.item() == pytest.approx(expected["entropy"], rel=1e-5, abs=1e-6)
    assert info.approxKl.item() == pytest.approx(expected["approx_kl"], rel=1e-4, abs=1e-6)
    assert info.clipFrac.item() == pytest.approx(expected["clip_frac"], abs=1e-6)
    # The perturbation moved the policy: some ratios are clipped and some are not.
    assert 0 < expected["clip_frac"] < 1 and expected["approx_kl"] > 1e-4
    assert not any(t.requires_grad for t in info) and loss.requires_grad


def test_clip_fraction_and_kl_are_zero_for_the_sampling_policy():
    algo = PPO()
    agent = pg.make_agent("gaussian")
    samples = pg.make_samples(agent, "gaussian")
    agent.train_mode(0)
    algo.initialize(agent, n_itr=1, batch_spec=pg.BatchSpec(7, 3), mid_batch_reset=True)
    _, info = _loss_on_batch(algo, agent, samples)
    assert info.clipFrac.item() == 0.0
    assert abs(info.approxKl.item()) < 1e-6


@pytest.mark.parametrize("kind", pg.KINDS)
def test_one_minibatch_logs_the_pre_step_loss_and_diagnostics(kind):
    """With one epoch of one minibatch, the logged loss, KL and clip fraction are those of the
    whole batch before the step (the minibatch is a permutation of it)."""
    algo = PPO(discount=0.95, gae_lambda=0.8, minibatches=1, epochs=1, ratio_clip=0.15)
    agent, samples = pg.setup(algo, kind)
    expected = _hand_loss(algo, kind, agent, samples)
    info = algo.optimize_agent(0, samples)
    assert type(info) is PpoOptInfo and PPO.opt_info_fields == PpoOptInfo._fields
    assert {"approxKl", "clipFrac", "explainedVariance"} <= set(PPO.opt_info_fields)
    assert all(len(v) == 1 for v in info)
    assert info.loss[0] == pytest.approx(expected["loss"], rel=1e-5, abs=1e-6)
    assert info.entropy[0] == pytest.approx(expected["entropy"], rel=1e-5, abs=1e-6)
    assert info.approxKl[0] == pytest.approx(expected["approx_kl"], rel=1e-4, abs=1e-6)
    assert info.clipFrac[0] == pytest.approx(expected["clip_frac"], abs=1e-6)
    assert info.explainedVariance[0] == pytest.approx(expected["explained_variance"], rel=1e-6,
                                                        abs=1e-8)


@pytest.mark.parametrize("kind", ["categorical", "recurrent"])
def test_minibatch_loop_bookkeeping(kind):
    algo = PPO(minibatches=2, epochs=3)
    agent, samples = pg.setup(algo, kind, T=8, B=4)
    lr = algo.optimizer.param_groups[0]["lr"]
    info = algo.optimize_agent(0, samples)
    n_updates = 3 * 2
    assert algo.update_counter == n_updates
    for field in ("loss", "gradNorm", "entropy", "perplexity", "approxKl", "clipFrac"):
        values = getattr(info, field)
        assert len(values) == n_updates and all(math.isfinite(v) for v in values), field
    assert len(info.explainedVariance) == 1  # once per batch, from the sampler's values
    assert all(0 <= c <= 1 for c in info.clipFrac)
    assert all(k > -1e-6 for k in info.approxKl)
    assert algo.optimizer.param_groups[0]["lr"] == pytest.approx(lr * 9 / 10)


def test_explained_variance_edge_cases():
    from rlfast.algos.pg.base import explained_variance
    ret = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    assert explained_variance(ret, ret, None) == 1.0
    assert explained_variance(ret, torch.full_like(ret, 2.5), None) == pytest.approx(0.0)
    assert math.isnan(explained_variance(torch.ones(3, 2), torch.zeros(3, 2), None))
    assert math.isnan(explained_variance(ret, ret, torch.zeros_like(ret)))
    valid = torch.tensor([[1.0, 0.0], [1.0, 0.0]])  # only 1 and 3 count
    assert explained_variance(ret, torch.tensor([[1.0, 9.0], [2.0, 9.0]]), valid) == \
        pytest.approx(1 - 0.25 / 1.0)


@pytest.mark.parametrize("bad", [dict(minibatches=0), dict(epochs=0)])
def test_bad_minibatch_settings_raise(bad):
    with pytest.raises(ValueError, match=next(iter(bad))):
        PPO(**bad)


@pytest.mark.filterwarnings("ignore:Detected call of:UserWarning")
def test_lr_anneal_steps_sets_the_schedule_horizon_in_environment_steps():
    # T=8, B=4: 32 steps an iteration; the run is 10 iterations (pg.setup), the anneal 40
    # (1,280 steps): after one update the rate is 39/40 of its start, not the run's 9/10.
    algo = PPO(minibatches=2, epochs=1, lr_anneal_steps=1280)
    agent, samples = pg.setup(algo, "categorical", T=8, B=4)
    lr = algo.optimizer.param_groups[0]["lr"]
    algo.optimize_agent(0, samples)
    assert algo.optimizer.param_groups[0]["lr"] == pytest.approx(lr * 39 / 40)
    # A horizon that is not a whole number of iterations rounds up (100 steps: 4 iterations)
    # and the rate stays zero past it, never negative.
    algo = PPO(lr_anneal_steps=100)
    pg.setup(algo, "categorical", T=8, B=4)
    rates = []
    for _ in range(6):
        rates.append(algo.optimizer.param_groups[0]["lr"] / algo.learning_rate)
        algo.lr_scheduler.step()
    assert rates == pytest.approx([1.0, 0.75, 0.5, 0.25, 0.0, 0.0])


@pytest.mark.filterwarnings("ignore:Detected call of:UserWarning")
def test_lr_anneal_steps_counts_every_ranks_batch():
    algo = PPO(lr_anneal_steps=1280)
    agent = pg.make_agent("categorical")
    algo.initialize(agent, n_itr=10, batch_spec=pg.BatchSpec(8, 4), world_size=2, rank=0)
    algo.lr_scheduler.step()  # 64 steps an iteration over both ranks: a 20-iteration anneal
    assert algo.optimizer.param_groups[0]["lr"] == pytest.approx(algo.learning_rate * 19 / 20)


@pytest.mark.parametrize("bad", [0, -5, 2.5, True, "10M"])
def test_bad_lr_anneal_steps_raise(bad):
    with pytest.raises((ValueError, TypeError), match="lr_anneal_steps"):
        PPO(lr_anneal_steps=bad)
