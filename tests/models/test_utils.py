"""Tests for rlfast.models.utils and RunningMeanStdModel."""
import numpy as np
import pytest
import torch

from rlfast.models.running_mean_std import RunningMeanStdModel
from rlfast.models.utils import (
    ScaleGrad,
    conv2d_output_shape,
    scale_grad,
    strip_ddp_state_dict,
    update_state_dict,
)


@pytest.mark.parametrize(
    "h, w, k, s, p, d",
    [(84, 84, 8, 4, 0, 1), (21, 17, 3, 2, 1, 1), (30, 31, 5, 1, 2, 2),
     (10, 12, (3, 5), (1, 2), (0, 1), 1)],
)
def test_conv2d_output_shape_matches_conv(h, w, k, s, p, d):
    conv = torch.nn.Conv2d(1, 1, kernel_size=k, stride=s, padding=p, dilation=d)
    out = conv(torch.zeros(1, 1, h, w))
    assert conv2d_output_shape(h, w, k, s, p, d) == tuple(out.shape[-2:])


def test_conv2d_output_shape_matches_maxpool():
    out = torch.nn.MaxPool2d(2)(torch.zeros(1, 1, 15, 9))
    assert conv2d_output_shape(15, 9, 2, 2) == tuple(out.shape[-2:])


def test_scale_grad_scales_only_gradient():
    x = torch.randn(3, requires_grad=True)
    y = ScaleGrad.apply(x, 0.25)
    assert torch.equal(y, x)
    (y * torch.tensor([1.0, 2.0, 3.0])).sum().backward()
    assert torch.allclose(x.grad, 0.25 * torch.tensor([1.0, 2.0, 3.0]))
    x2 = torch.randn(3, requires_grad=True)
    (scale_grad(x2, 2.0) ** 2).sum().backward()
    assert torch.allclose(x2.grad, 2.0 * 2 * x2.detach())


def _net(seed):
    torch.manual_seed(seed)
    net = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4))
    return net


def test_update_state_dict_hard_and_soft():
    target, source = _net(0), _net(1)
    source[1].num_batches_tracked.fill_(7)
    old = {k: v.clone() for k, v in target.state_dict().items()}
    new = {k: v.clone() for k, v in source.state_dict().items()}
    update_state_dict(target, source.state_dict(), tau=0.1)
    for key, value in target.state_dict().items():
        if torch.is_floating_point(value):
            assert torch.allclose(value, 0.1 * new[key] + 0.9 * old[key]), key
        else:
            assert torch.equal(value, new[key]), key
    update_state_dict(target, source.state_dict(), tau=1)
    for key, value in target.state_dict().items():
        assert torch.equal(value, new[key])
    with pytest.raises(ValueError):
        update_state_dict(target, source.state_dict(), tau=0)
    with pytest.raises(KeyError):
        update_state_dict(target, {"0.weight": new["0.weight"]}, tau=0.5)


def test_update_state_dict_strips_ddp_prefix():
    target, source = _net(0), _net(1)
    wrapped = {"module." + k: v for k, v in source.state_dict().items()}
    update_state_dict(target, wrapped, tau=0.5)
    update_state_dict(target, wrapped)
    assert torch.equal(target[0].weight, source[0].weight)


def test_strip_ddp_state_dict():
    sd = {"module.a.weight": 1, "b": 2, "module.module.c": 3, "x.module.d": 4}
    assert dict(strip_ddp_state_dict(sd)) == {"a.weight": 1, "b": 2, "module.c": 3, "x.module.d": 4}


def test_running_mean_std_matches_numpy():
    rng = np.random.default_rng(0)
    rms = RunningMeanStdModel((3,))
    assert torch.equal(rms.mean, torch.zeros(3)) and torch.equal(rms.var, torch.ones(3))
    batches = [rng.normal(2.0, 3.0, size=(n, 3)) for n in (5, 17, 1, 40)]
    for batch in batches:
        rms.update(torch.as_tensor(batch, dtype=torch.float32))
    data = np.concatenate(batches)
    assert np.allclose(rms.mean.numpy(), data.mean(0), atol=1e-5)
    assert np.allclose(rms.var.numpy(), data.var(0), rtol=1e-5)
    assert rms.count.item() == len(data)
    # Leading [T, B] dims are flattened.
    rms2 = RunningMeanStdModel(3)
    rms2.update(torch.as_tensor(data[:60].reshape(4, 15, 3)))
    assert np.allclose(rms2.mean.numpy(), data[:60].mean(0), atol=1e-5)
    with pytest.raises(ValueError):
        rms2.update(torch.zeros(4, 2))


def test_running_mean_std_buffers_travel_with_model():
    rms = RunningMeanStdModel((2,))
    assert set(dict(rms.named_buffers())) == {"mean", "var", "count"}
    rms.share_memory()
    assert rms.mean.is_shared()
    storage_ptr = rms.mean.data_ptr()
    rms.update(torch.tensor([[1.0, 2.0], [3.0, 4.0]]))
    assert rms.mean.data_ptr() == storage_ptr  # updated in place, so shared copies see it
    other = RunningMeanStdModel((2,))
    other.load_state_dict(rms.state_dict())
    assert torch.equal(other.mean, torch.tensor([2.0, 3.0]))
    normalized = rms.normalize(torch.tensor([[2.0, 3.0], [100.0, -100.0]]), clip=5.0, var_clip=0.0)
    assert torch.allclose(normalized, torch.tensor([[0.0, 0.0], [5.0, -5.0]]))
