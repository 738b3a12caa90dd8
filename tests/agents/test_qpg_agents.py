"""DDPG, TD3 and SAC agents: the squashed-Gaussian log-likelihood against torch.distributions,
Polyak updates, TD3 target smoothing statistics, action scaling, sampling modes, pretraining,
state dicts and argument checks."""
import math

import numpy as np
import pytest
import torch
import torch.distributions as td

from rlfast.agents import DdpgAgent, SacAgent, Td3Agent
from rlfast.agents.qpg import polyak_update
from rlfast.distributions import DistInfoStd, Gaussian
from rlfast.envs import EnvSpaces
from rlfast.spaces import FloatBox, IntBox

SMALL = dict(model_kwargs=dict(hidden_sizes=[16, 16]), q_model_kwargs=dict(hidden_sizes=[16, 16]))
PENDULUM = EnvSpaces(observation=FloatBox(low=[-1.0, -1.0, -8.0], high=[1.0, 1.0, 8.0]),
                     action=FloatBox(low=-2.0, high=2.0, shape=(1,)))
ASYM = EnvSpaces(observation=FloatBox(low=-1.0, high=1.0, shape=(4,)),
                 action=FloatBox(low=[0.0, -1.0], high=[1.0, 3.0]))
SAC_MIN_STD, SAC_MAX_STD = math.exp(-20.0), math.exp(2.0)  # SacAgent's log-std clamp [-20, 2]


def _agent(cls, spaces=PENDULUM, seed=0, **kwargs):
    torch.manual_seed(seed)
    agent = cls(**SMALL, **kwargs)
    agent.initialize(spaces)
    return agent


def _inputs(spaces, lead=(8,), seed=0):
    g = torch.Generator().manual_seed(seed)
    obs = torch.rand(*lead, *spaces.observation.shape, generator=g) * 2 - 1
    prev_action = torch.zeros(*lead, *spaces.action.shape)
    return obs, prev_action, torch.zeros(lead)


# ---------------------------------------------------------------- squashed Gaussian reference
def _ref_log_likelihood(x, mean, log_std, squash, min_std=None, max_std=None):
    """float64: Independent(Normal) log-density of pre-squash x minus
    sum log(squash * (1 - tanh(x)^2)), with 1 - tanh^2 = 1 / cosh^2 (exact for large |x|)."""
    x, mean, log_std = (t.detach().double() for t in (x, mean, log_std))
    std = log_std.exp()
    if min_std is not None or max_std is not None:
        std = std.clamp(min=min_std, max=max_std)
    base = td.Independent(td.Normal(mean, std), 1).log_prob(x)
    log_det = (math.log(squash) - 2 * torch.log(torch.cosh(x))).sum(-1)
    return base - log_det


def _transformed_log_prob(x, mean, log_std, squash):
    """torch.distributions reference at y = squash * tanh(x) (moderate x only)."""
    x, mean, log_std = (t.detach().double() for t in (x, mean, log_std))
    dist = td.TransformedDistribution(
        td.Independent(td.Normal(mean, log_std.exp()), 1),
        [td.TanhTransform(cache_size=1), td.AffineTransform(0.0, squash, event_dim=1)])
    tanh = dist.transforms[0]
    y = dist.transforms[1](tanh(x))
    return dist.log_prob(y)


@pytest.mark.parametrize("squash", [1.0, 2.0])
def test_squashed_log_likelihood_matches_torch_distributions(squash):
    g = torch.Generator().manual_seed(0)
    dim = 3
    dist = Gaussian(dim, squash=squash, min_std=SAC_MIN_STD, max_std=SAC_MAX_STD)
    mean = torch.randn(200, dim, generator=g)
    log_std = torch.randn(200, dim, generator=g) * 0.5
    x = torch.randn(200, dim, generator=g) * 2
    info = DistInfoStd(mean=mean, log_std=log_std)
    got = dist.log_likelihood(x, info)
    assert got.shape == (200,)
    ref = _ref_log_likelihood(x, mean, log_std, squash)
    assert torch.allclose(got.double(), ref, atol=1e-4, rtol=1e-5)
    assert torch.allclose(got.double(), _transformed_log_prob(x, mean, log_std, squash),
                          atol=1e-4, rtol=1e-5)


