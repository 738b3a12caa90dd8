"""DDPG, TD3 and SAC: critic targets through time-limit ends (bootstrapped from the stored final
observation) against values computed directly from the agent's target networks, the valid mask
without final observations, update bookkeeping (target / policy intervals), the entropy
temperature, OptInfo and argument checks."""
import math
from collections import namedtuple

import numpy as np
import pytest
import torch

from rlfast.agents import DdpgAgent, SacAgent, Td3Agent
from rlfast.algos import DDPG, SAC, TD3
from rlfast.envs import EnvSpaces
from rlfast.samplers.collections import AgentSamples, BatchSpec, EnvSamples, Samples
from rlfast.spaces import FloatBox
from rlfast.utils.buffer import torchify_buffer

SMALL = dict(model_kwargs=dict(hidden_sizes=[16, 16]), q_model_kwargs=dict(hidden_sizes=[16, 16]))
PENDULUM = EnvSpaces(observation=FloatBox(low=[-1.0, -1.0, -8.0], high=[1.0, 1.0, 8.0]),
                     action=FloatBox(low=-2.0, high=2.0, shape=(1,)))
ASYM = EnvSpaces(observation=FloatBox(low=-1.0, high=1.0, shape=(3,)),
                 action=FloatBox(low=[0.0, -1.0], high=[1.0, 3.0]))
EnvInfoTl = namedtuple("EnvInfoTl", ["timeout", "final_observation"])
EnvInfoNoFinal = namedtuple("EnvInfoNoFinal", ["timeout"])


def _examples(spaces, final=True):
    obs = np.zeros(spaces.observation.shape, np.float32)
    info = EnvInfoTl(np.bool_(False), obs.copy()) if final else EnvInfoNoFinal(np.bool_(False))
    return dict(observation=obs, action=np.zeros(spaces.action.shape, np.float32),
                reward=np.float32(0), done=np.bool_(False), env_info=info)


def _setup(algo, agent_cls, spaces=PENDULUM, T=4, B=2, final=True, seed=0, **agent_kwargs):
    torch.manual_seed(seed)
    agent = agent_cls(**SMALL, **agent_kwargs)
    agent.initialize(spaces)
    algo.initialize(agent, n_itr=100, batch_spec=BatchSpec(T, B), mid_batch_reset=True,
                    examples=_examples(spaces, final))
    return agent, algo


def _samples(spaces, T, B, seed=0, final=True, p_done=0.3):
    """Sampler-style [T, B] batch: actions in env units, timeouts flagged among dones."""
    rng = np.random.RandomState(seed)
    obs_shape, act_shape = spaces.observation.shape, spaces.action.shape
    low = np.broadcast_to(spaces.action.low, act_shape)
    high = np.broadcast_to(spaces.action.high, act_shape)
    obs = rng.uniform(-1, 1, size=(T, B) + obs_shape).astype(np.float32)
    action = rng.uniform(low, high, size=(T, B) + act_shape).astype(np.float32)
    done = rng.rand(T, B) < p_done
    timeout = done & (rng.rand(T, B) < 0.5)
    final_obs = np.where(done[..., None], rng.uniform(-1, 1, size=obs.shape), 0).astype(np.float32)
    info = EnvInfoTl(timeout, final_obs) if final else EnvInfoNoFinal(timeout)
    reward = rng.randn(T, B).astype(np.float32)
    return torchify_buffer(Samples(
        agent=AgentSamples(action=action, prev_action=np.zeros_like(action), agent_info=None),
        env=EnvSamples(observation=obs, reward=reward, prev_reward=np.zeros_like(reward),
                       done=done, env_info=info)))


