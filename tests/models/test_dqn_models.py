"""Tests for the DQN-family models (rlfast.models.dqn): heads, noisy layers, Atari/MLP/R2D1
models."""
import pytest
import torch
import torch.nn.functional as F

from rlfast.models.dqn import (AtariCatDqnModel, AtariDqnModel, AtariR2d1Model, CatDqnMlpModel,
                               DistributionalDuelingHeadModel, DistributionalHeadModel, DqnMlpModel,
                               DuelingHeadModel, NoisyLinear, R2d1MlpModel, RnnState)

IMAGE_SHAPE = (4, 104, 80)
OBS_SHAPE = (5,)
A = 3
SMALL_CONV = dict(channels=[4, 8], kernel_sizes=[8, 4], strides=[4, 2], paddings=[0, 1])


@pytest.fixture(autouse=True)
def _seeded():
    torch.manual_seed(99)


def relu_mlp(x, linears):
    """Independent reference: ReLU between the given Linear layers (none after the last)."""
    for i, layer in enumerate(linears):
        x = x @ layer.weight.T + (layer.bias if layer.bias is not None else 0)
        if i < len(linears) - 1:
            x = torch.relu(x)
    return x


def linears(module):
    return [m for m in module.modules() if isinstance(m, torch.nn.Linear)]


# ---- heads -------------------------------------------------------------------------------------
def test_dueling_head_matches_manual_formula():
    head = DuelingHeadModel(6, [7], A)
    with torch.no_grad():
        head.streams.advantage_bias.fill_(0.37)
    x = torch.randn(10, 6)
    value = relu_mlp(x, linears(head.streams.value))                       # [10, 1]
    adv_layers = linears(head.streams.advantage_hidden) + [head.streams.advantage_out]
    advantage = relu_mlp(x, adv_layers) + 0.37                             # shared bias
    expected = value + advantage - advantage.mean(dim=1, keepdim=True)
    torch.testing.assert_close(head(x), expected)
    torch.testing.assert_close(head.advantage(x), advantage)
    assert head.streams.advantage_out.bias is None  # one shared bias instead of one per action


def test_dueling_head_scales_gradient_into_trunk_only():
    torch.manual_seed(0)
    scaled = DuelingHeadModel(6, [7], A, grad_scale=0.25)
    plain = DuelingHeadModel(6, [7], A, grad_scale=1.0)
    plain.load_state_dict(scaled.state_dict())
    x = torch.randn(4, 6)
    grads = []
    for head in (scaled, plain):
        xi = x.clone().requires_grad_(True)
        (head(xi) ** 2).sum().backward()
        grads.append((xi.grad, [p.grad.clone() for p in head.parameters()]))
    torch.testing.assert_close(grads[0][0], 0.25 * grads[1][0])
    for g_scaled, g_plain in zip(grads[0][1], grads[1][1]):
        torch.testing.assert_close(g_scaled, g_plain)  # head parameters are not rescaled
    assert DuelingHeadModel(6, [7], A).grad_scale == pytest.approx(2 ** -0.5)


def test_distributional_head_shape_and_logits():
    head = DistributionalHeadModel(6, [8], A, n_atoms=11)
    x = torch.randn(2, 5, 6)
    out = head(x)
    assert out.shape == (2, 5, A, 11)
    flat = relu_mlp(x, linears(head)).reshape(2, 5, A, 11)
    torch.testing.assert_close(out, flat)


def test_distributional_dueling_head_matches_manual_formula():
    n_atoms = 5
    head = DistributionalDuelingHeadModel(6, [7], A, n_atoms)
    with torch.no_grad():
        head.streams.advantage_bias.copy_(torch.arange(n_atoms, dtype=torch.float32))
    x = torch.randn(4, 6)
    value = relu_mlp(x, linears(head.streams.value)).reshape(4, 1, n_atoms)
    adv_layers = linears(head.streams.advantage_hidden) + [head.streams.advantage_out]
    advantage = relu_mlp(x, adv_layers).reshape(4, A, n_atoms) + torch.arange(n_atoms)
    expected = value + advantage - advantage.mean(dim=1, keepdim=True)
    torch.testing.assert_close(head(x), expected)


