"""Every algorithm refuses a NaN / inf loss or gradient norm before it reaches the weights.

For each algorithm a batch (or the replay it trains from) holds a NaN reward or observation,
or a gradient hook turns a gradient NaN while the loss stays finite. ``optimize_agent`` must
raise :class:`NonFiniteError` naming the algorithm, the quantity and the iteration, and leave
every tensor of the agent (online and target networks, SAC's temperature) bit-for-bit as it
was, with the optimizer never stepped (its state empty, or, for a fused optimizer that
refused the step on the device, its step counts and moments still zero).
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from rlfast.agents import CatDqnAgent, DdpgAgent, DqnAgent, R2d1Agent, SacAgent, Td3Agent
from rlfast.algos import A2C, DDPG, DQN, PPO, R2D1, SAC, TD3, CategoricalDQN
from rlfast.algos.dqn.cat_dqn import project_distribution
from rlfast.envs import make
from rlfast.samplers import CpuWaitResetCollector, SerialSampler
from rlfast.utils.buffer import buffer_func
from rlfast.utils.finite import NonFiniteError

from tests.algos import _pg_batch
from tests.algos.test_qpg import ASYM, _samples as qpg_samples, _setup as qpg_setup

NAN = float("nan")


def _agent_tensors(agent, algo=None) -> dict[str, torch.Tensor]:
    """Every tensor of the agent's state (online and target networks), cloned, by dotted name;
    plus SAC's ``log_alpha``."""
    flat: dict[str, torch.Tensor] = {}

    def walk(prefix, value):
        if isinstance(value, dict):
            for key, item in value.items():
                walk(f"{prefix}.{key}" if prefix else str(key), item)
        elif isinstance(value, torch.Tensor):
            flat[prefix] = value.detach().clone()

    walk("", agent.state_dict())
    if algo is not None and hasattr(algo, "log_alpha"):
        flat["log_alpha"] = algo.log_alpha.detach().clone()
    assert flat
    return flat


def _assert_untouched(before: dict, agent, algo) -> None:
    after = _agent_tensors(agent, algo)
    assert after.keys() == before.keys()
    for name, tensor in after.items():
        assert bool(torch.isfinite(tensor).all()), f"{name} is no longer finite"
        assert torch.equal(tensor, before[name]), f"{name} changed"
    _assert_never_stepped(algo.optimizer)


def _assert_never_stepped(optimizer: torch.optim.Optimizer) -> None:
    """The optimizer took no step: its state is empty, or (a fused optimizer that refused the
    step on the device, which initializes its state first) every step count is 0 and every
    moment is 0."""
    for param, state in optimizer.state.items():
        for key, value in state.items():
            if isinstance(value, torch.Tensor):
                assert not bool(value.any()), f"the optimizer took a step ({key} of a " \
                                              f"{tuple(param.shape)} parameter is {value})"


def _nan_grad_hook(module: torch.nn.Module) -> None:
    """Make the gradient of ``module``'s first parameter NaN; the loss itself stays finite."""
    first = next(iter(module.parameters()))
    first.register_hook(lambda grad: torch.full_like(grad, NAN))


# ---------------------------------------------------------------- A2C and PPO
PG_ALGOS = {"A2C": lambda: A2C(), "PPO": lambda: PPO(minibatches=1, epochs=2)}



@pytest.mark.parametrize("name", sorted(PG_ALGOS))
@pytest.mark.parametrize("kind", ["categorical", "recurrent", "gaussian"])
@pytest.mark.parametrize("field", ["reward", "observation"])
def test_pg_nan_in_batch_raises_before_the_step(name, kind, field):
    algo = PG_ALGOS[name]()
    agent, samples = _pg_batch.setup(algo, kind)
    assert not bool(samples.env.env_info.timeout[0, 0])  # step (0, 0) is trained on
    getattr(samples.env, field)[0, 0] = NAN
    before = _agent_tensors(agent)
    with pytest.raises(NonFiniteError, match=rf"^{name}: loss is nan at iteration 3;"):
        algo.optimize_agent(3, samples)
    _assert_untouched(before, agent, algo)
    assert algo.update_counter == 0


