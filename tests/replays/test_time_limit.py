"""Time-limit replay: n-step windows cut by a time limit bootstrap from the stored final
observation with discount gamma**m; true terminations get 0; without a stored final observation
cut windows get 0 and are flagged. Checked against a reference loop over global time."""
from collections import namedtuple

import numpy as np
import pytest
import torch

from rlfast.replays import (SamplesFromReplayTL, SamplesFromReplayTLPri,
                            TlPrioritizedReplayBuffer, TlUniformReplayBuffer)
from rlfast.utils.buffer import torchify_buffer

Tl = namedtuple("Tl", ["observation", "action", "reward", "done", "timeout", "final_observation"])
TlNoFinal = namedtuple("TlNoFinal", ["observation", "action", "reward", "done", "timeout"])
OBS_DIM = 3


class TlStream:
    """``total`` steps of ``B`` envs. ``observation[g, b] = (g, b, noise)``; the final
    observation of a done step is ``(-g - 1000, b, noise)`` and zeros elsewhere (as the gym
    wrapper reports it); actions are unique ids ``g * B + b + 1``."""

    def __init__(self, total, B, p_done=0.25, p_timeout=0.5, seed=0):
        rng = np.random.RandomState(seed)
        self.total, self.B = total, B
        g, b = np.meshgrid(np.arange(total), np.arange(B), indexing="ij")
        self.observation = np.stack([g, b, rng.randn(total, B)], -1).astype(np.float32)
        self.done = rng.rand(total, B) < p_done
        self.timeout = self.done & (rng.rand(total, B) < p_timeout)
        final = np.stack([-g - 1000.0, b, rng.randn(total, B)], -1).astype(np.float32)
        self.final_observation = np.where(self.done[..., None], final, 0).astype(np.float32)
        self.reward = rng.randn(total, B).astype(np.float32)
        self.action = (g * B + b + 1).astype(np.float32)[..., None]

    def chunk(self, start, stop, final=True):
        s = slice(start, stop)
        if final:
            return Tl(self.observation[s], self.action[s], self.reward[s], self.done[s],
                      self.timeout[s], self.final_observation[s])
        return TlNoFinal(self.observation[s], self.action[s], self.reward[s], self.done[s],
                         self.timeout[s])

    def example(self, final=True):
        return self.chunk(0, 1, final).__class__(*(x[0, 0] for x in self.chunk(0, 1, final)))

    def reference(self, g, b, n, gamma, has_final):
        """(return_, done_n, timeout_n, bootstrap_discount, target observation) of the
        window starting at global step g."""
        ret, done_n, timeout_n, steps = 0.0, False, False, n
        for k in range(n):
            ret += gamma ** k * float(self.reward[g + k, b])
            if self.done[g + k, b]:
                done_n, timeout_n, steps = True, bool(self.timeout[g + k, b]), k + 1
                break
        target = self.observation[g + n, b]
        if not done_n:
            discount = gamma ** n
        elif timeout_n and has_final:
            discount = gamma ** steps
            target = self.final_observation[g + steps - 1, b]
        else:
            discount = 0.0
        return ret, done_n, timeout_n, discount, target


def _check_batch(batch, stream, n, gamma, has_final):
    """Compare every sample of a batch with the reference, identified by its action id."""
    ids = batch.action[:, 0].numpy().astype(np.int64) - 1
    gs, bs = ids // stream.B, ids % stream.B
    for i, (g, b) in enumerate(zip(gs, bs)):
        ret, done_n, timeout_n, discount, target = stream.reference(g, b, n, gamma, has_final)
        where = f"g={g} b={b}"
        observation = batch.agent_inputs.observation[i].numpy()
        assert np.allclose(observation, stream.observation[g, b]), where
        assert batch.return_[i].item() == pytest.approx(ret, abs=1e-5), where
        assert bool(batch.done[i]) == bool(stream.done[g, b]), where
        assert bool(batch.done_n[i]) == done_n, where
        assert bool(batch.timeout[i]) == bool(stream.timeout[g, b]), where
        assert bool(batch.timeout_n[i]) == timeout_n, where
        assert batch.bootstrap_discount[i].item() == pytest.approx(discount, abs=1e-6), where
        if discount > 0:
            assert np.allclose(batch.target_inputs.observation[i].numpy(), target), where
        elif not timeout_n:  # true termination (or no bootstrap): obs[t + n] as stored
            assert np.allclose(batch.target_inputs.observation[i].numpy(), target), where
    return gs, bs


def _valid_globals(n_appended, T, n):
    """Global steps a uniform buffer may replay (ages n .. T - 2, written ones only)."""
    hi_age = T - 2 if n_appended >= T else min(T - 2, n_appended - 1)
    return [n_appended - 1 - age for age in range(n, hi_age + 1)]


@pytest.mark.parametrize("n", [1, 3])
@pytest.mark.parametrize("final", [True, False], ids=["final_obs", "no_final_obs"])
def test_uniform_all_valid_windows_match_reference_through_wraps(n, final):
    gamma, B, T = 0.9, 3, 10
    stream = TlStream(total=47, B=B, seed=n)
    buf = TlUniformReplayBuffer(stream.example(final), size=T * B, B=B, discount=gamma,
                                n_step_return=n)
    assert buf.has_final_observation is final
    start = 0
    for size in [4, 3, 5, 1, 4, 4, 2, 5, 4, 3, 4, 4, 4]:
        buf.append_samples(stream.chunk(start, start + size, final))
        start += size
        gs = _valid_globals(start, T, n)
        if not gs:
            continue
        T_idxs = np.array([g % T for g in gs for _ in range(B)])
        B_idxs = np.array([b for _ in gs for b in range(B)])
        batch = torchify_buffer(buf.extract_batch(T_idxs, B_idxs))
        got_g, got_b = _check_batch(batch, stream, n, gamma, final)
        assert sorted(zip(got_g, got_b)) == sorted((g, b) for g in gs for b in range(B))
    assert start == 47
    # both kinds of episode end occurred inside windows
    assert stream.timeout.any() and (stream.done & ~stream.timeout).any()