# ---- noisy layers --------------------------------------------------------------------------------
def test_noisy_linear_init_and_factorized_noise():
    layer = NoisyLinear(9, 4, std_init=0.6)
    bound = 1 / 3
    assert layer.weight_mu.abs().max() <= bound and layer.bias_mu.abs().max() <= bound
    torch.testing.assert_close(layer.weight_sigma, torch.full((4, 9), 0.6 / 3))
    torch.testing.assert_close(layer.bias_sigma, torch.full((4,), 0.6 / 3))
    eps_w, eps_b = layer.weight_epsilon, layer.bias_epsilon
    assert torch.linalg.matrix_rank(eps_w).item() == 1
    # Factorized: eps_w[i, j] = f(eps_out[i]) f(eps_in[j]) and eps_b = f(eps_out).
    eps_in = eps_w[0] / eps_b[0]
    torch.testing.assert_close(eps_w, torch.outer(eps_b, eps_in))
    assert "weight_epsilon" not in layer.state_dict() and "bias_epsilon" not in layer.state_dict()


def test_noisy_linear_noise_on_off_and_reset():
    layer = NoisyLinear(6, 4)
    x = torch.randn(8, 6)
    y1, y1_again = layer(x), layer(x)
    torch.testing.assert_close(y1, y1_again)  # fixed between resets
    expected = x @ (layer.weight_mu + layer.weight_sigma * layer.weight_epsilon).T + \
        layer.bias_mu + layer.bias_sigma * layer.bias_epsilon
    torch.testing.assert_close(y1, expected)
    layer.reset_noise()
    y2 = layer(x)
    assert not torch.allclose(y1, y2)
    layer.noise_enabled = False
    mean = layer(x)
    torch.testing.assert_close(mean, F.linear(x, layer.weight_mu, layer.bias_mu))
    layer.reset_noise()
    torch.testing.assert_close(layer(x), mean)  # deterministic without noise
    layer.noise_enabled = True
    (layer(x) ** 2).sum().backward()
    assert layer.weight_sigma.grad.abs().sum() > 0 and layer.bias_sigma.grad.abs().sum() > 0


def test_noisy_layer_eval_mode_alone_keeps_noise():
    layer = NoisyLinear(6, 4).eval()
    x = torch.randn(3, 6)
    assert not torch.allclose(layer(x), F.linear(x, layer.weight_mu, layer.bias_mu))


@pytest.mark.parametrize("make", [
    lambda: DqnMlpModel(OBS_SHAPE, A, hidden_sizes=[8, 8], noisy=True),
    lambda: CatDqnMlpModel(OBS_SHAPE, A, hidden_sizes=[8], n_atoms=7, dueling=True, noisy=True),
    lambda: AtariCatDqnModel(IMAGE_SHAPE, A, n_atoms=5, fc_sizes=8, dueling=True, noisy=True,
                             **SMALL_CONV),
], ids=["dqn_mlp", "cat_mlp_dueling", "atari_cat_dueling"])
def test_noisy_models_reset_and_set_noise(make):
    model = make()
    assert model.noisy and any(isinstance(m, NoisyLinear) for m in model.modules())
    obs = torch.rand(2, *model.observation_shape) * (255 if model.scale_uint8 else 1)
    out1 = model(obs)
    torch.testing.assert_close(model(obs), out1)
    model.reset_noise()
    assert not torch.allclose(model(obs), out1)
    model.set_noise(False)
    mean = model(obs)
    model.reset_noise()
    torch.testing.assert_close(model(obs), mean)


def test_non_noisy_model_has_no_noisy_layers():
    model = DqnMlpModel(OBS_SHAPE, A)
    assert not model.noisy and not any(isinstance(m, NoisyLinear) for m in model.modules())
    model.reset_noise()  # no-op
    model.set_noise(False)


# ---- Atari conv sizes --------------------------------------------------------------------------
def test_atari_dqn_default_conv_output_size():
    model = AtariDqnModel(IMAGE_SHAPE, A)
    # Nature DQN convs: 104x80 -k8s4-> 25x19 -k4s2p1-> 12x9 -k3s1p1-> 12x9, 64 channels.
    assert model.conv_out_size == 64 * 12 * 9
    channels = [m.out_channels for m in model.modules() if isinstance(m, torch.nn.Conv2d)]
    assert channels == [32, 64, 64]
    with torch.no_grad():
        out = model.conv(torch.zeros(1, *IMAGE_SHAPE))
    assert tuple(out.shape) == (1, 64, 12, 9)
    assert AtariDqnModel((4, 84, 84), A).conv_out_size == 64 * 10 * 10