@pytest.mark.parametrize("name", sorted(PG_ALGOS))
def test_pg_nan_gradient_with_finite_loss_raises(name):
    algo = PG_ALGOS[name]()
    agent, samples = _pg_batch.setup(algo, "categorical")
    _nan_grad_hook(agent.model)
    before = _agent_tensors(agent)
    with pytest.raises(NonFiniteError, match=rf"^{name}: gradNorm is nan at iteration 0;"):
        algo.optimize_agent(0, samples)
    _assert_untouched(before, agent, algo)


def test_pg_finite_batch_still_trains():
    """The check refuses only non-finite updates: the same setup without a NaN steps."""
    algo = A2C()
    agent, samples = _pg_batch.setup(algo, "categorical")
    before = _agent_tensors(agent)
    info = algo.optimize_agent(0, samples)
    assert math.isfinite(info.loss[0]) and math.isfinite(info.gradNorm[0])
    assert any(not torch.equal(before[k], v) for k, v in _agent_tensors(agent).items())


def _nan_grad_from_call(module: torch.nn.Module, first_bad: int) -> None:
    """Make the gradient of ``module``'s first parameter NaN from its ``first_bad``-th
    backward pass on (counted from 1); earlier passes are untouched."""
    calls = [0]

    def hook(grad):
        calls[0] += 1
        return torch.full_like(grad, NAN) if calls[0] >= first_bad else grad

    next(iter(module.parameters())).register_hook(hook)


@pytest.mark.parametrize("fused", [True, False])
def test_ppo_nan_in_a_later_step_keeps_the_steps_before_it(fused):
    """The second of three gradient steps is not finite: the call raises naming it, and the
    weights are those after the first step (the refused step and the one after it never
    reached them), whether the optimizer refuses on the device (fused) or on the host."""
    def run(epochs, poison):
        algo = PPO(minibatches=1, epochs=epochs, optim_kwargs=dict(fused=fused) if fused
                   else dict(foreach=True))
        agent, samples = _pg_batch.setup(algo, "categorical")
        if poison:
            _nan_grad_from_call(agent.model, first_bad=2)
        torch.manual_seed(5)  # the same first minibatch order in both runs
        return algo, agent, samples

    algo, agent, samples = run(1, poison=False)
    algo.optimize_agent(0, samples)
    after_one_step = _agent_tensors(agent)
    algo, agent, samples = run(3, poison=True)
    assert algo.skips_on_device is fused
    with pytest.raises(NonFiniteError, match=r"^PPO: gradNorm is nan at iteration 4;"):
        algo.optimize_agent(4, samples)
    for name, tensor in _agent_tensors(agent).items():
        assert torch.equal(tensor, after_one_step[name]), f"{name} differs from one step's"
    assert algo.update_counter == 1
    steps = [state["step"] for state in algo.optimizer.state.values()]
    assert steps and all(float(step) == 1 for step in steps)


# ---------------------------------------------------------------- DQN, CategoricalDQN, R2D1
def _copy(samples):
    return buffer_func(samples, lambda x: x.clone())


def _replay_run(algo, agent, itrs: int, poison, recurrent: bool = False):
    """Train on CartPole batches from a serial sampler, poisoning every batch with
    ``poison(samples)`` (replay draws transitions at random, so each one must be poisoned
    for the first update to see a NaN). Returns the error of the iteration that raised."""
    sampler = SerialSampler(EnvCls=make, env_kwargs=dict(id="CartPole-v1"), batch_T=8,
                            batch_B=2, max_decorrelation_steps=0,
                            CollectorCls=CpuWaitResetCollector if recurrent else None)
    try:
        examples = sampler.initialize(agent, seed=0)
        algo.initialize(agent, n_itr=100, batch_spec=sampler.batch_spec,
                        mid_batch_reset=sampler.mid_batch_reset, examples=examples)
        agent.train_mode(0)
        before = _agent_tensors(agent)
        for itr in range(itrs):
            samples, _ = sampler.obtain_samples(itr)
            samples = _copy(samples)
            poison(samples)
            try:
                algo.optimize_agent(itr, samples)
            except NonFiniteError as error:
                assert itr == algo.min_itr_learn, "raised before learning started"
                _assert_untouched(before, agent, algo)
                assert algo.update_counter == 0
                return error
        raise AssertionError("no NonFiniteError")
    finally:
        sampler.shutdown()