@pytest.mark.parametrize("squash", [1.0, 2.0])
def test_squashed_log_likelihood_large_inputs_and_std_clamp(squash):
    dim = 2
    dist = Gaussian(dim, squash=squash, min_std=SAC_MIN_STD, max_std=SAC_MAX_STD)
    x = torch.tensor([[15.0, -15.0], [-15.0, 14.0], [9.5, -12.0], [0.0, 15.0]])
    mean = torch.tensor([[14.0, -14.5], [-15.0, 13.0], [9.0, -11.0], [0.5, 14.0]])
    # log-std outside [-20, 2] is clamped in every formula
    log_std = torch.tensor([[5.0, 0.0], [-0.5, 3.0], [0.2, -1.0], [-25.0, 0.1]])
    mean[3, 0] = 0.0  # x == mean where std is clamped at exp(-20): no overflow either
    info = DistInfoStd(mean=mean, log_std=log_std)
    got = dist.log_likelihood(x, info)
    assert torch.isfinite(got).all()
    ref = _ref_log_likelihood(x, mean, log_std, squash, SAC_MIN_STD, SAC_MAX_STD)
    assert torch.allclose(got.double(), ref, rtol=1e-5, atol=1e-3)


@pytest.mark.parametrize("squash", [1.0, 2.0])
def test_sample_loglikelihood_matches_reference_for_its_own_sample(squash):
    dim = 2
    dist = Gaussian(dim, squash=squash, min_std=SAC_MIN_STD, max_std=SAC_MAX_STD)
    mean = torch.cat([torch.randn(500, dim), torch.full((20, dim), 15.0),
                      torch.full((20, dim), -15.0)])
    log_std = torch.cat([torch.randn(500, dim) * 0.3, torch.full((40, dim), -3.0)])
    info = DistInfoStd(mean=mean, log_std=log_std)
    torch.manual_seed(11)
    x_ref = mean + log_std.clamp(-20, 2).exp() * torch.randn_like(mean)
    torch.manual_seed(11)
    y, log_pi = dist.sample_loglikelihood(info)
    assert torch.allclose(y, squash * torch.tanh(x_ref), atol=1e-6)
    assert y.abs().max() <= squash
    assert torch.isfinite(log_pi).all()
    ref = _ref_log_likelihood(x_ref, mean, log_std, squash, SAC_MIN_STD, SAC_MAX_STD)
    assert torch.allclose(log_pi.double(), ref, rtol=1e-5, atol=1e-3)


@pytest.mark.parametrize("action_squash", [1.0, 0.5])
def test_sac_agent_pi_log_pi_matches_reference(action_squash):
    agent = _agent(SacAgent, ASYM, action_squash=action_squash)
    obs, pa, pr = _inputs(ASYM, lead=(256,))
    torch.manual_seed(3)
    action, log_pi, dist_info = agent.pi(obs, pa, pr)
    assert action.shape == (256, 2) and log_pi.shape == (256,)
    assert action.abs().max() <= action_squash
    assert action.requires_grad and log_pi.requires_grad  # reparameterized
    u = (action / action_squash).detach().double()
    moderate = (u.abs() < 0.99).all(-1)
    assert moderate.sum() > 100
    x = torch.atanh(u[moderate])  # recover the pre-squash sample
    ref = _ref_log_likelihood(x, dist_info.mean[moderate], dist_info.log_std[moderate],
                              action_squash, SAC_MIN_STD, SAC_MAX_STD)
    assert torch.allclose(log_pi[moderate].double(), ref, atol=2e-3)


def test_sac_agent_pi_score_function_path():
    agent = _agent(SacAgent, ASYM)
    obs, pa, pr = _inputs(ASYM, lead=(64,))
    action, log_pi, dist_info = agent.pi(obs, pa, pr, reparameterize=False)
    assert not action.requires_grad and log_pi.requires_grad
    x = torch.atanh(action.double().clamp(-1 + 1e-7, 1 - 1e-7))
    ok = (action.abs() < 0.99).all(-1)
    ref = _ref_log_likelihood(x[ok], dist_info.mean[ok], dist_info.log_std[ok], 1.0)
    assert torch.allclose(log_pi[ok].double(), ref, atol=2e-3)


# ---------------------------------------------------------------- Polyak updates
def _params(module):
    return [p.detach().clone() for p in module.parameters()]