def _hand_samples(spaces, final=True):
    """B=1, T=6: a true termination at t=1 and a time-limit end at t=3 (final obs F)."""
    T = 6
    rng = np.random.RandomState(1)
    obs = rng.uniform(-1, 1, size=(T, 1) + spaces.observation.shape).astype(np.float32)
    final_obs = np.zeros_like(obs)
    final_obs[1, 0] = rng.uniform(-1, 1, size=spaces.observation.shape)
    final_obs[3, 0] = [0.9, -0.4, 5.0][:spaces.observation.shape[0]]  # F: unlike any obs
    done = np.zeros((T, 1), bool)
    done[1] = done[3] = True
    timeout = np.zeros((T, 1), bool)
    timeout[3] = True
    reward = np.array([[0.5], [-1.0], [2.0], [3.0], [0.25], [1.5]], np.float32)
    action = np.zeros((T, 1) + spaces.action.shape, np.float32)
    info = EnvInfoTl(timeout, final_obs) if final else EnvInfoNoFinal(timeout)
    return torchify_buffer(Samples(
        agent=AgentSamples(action=action, prev_action=action.copy(), agent_info=None),
        env=EnvSamples(observation=obs, reward=reward, prev_reward=np.zeros_like(reward),
                       done=done, env_info=info)))


def _hand_batch(algo, samples, ts=(1, 3, 2)):
    """Store the hand-built samples through optimize_agent (before learning starts) and
    extract the transitions at rows ``ts``."""
    opt_info = algo.optimize_agent(0, samples)
    assert all(v == [] for v in opt_info)  # itr 0 < min_itr_learn: storage only
    ts = np.array(ts)
    return torchify_buffer(algo.replay_buffer.extract_batch(ts, np.zeros_like(ts)))


