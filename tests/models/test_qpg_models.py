"""DDPG/TD3/SAC models: leading dims, the stacked-weight critic ensemble against plain
nn.Linear stacks, the CPU and batched paths against each other, and detached parameters."""
import pytest
import torch

from rlfast.models.qpg import EnsembleMlp, MuMlpModel, PiMlpModel, QofMuMlpModel

OBS, ACT, HID = (5,), 3, [16, 16]
LEADS = [(), (7,), (4, 3)]


def _linear_stack(member_state: dict, n_layers: int) -> torch.nn.Sequential:
    """An nn.Linear/ReLU stack holding one ensemble member's weights."""
    layers = []
    for i in range(n_layers):
        w, b = member_state[f"weight_{i}"], member_state[f"bias_{i}"]
        lin = torch.nn.Linear(w.shape[1], w.shape[0])
        with torch.no_grad():
            lin.weight.copy_(w)
            lin.bias.copy_(b)
        layers.append(lin)
        if i < n_layers - 1:
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers)


@pytest.mark.parametrize("lead", LEADS)
def test_mu_model_shapes_and_bound(lead):
    torch.manual_seed(0)
    model = MuMlpModel(OBS, HID, ACT, output_max=0.5)
    obs = 10 * torch.randn(*lead, *OBS)
    mu = model(obs)
    assert mu.shape == (*lead, ACT)
    assert mu.abs().max() <= 0.5
    # Same numbers as the flattened batch: leading dims only reshape.
    flat = model(obs.reshape(-1, *OBS))
    assert torch.allclose(mu.reshape(-1, ACT), flat, atol=1e-6)


@pytest.mark.parametrize("lead", LEADS)
def test_pi_model_shapes(lead):
    torch.manual_seed(0)
    model = PiMlpModel(OBS, HID, ACT)
    obs = torch.randn(*lead, *OBS)
    mean, log_std = model(obs)
    assert mean.shape == log_std.shape == (*lead, ACT)
    flat_mean, flat_log_std = model(obs.reshape(-1, *OBS))
    assert torch.allclose(mean.reshape(-1, ACT), flat_mean, atol=1e-6)
    assert torch.allclose(log_std.reshape(-1, ACT), flat_log_std, atol=1e-6)
    # mean and log_std are the two halves of one linear output layer
    out = model.mlp(obs.reshape(-1, *OBS))
    assert torch.allclose(flat_mean, out[:, :ACT]) and torch.allclose(flat_log_std, out[:, ACT:])


@pytest.mark.parametrize("lead", LEADS)
@pytest.mark.parametrize("ensemble_size", [1, 2, 3])
def test_q_model_shapes_ensemble_and_member(lead, ensemble_size):
    torch.manual_seed(1)
    model = QofMuMlpModel(OBS, HID, ACT, ensemble_size=ensemble_size)
    obs, act = torch.randn(*lead, *OBS), torch.rand(*lead, ACT) * 2 - 1
    q = model(obs, None, None, act)
    expected = lead if ensemble_size == 1 else (ensemble_size, *lead)
    assert q.shape == expected
    for k in range(ensemble_size):
        qk = model(obs, None, None, act, member=k)
        assert qk.shape == lead
        full_k = q if ensemble_size == 1 else q[k]
        assert torch.allclose(qk, full_k, atol=1e-6)


@pytest.mark.parametrize("ensemble_size", [1, 2])
def test_q_model_matches_nn_linear_reference(ensemble_size):
    torch.manual_seed(2)
    model = QofMuMlpModel(OBS, HID, ACT, ensemble_size=ensemble_size)
    obs, act = torch.randn(4, 3, *OBS), torch.rand(4, 3, ACT)
    q = model(obs, None, None, act).reshape(ensemble_size, 4, 3)
    x = torch.cat([obs, act], dim=-1)
    for k in range(ensemble_size):
        ref = _linear_stack(model.mlp.member_state_dict(k), len(HID) + 1)
        assert torch.allclose(q[k], ref(x).squeeze(-1), atol=1e-5)