@pytest.mark.parametrize("tau", [0.005, 0.3, 1.0])
def test_polyak_update_matches_manual(tau):
    torch.manual_seed(0)
    target = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4),
                                 torch.nn.Linear(4, 2))
    source = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4),
                                 torch.nn.Linear(4, 2))
    with torch.no_grad():
        source[1].running_mean.normal_()
    before_t = {k: v.clone() for k, v in target.state_dict().items()}
    src = {k: v.clone() for k, v in source.state_dict().items()}
    polyak_update(target, source, tau)
    after = target.state_dict()
    for key, old in before_t.items():
        if old.is_floating_point():
            assert torch.allclose(after[key], tau * src[key] + (1 - tau) * old, atol=1e-6), key
    if tau == 1.0:
        for key in before_t:
            if before_t[key].is_floating_point():
                assert torch.equal(after[key], src[key])
    # the source is untouched
    assert all(torch.equal(v, src[k]) for k, v in source.state_dict().items())


@pytest.mark.parametrize("tau", [0, -0.1, 1.5, float("nan")])
def test_polyak_update_rejects_bad_tau(tau):
    a, b = torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)
    with pytest.raises(ValueError):
        polyak_update(a, b, tau)


def test_polyak_update_rejects_mismatched_models():
    with pytest.raises(ValueError):
        polyak_update(torch.nn.Linear(2, 2), torch.nn.Sequential(torch.nn.Linear(2, 2),
                                                                  torch.nn.Linear(2, 2)), 0.5)