# ---- leading dims for every model --------------------------------------------------------------
FF_MODELS = {
    "atari_dqn": lambda: AtariDqnModel(IMAGE_SHAPE, A, fc_sizes=16, **SMALL_CONV),
    "atari_dqn_dueling": lambda: AtariDqnModel(IMAGE_SHAPE, A, fc_sizes=[16], dueling=True,
                                               **SMALL_CONV),
    "atari_cat": lambda: AtariCatDqnModel(IMAGE_SHAPE, A, n_atoms=7, fc_sizes=16, **SMALL_CONV),
    "atari_cat_dueling": lambda: AtariCatDqnModel(IMAGE_SHAPE, A, n_atoms=7, fc_sizes=16,
                                                  dueling=True, **SMALL_CONV),
    "mlp_dqn": lambda: DqnMlpModel(OBS_SHAPE, A, hidden_sizes=[8, 8]),
    "mlp_dqn_dueling": lambda: DqnMlpModel(OBS_SHAPE, A, hidden_sizes=[8, 8], dueling=True),
    "mlp_cat": lambda: CatDqnMlpModel(OBS_SHAPE, A, hidden_sizes=[8], n_atoms=7),
    "mlp_cat_dueling": lambda: CatDqnMlpModel(OBS_SHAPE, A, hidden_sizes=[8, 8], n_atoms=7,
                                              dueling=True),
}


def observations(model, lead, seed=0):
    g = torch.Generator().manual_seed(seed)
    if model.scale_uint8:
        return torch.randint(0, 256, (*lead, *model.observation_shape), generator=g,
                             dtype=torch.uint8)
    return torch.randn(*lead, *model.observation_shape, generator=g)


@pytest.mark.parametrize("name", list(FF_MODELS))
def test_feedforward_models_leading_dims(name):
    model = FF_MODELS[name]()
    T, B = 2, 3
    obs = observations(model, (T, B))
    tail = (A, model.n_atoms) if model.n_atoms else (A,)
    out_tb = model(obs)
    assert out_tb.shape == (T, B, *tail)
    out_b = model(obs[1])
    out_0 = model(obs[1, 2])
    assert out_b.shape == (B, *tail) and out_0.shape == tail
    torch.testing.assert_close(out_b, out_tb[1])
    torch.testing.assert_close(out_0, out_tb[1, 2])
    if model.n_atoms:
        torch.testing.assert_close(out_tb.sum(-1), torch.ones(T, B, A))
        assert (out_tb >= 0).all()
        torch.testing.assert_close(model(obs, log_probs=True).exp(), out_tb)
    else:
        with pytest.raises(ValueError, match="log_probs"):
            model(obs, log_probs=True)


@pytest.mark.parametrize("name", ["atari_dqn", "atari_cat"])
def test_atari_models_scale_uint8_like_float_pixels(name):
    model = FF_MODELS[name]()
    obs = observations(model, (2,))
    pixels = obs.float()
    torch.testing.assert_close(model(obs), model(pixels))
    # the caller's float input is not scaled in place
    torch.testing.assert_close(pixels, obs.float())


def test_models_reject_wrong_observation_shape():
    with pytest.raises(ValueError, match="must end in"):
        DqnMlpModel(OBS_SHAPE, A)(torch.zeros(2, 6))
    with pytest.raises(ValueError, match="must end in"):
        AtariDqnModel(IMAGE_SHAPE, A, **SMALL_CONV)(torch.zeros(2, 4, 80, 104, dtype=torch.uint8))
    with pytest.raises(ValueError, match="output_size"):
        DqnMlpModel(OBS_SHAPE, 0)
    with pytest.raises(ValueError, match="n_atoms"):
        CatDqnMlpModel(OBS_SHAPE, A, n_atoms=1)


def test_mlp_dqn_plain_is_exactly_an_mlp():
    model = DqnMlpModel(OBS_SHAPE, A, hidden_sizes=[8, 6])
    x = torch.randn(4, *OBS_SHAPE)
    layers = linears(model)
    assert [(lin.in_features, lin.out_features) for lin in layers] == [(5, 8), (8, 6), (6, A)]
    torch.testing.assert_close(model(x), relu_mlp(x, layers))


