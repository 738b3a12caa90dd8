"""Conv2dModel.channels_last: on the CPU ("auto") the input is laid out channels-last before the
first convolution; the values (and gradients) equal an independent NCHW computation with
``torch.nn.functional`` and the same weights, and the parameters and state dict are unchanged."""
import pytest
import torch
import torch.nn.functional as F

from rlfast.models.conv2d import Conv2dModel
from rlfast.models.dqn import AtariDqnModel
from rlfast.models.pg import AtariFfModel

NATURE = dict(in_channels=4, channels=[32, 64, 64], kernel_sizes=[8, 4, 3], strides=[4, 2, 1])
IMAGE = (4, 84, 84)
CASES = {"nature": dict(use_maxpool=False, batch=6), "maxpool": dict(use_maxpool=True, batch=2)}


@pytest.fixture(autouse=True)
def _seeded():
    torch.manual_seed(2024)


def make_model(use_maxpool, channels_last=None):
    model = Conv2dModel(**NATURE, use_maxpool=use_maxpool)
    if channels_last is not None:
        model.channels_last = channels_last  # on the instance
    return model


def convs(model):
    return [m for m in model.modules() if isinstance(m, torch.nn.Conv2d)]


def reference(model, x, weights, biases):
    """The stack by hand on NCHW-contiguous tensors: conv2d + relu (+ max_pool2d)."""
    h = x.contiguous()
    for w, b, stride in zip(weights, biases, model.strides):
        if model.use_maxpool:
            h = F.relu(F.conv2d(h, w.contiguous(), b, stride=1))
            if stride > 1:
                h = F.max_pool2d(h, stride)
        else:
            h = F.relu(F.conv2d(h, w.contiguous(), b, stride=stride))
        h = h.contiguous()
    return h


def assert_close(actual, expected, rel=1e-5):
    scale = expected.abs().max().item()
    assert scale > 0
    torch.testing.assert_close(actual, expected, rtol=rel, atol=rel * scale)


def record_first_conv_input(model):
    """A pre-hook on the first Conv2d; returns the list it appends (channels_last, nchw) to."""
    seen = []

    def hook(module, inputs):
        x = inputs[0]
        seen.append((x.is_contiguous(memory_format=torch.channels_last), x.is_contiguous()))

    convs(model)[0].register_forward_pre_hook(hook)
    return seen


def test_default_is_auto_and_instance_override_leaves_the_class_alone():
    assert Conv2dModel.channels_last == "auto"
    model = make_model(False, channels_last=False)
    assert model.channels_last is False and Conv2dModel.channels_last == "auto"
    assert make_model(False).channels_last == "auto"


@pytest.mark.parametrize("case", list(CASES))
def test_auto_output_and_weight_gradients_match_an_nchw_reference(case):
    use_maxpool, batch = CASES[case]["use_maxpool"], CASES[case]["batch"]
    model = make_model(use_maxpool)  # "auto": channels-last on the CPU
    seen = record_first_conv_input(model)
    x = torch.rand(batch, *IMAGE)
    out = model(x)
    assert seen == [(True, False)]  # converted before the first convolution
    assert out.shape == (batch, *model.conv_out_shape(84, 84))
    assert out.is_contiguous(memory_format=torch.channels_last)

    weights = [c.weight.detach().clone().requires_grad_(True) for c in convs(model)]
    biases = [c.bias.detach().clone().requires_grad_(True) for c in convs(model)]
    expected = reference(model, x, weights, biases)
    assert expected.is_contiguous()
    assert not expected.is_contiguous(memory_format=torch.channels_last)
    assert_close(out, expected)
    assert (expected > 0).any() and (expected == 0).any()  # the relus are active and cut

    g = torch.randn(expected.shape)
    (out * g).sum().backward()
    (expected * g).sum().backward()
    for conv, w, b in zip(convs(model), weights, biases):
        assert conv.weight.grad.abs().max() > 0
        assert_close(conv.weight.grad, w.grad, rel=1e-4)
        assert_close(conv.bias.grad, b.grad, rel=1e-4)
    # The parameters themselves keep their NCHW layout.
    assert all(c.weight.is_contiguous() for c in convs(model))


@pytest.mark.parametrize("mode, expected", [("auto", (True, False)), (True, (True, False)),
                                            (False, (False, True))])