def _perturb(module, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.add_(torch.randn(p.shape, generator=g))


def test_ddpg_agent_update_target_moves_both_targets():
    agent = _agent(DdpgAgent)
    assert set(agent.state_dict()) == {"model", "q_model", "target_model", "target_q_model"}
    # Targets start as copies and never take gradient.
    pairs = [(agent.model, agent.target_model), (agent.q_model, agent.target_q_model)]
    for online, target in pairs:
        assert all(torch.equal(a, b) for a, b in zip(online.parameters(), target.parameters()))
        assert not any(p.requires_grad for p in target.parameters())
    _perturb(agent.model, 1)
    _perturb(agent.q_model, 2)
    old_t, old_tq = _params(agent.target_model), _params(agent.target_q_model)
    agent.update_target(0.25)
    for new, old, src in zip(agent.target_model.parameters(), old_t, agent.model.parameters()):
        assert torch.allclose(new, 0.25 * src + 0.75 * old, atol=1e-6)
    for new, old, src in zip(agent.target_q_model.parameters(), old_tq,
                             agent.q_model.parameters()):
        assert torch.allclose(new, 0.25 * src + 0.75 * old, atol=1e-6)
    agent.update_target(1.0)
    assert all(torch.equal(a, b) for a, b in zip(agent.model.parameters(),
                                                 agent.target_model.parameters()))


def test_sac_agent_update_target_moves_critic_target_only():
    agent = _agent(SacAgent)
    assert set(agent.state_dict()) == {"model", "q_model", "target_q_model"}
    assert not hasattr(agent, "target_model")
    _perturb(agent.q_model, 3)
    old = _params(agent.target_q_model)
    agent.update_target(0.1)
    for new, o, src in zip(agent.target_q_model.parameters(), old, agent.q_model.parameters()):
        assert torch.allclose(new, 0.1 * src + 0.9 * o, atol=1e-6)


# ---------------------------------------------------------------- TD3 target smoothing
def _td3_target_stats(agent, n=20000):
    obs, pa, pr = _inputs(PENDULUM, lead=(n,), seed=5)
    with torch.no_grad():
        mu = agent.target_model(obs, pa, pr)
        a = agent.target_action(obs, pa, pr)
    return mu, a


def test_td3_target_noise_clip_respected():
    std, clip = 0.2, 0.1
    agent = _agent(Td3Agent, target_noise_std=std, target_noise_clip=clip)
    mu, a = _td3_target_stats(agent)
    assert a.shape == mu.shape
    assert (a - mu).abs().max() <= clip + 1e-6
    assert a.abs().max() <= 1.0
    # fraction of noise clipped to the bound: 2 * P(Z > clip / std)
    at_bound = ((a - mu).abs() > clip - 1e-5).float().mean().item()
    expected = 2 * (1 - 0.5 * (1 + math.erf(clip / std / math.sqrt(2))))
    assert abs(at_bound - expected) < 0.02


def test_td3_target_noise_std_when_clip_large():
    agent = _agent(Td3Agent, target_noise_std=0.2, target_noise_clip=10.0)
    mu, a = _td3_target_stats(agent)
    assert mu.abs().max() < 0.5  # an untrained policy: clamping to [-1, 1] is negligible
    noise = a - mu
    assert abs(noise.std().item() - 0.2) < 0.01
    assert abs(noise.mean().item()) < 0.01


def test_td3_target_action_clipped_to_unit_box():
    agent = _agent(Td3Agent, target_noise_std=5.0, target_noise_clip=None)
    mu, a = _td3_target_stats(agent, n=2000)
    assert a.min() >= -1.0 and a.max() <= 1.0
    assert (a == 1.0).any() and (a == -1.0).any()


def test_td3_without_target_noise_gives_target_mu():
    agent = _agent(Td3Agent, target_noise_std=None)
    mu, a = _td3_target_stats(agent, n=100)
    assert torch.equal(mu, a)
    # DDPG's target action is the target policy's as well
    ddpg = _agent(DdpgAgent)
    mu, a = _td3_target_stats(ddpg, n=100)
    assert torch.equal(mu, a)


def test_td3_agent_has_twin_critics_and_target_q_uses_min_input():
    agent = _agent(Td3Agent, target_noise_std=None)
    obs, pa, pr = _inputs(PENDULUM, lead=(5,))
    q = agent.q(obs, pa, pr, torch.zeros(5, 1))
    assert q.shape == (2, 5)
    tq = agent.target_q_at_mu(obs, pa, pr)
    ref = agent.target_q_model(obs, pa, pr, agent.target_model(obs, pa, pr))
    assert tq.shape == (2, 5) and torch.allclose(tq, ref) and not tq.requires_grad


# ---------------------------------------------------------------- action scaling
@pytest.mark.parametrize("cls", [DdpgAgent, Td3Agent, SacAgent])
@pytest.mark.parametrize("spaces", [PENDULUM, ASYM], ids=["pendulum", "asymmetric"])
def test_action_scaling_round_trip(cls, spaces):
    agent = _agent(cls, spaces)
    low = torch.as_tensor(spaces.action.low, dtype=torch.float32).expand(spaces.action.shape)
    high = torch.as_tensor(spaces.action.high, dtype=torch.float32).expand(spaces.action.shape)
    ones = torch.ones(spaces.action.shape)
    assert torch.allclose(agent.scale_action(-ones), low)
    assert torch.allclose(agent.scale_action(ones), high)
    assert torch.allclose(agent.scale_action(0 * ones), (low + high) / 2)
    u = torch.rand(50, *spaces.action.shape) * 2 - 1
    env_action = agent.scale_action(u)
    assert torch.allclose(env_action, low + (u + 1) * (high - low) / 2, atol=1e-6)
    assert torch.allclose(agent.normalize_action(env_action), u, atol=1e-5)
    normalized_np = agent.normalize_action(env_action.numpy())
    assert isinstance(normalized_np, np.ndarray)
    assert np.allclose(normalized_np, u.numpy(), atol=1e-5)


@pytest.mark.parametrize("cls", [DdpgAgent, Td3Agent, SacAgent])
@pytest.mark.parametrize("lead", [(), (6,), (2, 3)])
def test_step_sample_vs_eval(cls, lead):
    agent = _agent(cls, ASYM)
    obs, pa, pr = _inputs(ASYM, lead=lead)
    low, high = torch.tensor([0.0, -1.0]), torch.tensor([1.0, 3.0])
    agent.give_min_itr_learn(0)
    agent.eval_mode(0)
    s1, s2 = agent.step(obs, pa, pr), agent.step(obs, pa, pr)
    assert s1.action.shape == (*lead, 2) and s1.agent_info.mu.shape == (*lead, 2)
    assert torch.equal(s1.action, s2.action)  # deterministic
    assert torch.allclose(s1.action, agent.scale_action(s1.agent_info.mu), atol=1e-6)
    agent.sample_mode(0)
    s3, s4 = agent.step(obs, pa, pr), agent.step(obs, pa, pr)
    assert not torch.equal(s3.action, s4.action)
    assert torch.allclose(s3.agent_info.mu, s1.agent_info.mu, atol=1e-6)
    for s in (s1, s3, s4):
        assert (s.action >= low - 1e-5).all() and (s.action <= high + 1e-5).all()


def test_sac_eval_action_is_squashed_mean():
    agent = _agent(SacAgent, ASYM, action_squash=0.5)
    obs, pa, pr = _inputs(ASYM)
    agent.eval_mode(0)
    mean, _ = agent.model(obs, pa, pr)
    step = agent.step(obs, pa, pr)
    assert torch.allclose(step.agent_info.mu, 0.5 * torch.tanh(mean), atol=1e-6)
    assert torch.allclose(step.action, agent.scale_action(0.5 * torch.tanh(mean)), atol=1e-6)


def test_ddpg_exploration_noise_clip():
    agent = _agent(DdpgAgent, ASYM, action_std=0.3, action_noise_clip=0.05)
    obs, pa, pr = _inputs(ASYM, lead=(2000,))
    agent.sample_mode(0)
    step = agent.step(obs, pa, pr)
    diff = agent.normalize_action(step.action) - step.agent_info.mu
    assert diff.abs().max() <= 0.05 + 1e-5
    assert diff.abs().max() > 0.049


def test_ddpg_pretraining_uses_pretrain_std_until_min_itr_learn():
    agent = _agent(DdpgAgent, PENDULUM, action_std=0.01, pretrain_std=0.5)
    agent.give_min_itr_learn(3)
    obs, pa, pr = _inputs(PENDULUM, lead=(4000,))

    def noise_std(itr, mode="sample"):
        getattr(agent, f"{mode}_mode")(itr)
        step = agent.step(obs, pa, pr)
        return (agent.normalize_action(step.action) - step.agent_info.mu).std().item()

    assert agent.pretraining is False  # no mode yet
    assert noise_std(0) > 0.3 and agent.pretraining
    assert noise_std(2) > 0.3
    assert noise_std(3) < 0.02 and not agent.pretraining
    assert noise_std(0, "eval") < 1e-6 and not agent.pretraining
    # Without pretrain_std there is no pretraining phase.
    plain = _agent(DdpgAgent, PENDULUM, action_std=0.01)
    plain.give_min_itr_learn(3)
    plain.sample_mode(0)
    assert not plain.pretraining


def test_td3_uniform_pretraining_covers_the_bounds_until_min_itr_learn():
    """pretrain_uniform: actions uniform over the environment's bounds (the TD3 paper's
    start), whatever the policy's output, then mu(s) plus the exploration noise."""
    agent = _agent(Td3Agent, ASYM, action_std=0.01, pretrain_uniform=True)
    agent.give_min_itr_learn(2)
    obs, pa, pr = _inputs(ASYM, lead=(20000,))
    agent.sample_mode(1)
    assert agent.pretraining
    action = agent.step(obs, pa, pr).action
    low = torch.as_tensor(ASYM.action.low, dtype=action.dtype)
    high = torch.as_tensor(ASYM.action.high, dtype=action.dtype)
    assert bool(((action >= low) & (action <= high)).all())
    unit = (action - low) / (high - low)  # uniform on [0, 1] in every dimension
    assert torch.allclose(unit.mean(0), torch.full_like(unit[0], 0.5), atol=0.02)
    assert torch.allclose(unit.var(0), torch.full_like(unit[0], 1 / 12), atol=0.005)
    for q in (0.1, 0.5, 0.9):
        assert torch.allclose(unit.quantile(q, dim=0), torch.full_like(unit[0], q), atol=0.02)
    agent.sample_mode(2)
    step = agent.step(obs, pa, pr)
    assert not agent.pretraining
    assert (agent.normalize_action(step.action) - step.agent_info.mu).std().item() < 0.02
    # DDPG has no pretraining without pretrain_std, unless uniform is asked for.
    ddpg = _agent(DdpgAgent, ASYM, pretrain_uniform=True)
    ddpg.give_min_itr_learn(1)
    ddpg.sample_mode(0)
    assert ddpg.pretraining
    with pytest.raises(TypeError, match="pretrain_uniform must be True or False"):
        DdpgAgent(pretrain_uniform="yes")


def test_ou_exploration_follows_the_ornstein_uhlenbeck_statistics():
    """x_{t+1} = a x_t + s e_t with a = 1 - theta dt, s = sigma sqrt(dt), x_0 = 0: Var x_t =
    s^2 (1 - a^(2t)) / (1 - a^2) and Cov(x_t, x_{t+1}) = a Var x_t (closed forms), per env."""
    theta, dt, sigma, n_envs, steps = 0.15, 0.05, 0.2, 20000, 60
    agent = _agent(Td3Agent, PENDULUM, action_std=sigma, exploration="ou", ou_theta=theta,
                   ou_dt=dt, pretrain_std=None)
    obs, pa, pr = _inputs(PENDULUM, lead=(n_envs,))
    agent.sample_mode(0)
    noise = []
    for _ in range(steps):
        step = agent.step(obs, pa, pr)
        noise.append(agent.normalize_action(step.action) - step.agent_info.mu)
    a, s2 = 1 - theta * dt, sigma ** 2 * dt
    t = steps  # the last draw is x_t after t steps
    var_t = s2 * (1 - a ** (2 * t)) / (1 - a ** 2)
    var_prev = s2 * (1 - a ** (2 * (t - 1))) / (1 - a ** 2)
    # |mu| is small at initialization and the noise std is 0.28: clipping to [-1, 1] is rare
    last, prev = noise[-1][:, 0].double(), noise[-2][:, 0].double()
    assert last.var().item() == pytest.approx(var_t, rel=0.05)
    cov = ((last - last.mean()) * (prev - prev.mean())).mean().item()
    assert cov == pytest.approx(a * var_prev, rel=0.06)
    # Gaussian exploration of the same std: consecutive draws uncorrelated.
    gauss = _agent(Td3Agent, PENDULUM, action_std=sigma, pretrain_std=None)
    gauss.sample_mode(0)
    g1, g2 = [(gauss.normalize_action(st.action) - st.agent_info.mu)[:, 0]
              for st in (gauss.step(obs, pa, pr), gauss.step(obs, pa, pr))]
    assert abs(torch.corrcoef(torch.stack([g1, g2]))[0, 1].item()) < 0.03


def test_ou_exploration_state_resets_and_groups():
    agent = _agent(DdpgAgent, PENDULUM, action_std=0.5, exploration="ou", ou_theta=0.0,
                   ou_dt=1.0)
    obs, pa, pr = _inputs(PENDULUM, lead=(4,))
    agent.sample_mode(0)
    for _ in range(3):
        agent.step(obs, pa, pr)
    state = agent._ou_states[0].clone()
    assert bool((state != 0).all())
    agent.reset_one(2)  # env 2's episode ended: only its process restarts
    assert bool((agent._ou_states[0][2] == 0).all())
    assert torch.equal(agent._ou_states[0][[0, 1, 3]], state[[0, 1, 3]])
    # theta 0, dt 1: x_{t+1} = x_t + sigma * e, so after reset_one env 2 moves from zero.
    step = agent.step(obs, pa, pr)
    assert bool((agent._ou_states[0][2] != 0).all())
    # An evaluation (eval mode, reset) leaves the processes; a sampling reset clears them.
    kept = agent._ou_states[0].clone()
    agent.eval_mode(1)
    agent.reset()
    agent.reset_one(0)  # an evaluation episode ended
    assert torch.equal(agent.step(obs, pa, pr).action, agent.scale_action(
        agent.model(*agent.to_model_inputs(obs, pa, pr))))  # no noise in eval mode
    agent.sample_mode(1)
    assert torch.equal(agent._ou_states[0], kept)
    agent.reset()
    assert agent._ou_states == {}
    # Alternating samplers: each group has its own processes.
    agent.use_group(1)
    agent.step(obs, pa, pr)
    agent.use_group(0)
    agent.step(obs, pa, pr)
    assert set(agent._ou_states) == {0, 1}
    assert not torch.equal(agent._ou_states[0], agent._ou_states[1])
    del step


def test_sac_pretraining_uses_pretrain_std():
    agent = _agent(SacAgent, PENDULUM, pretrain_std=0.75)
    last = agent.model.mlp.model[-1]
    with torch.no_grad():  # mean 0 and std exp(-5) for every observation
        last.weight.zero_()
        last.bias.copy_(torch.tensor([0.0, -5.0]))
    agent.give_min_itr_learn(2)
    obs, pa, pr = _inputs(PENDULUM, lead=(4000,))

    def presquash_std(itr):
        agent.sample_mode(itr)
        u = agent.normalize_action(agent.step(obs, pa, pr).action).double()
        return torch.atanh(u.clamp(-1 + 1e-6, 1 - 1e-6)).std().item()

    assert abs(presquash_std(0) - 0.75) < 0.05
    assert presquash_std(2) < 0.02
    assert _agent(SacAgent, pretrain_std=None).pretrain_std is None


@pytest.mark.parametrize("action_squash", [1.0, 0.5])
def test_sac_uniform_pretraining_covers_the_squashed_bounds(action_squash):
    """pretrain_uniform: until min_itr_learn, SAC's normalized actions are uniform on
    [-action_squash, action_squash] whatever the policy outputs (checked against the uniform
    law's mean, variance and quantiles), then the policy's squashed Gaussian again."""
    agent = _agent(SacAgent, ASYM, action_squash=action_squash, pretrain_uniform=True)
    last = agent.model.mlp.model[-1]
    with torch.no_grad():  # mean 3 (tanh ~ 1) and std exp(-5): far from uniform
        last.weight.zero_()
        last.bias.copy_(torch.tensor([3.0, 3.0, -5.0, -5.0]))
    agent.give_min_itr_learn(2)
    obs, pa, pr = _inputs(ASYM, lead=(20000,))
    agent.sample_mode(1)
    assert agent.pretraining
    u = agent.normalize_action(agent.step(obs, pa, pr).action)
    assert bool((u.abs() <= action_squash + 1e-6).all())
    unit = (u + action_squash) / (2 * action_squash)  # uniform on [0, 1] in every dimension
    assert torch.allclose(unit.mean(0), torch.full_like(unit[0], 0.5), atol=0.02)
    assert torch.allclose(unit.var(0), torch.full_like(unit[0], 1 / 12), atol=0.005)
    for q in (0.1, 0.5, 0.9):
        assert torch.allclose(unit.quantile(q, dim=0), torch.full_like(unit[0], q), atol=0.02)
    agent.sample_mode(2)
    assert not agent.pretraining
    u = agent.normalize_action(agent.step(obs, pa, pr).action)
    expected = action_squash * math.tanh(3.0)
    assert torch.allclose(u, torch.full_like(u, expected), atol=1e-3)
    with pytest.raises(TypeError, match="pretrain_uniform must be True or False"):
        SacAgent(pretrain_uniform=1)


# ---------------------------------------------------------------- values and gradients
def test_ddpg_q_at_mu_gradient_reaches_policy_only():
    agent = _agent(DdpgAgent)
    obs, pa, pr = _inputs(PENDULUM)
    q = agent.q_at_mu(obs, pa, pr)
    assert q.shape == (8,)
    ref = agent.q_model(obs, pa, pr, agent.model(obs, pa, pr))
    assert torch.allclose(q, ref)
    q.sum().backward()
    assert all(p.grad is None or torch.count_nonzero(p.grad) == 0
               for p in agent.q_model.parameters())
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in agent.model.parameters())


