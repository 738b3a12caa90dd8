"""Generalized state-dependent exploration (gSDE) for SAC: PiSdeMlpModel and SacAgent's
``exploration="gsde"``. Each statistic is checked against an independent computation."""
from __future__ import annotations

import math

import pytest
import torch

from rlfast.agents import SacAgent
from rlfast.envs import EnvSpaces
from rlfast.models.qpg import PiMlpModel, PiSdeMlpModel
from rlfast.spaces import FloatBox

SPACES = EnvSpaces(observation=FloatBox(low=-1.0, high=1.0, shape=(3,)),
                   action=FloatBox(low=[-2.0, 0.0], high=[2.0, 1.0]))
SMALL = dict(model_kwargs=dict(hidden_sizes=[16, 8]), q_model_kwargs=dict(hidden_sizes=[16]))


def _agent(seed=0, **kwargs):
    torch.manual_seed(seed)
    agent = SacAgent(**SMALL, exploration="gsde", pretrain_std=None, **kwargs)
    agent.initialize(SPACES)
    return agent


def _obs(n, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(n, 3, generator=g) * 2 - 1, torch.zeros(n, 2), torch.zeros(n)


def _features(model, obs):
    """The trunk's last hidden layer, computed layer by layer from the weights."""
    h = obs
    for layer in model.trunk.model:
        h = layer(h)
    return h


def test_model_log_std_matches_explicit_sum_and_leading_dims():
    torch.manual_seed(0)
    model = PiSdeMlpModel((3,), [16, 8], 2, log_std_init=-1.0)
    with torch.no_grad():
        model.log_std.copy_(torch.randn(8, 2) * 0.5 - 1.0)
    obs = torch.rand(5, 3) * 2 - 1
    mean, log_std, z = model(obs, None, None, features=True)
    z_ref = _features(model, obs).detach()
    assert torch.allclose(z, z_ref)
    sigma = model.log_std.detach().exp()
    for b in range(5):
        for a in range(2):
            var = sum(float(z_ref[b, j]) ** 2 * float(sigma[j, a]) ** 2 for j in range(8))
            assert float(log_std[b, a].detach()) == pytest.approx(0.5 * math.log(var + 1e-6),
                                                                  rel=1e-5)
    assert torch.allclose(mean, model.mean_head(z_ref).clamp(-2.0, 2.0))
    # [T, B] and unbatched inputs give the same values in the caller's layout.
    m2, s2 = model(obs[:4].reshape(2, 2, 3))
    assert m2.shape == (2, 2, 2) and torch.allclose(s2.reshape(4, 2), log_std[:4])
    m0, s0, z0 = model(obs[0], features=True)
    assert m0.shape == (2,) and z0.shape == (8,) and torch.allclose(s0, log_std[0])


def test_model_mean_clip_and_std_does_not_train_the_trunk():
    torch.manual_seed(1)
    model = PiSdeMlpModel((3,), [16, 8], 1, mean_clip=0.5)
    with torch.no_grad():
        model.mean_head.bias.fill_(3.0)
    mean, log_std = model(torch.rand(6, 3))
    assert torch.allclose(mean, torch.full_like(mean, 0.5))
    log_std.sum().backward()
    assert all(p.grad is None or float(p.grad.abs().sum()) == 0.0
               for p in model.trunk.parameters())
    assert float(model.log_std.grad.abs().sum()) > 0.0


@pytest.mark.parametrize("kwargs", [dict(hidden_sizes=[]), dict(log_std_init=float("nan")),
                                    dict(mean_clip=0.0)])
def test_model_rejects_bad_arguments(kwargs):
    args = dict(hidden_sizes=[8], log_std_init=-2.0)
    args.update(kwargs)
    with pytest.raises(ValueError):
        PiSdeMlpModel((3,), action_size=1, **args)


def test_gsde_noise_has_the_models_state_dependent_std():
    """Over fresh matrices, the pre-squash noise z @ W of one state is N(0, z^2 @ sigma^2):
    20,000 environments in the same state, each with its own W."""
    agent = _agent(sde_sample_interval=1)
    with torch.no_grad():
        agent.model.log_std.copy_(torch.tensor([[-1.0, -0.5]]).expand(8, 2)
                                  + 0.1 * torch.arange(8.0)[:, None])
    obs, pa, pr = _obs(1)
    n = 20_000
    obs, pa, pr = obs.expand(n, 3), pa.expand(n, 2), pr.expand(n)
    agent.sample_mode(0)
    step = agent.step(obs, pa, pr)
    mean, log_std = agent.model(obs[:1], pa[:1], pr[:1])
    x = torch.atanh(agent.normalize_action(step.action).clamp(-1 + 1e-6, 1 - 1e-6))
    noise = (x - mean).double()
    assert noise.mean(0).abs().max().item() < 0.05 * log_std.exp().max().item()
    for a in range(2):
        assert noise[:, a].std().item() == pytest.approx(log_std[0, a].exp().item(), rel=0.05)
    # Each environment's matrix W has entries N(0, sigma^2) for the model's sigma.
    w = agent._sde_noise[0][0].double()
    assert w.shape == (n, 8, 2)
    ratio = w.std(0) / agent.model.noise_std().detach().double()
    assert float((ratio - 1).abs().max()) < 0.05
    assert float((w.mean(0) / agent.model.noise_std().detach()).abs().max()) < 0.05


def test_gsde_matrices_are_kept_for_the_interval_and_groups_are_separate():
    agent = _agent(sde_sample_interval=3)
    obs, pa, pr = _obs(4)
    agent.sample_mode(0)
    actions = [agent.step(obs, pa, pr).action for _ in range(7)]
    assert torch.equal(actions[0], actions[1]) and torch.equal(actions[1], actions[2])
    assert not torch.equal(actions[2], actions[3])
    assert torch.equal(actions[3], actions[5]) and not torch.equal(actions[5], actions[6])
    # Evaluation acts with the mean and leaves the matrices alone.
    kept = agent._sde_noise[0][0].clone(), agent._sde_noise[0][1]
    agent.eval_mode(1)
    mean, _ = agent.model(obs, pa, pr)
    assert torch.allclose(agent.step(obs, pa, pr).action,
                          agent.scale_action(torch.tanh(mean)))
    agent.sample_mode(1)
    assert torch.equal(agent._sde_noise[0][0], kept[0]) and agent._sde_noise[0][1] == kept[1]
    # Alternating samplers: each group its own matrices; a new batch size draws new ones.
    agent.use_group(1)
    agent.step(obs, pa, pr)
    assert set(agent._sde_noise) == {0, 1}
    assert not torch.equal(agent._sde_noise[0][0], agent._sde_noise[1][0])
    agent.use_group(0)
    agent.step(obs[:2], pa[:2], pr[:2])
    assert agent._sde_noise[0][0].shape[0] == 2


def test_gsde_sac_loss_trains_the_noise_std():
    """A SAC policy loss: gradient reaches the learned noise std through the state-dependent
    log-likelihood (and the policy's mean head)."""
    agent = _agent()
    obs, pa, pr = _obs(32)
    action, log_pi, _ = agent.pi(obs, pa, pr)
    (log_pi.mean() - agent.q(obs, pa, pr, action).min(0).values.mean()).backward()
    assert float(agent.model.log_std.grad.abs().sum()) > 0
    assert float(agent.model.mean_head.weight.grad.abs().sum()) > 0


def test_gsde_arguments_are_checked():
    with pytest.raises(ValueError, match="exploration"):
        SacAgent(exploration="ou")
    with pytest.raises((TypeError, ValueError), match="sde_sample_interval"):
        SacAgent(exploration="gsde", sde_sample_interval=0)
    class PlainPolicy(PiMlpModel):
        pass

    agent = SacAgent(ModelCls=PlainPolicy, exploration="gsde", **SMALL)
    with pytest.raises(TypeError, match="state-dependent"):
        agent.initialize(SPACES)
    assert SacAgent(exploration="gsde").ModelCls is PiSdeMlpModel
