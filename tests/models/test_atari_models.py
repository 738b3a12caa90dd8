"""Tests for the Atari policy-gradient models (rlfast.models.pg.AtariFfModel, AtariLstmModel)."""
import pytest
import torch
import torch.nn.functional as F

from rlfast.models.pg import AtariFfModel, AtariLstmModel, RnnState

IMAGE_SHAPE = (4, 104, 80)
N_ACTIONS = 6
FC = 32
LSTM = 16
LEADS = [(), (3,), (2, 3)]


@pytest.fixture(autouse=True)
def _seeded():
    torch.manual_seed(0)


def images(lead, seed=0, shape=IMAGE_SHAPE):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (*lead, *shape), generator=g, dtype=torch.uint8)


def lstm_inputs(lead, seed=0):
    g = torch.Generator().manual_seed(seed + 100)
    prev_action = F.one_hot(torch.randint(0, N_ACTIONS, lead, generator=g), N_ACTIONS).float()
    prev_reward = torch.randn(lead, generator=g)
    return images(lead, seed), prev_action, prev_reward


def ff_model(**kwargs):
    return AtariFfModel(IMAGE_SHAPE, N_ACTIONS, fc_sizes=FC, **kwargs)


def lstm_model(**kwargs):
    return AtariLstmModel(IMAGE_SHAPE, N_ACTIONS, fc_sizes=FC, lstm_size=LSTM, **kwargs)


def conv_out_hw(h, w, kernel, stride, padding):
    """Straightforward reference for one convolution's output height and width."""
    return (h + 2 * padding - kernel) // stride + 1, (w + 2 * padding - kernel) // stride + 1


# ---- convolution sizes -------------------------------------------------------------------------

def test_default_conv_output_for_104x80_image():
    # 8x8 stride 4, no padding: (104-8)/4+1 = 25, (80-8)/4+1 = 19;
    # 4x4 stride 2, padding 1: (25+2-4)//2+1 = 12, (19+2-4)//2+1 = 9; 32 channels.
    assert conv_out_hw(104, 80, 8, 4, 0) == (25, 19)
    assert conv_out_hw(25, 19, 4, 2, 1) == (12, 9)
    for model in (ff_model(), lstm_model()):
        assert model.conv_out_size == 32 * 12 * 9 == 3456
        out = model.conv(torch.zeros(2, *IMAGE_SHAPE))
        assert out.shape == (2, 32, 12, 9)


@pytest.mark.parametrize("use_maxpool", [False, True])
def test_custom_conv_output_size_matches_forward(use_maxpool):
    kwargs = dict(channels=[8, 16, 16], kernel_sizes=[5, 3, 3], strides=[2, 2, 1],
                  paddings=[1, 0, 1])
    model = AtariFfModel((3, 40, 36), 4, fc_sizes=[16, 8], use_maxpool=use_maxpool, **kwargs)
    h, w = 40, 36
    for k, s, p in zip(kwargs["kernel_sizes"], kwargs["strides"], kwargs["paddings"]):
        if use_maxpool:
            h, w = conv_out_hw(h, w, k, 1, p)
            if s > 1:
                h, w = conv_out_hw(h, w, s, s, 0)
        else:
            h, w = conv_out_hw(h, w, k, s, p)
    assert model.conv_out_size == 16 * h * w
    assert model.conv(torch.zeros(1, 3, 40, 36)).shape == (1, 16, h, w)
    pi, value = model(images((2,), shape=(3, 40, 36)), None, None)
    assert pi.shape == (2, 4) and value.shape == (2,)


# ---- feedforward model -------------------------------------------------------------------------

@pytest.mark.parametrize("lead", LEADS)
def test_ff_shapes_for_all_leading_dims(lead):
    model = ff_model()
    pi, value = model(images(lead), None, None)
    assert pi.shape == (*lead, N_ACTIONS) and value.shape == lead
    assert pi.dtype == torch.float32 and value.dtype == torch.float32
    assert torch.allclose(pi.sum(-1), torch.ones(lead))
    assert torch.all(pi > 0)


def test_ff_uint8_matches_prescaled_float_reference():
    model = ff_model()
    img = images((5,))
    pi, value = model(img, None, None)
    # Reference: scale by hand, then the model's own layers without forward().
    x = img.to(torch.float32) / 255.0
    features = model.fc(model.conv(x).flatten(1))
    ref_pi = torch.softmax(model.pi(features), dim=-1)
    ref_value = model.value(features)[:, 0]
    assert torch.allclose(pi, ref_pi, atol=1e-6)
    assert torch.allclose(value, ref_value, atol=1e-5)


def test_ff_float_pixels_are_scaled_the_same_and_input_is_untouched():
    model = ff_model()
    img = images((3,))
    pixels = img.float()
    saved = pixels.clone()
    pi_u8, value_u8 = model(img, None, None)
    pi_f, value_f = model(pixels, None, None)
    assert torch.allclose(pi_u8, pi_f, atol=1e-6) and torch.allclose(value_u8, value_f, atol=1e-6)
    assert torch.equal(pixels, saved)
    assert img.dtype == torch.uint8


def test_ff_time_batch_equals_each_element():
    model = ff_model()
    img = images((2, 3))
    pi, value = model(img, None, None)
    for t in range(2):
        for b in range(3):
            pi_one, value_one = model(img[t, b], None, None)
            assert torch.allclose(pi[t, b], pi_one, atol=1e-6)
            assert torch.allclose(value[t, b], value_one, atol=1e-5)