def test_sac_q_and_target_q_shapes_and_detach():
    agent = _agent(SacAgent)
    obs, pa, pr = _inputs(PENDULUM)
    action = torch.zeros(8, 1, requires_grad=True)
    q = agent.q(obs, pa, pr, action, detach_params=True)
    assert q.shape == (2, 8)
    q.sum().backward()
    assert action.grad.abs().sum() > 0
    assert all(p.grad is None for p in agent.q_model.parameters())
    tq = agent.target_q(obs, pa, pr, action)
    assert tq.shape == (2, 8) and not tq.requires_grad


# ---------------------------------------------------------------- state dicts
@pytest.mark.parametrize("cls", [DdpgAgent, Td3Agent, SacAgent])
def test_state_dict_round_trip(cls):
    a = _agent(cls, ASYM, seed=0)
    _perturb(a.q_model, 4)
    a.update_target(0.5)
    b = _agent(cls, ASYM, seed=1)
    b.load_state_dict(a.state_dict())
    for name in a.state_dict():
        for x, y in zip(getattr(a, name).parameters(), getattr(b, name).parameters()):
            assert torch.equal(x, y), name
    obs, pa, pr = _inputs(ASYM)
    a.eval_mode(0)
    b.eval_mode(0)
    assert torch.equal(a.step(obs, pa, pr).action, b.step(obs, pa, pr).action)
    # nested initial_model_state_dict restores every model, targets included
    c = _agent(cls, ASYM, seed=2, initial_model_state_dict=a.state_dict())
    for name in a.state_dict():
        for x, y in zip(getattr(a, name).parameters(), getattr(c, name).parameters()):
            assert torch.equal(x, y), name