@pytest.mark.parametrize("cls", [TlUniformReplayBuffer, TlPrioritizedReplayBuffer])
@pytest.mark.parametrize("n", [1, 3])
def test_sample_batch_matches_reference(cls, n):
    gamma, B = 0.95, 2
    stream = TlStream(total=60, B=B, seed=10 + n)
    buf = cls(stream.example(), size=40, B=B, discount=gamma, n_step_return=n)
    np.random.seed(0)
    for start in range(0, 60, 6):
        buf.append_samples(stream.chunk(start, start + 6))
        batch = buf.sample_batch(32)
        expected_type = SamplesFromReplayTLPri if cls is TlPrioritizedReplayBuffer \
            else SamplesFromReplayTL
        assert type(batch) is expected_type
        assert isinstance(batch.bootstrap_discount, torch.Tensor)
        assert batch.bootstrap_discount.dtype == torch.float32
        assert batch.timeout_n.dtype == torch.bool
        _check_batch(batch, stream, n, gamma, True)


def _hand_built(final=True):
    """B=1: rewards 1..10; a true termination at t=2 and a time-limit end at t=5."""
    T = 10
    obs = np.stack([np.arange(T), np.zeros(T), np.zeros(T)], -1).astype(np.float32)[:, None]
    final_obs = np.zeros((T, 1, OBS_DIM), np.float32)
    final_obs[2, 0] = [-2.0, 7.0, 7.0]   # the wrapper also reports it at terminations
    final_obs[5, 0] = [-5.0, 9.0, 9.0]
    done = np.zeros((T, 1), bool)
    done[2] = done[5] = True
    timeout = np.zeros((T, 1), bool)
    timeout[5] = True
    reward = np.arange(1, T + 1, dtype=np.float32)[:, None]
    action = np.zeros((T, 1, 1), np.float32)
    if final:
        return Tl(obs, action, reward, done, timeout, final_obs)
    return TlNoFinal(obs, action, reward, done, timeout)


@pytest.mark.parametrize("n,expected", [
    # t: (return_, done_n, timeout_n, bootstrap_discount, target obs[0])
    (1, {0: (1, 0, 0, 0.5, 1), 1: (2, 0, 0, 0.5, 2), 2: (3, 1, 0, 0.0, 3),
         4: (5, 0, 0, 0.5, 5), 5: (6, 1, 1, 0.5, -5), 6: (7, 0, 0, 0.5, 7)}),
    (3, {0: (2.75, 1, 0, 0.0, 3), 1: (3.5, 1, 0, 0.0, 4), 2: (3, 1, 0, 0.0, 5),
         3: (8, 1, 1, 0.125, -5), 4: (8, 1, 1, 0.25, -5), 5: (6, 1, 1, 0.5, -5),
         6: (7 + 4 + 2.25, 0, 0, 0.125, 9)}),
])
def test_hand_built_sequence(n, expected):
    samples = _hand_built()
    buf = TlUniformReplayBuffer(Tl(*(x[0, 0] for x in samples)), size=12, B=1, discount=0.5,
                                n_step_return=n)
    buf.append_samples(samples)
    ts = np.array(sorted(expected))
    b = buf.extract_batch(ts, np.zeros_like(ts))
    for i, t in enumerate(ts):
        ret, done_n, timeout_n, disc, target0 = expected[t]
        assert b.return_[i] == pytest.approx(ret), t
        assert bool(b.done_n[i]) == bool(done_n), t
        assert bool(b.timeout_n[i]) == bool(timeout_n), t
        assert b.bootstrap_discount[i] == pytest.approx(disc), t
        if disc > 0:
            assert b.target_inputs.observation[i][0] == target0, t
    # the time-limit cut at t=5 bootstraps from its final observation, not from obs[6]
    i5 = list(ts).index(5)
    assert np.array_equal(b.target_inputs.observation[i5], samples.final_observation[5, 0])
    assert bool(b.timeout[i5]) and not bool(b.timeout[list(ts).index(4)])


@pytest.mark.parametrize("n", [1, 3])
def test_without_final_observation_cut_windows_get_zero_discount(n):
    samples = _hand_built(final=False)
    buf = TlUniformReplayBuffer(TlNoFinal(*(x[0, 0] for x in samples)), size=12, B=1,
                                discount=0.5, n_step_return=n)
    assert buf.has_final_observation is False
    buf.append_samples(samples)
    ts = np.arange(0, 7)
    b = buf.extract_batch(ts, np.zeros_like(ts))
    cut = [t for t in ts if b.timeout_n[t]]
    assert cut == ([5] if n == 1 else [3, 4, 5])
    assert all(b.bootstrap_discount[t] == 0 for t in cut)
    # windows with no episode end still bootstrap
    assert b.bootstrap_discount[6] == pytest.approx(0.5 ** n)


def test_time_limit_replay_needs_timeout_field():
    Plain = namedtuple("Plain", ["observation", "action", "reward", "done"])
    example = Plain(np.zeros(3, np.float32), np.zeros(1, np.float32), np.float32(0), False)
    with pytest.raises(ValueError, match="timeout"):
        TlUniformReplayBuffer(example, size=10, B=1)
    with pytest.raises(ValueError, match="timeout"):
        TlPrioritizedReplayBuffer(example, size=10, B=1)
