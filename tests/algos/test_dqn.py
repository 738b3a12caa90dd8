"""DQN and Categorical DQN: loss pieces against independent references, update bookkeeping."""
import math

import numpy as np
import pytest
import torch

from rlfast.algos.dqn import DQN, CategoricalDQN
from rlfast.algos.dqn.cat_dqn import project_distribution
from rlfast.algos.dqn.dqn import huber
from rlfast.replays import AgentInputs, SamplesFromReplay


def test_huber_matches_piecewise_definition():
    d = torch.tensor([-3.0, -1.0, -0.5, 0.0, 0.2, 1.0, 2.5])
    expected = [1.0 * (3 - 0.5), 0.5, 0.125, 0.0, 0.02, 0.5, 1.0 * (2.5 - 0.5)]
    assert torch.allclose(huber(d, 1.0), torch.tensor(expected))
    assert torch.allclose(huber(d, None), 0.5 * d ** 2)


def test_prioritized_beta_anneals_linearly_from_the_first_learning_iteration():
    """The PER exponent follows the shared linear schedule: pri_beta_init until learning
    starts, linear to pri_beta_final over pri_beta_steps, constant after."""
    class BetaRecorder:
        def __init__(self):
            self.betas = []

        def set_beta(self, beta):
            self.betas.append(beta)

    algo = DQN(prioritized_replay=True, pri_beta_init=0.4, pri_beta_final=1.0)
    algo.replay_buffer = BetaRecorder()
    algo.min_itr_learn, algo.pri_beta_itr = 10, 10
    for itr in (0, 10, 15, 20, 25):
        algo.update_itr_hyperparams(itr)
    betas = algo.replay_buffer.betas
    assert betas[0] == 0.4 and betas[1] == 0.4
    assert betas[2] == pytest.approx(0.7, abs=1e-12)
    assert betas[3] == 1.0 and betas[4] == 1.0
    algo.prioritized_replay = False  # uniform replay has no beta to set
    algo.update_itr_hyperparams(15)
    assert len(betas) == 5


def _reference_projection(p, r, not_done, gamma_n, z):
    """Per-sample, per-atom loop (C51 paper, Algorithm 1)."""
    v_min, v_max, n = z[0], z[-1], len(z)
    dz = (v_max - v_min) / (n - 1)
    out = np.zeros_like(p)
    for i in range(p.shape[0]):
        for j in range(n):
            tz = min(max(r[i] + gamma_n * not_done[i] * z[j], v_min), v_max)
            b = (tz - v_min) / dz
            lo, hi = math.floor(b), math.ceil(b)
            if lo == hi:
                out[i, lo] += p[i, j]
            else:
                out[i, lo] += p[i, j] * (hi - b)
                out[i, hi] += p[i, j] * (b - lo)
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_projection_matches_reference(seed):
    rng = np.random.default_rng(seed)
    B, n = 16, 11
    z = np.linspace(-5.0, 5.0, n)
    p = rng.random((B, n))
    p /= p.sum(1, keepdims=True)
    r = rng.normal(0, 3, size=B)
    r[0] = 1.0  # lands exactly on atoms when not_done == 0
    not_done = (rng.random(B) > 0.3).astype(float)
    not_done[0] = 0.0
    got = project_distribution(torch.tensor(p), torch.tensor(r), torch.tensor(not_done), 0.9,
                               torch.tensor(z))
    expected = _reference_projection(p, r, not_done, 0.9, z)
    assert np.allclose(got.numpy(), expected, atol=1e-10)
    assert np.allclose(got.sum(-1).numpy(), 1.0)


class ScriptedAgent:
    """Q(s) = s @ W (online) and s @ W_target (target), on 1-d float observations."""

    device = torch.device("cpu")

    def __init__(self, W, W_target):
        self.W, self.W_target = W, W_target

    def __call__(self, observation, prev_action, prev_reward):
        return observation @ self.W

    def target(self, observation, prev_action, prev_reward):
        return observation @ self.W_target


def _batch(obs, next_obs, action, ret, done_n):
    z = torch.zeros(len(action))
    return SamplesFromReplay(agent_inputs=AgentInputs(obs, action, z), action=action,
                             return_=ret, done=done_n.clone(), done_n=done_n,
                             target_inputs=AgentInputs(next_obs, action, z))


@pytest.mark.parametrize("double", [False, True])
def test_dqn_td_target(double):
    torch.manual_seed(0)
    W = torch.randn(3, 4, requires_grad=True)
    W_target = torch.randn(3, 4)
    obs, next_obs = torch.randn(5, 3), torch.randn(5, 3)
    action = torch.tensor([0, 1, 2, 3, 0])
    ret = torch.randn(5)
    done_n = torch.tensor([False, True, False, False, True])
    algo = DQN(discount=0.9, n_step_return=2, delta_clip=None, double_dqn=double)
    algo.agent = ScriptedAgent(W, W_target)
    loss, td = algo.loss(_batch(obs, next_obs, action, ret, done_n))
    q = (obs @ W)[torch.arange(5), action]
    target_qs = next_obs @ W_target
    if double:
        next_a = (next_obs @ W).argmax(-1)
        bootstrap = target_qs[torch.arange(5), next_a]
    else:
        bootstrap = target_qs.max(-1).values
    y = ret + 0.81 * (~done_n).float() * bootstrap
    assert torch.allclose(td, (y - q).abs().detach())
    assert torch.allclose(loss, (0.5 * (y - q) ** 2).mean())
    loss.backward()
    assert W.grad is not None and W.grad.abs().sum() > 0