def test_plain_policy_state_dict_loads_policy_only_and_unknown_keys_raise():
    a, b = _agent(DdpgAgent, seed=0), _agent(DdpgAgent, seed=1)
    q_before = _params(b.q_model)
    b.load_state_dict(a.model.state_dict())
    assert all(torch.equal(x, y) for x, y in zip(a.model.parameters(), b.model.parameters()))
    assert all(torch.equal(x, y) for x, y in zip(q_before, b.q_model.parameters()))
    bad = dict(a.state_dict(), target_pi_model={})
    with pytest.raises(KeyError):
        b.load_state_dict(bad)


# ---------------------------------------------------------------- argument checks
@pytest.mark.parametrize("cls", [DdpgAgent, Td3Agent, SacAgent])
@pytest.mark.parametrize("action_space", [IntBox(0, 3), FloatBox(-1.0, 1.0, shape=(2, 2))],
                         ids=["discrete", "matrix"])
def test_agents_reject_non_flat_continuous_action_spaces(cls, action_space):
    agent = cls(**SMALL)
    with pytest.raises(TypeError):
        agent.initialize(EnvSpaces(observation=PENDULUM.observation, action=action_space))


@pytest.mark.parametrize("cls", [DdpgAgent, SacAgent])
def test_agents_reject_multi_discrete_action_space(cls):
    agent = cls(**SMALL)
    with pytest.raises(TypeError):
        agent.initialize(EnvSpaces(observation=PENDULUM.observation,
                                   action=IntBox(0, 3, shape=(2,))))


