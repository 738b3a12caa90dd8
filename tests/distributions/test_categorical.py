"""Categorical distribution checked against torch.distributions as the reference."""
import pytest
import torch
import torch.distributions as td

from rlfast.distributions import Categorical, DistInfo

LEAD_SHAPES = [(), (4,), (3, 4)]


def _random_probs(lead_shape, dim, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return torch.softmax(torch.randn(lead_shape + (dim,), generator=gen), dim=-1)


@pytest.mark.parametrize("lead_shape", LEAD_SHAPES)
def test_log_likelihood_entropy_kl_match_torch(lead_shape):
    dim = 5
    p = _random_probs(lead_shape, dim, seed=1)
    q = _random_probs(lead_shape, dim, seed=2)
    x = torch.randint(dim, lead_shape, generator=torch.Generator().manual_seed(3))
    dist = Categorical(dim)
    ref_p, ref_q = td.Categorical(probs=p), td.Categorical(probs=q)

    ll = dist.log_likelihood(x, DistInfo(prob=p))
    assert ll.shape == lead_shape
    assert torch.allclose(ll, ref_p.log_prob(x), atol=1e-5)

    ent = dist.entropy(DistInfo(prob=p))
    assert ent.shape == lead_shape
    assert torch.allclose(ent, ref_p.entropy(), atol=1e-5)
    assert torch.allclose(dist.perplexity(DistInfo(prob=p)), ref_p.entropy().exp(), atol=1e-5)

    kl = dist.kl(DistInfo(prob=p), DistInfo(prob=q))
    assert kl.shape == lead_shape
    assert torch.allclose(kl, td.kl_divergence(ref_p, ref_q), atol=1e-5)

    ratio = dist.likelihood_ratio(x, DistInfo(prob=p), DistInfo(prob=q))
    assert torch.allclose(ratio, torch.exp(ref_q.log_prob(x) - ref_p.log_prob(x)), rtol=1e-4)


def test_mean_methods_respect_valid():
    dim = 3
    p = _random_probs((4, 2), dim, seed=4)
    q = _random_probs((4, 2), dim, seed=5)
    valid = torch.tensor([[1.0, 0.0]] * 4)
    dist = Categorical(dim)
    kl = dist.kl(DistInfo(p), DistInfo(q))
    assert torch.allclose(dist.mean_kl(DistInfo(p), DistInfo(q), valid), kl[:, 0].mean())
    assert torch.allclose(dist.mean_kl(DistInfo(p), DistInfo(q)), kl.mean())
    ent = dist.entropy(DistInfo(p))
    assert torch.allclose(dist.mean_entropy(DistInfo(p), valid), ent[:, 0].mean())
    assert torch.allclose(dist.mean_perplexity(DistInfo(p), valid), ent[:, 0].exp().mean())


@pytest.mark.parametrize("lead_shape", LEAD_SHAPES)
def test_sample_shape_and_dtype(lead_shape):
    dist = Categorical(4, dtype=torch.int32)
    sample = dist.sample(DistInfo(prob=_random_probs(lead_shape, 4)))
    assert sample.shape == lead_shape
    assert sample.dtype == torch.int32
    assert bool(((sample >= 0) & (sample < 4)).all())


def test_sample_frequencies():
    torch.manual_seed(0)
    prob = torch.tensor([0.1, 0.2, 0.0, 0.7])
    n = 20000
    samples = Categorical(4).sample(DistInfo(prob=prob.expand(n, 4)))
    freq = torch.bincount(samples, minlength=4).float() / n
    # 4 standard errors of a binomial proportion.
    tol = 4 * torch.sqrt(prob * (1 - prob) / n) + 1e-6
    assert bool((torch.abs(freq - prob) <= tol).all()), freq
    assert freq[2] == 0


def test_zero_probabilities_are_numerically_safe():
    prob = torch.tensor([[1.0, 0.0, 0.0], [0.5, 0.5, 0.0]], requires_grad=True)
    dist = Categorical(3)
    ll = dist.log_likelihood(torch.tensor([1, 2]), DistInfo(prob))
    ent = dist.entropy(DistInfo(prob))
    kl = dist.kl(DistInfo(prob), DistInfo(prob.flip(-1)))
    total = ll.sum() + ent.sum() + kl.sum()
    assert torch.isfinite(total)
    total.backward()
    assert torch.isfinite(prob.grad).all()
    assert ent[0].item() == pytest.approx(0.0, abs=1e-6)


def test_onehot_conversions_and_checks():
    dist = Categorical(4)
    idx = torch.tensor([[3, 0], [1, 2]])
    onehot = dist.to_onehot(idx)
    assert onehot.dtype == torch.float and onehot.shape == (2, 2, 4)
    assert torch.equal(dist.from_onehot(onehot), idx)
    assert dist.from_onehot(onehot).dtype == torch.long
    assert dist.dim == 4
    with pytest.raises(ValueError, match="trailing dim"):
        dist.entropy(DistInfo(prob=torch.ones(2, 3) / 3))
    with pytest.raises(ValueError):
        Categorical(0)


def test_cpu_draws_are_torch_multinomial_bit_for_bit():
    """The CPU keeps torch.multinomial: the same generator state gives the same indexes (the
    runs recorded before the CUDA path existed stay reproducible)."""
    from rlfast.distributions.categorical import draw_categorical

    p = _random_probs((64,), 6, seed=4)
    torch.manual_seed(9)
    want = torch.multinomial(p, num_samples=1)
    torch.manual_seed(9)
    assert torch.equal(draw_categorical(p), want)
    torch.manual_seed(9)
    assert torch.equal(Categorical(6).sample(DistInfo(prob=p)), want.reshape(64))


def test_exponential_race_draws_the_categorical_law_without_host_reads():
    """The CUDA draw (argmax p / Exp(1)), run here on the CPU: frequencies match the
    probabilities (unnormalized ones too), a zero probability never wins, shape [N, 1], and
    it reads nothing back to the host (so a CUDA graph can capture it)."""
    from rlfast.distributions.categorical import exponential_race
    from rlfast.utils.host_sync import HostSyncCounter

    torch.manual_seed(0)
    weights = torch.tensor([0.5, 3.0, 0.0, 1.5])  # sums to 5: probabilities .1 .6 0 .3
    n = 40000
    with HostSyncCounter() as reads:
        draws = exponential_race(weights.expand(n, 4).contiguous())
    assert reads.count == 0
    assert draws.shape == (n, 1) and draws.dtype == torch.long
    freq = torch.bincount(draws.flatten(), minlength=4).float() / n
    assert freq[2] == 0
    assert torch.allclose(freq, torch.tensor([0.1, 0.6, 0.0, 0.3]), atol=0.01)
