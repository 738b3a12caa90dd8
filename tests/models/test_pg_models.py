"""Tests for the policy-gradient models on vector observations."""
import pytest
import torch

from rlfast.models.mlp import MlpModel
from rlfast.models.pg import (
    CategoricalPgFfModel,
    CategoricalPgLstmModel,
    MujocoFfModel,
    MujocoLstmModel,
    RnnState,
)

OBS_SHAPE = (6,)
A = 3
LEAD_SHAPES = [(), (4,), (5, 4)]


def _inputs(lead_shape, seed=0):
    gen = torch.Generator().manual_seed(seed)
    obs = torch.randn(lead_shape + OBS_SHAPE, generator=gen)
    prev_action = torch.randn(lead_shape + (A,), generator=gen)
    prev_reward = torch.randn(lead_shape, generator=gen)
    return obs, prev_action, prev_reward


@pytest.mark.parametrize("lead_shape", LEAD_SHAPES)
def test_categorical_ff_shapes(lead_shape):
    model = CategoricalPgFfModel(OBS_SHAPE, A)
    pi, value = model(*_inputs(lead_shape))
    assert pi.shape == lead_shape + (A,)
    assert value.shape == lead_shape
    assert torch.allclose(pi.sum(-1), torch.ones(lead_shape))
    # Policy output gain 0.01 starts the policy close to uniform.
    assert torch.allclose(pi, torch.full_like(pi, 1.0 / A), atol=0.05)


@pytest.mark.parametrize("lead_shape", LEAD_SHAPES)
def test_mujoco_ff_shapes(lead_shape):
    model = MujocoFfModel(OBS_SHAPE, A, init_log_std=-0.5)
    mu, log_std, value = model(*_inputs(lead_shape))
    assert mu.shape == lead_shape + (A,)
    assert log_std.shape == lead_shape + (A,)
    assert value.shape == lead_shape
    assert torch.allclose(log_std, torch.full(lead_shape + (A,), -0.5))
    assert mu.abs().max() <= 1.0


def test_mujoco_ff_mu_nonlinearity_none_is_linear():
    model = MujocoFfModel(OBS_SHAPE, A, mu_nonlinearity=None)
    assert isinstance(model.mu, MlpModel)
    with torch.no_grad():
        model.mu.model[-1].bias.fill_(5.0)
    mu, _, _ = model(torch.zeros(2, *OBS_SHAPE))
    assert torch.allclose(mu, torch.full((2, A), 5.0))


def test_orthogonal_init_gains():
    model = CategoricalPgFfModel(OBS_SHAPE, A, hidden_sizes=[64, 64])
    hidden = model.pi.model[2].weight  # [64, 64]
    assert torch.allclose(hidden @ hidden.t(), 2.0 * torch.eye(64), atol=1e-4)
    pi_out = model.pi.model[-1].weight  # [A, 64], orthonormal rows times 0.01
    assert torch.allclose(pi_out @ pi_out.t(), 1e-4 * torch.eye(A), atol=1e-7)
    v_out = model.value.model[-1].weight
    assert torch.allclose((v_out @ v_out.t()).squeeze(), torch.tensor(1.0), atol=1e-5)
    assert torch.count_nonzero(model.pi.model[0].bias) == 0


@pytest.mark.parametrize("lead_shape", LEAD_SHAPES)
def test_categorical_lstm_shapes(lead_shape):
    model = CategoricalPgLstmModel(OBS_SHAPE, A, lstm_size=16)
    pi, value, state = model(*_inputs(lead_shape), None)
    assert pi.shape == lead_shape + (A,)
    assert value.shape == lead_shape
    assert torch.allclose(pi.sum(-1), torch.ones(lead_shape))
    B = lead_shape[-1] if lead_shape else 1
    assert isinstance(state, RnnState)
    assert state.h.shape == (1, B, 16) and state.c.shape == (1, B, 16)


@pytest.mark.parametrize("lead_shape", LEAD_SHAPES)
def test_mujoco_lstm_shapes(lead_shape):
    model = MujocoLstmModel(OBS_SHAPE, A, hidden_sizes=[32], lstm_size=16)
    mu, log_std, value, state = model(*_inputs(lead_shape), None)
    assert mu.shape == lead_shape + (A,)
    assert log_std.shape == lead_shape + (A,)
    assert value.shape == lead_shape
    B = lead_shape[-1] if lead_shape else 1
    assert state.h.shape == (1, B, 16)