@pytest.mark.parametrize("cls", [DdpgAgent, Td3Agent, SacAgent])
def test_agents_accept_gym_wrapped_pendulum_spaces(cls):
    from rlfast.envs import make
    env = make("Pendulum-v1")
    agent = cls(**SMALL)
    agent.initialize(env.spaces)
    assert agent.env_model_kwargs == dict(observation_shape=(3,), action_size=1)
    assert torch.allclose(agent.scale_action(torch.ones(1)), torch.tensor([2.0]))
    env.close()


def test_agents_reject_unbounded_actions():
    agent = DdpgAgent(**SMALL)
    with pytest.raises(ValueError):
        agent.initialize(EnvSpaces(PENDULUM.observation, FloatBox(-np.inf, np.inf, shape=(2,))))


@pytest.mark.parametrize("make", [
    lambda: DdpgAgent(action_std=0),
    lambda: DdpgAgent(action_noise_clip=-1.0),
    lambda: DdpgAgent(pretrain_std=0),
    lambda: DdpgAgent(exploration="ornstein"),
    lambda: DdpgAgent(exploration="ou", ou_theta=-0.1),
    lambda: Td3Agent(exploration="ou", ou_dt=0),
    lambda: Td3Agent(target_noise_std=-0.2),
    lambda: Td3Agent(target_noise_clip=0),
    lambda: SacAgent(action_squash=2.0),
    lambda: SacAgent(action_squash=0),
    lambda: SacAgent(pretrain_std=-1.0),
])
def test_bad_agent_arguments_raise_value_error(make):
    with pytest.raises(ValueError):
        make()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
@pytest.mark.parametrize("cls", [DdpgAgent, Td3Agent, SacAgent])
def test_to_device_moves_every_model_and_returns_cpu_actions(cls):
    agent = _agent(cls, ASYM)
    agent.to_device(0)
    for name in agent.state_dict():
        assert all(p.is_cuda for p in getattr(agent, name).parameters()), name
    obs, pa, pr = _inputs(ASYM)
    agent.sample_mode(0)
    step = agent.step(obs, pa, pr)
    assert not step.action.is_cuda and step.action.shape == (8, 2)
    assert torch.allclose(agent.normalize_action(step.action.cuda()).cpu(),
                          agent.normalize_action(step.action), atol=1e-6)
    agent.update_target(0.5)