def _nan_reward(samples):
    samples.env.reward[:] = NAN


def _nan_observation(samples):
    samples.env.observation[:] = NAN


def _inf_observation(samples):
    samples.env.observation[..., 0] = float("inf")


DQN_CASES = {
    "DQN-reward": (lambda: DQN(batch_size=8, min_steps_learn=16, replay_size=256),
                   lambda: DqnAgent(model_kwargs=dict(hidden_sizes=[8])), _nan_reward),
    "DQN-observation-prioritized": (
        lambda: DQN(batch_size=8, min_steps_learn=16, replay_size=256, prioritized_replay=True,
                    double_dqn=True, n_step_return=2),
        lambda: DqnAgent(model_kwargs=dict(hidden_sizes=[8])), _nan_observation),
    "CategoricalDQN-reward": (
        lambda: CategoricalDQN(batch_size=8, min_steps_learn=16, replay_size=256),
        lambda: CatDqnAgent(n_atoms=11, model_kwargs=dict(hidden_sizes=[8])), _nan_reward),
    "CategoricalDQN-observation": (
        lambda: CategoricalDQN(batch_size=8, min_steps_learn=16, replay_size=256),
        lambda: CatDqnAgent(n_atoms=11, model_kwargs=dict(hidden_sizes=[8])), _inf_observation),
}


@pytest.mark.parametrize("case", sorted(DQN_CASES))
def test_dqn_family_nan_in_replay_raises_before_the_step(case):
    make_algo, make_agent, poison = DQN_CASES[case]
    torch.manual_seed(0)
    algo, agent = make_algo(), make_agent()
    error = _replay_run(algo, agent, itrs=4, poison=poison)
    name = case.split("-")[0]
    assert str(error).startswith(f"{name}: loss is nan at iteration {algo.min_itr_learn};")


def test_projection_of_a_nan_return_is_nan_not_an_index_error():
    """C51's projection indexes atoms by the shifted return: a NaN there must put a NaN in
    that target row (so the cross-entropy, which the loss check names, is NaN); finite rows
    are unaffected."""
    z = torch.linspace(-2.0, 2.0, 5)
    next_p = torch.full((3, 5), 0.2)
    returns = torch.tensor([0.5, NAN, -1.0])
    projected = project_distribution(next_p, returns, torch.ones(3), 0.9, z)
    assert bool(torch.isnan(projected[1]).any())
    assert bool(torch.isnan(-(projected[1] * torch.full((5,), 0.2).log()).sum()))
    finite = project_distribution(next_p[[0, 2]], returns[[0, 2]], torch.ones(2), 0.9, z)
    assert torch.equal(projected[[0, 2]], finite)


def test_r2d1_nan_observation_in_replayed_sequences_raises_before_the_step():
    """Input priorities come from the sampler's q values and rewards (finite here), so the
    NaN observations are stored and reach the loss through the replayed sequences."""
    torch.manual_seed(0)
    algo = R2D1(batch_T=4, batch_B=2, warmup_T=2, store_rnn_state_interval=8, n_step_return=2,
                min_steps_learn=0, replay_size=512, replay_ratio=1)
    agent = R2d1Agent(model_kwargs=dict(hidden_sizes=[8], lstm_size=8, head_size=8))
    error = _replay_run(algo, agent, itrs=10, poison=_nan_observation, recurrent=True)
    assert str(error).startswith(f"R2D1: loss is nan at iteration {algo.min_itr_learn};")