def test_first_conv_sees_the_layout_the_mode_asks_for(mode, expected):
    model = make_model(False, channels_last=mode)
    seen = record_first_conv_input(model)
    x = torch.rand(2, *IMAGE)
    out = model(x)
    assert seen == [expected]
    weights = [c.weight.detach() for c in convs(model)]
    biases = [c.bias.detach() for c in convs(model)]
    assert_close(out.detach(), reference(model, x, weights, biases))


@pytest.mark.parametrize("mode, cpu, cuda", [("auto", True, False), (True, True, True),
                                           (False, False, False)])
def test_auto_means_the_cpu_only(mode, cpu, cuda):
    model = make_model(False, channels_last=mode)
    assert model._use_channels_last(torch.device("cpu")) is cpu
    assert model._use_channels_last(torch.device("cuda", 0)) is cuda


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("mode, expected", [("auto", (False, True)), (True, (True, False))])
def test_auto_keeps_nchw_on_cuda(mode, expected):
    model = make_model(False, channels_last=mode).cuda()
    seen = record_first_conv_input(model)
    x = torch.rand(2, *IMAGE, device="cuda")
    with torch.no_grad():
        out = model(x)
        cpu_model = make_model(False, channels_last=False)
        cpu_model.load_state_dict(model.state_dict())
        expected_out = cpu_model(x.cpu())
    assert seen == [expected]
    assert_close(out.cpu(), expected_out, rel=1e-2)  # TF32 convolutions on recent GPUs


def test_unbatched_input_is_left_alone():
    model = make_model(False)
    seen = record_first_conv_input(model)
    x = torch.rand(*IMAGE)
    out = model(x)
    assert seen == [(False, True)]  # 3-D: no channels-last layout to take
    weights = [c.weight.detach() for c in convs(model)]
    biases = [c.bias.detach() for c in convs(model)]
    assert_close(out.detach(), reference(model, x[None], weights, biases)[0])


@pytest.mark.parametrize("use_maxpool", [False, True])
def test_state_dict_keys_and_shapes_do_not_depend_on_the_mode(use_maxpool):
    torch.manual_seed(0)
    on = make_model(use_maxpool, channels_last=True)
    torch.manual_seed(0)
    off = make_model(use_maxpool, channels_last=False)
    on(torch.rand(1, *IMAGE))  # after a forward pass, too
    sd_on, sd_off = on.state_dict(), off.state_dict()
    assert list(sd_on) == list(sd_off)
    for key in sd_on:
        assert sd_on[key].shape == sd_off[key].shape
        assert torch.equal(sd_on[key], sd_off[key])
        assert sd_on[key].is_contiguous()
    off.load_state_dict(sd_on)  # interchangeable


def _toggle_outputs(model, first_conv, *inputs):
    """Outputs with the model's Conv2dModel forced channels-last, then forced NCHW."""
    seen = []
    first_conv.register_forward_pre_hook(
        lambda m, inp: seen.append(inp[0].is_contiguous(memory_format=torch.channels_last)))
    results = []
    for mode in (True, False):
        model.conv.channels_last = mode
        with torch.no_grad():
            results.append(model(*inputs))
    assert seen == [True, False]  # the switch reached the model's convolutions
    return results


def test_atari_pg_model_outputs_equal_in_both_layouts():
    model = AtariFfModel(image_shape=(4, 104, 80), output_size=6, fc_sizes=32)
    assert isinstance(model.conv, Conv2dModel)
    image = torch.randint(0, 256, (2, 3, 4, 104, 80), dtype=torch.uint8)  # [T, B] leading dims
    (pi_cl, v_cl), (pi_nchw, v_nchw) = _toggle_outputs(model, convs(model.conv)[0], image)
    assert pi_cl.shape == (2, 3, 6) and v_cl.shape == (2, 3)
    assert_close(pi_cl, pi_nchw)
    assert_close(v_cl, v_nchw)


@pytest.mark.parametrize("dueling", [False, True])
def test_atari_dqn_model_outputs_equal_in_both_layouts(dueling):
    model = AtariDqnModel(image_shape=(4, 84, 84), output_size=6, fc_sizes=32, dueling=dueling)
    assert isinstance(model.conv, Conv2dModel)
    image = torch.randint(0, 256, (3, 4, 84, 84), dtype=torch.uint8)
    q_cl, q_nchw = _toggle_outputs(model, convs(model.conv)[0], image)
    assert q_cl.shape == (3, 6)
    assert_close(q_cl, q_nchw)