@pytest.mark.parametrize("model_cls", [CategoricalPgLstmModel, MujocoLstmModel])
def test_lstm_state_continuity(model_cls):
    torch.manual_seed(0)
    model = model_cls(OBS_SHAPE, A, hidden_sizes=[16], lstm_size=8)
    T, B = 6, 3
    obs, prev_action, prev_reward = _inputs((T, B), seed=1)
    init = RnnState(h=torch.randn(1, B, 8), c=torch.randn(1, B, 8))
    with torch.no_grad():
        full = model(obs, prev_action, prev_reward, init)
        state = init
        steps = []
        for t in range(T):
            out = model(obs[t], prev_action[t], prev_reward[t], state)
            steps.append(out[:-1])
            state = out[-1]
    for i, full_out in enumerate(full[:-1]):
        stepped = torch.stack([s[i] for s in steps])
        assert torch.allclose(full_out, stepped, atol=1e-6)
    assert torch.allclose(full[-1].h, state.h, atol=1e-6)
    assert torch.allclose(full[-1].c, state.c, atol=1e-6)
    # A different initial state changes the outputs; None means zeros.
    with torch.no_grad():
        zero = model(obs, prev_action, prev_reward,
                     RnnState(torch.zeros(1, B, 8), torch.zeros(1, B, 8)))
        none = model(obs, prev_action, prev_reward, None)
    assert torch.allclose(zero[0], none[0])
    assert not torch.allclose(zero[0], full[0])


def test_lstm_uses_prev_action_and_reward():
    torch.manual_seed(0)
    model = CategoricalPgLstmModel(OBS_SHAPE, A, lstm_size=8)
    obs, prev_action, prev_reward = _inputs((4,))
    onehot = torch.eye(A)[torch.tensor([0, 1, 2, 0])]
    with torch.no_grad():
        base = model(obs, onehot, prev_reward, None)[1]
        other_action = model(obs, onehot.roll(1, dims=-1), prev_reward, None)[1]
        other_reward = model(obs, onehot, prev_reward + 1, None)[1]
    assert not torch.allclose(base, other_action)
    assert not torch.allclose(base, other_reward)
    with pytest.raises(ValueError, match="one-hot"):
        model(obs, torch.tensor([0, 1, 2, 0]), prev_reward, None)


FF_FACTORIES = [
    lambda norm: CategoricalPgFfModel(OBS_SHAPE, A, normalize_observation=norm, norm_obs_clip=3.0),
    lambda norm: MujocoFfModel(OBS_SHAPE, A, normalize_observation=norm, norm_obs_clip=3.0),
]
LSTM_FACTORIES = [
    lambda norm: CategoricalPgLstmModel(OBS_SHAPE, A, lstm_size=8, normalize_observation=norm,
                                        norm_obs_clip=3.0),
    lambda norm: MujocoLstmModel(OBS_SHAPE, A, hidden_sizes=[8], lstm_size=8,
                                 normalize_observation=norm, norm_obs_clip=3.0),
]


def _call(model, obs, prev_action, prev_reward):
    if isinstance(model, (CategoricalPgLstmModel, MujocoLstmModel)):
        return model(obs, prev_action, prev_reward, None)[:-1]
    return model(obs, prev_action, prev_reward)


@pytest.mark.parametrize("factory", FF_FACTORIES + LSTM_FACTORIES)
def test_observation_normalization(factory):
    torch.manual_seed(0)
    normed = factory(True)
    plain = factory(False)
    plain.load_state_dict({k: v for k, v in normed.state_dict().items() if "rms" not in k})
    data = 4.0 + 2.0 * torch.randn(10, 20, *OBS_SHAPE)
    normed.update_obs_rms(data)
    rms_mean = [v for k, v in normed.state_dict().items() if k.endswith("rms.mean")][0]
    rms_var = [v for k, v in normed.state_dict().items() if k.endswith("rms.var")][0]
    flat = data.reshape(-1, *OBS_SHAPE)
    assert torch.allclose(rms_mean, flat.mean(0), atol=1e-4)
    assert torch.allclose(rms_var, flat.var(0, unbiased=False), rtol=1e-4)

    obs, prev_action, prev_reward = _inputs((5,), seed=2)
    obs = obs * 10 + 4  # some entries normalize beyond the clip of 3
    expected_obs = torch.clamp((obs - rms_mean) / torch.sqrt(rms_var + 1e-6), -3.0, 3.0)
    with torch.no_grad():
        out_normed = _call(normed, obs, prev_action, prev_reward)
        out_plain = _call(plain, expected_obs, prev_action, prev_reward)
    for a, b in zip(out_normed, out_plain):
        assert torch.allclose(a, b, atol=1e-5)
    # Without normalization update_obs_rms is a no-op and the state dict has no statistics.
    plain.update_obs_rms(data)
    assert not any("rms" in k for k in plain.state_dict())