def test_ensemble_members_are_independent_and_linear_init_bounds():
    torch.manual_seed(3)
    mlp = EnsembleMlp(6, [32, 32], 2, ensemble_size=2)
    w0, w1 = mlp.weights[0][0], mlp.weights[0][1]
    assert not torch.allclose(w0, w1)
    for w, fan_in in zip(mlp.weights, [6, 32, 32]):
        assert w.abs().max() <= 1 / fan_in ** 0.5 + 1e-7


@pytest.mark.parametrize("member", [None, 0, 2])
def test_ensemble_cpu_path_equals_batched_path(member):
    torch.manual_seed(4)
    mlp = EnsembleMlp(8, [16, 16], 4, ensemble_size=3)
    x = torch.randn(11, 8)
    cpu_out = mlp(x, member=member)  # 2-D input on CPU: per-member addmm
    E = 3 if member is None else 1
    batched = mlp(x.expand(E, 11, 8).contiguous(), member=member)  # 3-D: baddbmm
    assert cpu_out.shape == batched.shape == (E, 11, 4)
    assert torch.allclose(cpu_out, batched, atol=1e-6)
    for j in range(E):
        k = j if member is None else member
        ref = _linear_stack(mlp.member_state_dict(k), 3)
        assert torch.allclose(cpu_out[j], ref(x), atol=1e-5)


def test_ensemble_distinct_inputs_per_member():
    torch.manual_seed(5)
    mlp = EnsembleMlp(4, [16], 2, ensemble_size=2)
    x = torch.randn(2, 9, 4)
    out = mlp(x)
    for k in range(2):
        ref = _linear_stack(mlp.member_state_dict(k), 2)
        assert torch.allclose(out[k], ref(x[k]), atol=1e-5)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU for the broadcast path")
def test_ensemble_gpu_shared_input_path_equals_cpu():
    torch.manual_seed(6)
    mlp = EnsembleMlp(8, [16, 16], 1, ensemble_size=2)
    x = torch.randn(13, 8)
    cpu_out = mlp(x)
    gpu_out = mlp.cuda()(x.cuda()).cpu()
    assert torch.allclose(cpu_out, gpu_out, atol=1e-4)


def test_detach_params_blocks_weight_grads_only():
    torch.manual_seed(7)
    model = QofMuMlpModel(OBS, HID, ACT, ensemble_size=2)
    obs = torch.randn(6, *OBS, requires_grad=True)
    act = torch.rand(6, ACT, requires_grad=True)
    model(obs, None, None, act, detach_params=True).sum().backward()
    for p in model.parameters():
        assert p.grad is None or torch.count_nonzero(p.grad) == 0
    assert act.grad is not None and act.grad.abs().sum() > 0
    assert obs.grad is not None and obs.grad.abs().sum() > 0
    # Without detaching, the weights get gradient.
    model(obs, None, None, act).sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())


def test_detach_params_with_member_gradient_matches_reference():
    torch.manual_seed(8)
    model = QofMuMlpModel(OBS, HID, ACT, ensemble_size=2)
    obs = torch.randn(6, *OBS)
    act = torch.rand(6, ACT, requires_grad=True)
    model(obs, None, None, act, detach_params=True, member=1).sum().backward()
    ref = _linear_stack(model.mlp.member_state_dict(1), len(HID) + 1)
    act_ref = act.detach().clone().requires_grad_(True)
    ref(torch.cat([obs, act_ref], -1)).sum().backward()
    assert torch.allclose(act.grad, act_ref.grad, atol=1e-5)


def test_bad_arguments_raise_value_error():
    with pytest.raises(ValueError):
        MuMlpModel(OBS, HID, 0)
    with pytest.raises(ValueError):
        MuMlpModel(OBS, HID, ACT, output_max=0)
    with pytest.raises(ValueError):
        PiMlpModel(OBS, HID, -1)
    with pytest.raises(ValueError):
        QofMuMlpModel(OBS, HID, ACT, ensemble_size=0)
    with pytest.raises(ValueError):
        EnsembleMlp(4, [0], 1)
    mlp = EnsembleMlp(4, [8], 1, ensemble_size=2)
    with pytest.raises(ValueError):
        mlp(torch.randn(3, 4), member=2)
    with pytest.raises(ValueError):
        mlp(torch.randn(3, 5, 4))  # 3-D input with the wrong member count
