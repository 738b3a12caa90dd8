"""Gaussian distribution checked against torch.distributions and change-of-variables references."""
import math

import pytest
import torch
import torch.distributions as td

from rlfast.distributions import DistInfoStd, Gaussian
from rlfast.distributions.gaussian import DistInfo

LEAD_SHAPES = [(), (5,), (3, 5)]
DIM = 3


def _normal_params(lead_shape, seed):
    gen = torch.Generator().manual_seed(seed)
    mean = torch.randn(lead_shape + (DIM,), generator=gen, dtype=torch.float64)
    log_std = 0.5 * torch.randn(lead_shape + (DIM,), generator=gen, dtype=torch.float64)
    return mean, log_std


@pytest.mark.parametrize("lead_shape", LEAD_SHAPES)
def test_learned_std_matches_torch(lead_shape):
    mean, log_std = _normal_params(lead_shape, 0)
    mean2, log_std2 = _normal_params(lead_shape, 1)
    x = torch.randn(lead_shape + (DIM,), dtype=torch.float64)
    dist = Gaussian(DIM)
    info, info2 = DistInfoStd(mean, log_std), DistInfoStd(mean2, log_std2)
    ref, ref2 = td.Normal(mean, log_std.exp()), td.Normal(mean2, log_std2.exp())

    ll = dist.log_likelihood(x, info)
    assert ll.shape == lead_shape
    assert torch.allclose(ll, ref.log_prob(x).sum(-1))
    ent = dist.entropy(info)
    assert ent.shape == lead_shape
    assert torch.allclose(ent, ref.entropy().sum(-1))
    assert torch.allclose(dist.perplexity(info), ref.entropy().sum(-1).exp())
    kl = dist.kl(info, info2)
    assert kl.shape == lead_shape
    assert torch.allclose(kl, td.kl_divergence(ref, ref2).sum(-1))
    ratio = dist.likelihood_ratio(x, info, info2)
    assert torch.allclose(ratio, (ref2.log_prob(x).sum(-1) - ref.log_prob(x).sum(-1)).exp())


@pytest.mark.parametrize("std", [0.7, [0.5, 1.0, 2.0]])
def test_fixed_std_with_mean_only_dist_info(std):
    mean, _ = _normal_params((4,), 2)
    x = torch.randn(4, DIM, dtype=torch.float64)
    dist = Gaussian(DIM, std=std)
    ref = td.Normal(mean, torch.tensor(std, dtype=torch.float64).expand_as(mean))
    assert torch.allclose(dist.log_likelihood(x, DistInfo(mean)), ref.log_prob(x).sum(-1),
                          atol=1e-6)
    assert torch.allclose(dist.entropy(DistInfo(mean)), ref.entropy().sum(-1), atol=1e-6)
    # Fixed std wins over a log_std in dist_info.
    assert torch.allclose(
        dist.log_likelihood(x, DistInfoStd(mean, torch.zeros_like(mean) + 5)),
        ref.log_prob(x).sum(-1), atol=1e-6
    )
    dist.set_std(None)
    with pytest.raises(ValueError, match="log_std"):
        dist.log_likelihood(x, DistInfo(mean))


def test_min_max_std_clamp_in_formulas():
    mean = torch.zeros(2, DIM, dtype=torch.float64)
    log_std = torch.tensor([[-10.0, 0.0, 10.0], [-0.1, 0.2, 3.0]], dtype=torch.float64)
    x = torch.randn(2, DIM, dtype=torch.float64)
    dist = Gaussian(DIM, min_std=0.5, max_std=2.0)
    clamped_std = log_std.exp().clamp(0.5, 2.0)
    ref = td.Normal(mean, clamped_std)
    info = DistInfoStd(mean, log_std)
    assert torch.allclose(dist.log_likelihood(x, info), ref.log_prob(x).sum(-1))
    assert torch.allclose(dist.entropy(info), ref.entropy().sum(-1))
    with pytest.raises(ValueError):
        Gaussian(DIM, min_std=2.0, max_std=1.0)


def test_sampling_statistics():
    torch.manual_seed(0)
    n = 40000
    mean = torch.tensor([1.0, -2.0, 0.5])
    log_std = torch.tensor([0.0, -1.0, 0.7])
    info = DistInfoStd(mean.expand(n, DIM), log_std.expand(n, DIM))
    samples = Gaussian(DIM).sample(info)
    assert samples.shape == (n, DIM)
    std = log_std.exp()
    assert torch.allclose(samples.mean(0), mean, atol=4 * float(std.max()) / math.sqrt(n))
    assert torch.allclose(samples.std(0), std, rtol=0.03)


@pytest.mark.parametrize("lead_shape", LEAD_SHAPES)
def test_sample_shapes_and_clipping(lead_shape):
    torch.manual_seed(1)
    mean, log_std = _normal_params(lead_shape, 3)
    info = DistInfoStd(mean, log_std + 2)
    assert Gaussian(DIM).sample(info).shape == lead_shape + (DIM,)
    assert Gaussian(DIM, clip=0.3).sample(info).abs().max() <= 0.3
    noise = Gaussian(DIM, noise_clip=0.1).sample(info) - mean
    assert noise.abs().max() <= 0.1 + 1e-12
    squashed = Gaussian(DIM, squash=2.0).sample(info)
    assert squashed.abs().max() <= 2.0