def test_categorical_loss_is_cross_entropy_of_projection():
    torch.manual_seed(0)
    n_atoms, A, B = 5, 2, 4

    class CatAgent:
        device = torch.device("cpu")

        def __init__(self):
            self.n_atoms = n_atoms
            self.logits = torch.randn(A, n_atoms, requires_grad=True)
            self.target_logits = torch.randn(A, n_atoms)

        def give_V_min_max(self, lo, hi):
            pass

        def __call__(self, obs, *_):
            return torch.softmax(self.logits, -1).expand(len(obs), A, n_atoms)

        def target(self, obs, *_):
            return torch.softmax(self.target_logits, -1).expand(len(obs), A, n_atoms)

    algo = CategoricalDQN(V_min=-2.0, V_max=2.0, discount=0.5, n_step_return=1)
    algo.agent = CatAgent()
    obs = torch.zeros(B, 1)
    action = torch.tensor([0, 1, 1, 0])
    ret = torch.tensor([0.5, -1.0, 0.0, 3.0])
    done_n = torch.tensor([False, False, True, False])
    loss, priorities = algo.loss(_batch(obs, obs, action, ret, done_n))
    z = torch.linspace(-2.0, 2.0, n_atoms)
    target_p = torch.softmax(algo.agent.target_logits, -1)
    next_a = (target_p * z).sum(-1).argmax()
    m = project_distribution(target_p[next_a].expand(B, n_atoms), ret, (~done_n).float(), 0.5, z)
    log_p = torch.log(torch.softmax(algo.agent.logits, -1)[action])
    expected = -(m * log_p).sum(-1)
    assert torch.allclose(priorities, expected.detach(), atol=1e-6)
    assert torch.allclose(loss, expected.mean(), atol=1e-6)


def test_dqn_update_bookkeeping():
    """Updates per iteration follow replay_ratio; nothing is learned before min_steps_learn;
    the target network is refreshed every target_update_interval updates."""
    from rlfast.agents import DqnAgent
    from rlfast.envs import make
    from rlfast.samplers import SerialSampler

    sampler = SerialSampler(EnvCls=make, env_kwargs=dict(id="CartPole-v1"), batch_T=4,
                            batch_B=2, max_decorrelation_steps=0)
    agent = DqnAgent(model_kwargs=dict(hidden_sizes=[8]))
    examples = sampler.initialize(agent, seed=0)
    algo = DQN(batch_size=4, min_steps_learn=16, replay_size=256, replay_ratio=2,
               target_update_interval=3, learning_rate=1e-2)
    algo.initialize(agent, n_itr=10, batch_spec=sampler.batch_spec, mid_batch_reset=True,
                    examples=examples)
    assert algo.updates_per_optimize == 4  # 2 * 8 sampled / 4 per update
    targets = []
    original = agent.update_target
    agent.update_target = lambda tau=1: (targets.append(algo.update_counter), original(tau))
    for itr in range(4):
        samples, _ = sampler.obtain_samples(itr)
        info = algo.optimize_agent(itr, samples)
        assert len(info.loss) == (0 if itr < 2 else 4)
    assert algo.update_counter == 8
    assert targets == [3, 6]
    sampler.shutdown()


def test_dqn_rejects_wait_reset_collectors():
    algo = DQN()
    with pytest.raises(ValueError, match="mid-batch"):
        algo.initialize(agent=None, n_itr=1, batch_spec=(1, 1), mid_batch_reset=False, examples={})


@pytest.mark.parametrize("kind", ["dqn", "catdqn"])
def test_noisy_networks_draw_new_noise_in_both_networks_for_every_update(kind):
    """NoisyNet-DQN (Fortunato et al. 2018) and Rainbow sample the online and the target
    network's noise afresh for each update. Before, the target network kept the noise drawn
    when it was built for the whole run (a fixed perturbation of every target) and the online
    one kept the last sampling step's for all updates of an iteration."""
    from rlfast.agents import CatDqnAgent, DqnAgent
    from tests.algos import _replay_setups

    algo, sample = _replay_setups.setup(kind)
    if kind == "dqn":  # the same learner with a noisy agent in place of its plain one
        agent = DqnAgent(model_kwargs=dict(hidden_sizes=[16], noisy=True))
    else:
        agent = CatDqnAgent(n_atoms=11, model_kwargs=dict(hidden_sizes=[16], noisy=True))
        agent.give_V_min_max(algo.V_min, algo.V_max)
    agent.initialize(_replay_setups.CARTPOLE_SPACES)
    agent.train_mode(0)
    algo.agent = agent
    algo.optim_initialize()
    seen = {"online": [], "target": []}
    loss = algo.loss

    def recording_loss(batch):
        for net, model in (("online", agent.model), ("target", agent.target_model)):
            seen[net].append(torch.cat([b.reshape(-1).clone() for n, b in model.named_buffers()
                                        if n.endswith("epsilon")]))
        return loss(batch)

    algo.loss = recording_loss
    for itr in range(4):
        algo.optimize_agent(itr, sample(itr))
    assert algo.update_counter >= 4 and len(seen["target"]) == algo.update_counter
    for net in ("online", "target"):
        draws = seen[net]
        assert all(not torch.equal(a, b) for a, b in zip(draws, draws[1:])), net