@pytest.mark.parametrize("factory", FF_FACTORIES + LSTM_FACTORIES)
def test_gradients_flow_to_all_parameters(factory):
    model = factory(False)
    obs, prev_action, prev_reward = _inputs((5, 4), seed=3)
    outputs = _call(model, obs, prev_action, prev_reward)
    # Random weights: a plain sum would give zero gradient through softmax (rows sum to 1)
    # and through zero-initialized outputs.
    gen = torch.Generator().manual_seed(4)
    loss = sum((out * torch.randn(out.shape, generator=gen)).sum() for out in outputs)
    loss.backward()
    for name, param in model.named_parameters():
        assert param.grad is not None, name
        assert torch.count_nonzero(param.grad) > 0, name


def test_bad_observation_rank_is_reported():
    model = CategoricalPgFfModel(OBS_SHAPE, A)
    with pytest.raises(ValueError, match="between"):
        model(torch.zeros(2, 2, 2, 6), None, None)


# ---- one softmax per action dimension (MultiDiscrete actions) ---------------------------------
@pytest.mark.parametrize("nvec", [(3, 4, 2), (3, 3)])
@pytest.mark.parametrize("lead_shape", LEAD_SHAPES)
def test_categorical_models_with_action_nvec_give_one_distribution_per_dimension(nvec, lead_shape):
    from rlfast.models.pg.model_parts import segment_softmax
    size = sum(nvec)
    torch.manual_seed(0)
    ff = CategoricalPgFfModel(OBS_SHAPE, size, hidden_sizes=[8], action_nvec=nvec)
    lstm = CategoricalPgLstmModel(OBS_SHAPE, size, hidden_sizes=[8], lstm_size=5, action_nvec=nvec)
    obs, _, prev_reward = _inputs(lead_shape)
    prev_action = torch.zeros(lead_shape + (size,))
    for pi in (ff(obs)[0], lstm(obs, prev_action, prev_reward)[0]):
        assert pi.shape == lead_shape + (size,)
        for part in pi.split(list(nvec), dim=-1):
            torch.testing.assert_close(part.sum(-1), torch.ones(lead_shape))
    # The probabilities are the per-segment softmax of the policy MLP's logits.
    logits = ff.pi(obs.reshape(-1, *OBS_SHAPE))
    expected = torch.cat([torch.softmax(p, -1) for p in logits.split(list(nvec), -1)], -1)
    torch.testing.assert_close(ff(obs)[0].reshape(-1, size), expected)
    torch.testing.assert_close(segment_softmax(logits, nvec), expected)


def test_action_nvec_must_sum_to_action_size():
    with pytest.raises(ValueError, match=r"action_nvec \[3, 4\] must be positive sizes summing "
                                         r"to action_size \(6\)"):
        CategoricalPgFfModel(OBS_SHAPE, 6, action_nvec=[3, 4])
    with pytest.raises(ValueError, match="CategoricalPgLstmModel"):
        CategoricalPgLstmModel(OBS_SHAPE, 2, action_nvec=[2, 0])


def test_without_action_nvec_the_model_is_unchanged():
    torch.manual_seed(3)
    plain = CategoricalPgFfModel(OBS_SHAPE, A, hidden_sizes=[8])
    obs = _inputs((4,))[0]
    torch.testing.assert_close(plain(obs)[0], torch.softmax(plain.pi(obs), -1), rtol=0, atol=0)
    torch.manual_seed(3)
    same_init = CategoricalPgFfModel(OBS_SHAPE, A, hidden_sizes=[8], action_nvec=[A])
    assert all(torch.equal(a, b) for a, b in zip(plain.state_dict().values(),
                                                 same_init.state_dict().values()))
