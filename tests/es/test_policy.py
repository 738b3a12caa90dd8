"""The ES policy: flat parameter layout, batched actions against a numpy reference."""
import numpy as np
import pytest
import torch
from gymnasium import spaces

from rlfast.es.policy import BatchedPolicy, EsPolicy, policy_spec


def _numpy_forward(vector, sizes, obs):
    """Reference: unpack the flat vector layer by layer (weight [out, in] row-major, then
    bias) and run the tanh MLP with numpy in float64."""
    h, offset = np.asarray(obs, dtype=np.float64), 0
    for k, (n_in, n_out) in enumerate(zip(sizes[:-1], sizes[1:])):
        w = vector[offset:offset + n_out * n_in].reshape(n_out, n_in)
        offset += n_out * n_in
        b = vector[offset:offset + n_out]
        offset += n_out
        h = w @ h + b
        if k < len(sizes) - 2:
            h = np.tanh(h)
    assert offset == len(vector)
    return h


@pytest.mark.parametrize("hidden", [[], [8], [5, 3]])
def test_batched_outputs_match_numpy_reference(hidden):
    policy = EsPolicy(obs_dim=4, n_outputs=3, discrete=True, hidden_sizes=hidden)
    sizes = [4, *hidden, 3]
    assert policy.n_params == sum(a * b + b for a, b in zip(sizes[:-1], sizes[1:]))
    rng = np.random.default_rng(0)
    rows = rng.normal(size=(6, policy.n_params)).astype(np.float32)
    obs = rng.normal(size=(6, 4)).astype(np.float32)
    batched = BatchedPolicy(policy)
    batched.load(torch.from_numpy(rows))
    out = batched.outputs(torch.from_numpy(obs)).numpy()
    for i in range(6):
        ref = _numpy_forward(rows[i].astype(np.float64), sizes, obs[i])
        np.testing.assert_allclose(out[i], ref, rtol=1e-4, atol=1e-5)
        # The module, loaded with the same vector, agrees too (same parameter order).
        module_out = policy.load_vector(rows[i])(torch.from_numpy(obs[i])).detach().numpy()
        np.testing.assert_allclose(module_out, ref, rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(batched.actions(torch.from_numpy(obs)), out.argmax(axis=1))


def test_continuous_actions_are_squashed_into_the_bounds():
    policy = EsPolicy(obs_dim=2, n_outputs=2, discrete=False, hidden_sizes=[4],
                      low=[-2.0, 0.0], high=[2.0, 1.0])
    rows = torch.from_numpy(np.random.default_rng(1).normal(scale=5, size=(10, policy.n_params))
                            .astype(np.float32))
    batched = BatchedPolicy(policy)
    batched.load(rows)
    obs = torch.randn(10, 2) * 10
    actions = batched.actions(obs)
    raw = batched.outputs(obs).numpy()
    np.testing.assert_allclose(actions[:, 0], 2.0 * np.tanh(raw[:, 0]), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(actions[:, 1], 0.5 + 0.5 * np.tanh(raw[:, 1]), rtol=1e-5, atol=1e-6)
    assert actions.min(axis=0)[1] >= 0.0 and actions.max(axis=0)[0] <= 2.0
    single = policy.load_vector(rows[3].numpy()).act(obs[3].numpy())
    np.testing.assert_allclose(single, actions[3], rtol=1e-5, atol=1e-6)


def test_policy_spec_and_errors():
    spec = policy_spec(spaces.Box(-1, 1, (2, 3)), spaces.Discrete(4))
    assert spec == dict(obs_dim=6, n_outputs=4, discrete=True, low=None, high=None)
    spec = policy_spec(spaces.Box(-1, 1, (3,)), spaces.Box(-np.inf, np.inf, (2,)))
    assert spec["low"] is None and not spec["discrete"]
    with pytest.raises(ValueError, match="Box observation space"):
        policy_spec(spaces.Dict({"a": spaces.Discrete(2)}), spaces.Discrete(2))
    with pytest.raises(ValueError, match="Discrete or a 1-D Box action"):
        policy_spec(spaces.Box(-1, 1, (3,)), spaces.MultiDiscrete([2, 2]))
    policy = EsPolicy(obs_dim=3, n_outputs=2, discrete=True)
    with pytest.raises(ValueError, match="has 8 numbers; got 5"):
        policy.load_vector(np.zeros(5))
    with pytest.raises(ValueError, match="unknown policy init 'xavier'"):
        policy.initial_vector("xavier")
    with pytest.raises(ValueError, match="hidden_sizes must be positive"):
        EsPolicy(obs_dim=3, n_outputs=2, discrete=True, hidden_sizes=[0])


def test_initial_vectors():
    policy = EsPolicy(obs_dim=3, n_outputs=2, discrete=False, hidden_sizes=[16])
    assert not policy.initial_vector("zeros").any()
    a, b = policy.initial_vector("torch", seed=3), policy.initial_vector("torch", seed=3)
    np.testing.assert_array_equal(a, b)
    assert a.shape == (policy.n_params,)
    # First layer weights lie within nn.Linear's bound 1/sqrt(fan_in).
    assert np.abs(a[:48]).max() <= 1 / np.sqrt(3) + 1e-7 and np.abs(a[:48]).max() > 0.3
    assert not np.array_equal(a, policy.initial_vector("torch", seed=4))