@pytest.mark.parametrize("squash", [1.0, 2.5])
def test_squashed_log_likelihood_matches_transformed_distribution(squash):
    mean, log_std = _normal_params((6,), 4)
    x = 0.8 * torch.randn(6, DIM, dtype=torch.float64)
    dist = Gaussian(DIM, squash=squash)
    ll = dist.log_likelihood(x, DistInfoStd(mean, log_std))
    # Reference 1: torch's tanh + affine transformed distribution at y = squash * tanh(x).
    transformed = td.TransformedDistribution(
        td.Normal(mean, log_std.exp()), [td.TanhTransform(), td.AffineTransform(0.0, squash)]
    )
    y = squash * torch.tanh(x)
    assert torch.allclose(ll, transformed.log_prob(y).sum(-1), atol=1e-8)
    # Reference 2: change of variables with a central finite-difference Jacobian.
    h = 1e-6
    jac = (squash * torch.tanh(x + h) - squash * torch.tanh(x - h)) / (2 * h)
    fd_ref = td.Normal(mean, log_std.exp()).log_prob(x).sum(-1) - torch.log(jac).sum(-1)
    assert torch.allclose(ll, fd_ref, atol=1e-6)


def test_squash_correction_is_stable_for_large_inputs():
    x = torch.tensor([[20.0, -30.0, 45.0]], requires_grad=True)
    mean = torch.zeros(1, DIM)
    dist = Gaussian(DIM, std=50.0, squash=1.0)
    ll = dist.log_likelihood(x, DistInfo(mean))
    # log(1 - tanh(x)^2) = log 4 - 2|x| - 2 log(1 + exp(-2|x|)), written directly in float64.
    xd = x.detach().double()
    log_det = (math.log(4) - 2 * xd.abs() - 2 * torch.log1p(torch.exp(-2 * xd.abs()))).sum(-1)
    ref = td.Normal(torch.zeros(1, DIM, dtype=torch.float64), 50.0).log_prob(xd).sum(-1) - log_det
    assert torch.isfinite(ll).all()
    assert torch.allclose(ll.double(), ref, rtol=1e-5)
    ll.sum().backward()
    assert torch.isfinite(x.grad).all()


def test_sample_loglikelihood():
    torch.manual_seed(2)
    mean, log_std = _normal_params((4,), 5)
    mean.requires_grad_(True)
    log_std.requires_grad_(True)
    dist = Gaussian(DIM, squash=1.5)
    action, ll = dist.sample_loglikelihood(DistInfoStd(mean, log_std))
    assert action.shape == (4, DIM) and ll.shape == (4,)
    assert action.abs().max() < 1.5
    pre = torch.atanh(action.detach() / 1.5)
    ref = td.TransformedDistribution(
        td.Normal(mean.detach(), log_std.detach().exp()),
        [td.TanhTransform(), td.AffineTransform(0.0, 1.5)]
    ).log_prob(action.detach()).sum(-1)
    assert torch.allclose(ll.detach(),
                          dist.log_likelihood(pre, DistInfoStd(mean.detach(), log_std.detach())),
                          atol=1e-6)
    assert torch.allclose(ll.detach(), ref, atol=1e-5)
    (action.sum() + ll.sum()).backward()
    assert mean.grad is not None and log_std.grad is not None
    assert dist.squash == 1.5  # setting preserved


def test_entropy_with_squash_raises_and_setters():
    dist = Gaussian(DIM, squash=1.0)
    info = DistInfoStd(torch.zeros(DIM), torch.zeros(DIM))
    with pytest.raises(ValueError, match="squash"):
        dist.entropy(info)
    dist.set_squash(None)
    assert torch.allclose(dist.entropy(info),
                          torch.tensor(DIM * 0.5 * math.log(2 * math.pi * math.e)))
    dist.set_clip(0.5)
    dist.set_noise_clip(0.2)
    assert dist.clip == 0.5 and dist.noise_clip == 0.2
    with pytest.raises(ValueError, match="broadcast"):
        dist.set_std([1.0, 2.0])
    with pytest.raises(ValueError, match="trailing dim"):
        dist.log_likelihood(torch.zeros(2), DistInfoStd(torch.zeros(2), torch.zeros(2)))


def test_mean_kl_valid():
    mean, log_std = _normal_params((4, 2), 6)
    mean2, log_std2 = _normal_params((4, 2), 7)
    dist = Gaussian(DIM)
    valid = torch.tensor([[1.0, 0.0]] * 4, dtype=torch.float64)
    kl = dist.kl(DistInfoStd(mean, log_std), DistInfoStd(mean2, log_std2))
    assert torch.allclose(dist.mean_kl(DistInfoStd(mean, log_std), DistInfoStd(mean2, log_std2),
                                       valid), kl[:, 0].mean())
    assert bool((kl >= 0).all())
    assert torch.allclose(dist.kl(DistInfoStd(mean, log_std), DistInfoStd(mean, log_std)),
                          torch.zeros(4, 2, dtype=torch.float64))
