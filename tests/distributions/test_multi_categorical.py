"""MultiCategorical checked against an independent reference: one torch.distributions.Categorical
per action dimension, in float64, combined with explicit Python loops."""
import numpy as np
import pytest
import torch
import torch.distributions as td

from rlfast.distributions import DistInfo, MultiCategorical

LEAD_SHAPES = [(), (4,), (3, 4)]
NVEC = (3, 5, 2)  # unequal sizes exercise the padded layout


def _random_probs(lead_shape, nvec, seed):
    """Concatenated per-dimension probability vectors, float64."""
    gen = torch.Generator().manual_seed(seed)
    parts = [torch.softmax(torch.randn(lead_shape + (n,), generator=gen, dtype=torch.float64), -1)
             for n in nvec]
    return torch.cat(parts, dim=-1)


def _segments(prob, nvec):
    return list(torch.split(prob, list(nvec), dim=-1))


def _random_actions(lead_shape, nvec, start, seed):
    gen = torch.Generator().manual_seed(seed)
    return torch.stack([torch.randint(n, lead_shape, generator=gen) + s
                        for n, s in zip(nvec, start)], dim=-1)


def _reference(lead_shape, p, q, x, nvec, start):
    """Per-datum log p(x), entropy(p), KL(p||q) by looping over data and dimensions."""
    ll = torch.zeros(lead_shape, dtype=torch.float64)
    ent = torch.zeros(lead_shape, dtype=torch.float64)
    kl = torch.zeros(lead_shape, dtype=torch.float64)
    p_parts, q_parts = _segments(p, nvec), _segments(q, nvec)
    for idx in np.ndindex(*lead_shape):
        for d in range(len(nvec)):
            ref_p = td.Categorical(probs=p_parts[d][idx])
            ref_q = td.Categorical(probs=q_parts[d][idx])
            value = x[idx + (d,)] - start[d]
            ll[idx] += ref_p.log_prob(value)
            ent[idx] += ref_p.entropy()
            kl[idx] += td.kl_divergence(ref_p, ref_q)
    return ll, ent, kl


@pytest.mark.parametrize("start", [(0, 0, 0), (1, -2, 5)])
@pytest.mark.parametrize("lead_shape", LEAD_SHAPES)
def test_formulas_match_per_dimension_reference(lead_shape, start):
    p = _random_probs(lead_shape, NVEC, seed=1)
    q = _random_probs(lead_shape, NVEC, seed=2)
    x = _random_actions(lead_shape, NVEC, start, seed=3)
    dist = MultiCategorical(NVEC, start=start)
    assert dist.dim == sum(NVEC) and dist.n_dims == 3 and dist.nvec == NVEC
    ref_ll, ref_ent, ref_kl = _reference(lead_shape, p, q, x, NVEC, start)

    ll = dist.log_likelihood(x, DistInfo(prob=p))
    assert ll.shape == lead_shape
    torch.testing.assert_close(ll, ref_ll, atol=1e-6, rtol=1e-6)
    ent = dist.entropy(DistInfo(prob=p))
    assert ent.shape == lead_shape
    torch.testing.assert_close(ent, ref_ent, atol=1e-6, rtol=1e-6)
    kl = dist.kl(DistInfo(prob=p), DistInfo(prob=q))
    assert kl.shape == lead_shape
    torch.testing.assert_close(kl, ref_kl, atol=1e-6, rtol=1e-6)
    ratio = dist.likelihood_ratio(x, DistInfo(prob=p), DistInfo(prob=q))
    ref_ll_q = _reference(lead_shape, q, p, x, NVEC, start)[0]
    torch.testing.assert_close(ratio, torch.exp(ref_ll_q - ref_ll), rtol=1e-5, atol=1e-9)
    torch.testing.assert_close(dist.perplexity(DistInfo(prob=p)), ref_ent.exp(), rtol=1e-6, atol=0)


def test_argmax_is_the_per_dimension_mode():
    start = (2, 0, -1)
    p = _random_probs((6, 5), NVEC, seed=7)
    got = MultiCategorical(NVEC, start=start).argmax(DistInfo(prob=p))
    assert got.shape == (6, 5, 3) and got.dtype == torch.long
    for d, part in enumerate(_segments(p, NVEC)):
        assert torch.equal(got[..., d], part.argmax(dim=-1) + start[d])


def test_samples_follow_each_dimension_independently():
    torch.manual_seed(0)
    start = (1, 0, 10)
    p = torch.cat([torch.tensor([0.7, 0.2, 0.1]), torch.tensor([0.0, 0.0, 0.5, 0.5, 0.0]),
                   torch.tensor([0.25, 0.75])])
    dist = MultiCategorical(NVEC, start=start)
    draws = dist.sample(DistInfo(prob=p.expand(20_000, -1)))
    assert draws.shape == (20_000, 3) and draws.dtype == torch.long
    for d, (n, s) in enumerate(zip(NVEC, start)):
        assert draws[:, d].min() >= s and draws[:, d].max() < s + n
    freq0 = torch.bincount(draws[:, 0] - 1, minlength=3).double() / 20_000
    freq1 = torch.bincount(draws[:, 1], minlength=5).double() / 20_000
    freq2 = torch.bincount(draws[:, 2] - 10, minlength=2).double() / 20_000
    for freq, expected in [(freq0, [0.7, 0.2, 0.1]), (freq1, [0, 0, 0.5, 0.5, 0]),
                           (freq2, [0.25, 0.75])]:
        torch.testing.assert_close(freq, torch.tensor(expected, dtype=torch.float64),
                                   atol=0.015, rtol=0)
    # Zero-probability values are never drawn, and dimensions are drawn independently.
    assert set(draws[:, 1].tolist()) <= {2, 3}
    joint = ((draws[:, 0] == 1) & (draws[:, 2] == 11)).double().mean()
    assert abs(joint.item() - 0.7 * 0.75) < 0.015


def test_onehot_round_trip():
    start = (0, 3, -1)
    x = _random_actions((4, 2), NVEC, start, seed=9)
    dist = MultiCategorical(NVEC, start=start)
    onehot = dist.to_onehot(x)
    assert onehot.shape == (4, 2, sum(NVEC)) and onehot.dtype == torch.float32
    for d, part in enumerate(_segments(onehot, NVEC)):
        assert torch.equal(part.sum(-1), torch.ones(4, 2))
        assert torch.equal(part.argmax(-1) + start[d], x[..., d])
    assert torch.equal(dist.from_onehot(onehot), x)


def test_gradients_flow_to_probabilities():
    logits = torch.randn(5, sum(NVEC), requires_grad=True)
    prob = torch.cat([torch.softmax(s, -1) for s in logits.split(list(NVEC), -1)], -1)
    dist = MultiCategorical(NVEC)
    x = _random_actions((5,), NVEC, (0, 0, 0), seed=4)
    loss = -(dist.log_likelihood(x, DistInfo(prob)).mean() + dist.entropy(DistInfo(prob)).mean())
    loss.backward()
    assert torch.isfinite(logits.grad).all() and logits.grad.abs().sum() > 0


def test_bad_arguments_name_the_problem():
    with pytest.raises(ValueError, match="nvec"):
        MultiCategorical([])
    with pytest.raises(ValueError, match=">= 1"):
        MultiCategorical([3, 0])
    with pytest.raises(ValueError, match="start"):
        MultiCategorical([3, 2], start=[0, 1, 2])
    with pytest.raises(ValueError, match=r"sum\(nvec\) = 5"):
        MultiCategorical([3, 2]).entropy(DistInfo(prob=torch.ones(4) / 4))