def _perturb(module, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.add_(0.5 * torch.randn(p.shape, generator=g))


def _ref_target_q_ddpg(agent, obs):
    """min over the target critics of Q_target(s', mu_target(s')), straight from the nets."""
    with torch.no_grad():
        mu = agent.target_model(obs)
        tq = agent.target_q_model
        qs = [tq(obs, None, None, mu, member=k) for k in range(tq.ensemble_size)]
    return torch.stack(qs).min(0).values


# ---------------------------------------------------------------- time-limit targets: DDPG/TD3
@pytest.mark.parametrize("algo_cls,agent_cls,agent_kwargs", [
    (DDPG, DdpgAgent, {}), (TD3, Td3Agent, dict(target_noise_std=None))])
def test_ddpg_time_limit_end_bootstraps_from_final_observation(algo_cls, agent_cls, agent_kwargs):
    gamma = 0.9
    agent, algo = _setup(algo_cls(discount=gamma, min_steps_learn=1000, replay_size=24),
                         agent_cls, T=6, B=1, **agent_kwargs)
    _perturb(agent.target_model, 1)  # targets differ from the online nets
    _perturb(agent.target_q_model, 2)
    samples = _hand_samples(PENDULUM)
    batch = _hand_batch(algo, samples)  # rows: 1 terminal, 3 time limit, 2 plain
    y, valid = algo.q_target(batch)
    assert valid is None
    obs, r = samples.env.observation[:, 0], samples.env.reward[:, 0]
    final_obs = samples.env.env_info.final_observation[:, 0]
    boot_final = _ref_target_q_ddpg(agent, final_obs[3:4])[0]
    boot_next = _ref_target_q_ddpg(agent, obs[3:4])[0]
    assert abs(boot_final) > 1e-3 and abs(boot_final - boot_next) > 1e-3
    assert y[0].item() == pytest.approx(r[1].item(), abs=1e-6)  # true terminal: y = r
    assert y[1].item() == pytest.approx((r[3] + gamma * boot_final).item(), abs=1e-5)
    assert y[2].item() == pytest.approx((r[2] + gamma * boot_next).item(), abs=1e-5)


def test_ddpg_n_step_window_cut_by_time_limit():
    gamma = 0.9
    agent, algo = _setup(DDPG(discount=gamma, min_steps_learn=1000, replay_size=24,
                              n_step_return=2), DdpgAgent, T=6, B=1)
    _perturb(agent.target_q_model, 3)
    samples = _hand_samples(PENDULUM)
    batch = _hand_batch(algo, samples, ts=(0, 2, 3))
    y, _ = algo.q_target(batch)
    F, r = samples.env.env_info.final_observation[3:4, 0], samples.env.reward[:, 0]
    boot_F = _ref_target_q_ddpg(agent, F)[0]
    expected = [r[0] + gamma * r[1],                           # true termination at row 1
                r[2] + gamma * r[3] + gamma ** 2 * boot_F,      # cut at row 3 after 2 steps
                r[3] + gamma * boot_F]                          # cut after 1 step
    for i in range(3):
        assert y[i].item() == pytest.approx(float(expected[i]), abs=1e-5)


def test_ddpg_without_bootstrap_timelimit_treats_time_limit_as_terminal():
    agent, algo = _setup(DDPG(discount=0.9, min_steps_learn=1000, replay_size=24,
                              bootstrap_timelimit=False), DdpgAgent, T=6, B=1)
    samples = _hand_samples(PENDULUM)
    batch = _hand_batch(algo, samples)
    y, valid = algo.q_target(batch)
    r = samples.env.reward[:, 0]
    assert valid is None
    assert y[0].item() == pytest.approx(r[1].item())
    assert y[1].item() == pytest.approx(r[3].item())  # time limit: no bootstrap
    factor, _ = algo.bootstrap_factor(batch)
    assert torch.allclose(factor, torch.tensor([0.0, 0.0, 0.9]))


def test_missing_final_observation_masks_time_limit_windows():
    agent, algo = _setup(DDPG(discount=0.9, min_steps_learn=1000, replay_size=24), DdpgAgent,
                         T=6, B=1, final=False)
    assert algo.replay_buffer.has_final_observation is False
    batch = _hand_batch(algo, _hand_samples(PENDULUM, final=False))
    factor, valid = algo.bootstrap_factor(batch)
    assert torch.allclose(valid, torch.tensor([1.0, 0.0, 1.0]))  # the cut window is left out
    assert torch.allclose(factor, torch.tensor([0.0, 0.0, 0.9]))
    losses = torch.tensor([1.0, 100.0, 3.0])
    assert algo.weighted_mean(losses, batch, valid).item() == pytest.approx(2.0)
    # the critic loss leaves it out too
    _, info, _ = algo.losses(batch, update_policy=False)
    y, _ = algo.q_target(batch)
    q = agent.q_model(batch.agent_inputs.observation, None, None, batch.action).detach()
    expected = 0.5 * ((y - q) ** 2 * valid).sum() / valid.sum()
    assert info["qLoss"].item() == pytest.approx(expected.item(), rel=1e-5)


def test_ddpg_losses_match_reference():
    agent, algo = _setup(DDPG(discount=0.9, min_steps_learn=1000, replay_size=24), DdpgAgent,
                         T=6, B=1)
    batch = _hand_batch(algo, _hand_samples(PENDULUM), ts=(0, 1, 2, 3))
    loss, info, td_abs = algo.losses(batch, update_policy=True)
    y, _ = algo.q_target(batch)
    obs = batch.agent_inputs.observation
    with torch.no_grad():
        q = agent.q_model(obs, None, None, batch.action)
        q_mu = agent.q_model(obs, None, None, agent.model(obs))
    assert info["qLoss"].item() == pytest.approx((0.5 * (y - q) ** 2).mean().item(), rel=1e-5)
    assert info["muLoss"].item() == pytest.approx(-q_mu.mean().item(), rel=1e-5)
    assert torch.allclose(td_abs, (y - q).abs(), atol=1e-6)
    assert loss.item() == pytest.approx(info["qLoss"].item() + info["muLoss"].item(), rel=1e-5)


# ---------------------------------------------------------------- time-limit targets: SAC
def _sac_y(algo, batch, big=1000.0, seed=7):
    """The critic target y of SAC's loss, read back through td_abs = |y - q| with the online
    critic replaced by a constant above any target."""
    agent = algo.agent
    original = agent.q

    def constant_q(observation, prev_action, prev_reward, action, detach_params=False):
        if detach_params:
            return original(observation, prev_action, prev_reward, action, detach_params=True)
        return torch.full((2, action.shape[0]), big, requires_grad=True)

    agent.q = constant_q
    try:
        torch.manual_seed(seed)
        _, info, td_abs = algo.losses(batch)
    finally:
        del agent.q
    return big - td_abs, info


def _ref_sac_v(agent, obs, alpha, seed=7):
    """min_i Q_i,target(s', a') - alpha log pi(a'|s') with a' drawn from the same noise."""
    with torch.no_grad():
        torch.manual_seed(seed)
        mean, log_std = agent.model(obs)
        std = log_std.clamp(-20.0, 2.0).exp()
        x = mean + std * torch.randn_like(mean)
        a = torch.tanh(x)
        x64, m64, s64 = x.double(), mean.double(), std.double()
        log_pi = torch.distributions.Independent(torch.distributions.Normal(m64, s64), 1) \
            .log_prob(x64) + (2 * torch.log(torch.cosh(x64))).sum(-1)
        tq = agent.target_q_model
        q = torch.stack([tq(obs, None, None, a, member=k) for k in range(2)]).min(0).values
    return q.double() - alpha * log_pi


@pytest.mark.parametrize("fixed_alpha,reward_scale", [(0.3, 2.0), (None, 1.0)])
def test_sac_time_limit_end_bootstraps_from_final_observation(fixed_alpha, reward_scale):
    gamma = 0.9
    algo = SAC(discount=gamma, min_steps_learn=1000, replay_size=24, fixed_alpha=fixed_alpha,
               reward_scale=reward_scale, initial_alpha=0.5)
    agent, algo = _setup(algo, SacAgent, T=6, B=1)
    _perturb(agent.target_q_model, 4)
    samples = _hand_samples(PENDULUM)
    batch = _hand_batch(algo, samples)  # rows 1 (terminal), 3 (time limit), 2 (plain)
    y, info = _sac_y(algo, batch)
    alpha = 0.3 if fixed_alpha is not None else 0.5
    assert info["alpha"].item() == pytest.approx(alpha)
    # target_inputs of the batch in order: row 1 -> obs[2], row 3 -> F, row 2 -> obs[3]
    obs, F = samples.env.observation[:, 0], samples.env.env_info.final_observation[:, 0]
    next_obs = torch.stack([obs[2], F[3], obs[3]])
    assert torch.equal(batch.target_inputs.observation, next_obs)
    v = _ref_sac_v(agent, next_obs, alpha)
    r = samples.env.reward[:, 0].double()
    expected = torch.stack([reward_scale * r[1], reward_scale * r[3] + gamma * v[1],
                            reward_scale * r[2] + gamma * v[2]])
    assert abs(v[1]) > 1e-3
    assert torch.allclose(y.double(), expected, atol=2e-4)


def test_sac_without_bootstrap_timelimit_treats_time_limit_as_terminal():
    algo = SAC(discount=0.9, min_steps_learn=1000, replay_size=24, bootstrap_timelimit=False)
    agent, algo = _setup(algo, SacAgent, T=6, B=1)
    samples = _hand_samples(PENDULUM)
    y, _ = _sac_y(algo, _hand_batch(algo, samples))
    r = samples.env.reward[:, 0]
    assert y[0].item() == pytest.approx(r[1].item(), abs=1e-4)
    assert y[1].item() == pytest.approx(r[3].item(), abs=1e-4)


def test_sac_missing_final_observation_masks_time_limit_windows():
    algo = SAC(discount=0.9, min_steps_learn=1000, replay_size=24)
    agent, algo = _setup(algo, SacAgent, T=6, B=1, final=False)
    batch = _hand_batch(algo, _hand_samples(PENDULUM, final=False))
    factor, valid = algo.bootstrap_factor(batch)
    assert torch.allclose(valid, torch.tensor([1.0, 0.0, 1.0]))
    assert torch.allclose(factor, torch.tensor([0.0, 0.0, 0.9]))


# ---------------------------------------------------------------- update bookkeeping
def test_replay_stores_normalized_actions_and_no_updates_before_min_steps():
    agent, algo = _setup(DDPG(min_steps_learn=16, batch_size=4, replay_size=64), DdpgAgent,
                         ASYM, T=4, B=2)
    assert algo.min_itr_learn == 2
    samples = _samples(ASYM, 4, 2)
    info = algo.optimize_agent(0, samples)
    assert all(v == [] for v in info) and algo.update_counter == 0
    stored = torch.as_tensor(algo.replay_buffer.samples.action[:4])
    assert torch.allclose(stored, agent.normalize_action(samples.agent.action), atol=1e-6)
    assert stored.abs().max() <= 1 + 1e-6


def _tensors(module):
    return [p.detach().clone() for p in module.parameters()]


def _same(a, b):
    return all(torch.equal(x, y) for x, y in zip(a, b))


def test_ddpg_target_update_interval():
    tau = 0.2
    algo = DDPG(min_steps_learn=0, batch_size=8, replay_ratio=1, replay_size=64,
                target_update_interval=3, target_update_tau=tau)
    agent, algo = _setup(algo, DdpgAgent, T=4, B=2)
    assert algo.updates_per_optimize == 1
    for itr in range(7):
        old_t, old_tq = _tensors(agent.target_model), _tensors(agent.target_q_model)
        algo.optimize_agent(itr, _samples(PENDULUM, 4, 2, seed=itr))
        moved = algo.update_counter % 3 == 0
        assert _same(old_t, _tensors(agent.target_model)) != moved, itr
        assert _same(old_tq, _tensors(agent.target_q_model)) != moved, itr
        if moved:  # Polyak step toward the freshly updated online nets
            for new, old, src in zip(agent.target_q_model.parameters(), old_tq,
                                     agent.q_model.parameters()):
                assert torch.allclose(new, tau * src + (1 - tau) * old, atol=1e-6)
            for new, old, src in zip(agent.target_model.parameters(), old_t,
                                     agent.model.parameters()):
                assert torch.allclose(new, tau * src + (1 - tau) * old, atol=1e-6)
    assert algo.update_counter == 7


def test_td3_policy_update_interval_and_opt_info():
    algo = TD3(min_steps_learn=0, batch_size=8, replay_ratio=4, replay_size=64)
    agent, algo = _setup(algo, Td3Agent, T=4, B=2)
    assert algo.updates_per_optimize == 4 and algo.policy_update_interval == 2
    before = _tensors(agent.model)
    info = algo.optimize_agent(0, _samples(PENDULUM, 4, 2))
    assert type(info).__name__ == "OptInfo"
    assert len(info.qLoss) == len(info.qMean) == len(info.qGradNorm) == 4
    assert len(info.muLoss) == len(info.muGradNorm) == 2  # updates 0 and 2 only
    assert all(math.isfinite(v) for field in info for v in field)
    assert not _same(before, _tensors(agent.model))
    # an update without a policy step leaves the policy unchanged
    assert algo.update_counter == 4
    algo.updates_per_optimize = 1
    algo.optimize_agent(1, _samples(PENDULUM, 4, 2, seed=1))  # counter 4: policy step
    mid = _tensors(agent.model)
    algo.optimize_agent(2, _samples(PENDULUM, 4, 2, seed=2))  # counter 5: critic only
    assert _same(mid, _tensors(agent.model))


@pytest.mark.parametrize("algo_cls,agent_cls,kwargs", [
    (DDPG, DdpgAgent, {}), (DDPG, DdpgAgent, dict(prioritized_replay=True, n_step_return=2)),
    (TD3, Td3Agent, {}),
    (SAC, SacAgent, {}), (SAC, SacAgent, dict(prioritized_replay=True, n_step_return=3,
                                              action_prior="gaussian")),
    (SAC, SacAgent, dict(reparameterize=False, fixed_alpha=0.1)),
])
def test_optimize_agent_runs_and_reports_finite_opt_info(algo_cls, agent_cls, kwargs):
    algo = algo_cls(min_steps_learn=16, batch_size=16, replay_ratio=6, replay_size=128, **kwargs)
    agent, algo = _setup(algo, agent_cls, ASYM, T=8, B=2)
    assert algo.min_itr_learn == 1
    assert all(v == [] for v in algo.optimize_agent(0, _samples(ASYM, 8, 2, seed=0)))
    params = _tensors(agent.q_model)
    info = algo.optimize_agent(1, _samples(ASYM, 8, 2, seed=1))
    assert info._fields == algo.opt_info_fields
    assert len(info.qLoss) == 6 and algo.update_counter == 6
    for name, values in zip(info._fields, info):
        assert len(values) > 0 and all(math.isfinite(v) for v in values), name
    assert not _same(params, _tensors(agent.q_model))


# ---------------------------------------------------------------- SAC temperature
def test_sac_target_entropy_auto_is_minus_action_dim():
    for target_entropy, expected in [("auto", -2.0), (5.0, 5.0)]:
        algo = SAC(min_steps_learn=1000, batch_size=8, replay_size=64, initial_alpha=2.0,
                   target_entropy=target_entropy)
        agent, algo = _setup(algo, SacAgent, ASYM, T=4, B=2)  # action_dim 2
        algo.optimize_agent(0, _samples(ASYM, 4, 2))
        batch = torchify_buffer(algo.replay_buffer.extract_batch(np.array([1, 2]),
                                                                 np.array([0, 1])))
        _, info, _ = algo.losses(batch)
        # alpha_loss = -log_alpha * (mean log_pi + target_entropy)
        recovered = -info["alphaLoss"].item() / math.log(2.0) - info["logPi"].item()
        assert recovered == pytest.approx(expected, abs=1e-4)


@pytest.mark.parametrize("target_entropy,direction", [(-100.0, -1), (100.0, 1)])
def test_sac_alpha_loss_sign(target_entropy, direction):
    algo = SAC(min_steps_learn=0, batch_size=8, replay_ratio=1, replay_size=64,
               target_entropy=target_entropy)
    agent, algo = _setup(algo, SacAgent, PENDULUM, T=4, B=2)
    before = algo.log_alpha.item()
    algo.optimize_agent(0, _samples(PENDULUM, 4, 2))
    # entropy above target (target -100): alpha shrinks; below target (+100): alpha grows
    assert (algo.log_alpha.item() - before) * direction > 0
    assert algo.alpha == pytest.approx(math.exp(algo.log_alpha.item()))


def test_sac_fixed_alpha_has_no_alpha_param_group():
    algo = SAC(min_steps_learn=0, batch_size=8, replay_ratio=2, replay_size=64, fixed_alpha=0.2)
    agent, algo = _setup(algo, SacAgent, PENDULUM, T=4, B=2)
    assert len(algo.optimizer.param_groups) == 2
    assert not any(p is algo.log_alpha for g in algo.optimizer.param_groups for p in g["params"])
    before = algo.log_alpha.clone()
    info = algo.optimize_agent(0, _samples(PENDULUM, 4, 2))
    assert torch.equal(before, algo.log_alpha)
    assert algo.alpha == pytest.approx(0.2)
    assert all(a == pytest.approx(0.2) for a in info.alpha)
    assert all(v == 0.0 for v in info.alphaLoss)
    learned = SAC(min_steps_learn=0, batch_size=8, replay_size=64)
    _setup(learned, SacAgent, PENDULUM, T=4, B=2)
    assert len(learned.optimizer.param_groups) == 3


# ---------------------------------------------------------------- state dicts
def test_sac_optim_state_dict_round_trip():
    algo = SAC(min_steps_learn=0, batch_size=8, replay_ratio=2, replay_size=64)
    agent, algo = _setup(algo, SacAgent, PENDULUM, T=4, B=2)
    algo.optimize_agent(0, _samples(PENDULUM, 4, 2))
    state = algo.optim_state_dict()
    agent2 = SacAgent(**SMALL)
    agent2.initialize(PENDULUM)
    agent2.load_state_dict(agent.state_dict())
    algo2 = SAC(min_steps_learn=0, batch_size=8, replay_size=64, initial_optim_state_dict=state)
    algo2.initialize(agent2, 100, BatchSpec(4, 2), True, _examples(PENDULUM))
    assert algo2.log_alpha.item() == pytest.approx(algo.log_alpha.item())
    assert algo2.log_alpha.item() != 0.0
    s1, s2 = algo.optimizer.state_dict()["state"], algo2.optimizer.state_dict()["state"]
    assert s1.keys() == s2.keys()
    for k in s1:
        assert torch.equal(s1[k]["exp_avg"], s2[k]["exp_avg"])


def test_ddpg_optim_state_dict_round_trip():
    algo = DDPG(min_steps_learn=0, batch_size=8, replay_ratio=1, replay_size=64)
    agent, algo = _setup(algo, DdpgAgent, PENDULUM, T=4, B=2)
    algo.optimize_agent(0, _samples(PENDULUM, 4, 2))
    algo2 = DDPG(min_steps_learn=0, batch_size=8, replay_size=64,
                 initial_optim_state_dict=algo.optim_state_dict())
    _setup(algo2, DdpgAgent, PENDULUM, T=4, B=2)
    s1, s2 = algo.optimizer.state_dict(), algo2.optimizer.state_dict()
    assert [g["lr"] for g in s1["param_groups"]] == [g["lr"] for g in s2["param_groups"]]
    for k in s1["state"]:
        assert torch.equal(s1["state"][k]["exp_avg_sq"], s2["state"][k]["exp_avg_sq"])


# ---------------------------------------------------------------- learning-rate schedule
@pytest.mark.parametrize("make,agent_cls,rates", [
    (lambda **kw: TD3(mu_learning_rate=2e-4, q_learning_rate=5e-4, **kw), Td3Agent, [2e-4, 5e-4]),
    (lambda **kw: SAC(learning_rate=7.3e-4, **kw), SacAgent, [7.3e-4] * 3),
    (lambda **kw: DDPG(learning_rate=1e-4, q_learning_rate=1e-3, **kw), DdpgAgent, [1e-4, 1e-3]),
])
def test_linear_lr_schedule_scales_every_group_by_the_remaining_fraction(make, agent_cls, rates):
    common = dict(min_steps_learn=0, batch_size=8, replay_ratio=2, replay_size=256)
    _, algo = _setup(make(linear_lr_schedule=True, **common), agent_cls)  # n_itr = 100
    for itr, fraction in [(0, 1.0), (25, 0.75), (60, 0.4), (99, 0.01)]:
        algo.optimize_agent(itr, _samples(PENDULUM, 4, 2, seed=itr))
        assert [g["lr"] for g in algo.optimizer.param_groups] == \
            pytest.approx([r * fraction for r in rates], rel=1e-12)
    # the async runner's sampler iteration decides the fraction when given
    algo.optimize_agent(3, _samples(PENDULUM, 4, 2), sampler_itr=80)
    assert [g["lr"] for g in algo.optimizer.param_groups] == pytest.approx(
        [r * 0.2 for r in rates])
    # at the end of the run the rate is zero: an update leaves the weights as they were
    before = [p.detach().clone() for g in algo.optimizer.param_groups for p in g["params"]]
    algo.optimize_agent(100, _samples(PENDULUM, 4, 2, seed=5))
    assert all(g["lr"] == 0.0 for g in algo.optimizer.param_groups)
    after = [p.detach() for g in algo.optimizer.param_groups for p in g["params"]]
    assert all(torch.equal(a, b) for a, b in zip(before, after))
    # without the schedule the configured rates stay
    _, plain = _setup(make(**common), agent_cls)
    plain.optimize_agent(60, _samples(PENDULUM, 4, 2))
    assert [g["lr"] for g in plain.optimizer.param_groups] == pytest.approx(rates, rel=1e-12)


def test_linear_lr_schedule_resumes_from_the_configured_rate():
    """A restored optimizer state carries the decayed rates; the schedule scales the
    configured ones, so a resumed run continues where the first left off."""
    common = dict(min_steps_learn=0, batch_size=8, replay_ratio=2, replay_size=256,
                  linear_lr_schedule=True)
    _, algo = _setup(SAC(learning_rate=1e-3, **common), SacAgent)
    algo.optimize_agent(50, _samples(PENDULUM, 4, 2))
    state = algo.optim_state_dict()
    assert [g["lr"] for g in state["optimizer"]["param_groups"]] == pytest.approx([5e-4] * 3)
    _, resumed = _setup(SAC(learning_rate=1e-3, initial_optim_state_dict=state, **common),
                        SacAgent)
    resumed.optimize_agent(60, _samples(PENDULUM, 4, 2))
    assert [g["lr"] for g in resumed.optimizer.param_groups] == pytest.approx([4e-4] * 3)


def test_linear_lr_schedule_must_be_a_bool():
    with pytest.raises(TypeError, match="linear_lr_schedule"):
        TD3(linear_lr_schedule="yes")


# ---------------------------------------------------------------- argument checks
def test_param_group_learning_rates():
    _, ddpg = _setup(DDPG(learning_rate=1e-4, q_learning_rate=3e-3, replay_size=64), DdpgAgent)
    assert [g["lr"] for g in ddpg.optimizer.param_groups] == [1e-4, 3e-3]
    agent, td3 = _setup(TD3(mu_learning_rate=2e-4, q_learning_rate=5e-4, replay_size=64),
                        Td3Agent)
    assert [g["lr"] for g in td3.optimizer.param_groups] == [2e-4, 5e-4]
    assert {id(p) for p in td3.optimizer.param_groups[0]["params"]} == \
        {id(p) for p in agent.model.parameters()}


@pytest.mark.parametrize("algo_cls", [TD3, SAC])
def test_twin_critic_algorithms_reject_single_critic_agent(algo_cls):
    agent = DdpgAgent(**SMALL)
    agent.initialize(PENDULUM)
    with pytest.raises(ValueError, match="twin"):
        algo_cls(replay_size=64).initialize(agent, 10, BatchSpec(4, 2), True,
                                            _examples(PENDULUM))


def test_initialize_checks_collector_and_env_info():
    agent = DdpgAgent(**SMALL)
    agent.initialize(PENDULUM)
    with pytest.raises(ValueError, match="mid"):
        DDPG(replay_size=64).initialize(agent, 10, BatchSpec(4, 2), False, _examples(PENDULUM))
    examples = dict(_examples(PENDULUM), env_info=namedtuple("Info", ["other"])(0))
    with pytest.raises(ValueError, match="timeout"):
        DDPG(replay_size=64).initialize(agent, 10, BatchSpec(4, 2), True, examples)


@pytest.mark.parametrize("make", [
    lambda: DDPG(discount=1.5), lambda: DDPG(batch_size=0),
    lambda: DDPG(target_update_tau=0), lambda: DDPG(target_update_interval=0),
    lambda: DDPG(learning_rate=0), lambda: DDPG(q_learning_rate=-1),
    lambda: DDPG(q_target_clip=0), lambda: DDPG(n_step_return=0), lambda: DDPG(replay_ratio=0),
    lambda: TD3(policy_update_interval=0), lambda: SAC(action_prior="laplace"),
    lambda: SAC(target_entropy="high"), lambda: SAC(fixed_alpha=-0.1),
    lambda: SAC(learning_rate=0), lambda: SAC(initial_alpha=0), lambda: SAC(replay_size=0),
])
def test_bad_algorithm_arguments_raise_value_error(make):
    with pytest.raises(ValueError):
        make()


@pytest.mark.parametrize("make,name", [
    (lambda: DDPG(batch_size=2.5), "batch_size"), (lambda: TD3(replay_size="big"), "replay_size"),
    (lambda: SAC(n_step_return=True), "n_step_return"),
])
def test_non_integer_counts_raise_type_error_naming_the_value(make, name):
    with pytest.raises(TypeError, match=name):
        make()


# ---------------------------------------------------------------- on a GPU (skipped on CPU)
_CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")


def _cuda_run(algo, agent_cls, **agent_kwargs):
    torch.manual_seed(0)
    agent = agent_cls(**SMALL, **agent_kwargs)
    agent.initialize(ASYM)
    agent.to_device(0)
    algo.initialize(agent, 100, BatchSpec(8, 2), True, _examples(ASYM))
    info = algo.optimize_agent(0, _samples(ASYM, 8, 2))
    assert all(len(v) > 0 and all(math.isfinite(x) for x in v) for v in info)
    assert all(p.is_cuda for p in agent.target_q_model.parameters())
    return info


@_CUDA
@pytest.mark.parametrize("algo_cls,agent_cls", [(DDPG, DdpgAgent), (SAC, SacAgent)])
def test_optimize_agent_on_cuda(algo_cls, agent_cls):
    _cuda_run(algo_cls(min_steps_learn=0, batch_size=16, replay_ratio=4, replay_size=128),
              agent_cls)


@_CUDA
@pytest.mark.parametrize("make", [
    lambda: TD3(min_steps_learn=0, batch_size=16, replay_ratio=4, replay_size=128),
    lambda: SAC(min_steps_learn=0, batch_size=16, replay_ratio=4, replay_size=128,
                fixed_alpha=0.2),
], ids=["td3_critic_only_update", "sac_fixed_alpha"])
def test_optimize_agent_on_cuda_with_placeholder_diagnostics(make):
    algo = make()
    _cuda_run(algo, Td3Agent if isinstance(algo, TD3) else SacAgent)