def test_ff_starts_near_uniform_and_gradients_reach_every_parameter():
    model = ff_model()
    pi, value = model(images((4,)), None, None)
    assert torch.allclose(pi, torch.full_like(pi, 1 / N_ACTIONS), atol=0.05)
    (pi[:, 0].sum() + value.sum()).backward()
    for name, param in model.named_parameters():
        assert param.grad is not None and torch.any(param.grad != 0), name


def test_ff_no_fc_layer():
    model = AtariFfModel(IMAGE_SHAPE, N_ACTIONS, fc_sizes=None)
    assert model.pi.in_features == 3456
    pi, value = model(images((2,)), None, None)
    assert pi.shape == (2, N_ACTIONS) and value.shape == (2,)


def test_bad_inputs_raise():
    model = ff_model()
    with pytest.raises(ValueError, match="image_shape"):
        model(images((2,), shape=(4, 84, 84)), None, None)
    with pytest.raises(ValueError, match="image_shape"):
        AtariFfModel((104, 80), N_ACTIONS)
    with pytest.raises(ValueError, match="output_size"):
        AtariLstmModel(IMAGE_SHAPE, 0)
    with pytest.raises(ValueError, match="too small"):
        AtariFfModel((4, 6, 6), N_ACTIONS)


# ---- LSTM model --------------------------------------------------------------------------------

@pytest.mark.parametrize("lead", LEADS)
def test_lstm_shapes_for_all_leading_dims(lead):
    model = lstm_model()
    pi, value, state = model(*lstm_inputs(lead), None)
    B = lead[-1] if lead else 1
    assert pi.shape == (*lead, N_ACTIONS) and value.shape == lead
    assert torch.allclose(pi.sum(-1), torch.ones(lead))
    assert isinstance(state, RnnState)
    assert state.h.shape == (1, B, LSTM) and state.c.shape == (1, B, LSTM)


def test_lstm_sequence_equals_step_by_step_with_carried_state():
    model = lstm_model()
    T, B = 4, 3
    img, prev_action, prev_reward = lstm_inputs((T, B), seed=3)
    g = torch.Generator().manual_seed(7)
    init = RnnState(h=torch.randn(1, B, LSTM, generator=g), c=torch.randn(1, B, LSTM, generator=g))
    pi, value, final = model(img, prev_action, prev_reward, init)
    state = init
    for t in range(T):
        pi_t, value_t, state = model(img[t], prev_action[t], prev_reward[t], state)
        assert torch.allclose(pi[t], pi_t, atol=1e-6)
        assert torch.allclose(value[t], value_t, atol=1e-5)
    assert torch.allclose(final.h, state.h, atol=1e-6)
    assert torch.allclose(final.c, state.c, atol=1e-6)


def test_lstm_none_state_is_zero_state_and_state_matters():
    model = lstm_model()
    x = lstm_inputs((2,), seed=4)
    zeros = RnnState(h=torch.zeros(1, 2, LSTM), c=torch.zeros(1, 2, LSTM))
    pi0, value0, _ = model(*x, None)
    pi1, value1, _ = model(*x, zeros)
    assert torch.equal(pi0, pi1) and torch.equal(value0, value1)
    other = RnnState(h=torch.ones(1, 2, LSTM), c=torch.ones(1, 2, LSTM))
    _, value2, _ = model(*x, other)
    assert not torch.allclose(value0, value2)


def test_lstm_uint8_matches_prescaled_float_reference():
    model = lstm_model()
    img, prev_action, prev_reward = lstm_inputs((2, 3), seed=5)
    pi, value, state = model(img, prev_action, prev_reward, None)
    # Reference built from torch primitives: scale, conv, fc (ReLU), LSTM, heads.
    x = img.reshape(6, *IMAGE_SHAPE).float() / 255.0
    features = model.conv(x).flatten(1)
    linear = model.body.mlp.model[0]
    fc = torch.relu(features @ linear.weight.T + linear.bias).reshape(2, 3, FC)
    lstm_in = torch.cat([fc, prev_action, prev_reward.unsqueeze(-1)], dim=-1)
    out, (h, c) = model.body.core.lstm(lstm_in)
    assert torch.allclose(pi, torch.softmax(model.pi(out), -1), atol=1e-6)
    assert torch.allclose(value, model.value(out)[..., 0], atol=1e-5)
    assert torch.allclose(state.h, h, atol=1e-6) and torch.allclose(state.c, c, atol=1e-6)


def test_lstm_previous_action_and_reward_are_inputs():
    model = lstm_model()
    img, prev_action, prev_reward = lstm_inputs((2,), seed=6)
    _, value, _ = model(img, prev_action, prev_reward, None)
    _, value_a, _ = model(img, prev_action.roll(1, dims=-1), prev_reward, None)
    _, value_r, _ = model(img, prev_action, prev_reward + 1.0, None)
    assert not torch.allclose(value, value_a) and not torch.allclose(value, value_r)


def test_lstm_gradients_reach_every_parameter():
    model = lstm_model()
    pi, value, _ = model(*lstm_inputs((2, 2), seed=8), None)
    (pi[..., 0].sum() + value.sum()).backward()
    for name, param in model.named_parameters():
        assert param.grad is not None and torch.any(param.grad != 0), name


def test_lstm_prev_action_must_be_one_hot_sized():
    model = lstm_model()
    img, _, prev_reward = lstm_inputs((2,))
    with pytest.raises(ValueError, match="prev_action"):
        model(img, torch.zeros(2, dtype=torch.long), prev_reward, None)
