"""R2D1: value rescaling, burn-in / target slicing and sequence priorities."""
import pytest
import torch

from rlfast.algos.dqn.r2d1 import R2D1, inv_value_rescale, value_rescale
from rlfast.replays import AgentInputs, SequenceSamplesFromReplay


@pytest.mark.parametrize("eps", [1e-3, 1e-2])
def test_value_rescale_inverse(eps):
    x = torch.linspace(-1000, 1000, 2001, dtype=torch.float64)
    assert torch.allclose(inv_value_rescale(value_rescale(x, eps), eps), x, rtol=1e-8, atol=1e-6)
    # h is the documented formula
    assert torch.allclose(value_rescale(x, eps), x.sign() * ((x.abs() + 1).sqrt() - 1) + eps * x)


class LinearRnnAgent:
    """q_t = W x_t + h_t with h_t = h_{t-1} + x_t (a scripted 'recurrent' net on 1-d inputs)."""

    device = torch.device("cpu")

    def __init__(self, W, W_target):
        self.W, self.W_target = W, W_target
        self.calls = []

    def _run(self, W, observation, state, name):
        self.calls.append((name, observation.shape[0]))
        h = state[0][0] if state is not None else torch.zeros(observation.shape[1], 1)
        qs = []
        for x in observation:
            h = h + x
            qs.append(x @ W + h)
        return torch.stack(qs), (h.unsqueeze(0),)

    def __call__(self, observation, prev_action, prev_reward, init_rnn_state=None):
        return self._run(self.W, observation, init_rnn_state, "online")

    def target(self, observation, prev_action, prev_reward, init_rnn_state=None):
        return self._run(self.W_target, observation, init_rnn_state, "target")


def test_loss_burns_in_and_targets_n_steps_ahead():
    torch.manual_seed(0)
    wT, bT, n, B, A = 2, 3, 2, 4, 3
    L = wT + bT + n
    W = torch.randn(1, A, requires_grad=True)
    W_target = torch.randn(1, A)
    obs = torch.randn(L, B, 1)
    action = torch.randint(0, A, (L, B))
    ret = torch.randn(L, B)
    done = torch.zeros(L, B, dtype=torch.bool)
    done[wT + 1, 0] = True  # env 0's episode ends on the 2nd trained step
    done_n = done.clone()
    init = (torch.randn(B, 1, 1),)  # stored as [B, N, H]
    batch = SequenceSamplesFromReplay(
        agent_inputs=AgentInputs(obs, torch.zeros(L, B), torch.zeros(L, B)), action=action,
        return_=ret, done=done, done_n=done_n, init_rnn_state=init)
    algo = R2D1(discount=0.9, batch_T=bT, batch_B=B, warmup_T=wT, n_step_return=n,
                double_dqn=False, prioritized_replay=False, pri_eta=0.5, delta_clip=None)
    agent = LinearRnnAgent(W, W_target)
    algo.agent = agent
    loss, priorities = algo.loss(batch)
    # Reference, written out step by step.
    h0 = init[0].transpose(0, 1)[0]                          # [B, 1]
    h_warm = h0 + obs[:wT].sum(0)
    q_all, h = [], h_warm
    for t in range(wT, L):
        h = h + obs[t]
        q_all.append((obs[t] @ W + h, obs[t] @ W_target + h))
    q = torch.stack([qa for qa, _ in q_all[:bT]]).gather(-1, action[wT:wT + bT, :, None])[..., 0]
    tq = torch.stack([qt for _, qt in q_all]).max(-1).values[n:]
    y = value_rescale(ret[wT:wT + bT]
                      + 0.81 * (~done_n[wT:wT + bT]).float() * inv_value_rescale(tq))
    valid = torch.ones(bT, B)
    valid[2:, 0] = 0  # after env 0's done
    losses = 0.5 * (y - q) ** 2
    assert torch.allclose(loss, (losses * valid).sum() / valid.sum(), atol=1e-5)
    td = (y - q).abs().detach() * valid
    expected_pri = 0.5 * td.max(0).values + 0.5 * td.sum(0) / valid.sum(0)
    assert torch.allclose(priorities, expected_pri, atol=1e-5)
    # burn-in ran on wT steps for both nets, then the trained and target windows
    assert ("online", wT) in agent.calls and ("target", wT) in agent.calls
    assert ("online", bT) in agent.calls and ("target", bT + n) in agent.calls
    loss.backward()
    assert W.grad is not None


def test_r2d1_needs_wait_reset_collectors():
    with pytest.raises(ValueError, match="wait-reset"):
        R2D1().check_collector(mid_batch_reset=True)


def test_input_priorities_match_reference_loop():
    """Per-env eta-mix of |TD| from stored q values, n-step returns cut at episode ends."""
    from types import SimpleNamespace

    torch.manual_seed(3)
    T, B, A, n, gamma, eta = 9, 3, 2, 2, 0.9, 0.7
    q = torch.randn(T, B, A)
    action = torch.randint(0, A, (T, B))
    reward = torch.randn(T, B)
    done = torch.zeros(T, B, dtype=torch.bool)
    done[4, 1] = True
    samples = SimpleNamespace(agent=SimpleNamespace(agent_info=SimpleNamespace(q=q), action=action),
                              env=SimpleNamespace(reward=reward, done=done))
    algo = R2D1(discount=gamma, n_step_return=n, pri_eta=eta, batch_T=4, warmup_T=2,
                store_rnn_state_interval=2)
    got = algo.compute_input_priorities(samples)
    for b in range(B):
        tds = []
        for t in range(T - n):
            if done[:t, b].any():
                break  # after the first episode end
            ret, cut = 0.0, False
            for k in range(n):
                ret += gamma ** k * float(reward[t + k, b])
                if done[t + k, b]:
                    cut = True
                    break
            boot = 0.0 if cut else gamma ** n * float(inv_value_rescale(q[t + n, b].max()))
            y = float(value_rescale(torch.tensor(ret + boot)))
            tds.append(abs(y - float(q[t, b, action[t, b]])))
        expected = eta * max(tds) + (1 - eta) * sum(tds) / len(tds)
        assert got[b] == pytest.approx(expected, rel=1e-5)
    assert algo.input_priority_shift == 2  # (2 + 4) // 2 - 1


def test_episode_end_during_burn_in_masks_trained_steps():
    torch.manual_seed(1)
    wT, bT, n, B, A = 2, 3, 1, 2, 2
    L = wT + bT + n
    done = torch.zeros(L, B, dtype=torch.bool)
    done[0, 0] = True  # env 0's episode ended in the burn-in: nothing of it is trainable
    batch = SequenceSamplesFromReplay(
        agent_inputs=AgentInputs(torch.randn(L, B, 1), torch.zeros(L, B), torch.zeros(L, B)),
        action=torch.randint(0, A, (L, B)), return_=torch.randn(L, B), done=done,
        done_n=done.clone(), init_rnn_state=(torch.zeros(B, 1, 1),))
    algo = R2D1(batch_T=bT, batch_B=B, warmup_T=wT, n_step_return=n, double_dqn=False,
                prioritized_replay=False, delta_clip=None)
    algo.agent = LinearRnnAgent(torch.randn(1, A, requires_grad=True), torch.randn(1, A))
    loss, priorities = algo.loss(batch)
    assert priorities[0] == 0  # no valid step for env 0
    batch2 = batch._replace(return_=batch.return_.clone())
    batch2.return_[wT:, 0] += 100.0  # env 0's trained returns do not matter
    loss2, _ = algo.loss(batch2)
    assert torch.allclose(loss, loss2)
