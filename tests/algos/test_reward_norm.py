"""Reward normalization (``normalize_reward``): checked against a step-by-step reference."""
import numpy as np
import pytest
import torch

from rlfast.algos import A2C, PPO
from rlfast.algos.pg.reward_norm import RewardNormalizer


def _reference(batches, discount, clip=10.0, eps=1e-8):
    """Scaled rewards computed independently: per-environment discounted returns in a plain
    loop over every step of every batch, the population variance of all of them so far (numpy,
    over the concatenated history), then reward / sqrt(var + eps), clipped."""
    B = batches[0][0].shape[1]
    running = [0.0] * B
    history = []
    out = []
    for reward, done in batches:
        T = reward.shape[0]
        for t in range(T):
            for b in range(B):
                running[b] = running[b] * discount + float(reward[t, b])
                history.append(running[b])
                if done[t, b]:
                    running[b] = 0.0
        std = np.sqrt(np.var(np.array(history)) + eps)
        out.append(np.clip(reward / std, -clip, clip))
    return out


def _batches(seed, n=4, T=16, B=3, scale=50.0):
    rng = np.random.default_rng(seed)
    batches = []
    for _ in range(n):
        reward = rng.normal(-1.0, 1.0, size=(T, B)) * scale
        done = rng.random((T, B)) < 0.1
        batches.append((reward.astype(np.float32), done))
    return batches


@pytest.mark.parametrize("discount", [0.99, 0.5])
def test_scaled_rewards_match_a_step_by_step_reference(discount):
    batches = _batches(0)
    normalizer = RewardNormalizer(discount)
    expected = _reference(batches, discount)
    for (reward, done), want in zip(batches, expected):
        got = normalizer(torch.from_numpy(reward), torch.from_numpy(done))
        assert got.dtype == torch.float32
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-6)
    assert float(normalizer.stats.count) == sum(r.size for r, _ in batches)


def test_clipping_and_sign():
    normalizer = RewardNormalizer(0.9, clip=2.0)
    reward = torch.tensor([[1.0, -1.0], [1.0, -1.0], [100.0, -100.0]])
    done = torch.zeros(3, 2, dtype=torch.bool)
    scaled = normalizer(reward, done)
    assert torch.all(torch.sign(scaled) == torch.sign(reward))
    assert float(scaled.abs().max()) <= 2.0


def test_state_round_trip_continues_identically():
    batches = _batches(1)
    whole = RewardNormalizer(0.99)
    for reward, done in batches[:2]:
        whole(torch.from_numpy(reward), torch.from_numpy(done))
    resumed = RewardNormalizer(0.99)
    resumed.load_state_dict(whole.state_dict())
    for reward, done in batches[2:]:
        a = whole(torch.from_numpy(reward), torch.from_numpy(done))
        b = resumed(torch.from_numpy(reward), torch.from_numpy(done))
        assert torch.equal(a, b)


@pytest.mark.parametrize("Algo", [PPO, A2C])
def test_algorithms_take_the_option_and_save_its_state(Algo):
    plain = Algo()
    assert plain.reward_normalizer is None
    assert "reward_normalizer" not in plain.state_dict()
    algo = Algo(normalize_reward=True, discount=0.9)
    assert isinstance(algo.reward_normalizer, RewardNormalizer)
    assert algo.reward_normalizer.discount == 0.9
    reward, done = _batches(2, n=1)[0]
    algo.reward_normalizer(torch.from_numpy(reward), torch.from_numpy(done))
    state = algo.state_dict()
    fresh = Algo(normalize_reward=True, discount=0.9)
    fresh.load_state_dict(state)
    assert torch.equal(fresh.reward_normalizer.stats.var, algo.reward_normalizer.stats.var)
    np.testing.assert_array_equal(fresh.reward_normalizer.returns, algo.reward_normalizer.returns)
    with pytest.raises(TypeError, match="normalize_reward"):
        Algo(normalize_reward="yes")
