"""Tests for MlpModel, Conv2dModel and Conv2dHeadModel."""
import pytest
import torch

from rlfast.models import Conv2dHeadModel, Conv2dModel, MlpModel


def test_mlp_structure_and_output_size():
    mlp = MlpModel(5, [8, 6], output_size=3)
    assert mlp.output_size == 3
    linears = [m for m in mlp.modules() if isinstance(m, torch.nn.Linear)]
    assert [(lin.in_features, lin.out_features) for lin in linears] == [(5, 8), (8, 6), (6, 3)]
    x = torch.randn(4, 5)
    # Reference forward written out by hand: last layer linear.
    h = torch.relu(linears[0](x))
    h = torch.relu(linears[1](h))
    assert torch.allclose(mlp(x), linears[2](h))


def test_mlp_without_output_ends_in_nonlinearity():
    mlp = MlpModel(5, 7, output_size=None, nonlinearity=torch.nn.Tanh)
    assert mlp.output_size == 7
    out = mlp(torch.randn(10, 5) * 100)
    assert out.abs().max() <= 1.0
    linear = MlpModel(5, [], output_size=2)
    assert linear.output_size == 2 and len(linear.model) == 1
    with pytest.raises(ValueError):
        MlpModel(5, [0])


def test_nonlinearity_by_name_as_configs_give_it():
    from rlfast.models.pg import MujocoFfModel
    from rlfast.models.utils import nonlinearity_class
    assert nonlinearity_class("ReLU") is torch.nn.ReLU
    assert nonlinearity_class(torch.nn.ELU) is torch.nn.ELU
    assert nonlinearity_class("none", allow_none=True) is None
    assert nonlinearity_class(None, allow_none=True) is None
    with pytest.raises(ValueError, match="hidden must be .*one of elu, gelu.*got 'swish'"):
        nonlinearity_class("swish", "hidden")
    with pytest.raises(ValueError, match="got None"):
        nonlinearity_class(None)  # a hidden layer needs one
    mlp = MlpModel(5, [8], output_size=None, nonlinearity="tanh")
    assert isinstance(mlp.model[1], torch.nn.Tanh)
    # The zoo's MuJoCo PPO network: ReLU hidden layers and a linear mean.
    model = MujocoFfModel((3,), 2, hidden_sizes=[8], hidden_nonlinearity="relu",
                          mu_nonlinearity="none")
    linears = [m for m in model.mu.modules() if isinstance(m, torch.nn.Linear)]
    x = torch.randn(6, 3)
    expected = linears[1](torch.relu(linears[0](x)))  # by hand: no tanh anywhere
    torch.testing.assert_close(model(x)[0], expected)
    assert not any(isinstance(m, torch.nn.Tanh) for m in model.modules())
    with pytest.raises(ValueError, match="mu_nonlinearity"):
        MujocoFfModel((3,), 2, mu_nonlinearity="softplusx")


@pytest.mark.parametrize("use_maxpool", [False, True])
@pytest.mark.parametrize("hw", [(84, 84), (64, 50), (33, 41)])
def test_conv_out_size_matches_forward(use_maxpool, hw):
    conv = Conv2dModel(
        in_channels=4, channels=[16, 32, 8], kernel_sizes=[8, 4, 3], strides=[4, 2, 1],
        paddings=[0, 1, 1], use_maxpool=use_maxpool,
    )
    h, w = hw
    out = conv(torch.zeros(2, 4, h, w))
    assert out.shape[1:] == conv.conv_out_shape(h, w)
    assert out[0].numel() == conv.conv_out_size(h, w)
    assert conv.conv_out_size(h, w, c=4) == out[0].numel()
    with pytest.raises(ValueError):
        conv.conv_out_size(h, w, c=3)


def test_conv_uses_maxpool_for_striding():
    conv = Conv2dModel(3, [8], [3], [2], use_maxpool=True)
    kinds = [type(m) for m in conv.conv]
    assert torch.nn.MaxPool2d in kinds
    assert conv.conv[0].stride == (1, 1)
    plain = Conv2dModel(3, [8], [3], [2])
    assert plain.conv[0].stride == (2, 2)
    assert torch.nn.MaxPool2d not in [type(m) for m in plain.conv]


def test_conv_argument_checks():
    with pytest.raises(ValueError, match="same length"):
        Conv2dModel(3, [8, 8], [3], [1])
    with pytest.raises(ValueError, match="Conv2dHeadModel"):
        Conv2dModel(3, [8], [3], [1], head_sizes=[32])


@pytest.mark.parametrize("hidden_sizes, output_size, expected",
                         [([32], 6, 6), ([32, 16], None, 16), ([], None, None)])
def test_conv2d_head_model(hidden_sizes, output_size, expected):
    model = Conv2dHeadModel((3, 20, 20), [8, 4], [5, 3], [2, 1], hidden_sizes,
                            output_size=output_size)
    out = model(torch.randn(5, 3, 20, 20))
    if expected is None:
        expected = model.conv.conv_out_size(20, 20)
    assert model.output_size == expected
    assert out.shape == (5, expected)
    out.sum().backward()
    assert model.conv.conv[0].weight.grad is not None