# ---- recurrent models --------------------------------------------------------------------------
R2D1_MODELS = {
    "atari": lambda: AtariR2d1Model(IMAGE_SHAPE, A, fc_size=16, lstm_size=6, head_size=8,
                                    **SMALL_CONV),
    "atari_dueling": lambda: AtariR2d1Model(IMAGE_SHAPE, A, fc_size=16, lstm_size=6, head_size=8,
                                            dueling=True, **SMALL_CONV),
    "mlp": lambda: R2d1MlpModel(OBS_SHAPE, A, hidden_sizes=[8], lstm_size=6, head_size=8),
    "mlp_dueling": lambda: R2d1MlpModel(OBS_SHAPE, A, hidden_sizes=[8], lstm_size=6, head_size=8,
                                        dueling=True),
}


def r2d1_inputs(model, T, B, seed=0):
    g = torch.Generator().manual_seed(seed)
    if isinstance(model, AtariR2d1Model):
        obs = torch.randint(0, 256, (T, B, *IMAGE_SHAPE), generator=g, dtype=torch.uint8)
    else:
        obs = torch.randn(T, B, *OBS_SHAPE, generator=g)
    prev_action = torch.randint(0, A, (T, B), generator=g)
    prev_reward = torch.randn(T, B, generator=g)
    state = RnnState(h=torch.randn(1, B, 6, generator=g), c=torch.randn(1, B, 6, generator=g))
    return obs, prev_action, prev_reward, state


@pytest.mark.parametrize("name", list(R2D1_MODELS))
def test_r2d1_sequence_equals_stepwise(name):
    model = R2D1_MODELS[name]()
    T, B = 4, 2
    obs, prev_action, prev_reward, state = r2d1_inputs(model, T, B)
    q_all, final = model(obs, prev_action, prev_reward, state)
    assert q_all.shape == (T, B, A) and final.h.shape == (1, B, 6) and final.c.shape == (1, B, 6)
    s = state
    for t in range(T):
        q_t, s = model(obs[t], prev_action[t], prev_reward[t], s)
        assert q_t.shape == (B, A)
        torch.testing.assert_close(q_t, q_all[t], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(s.h, final.h, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(s.c, final.c, atol=1e-5, rtol=1e-5)
    # One step of one environment, no leading dims (state with B = 1).
    s1 = RnnState(h=state.h[:, :1], c=state.c[:, :1])
    q_0, _ = model(obs[0, 0], prev_action[0, 0], prev_reward[0, 0], s1)
    assert q_0.shape == (A,)
    torch.testing.assert_close(q_0, q_all[0, 0], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", ["atari", "mlp"])
def test_r2d1_onehot_prev_action_and_zero_state(name):
    model = R2D1_MODELS[name]()
    obs, prev_action, prev_reward, _ = r2d1_inputs(model, 3, 2, seed=1)
    onehot = F.one_hot(prev_action, A).float()
    q_int, s_int = model(obs, prev_action, prev_reward, None)
    q_hot, s_hot = model(obs, onehot, prev_reward, None)
    torch.testing.assert_close(q_int, q_hot)
    zeros = RnnState(h=torch.zeros(1, 2, 6), c=torch.zeros(1, 2, 6))
    q_zero, _ = model(obs, onehot, prev_reward, zeros)
    torch.testing.assert_close(q_int, q_zero)
    # The previous action and reward are LSTM inputs: changing them changes Q.
    q_other, _ = model(obs, (prev_action + 1) % A, prev_reward, None)
    assert not torch.allclose(q_other, q_int)


def test_r2d1_dueling_head_and_sizes():
    model = AtariR2d1Model(IMAGE_SHAPE, A, fc_size=16, lstm_size=6, head_size=8, dueling=True,
                           **SMALL_CONV)
    assert isinstance(model.head, DuelingHeadModel)
    assert model.body.core.lstm.input_size == 16 + A + 1 and model.body.core.lstm.hidden_size == 6
    default = AtariR2d1Model(IMAGE_SHAPE, A)
    assert default.conv_out_size == 64 * 12 * 9 and default.lstm_size == 512