def test_dqn_nan_gradient_with_finite_loss_raises():
    torch.manual_seed(0)
    algo = DQN(batch_size=8, min_steps_learn=16, replay_size=256)
    agent = DqnAgent(model_kwargs=dict(hidden_sizes=[8]))
    hooked = []

    def hook_once(samples):
        if not hooked:
            _nan_grad_hook(agent.model)
            hooked.append(True)

    error = _replay_run(algo, agent, itrs=4, poison=hook_once)
    assert str(error).startswith(f"DQN: gradNorm is nan at iteration {algo.min_itr_learn};")


# ---------------------------------------------------------------- DDPG, TD3, SAC
QPG_CASES = {
    "DDPG": (DDPG, DdpgAgent, {}),
    "DDPG-prioritized": (DDPG, DdpgAgent, dict(prioritized_replay=True, n_step_return=2)),
    "TD3": (TD3, Td3Agent, {}),
    "SAC": (SAC, SacAgent, {}),
    "SAC-fixed-alpha": (SAC, SacAgent, dict(fixed_alpha=0.1, reparameterize=False)),
}


def _qpg(case):
    algo_cls, agent_cls, kwargs = QPG_CASES[case]
    algo = algo_cls(min_steps_learn=0, batch_size=8, replay_ratio=2, replay_size=64, **kwargs)
    agent, algo = qpg_setup(algo, agent_cls, ASYM, T=8, B=2)
    return algo_cls.__name__, agent, algo


@pytest.mark.parametrize("case", sorted(QPG_CASES))
def test_qpg_nan_reward_names_the_critic_loss(case):
    name, agent, algo = _qpg(case)
    samples = qpg_samples(ASYM, 8, 2)
    samples.env.reward[:] = NAN
    before = _agent_tensors(agent, algo)
    with pytest.raises(NonFiniteError, match=rf"^{name}: qLoss is nan at iteration 0;"):
        algo.optimize_agent(0, samples)
    _assert_untouched(before, agent, algo)
    assert algo.update_counter == 0


@pytest.mark.parametrize("case", ["DDPG", "TD3", "SAC"])
def test_qpg_inf_observation_raises_before_the_step(case):
    name, agent, algo = _qpg(case)
    samples = qpg_samples(ASYM, 8, 2)
    samples.env.observation[:, :, 1] = float("inf")
    before = _agent_tensors(agent, algo)
    with pytest.raises(NonFiniteError, match=rf"^{name}: \w+ is (nan|inf|-inf) at iteration 0;"):
        algo.optimize_agent(0, samples)
    _assert_untouched(before, agent, algo)


@pytest.mark.parametrize("case,expected", [("DDPG", "muGradNorm"), ("TD3", "muGradNorm"),
                                           ("SAC", "piGradNorm")])
def test_qpg_nan_policy_gradient_names_its_norm(case, expected):
    """A NaN gradient with finite losses is named by its parameter group."""
    name, agent, algo = _qpg(case)
    _nan_grad_hook(agent.model)
    before = _agent_tensors(agent, algo)
    with pytest.raises(NonFiniteError, match=rf"^{name}: {expected} is nan at iteration 5;"):
        algo.optimize_agent(5, qpg_samples(ASYM, 8, 2))
    _assert_untouched(before, agent, algo)


def test_qpg_finite_batch_still_steps():
    name, agent, algo = _qpg("SAC")
    before = _agent_tensors(agent, algo)
    info = algo.optimize_agent(0, qpg_samples(ASYM, 8, 2))
    assert all(math.isfinite(v) for field in info for v in field)
    assert algo.update_counter == 4 and algo.optimizer.state
    assert not torch.equal(before["log_alpha"], algo.log_alpha.detach())
    assert np.isfinite(float(algo.log_alpha.detach()))
