"""Memory cores: the sequence forward against step-by-step references, fixed state shapes,
the attention window, resets, and the recurrent models built on them."""
import math

import pytest
import torch

from rlfast.models.memory import (CORES, AttentionCore, GruCore, LnLstmCore, LstmCore, check_core,
                                  make_core)
from rlfast.models.pg import CategoricalPgLstmModel, MujocoLstmModel
from rlfast.models.dqn import R2d1MlpModel

T, B, IN, H, K = 11, 4, 5, 8, 3


def _core(kind, seed=0):
    torch.manual_seed(seed)
    return make_core(kind, IN, H, memory_len=K)


def _random_state(core, batch=B, seed=1):
    """A nonzero start state; the attention window gets some filled and some empty slots."""
    g = torch.Generator().manual_seed(seed)
    zero = core.zero_state(batch)
    leaves = []
    for name, leaf in zip(zero._fields, zero):
        if name == "valid":
            leaves.append((torch.rand(leaf.shape, generator=g) > 0.4).float())
        else:
            leaves.append(torch.randn(leaf.shape, generator=g))
    return type(zero)(*leaves)


def _resets():
    reset = torch.zeros(T, B, dtype=torch.bool)
    reset[0, 3] = True   # a column that starts a new episode at once
    reset[4, 0] = True
    reset[5, 1] = True
    reset[9, 1] = True   # two episode ends in one column
    return reset


def _per_step(core, x, state, reset):
    """The reference: one call per step, the state zeroed by hand where an episode starts."""
    outs = []
    for t in range(x.shape[0]):
        keep = (~reset[t]).float()
        state = type(state)(*(leaf * keep.view(1, -1, 1) for leaf in state))
        out, state = core(x[t:t + 1], state)
        outs.append(out[0])
    return torch.stack(outs), state


@pytest.mark.parametrize("kind", list(CORES))
def test_sequence_forward_equals_per_step_forward_with_resets(kind):
    core = _core(kind)
    x = torch.randn(T, B, IN)
    start = _random_state(core)
    out, state = core(x, start, _resets())
    ref_out, ref_state = _per_step(core, x, start, _resets())
    assert torch.allclose(out, ref_out, atol=1e-5), (out - ref_out).abs().max()
    for leaf, ref in zip(state, ref_state):
        assert torch.allclose(leaf, ref, atol=1e-5)


@pytest.mark.parametrize("kind", list(CORES))
def test_state_shapes_stay_fixed(kind):
    core = _core(kind)
    shapes = [tuple(leaf.shape) for leaf in core.zero_state(B)]
    assert all(s[1] == B for s in shapes)  # [N, B, H]: B is dim 1 of every leaf
    state = None
    for t_len in (1, 1, 5, 1, 13):  # per-step calls and sequences longer than the window
        _, state = core(torch.randn(t_len, B, IN), state)
        assert [tuple(leaf.shape) for leaf in state] == shapes
        assert all(leaf.dtype == torch.float32 for leaf in state)


@pytest.mark.parametrize("kind", list(CORES))
def test_none_state_is_the_zero_state_and_zero_column_forgets(kind):
    core = _core(kind)
    x = torch.randn(T, B, IN)
    out_none, _ = core(x, None)
    out_zero, _ = core(x, core.zero_state(B))
    assert torch.allclose(out_none, out_zero, atol=1e-6)
    # a reset at step 0 ignores whatever the start state held
    out_reset, _ = core(x, _random_state(core), torch.ones(T, B, dtype=torch.bool) & (
        torch.arange(T)[:, None] == 0))
    assert torch.allclose(out_reset, out_none, atol=1e-5)


@pytest.mark.parametrize("kind", list(CORES))
def test_steps_before_a_reset_do_not_reach_the_steps_after_it(kind):
    core = _core(kind)
    x = torch.randn(T, B, IN)
    reset = _resets()
    out, _ = core(x, _random_state(core), reset)
    x2 = x.clone()
    x2[:4, 0] += 5.0  # env 0's first episode, which ends before step 4
    out2, _ = core(x2, _random_state(core), reset)
    assert torch.allclose(out[4:, 0], out2[4:, 0], atol=1e-6)
    assert not torch.allclose(out[:4, 0], out2[:4, 0])
    assert torch.allclose(out[:, 2], out2[:, 2], atol=1e-6)  # other columns untouched


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_fused_and_stepped_recurrences_agree(kind):
    """Without resets lstm and gru run torch's fused module; an all-False reset runs the loop."""
    core = _core(kind)
    x, start = torch.randn(T, B, IN), _random_state(core)
    fused, fused_state = core(x, start)
    looped, looped_state = core(x, start, torch.zeros(T, B, dtype=torch.bool))
    assert torch.allclose(fused, looped, atol=1e-5)
    for a, b in zip(fused_state, looped_state):
        assert torch.allclose(a, b, atol=1e-5)


def test_gru_step_matches_the_gru_equations():
    """GruCore's recurrence against the GRU equations written out (Cho et al. 2014)."""
    core = _core("gru")
    g = core.gru
    x, h = torch.randn(1, B, IN), torch.randn(1, B, H)
    out, state = core(x, (h,), torch.zeros(1, B, dtype=torch.bool))
    W_ir, W_iz, W_in = g.weight_ih_l0.chunk(3)
    W_hr, W_hz, W_hn = g.weight_hh_l0.chunk(3)
    b_ir, b_iz, b_in = g.bias_ih_l0.chunk(3)
    b_hr, b_hz, b_hn = g.bias_hh_l0.chunk(3)
    x0, h0 = x[0], h[0]
    r = torch.sigmoid(x0 @ W_ir.T + b_ir + h0 @ W_hr.T + b_hr)
    z = torch.sigmoid(x0 @ W_iz.T + b_iz + h0 @ W_hz.T + b_hz)
    n = torch.tanh(x0 @ W_in.T + b_in + r * (h0 @ W_hn.T + b_hn))
    assert torch.allclose(out[0], (1 - z) * n + z * h0, atol=1e-6)
    assert torch.allclose(state.h[0], out[0])


def test_ln_lstm_step_matches_layer_normalised_lstm_equations():
    core = _core("ln_lstm")
    x, h, c = torch.randn(1, B, IN), torch.randn(1, B, H), torch.randn(1, B, H)
    out, state = core(x, (h, c))

    def ln(v, norm):
        mean, var = v.mean(-1, keepdim=True), v.var(-1, unbiased=False, keepdim=True)
        return (v - mean) / torch.sqrt(var + norm.eps) * norm.weight + norm.bias

    gates = (ln(x[0] @ core.input_proj.weight.T, core.input_norm)
             + ln(h[0] @ core.hidden_proj.weight.T, core.hidden_norm) + core.bias)
    i, f, gg, o = gates.chunk(4, dim=-1)
    c1 = torch.sigmoid(f) * c[0] + torch.sigmoid(i) * torch.tanh(gg)
    h1 = torch.sigmoid(o) * torch.tanh(ln(c1, core.cell_norm))
    assert torch.allclose(out[0], h1, atol=1e-5)
    assert torch.allclose(state.c[0], c1, atol=1e-5)


def _attention_reference(core, xs):
    """Full attention of each step over itself and the ``memory_len`` steps before it, from
    scratch, for one environment (``xs`` [T, IN]): no cache, written with plain loops."""
    D, nh = core.hidden_size, core.n_heads
    dh = D // nh
    e = core.embed(xs)
    q, k, v = core.qkv(core.attn_norm(e)).chunk(3, dim=-1)
    outs = []
    for t in range(len(xs)):
        heads = []
        for hd in range(nh):
            sl = slice(hd * dh, (hd + 1) * dh)
            span = range(max(0, t - core.memory_len), t + 1)
            logits = torch.stack([q[t, sl] @ k[s, sl] / math.sqrt(dh) + core.age_bias[hd, t - s]
                                  for s in span])
            weights = torch.softmax(logits, 0)
            heads.append(sum(w * v[s, sl] for w, s in zip(weights, span)))
        y = e[t] + core.attn_out(torch.cat(heads))
        outs.append(core.out_norm(y + core.mlp(core.mlp_norm(y))))
    return torch.stack(outs)


def test_attention_matches_windowed_attention_from_scratch():
    core = _core("attention")
    with torch.no_grad():
        core.age_bias.normal_()  # a nonzero bias per age, so the ages must line up
    x = torch.randn(T, B, IN)
    out, _ = core(x)                       # one sequence call
    stepped, state = [], None
    for t in range(T):                     # per-step calls through the cache
        o, state = core(x[t:t + 1], state)
        stepped.append(o[0])
    for b in range(B):
        ref = _attention_reference(core, x[:, b])
        assert torch.allclose(out[:, b], ref, atol=1e-5)
        assert torch.allclose(torch.stack(stepped)[:, b], ref, atol=1e-5)


def test_attention_sees_exactly_memory_len_steps_back():
    core = _core("attention")
    x = torch.randn(T, 1, IN)
    out, _ = core(x)
    t = 8
    far, near = x.clone(), x.clone()
    far[t - K - 1] += 3.0   # just outside step t's window
    near[t - K] += 3.0      # the oldest step inside it
    assert torch.allclose(core(far)[0][t], out[t], atol=1e-6)
    assert not torch.allclose(core(near)[0][t], out[t])


def test_core_choice_and_bad_inputs():
    assert isinstance(make_core("lstm", IN, H), LstmCore)
    assert isinstance(make_core("gru", IN, H), GruCore)
    assert isinstance(make_core("ln_lstm", IN, H), LnLstmCore)
    assert make_core("attention", IN, H, memory_len=7).memory_len == 7
    assert isinstance(make_core("attention", IN, H), AttentionCore)
    with pytest.raises(ValueError, match="core must be one of lstm, gru, ln_lstm, attention"):
        check_core("transformer")
    core = _core("gru")
    with pytest.raises(ValueError, match=r"input must be \[T, B, 5\]"):
        core(torch.randn(3, B, IN + 1))
    with pytest.raises(ValueError, match=r"reset must be \[T, B\]"):
        core(torch.randn(3, B, IN), None, torch.zeros(3, B + 1, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"state.h must be \[1, 4, 8\]"):
        core(torch.randn(3, B, IN), (torch.zeros(1, B, H + 1),))
    with pytest.raises(ValueError, match="multiple of n_heads"):
        AttentionCore(IN, 6, n_heads=4)


@pytest.mark.parametrize("kind", list(CORES))
@pytest.mark.parametrize("model_cls", ["categorical", "mujoco", "r2d1"])
def test_models_take_a_core_and_reset(model_cls, kind):
    torch.manual_seed(0)
    obs_dim, A = 3, 2
    if model_cls == "categorical":
        model = CategoricalPgLstmModel((obs_dim,), A, hidden_sizes=[6], lstm_size=8, core=kind,
                                       memory_len=K)
    elif model_cls == "mujoco":
        model = MujocoLstmModel((obs_dim,), A, hidden_sizes=[6], lstm_size=8, core=kind,
                                memory_len=K)
    else:
        model = R2d1MlpModel((obs_dim,), A, hidden_sizes=[6], lstm_size=8, head_size=6, core=kind,
                             memory_len=K)
    assert model.body.core.kind == kind
    obs, prev_a, prev_r = torch.randn(T, B, obs_dim), torch.randn(T, B, A), torch.randn(T, B)
    reset = _resets()
    *outputs, state = model(obs, prev_a, prev_r, None, reset)
    assert outputs[0].shape[:2] == (T, B)
    # the same steps one at a time, the state zeroed by hand at episode starts
    step_state, firsts = None, []
    for t in range(T):
        if step_state is not None:
            keep = (~reset[t]).float().view(1, -1, 1)
            step_state = type(step_state)(*(leaf * keep for leaf in step_state))
        *step_out, step_state = model(obs[t], prev_a[t], prev_r[t], step_state)
        firsts.append(step_out[0])
    assert torch.allclose(outputs[0], torch.stack(firsts), atol=1e-5)
    for a, b in zip(state, step_state):
        assert a.shape == b.shape and torch.allclose(a, b, atol=1e-5)


def test_lstm_weights_from_before_the_memory_cores_load():
    """Snapshots written before the cores hold the LSTM at ``body.lstm``; they still load."""
    model = CategoricalPgLstmModel((3,), 2, hidden_sizes=[6], lstm_size=8)
    state = model.state_dict()
    old = {k.replace("body.core.lstm.", "body.lstm."): v for k, v in state.items()}
    assert any(k.startswith("body.lstm.") for k in old)
    fresh = CategoricalPgLstmModel((3,), 2, hidden_sizes=[6], lstm_size=8)
    fresh.load_state_dict(old)
    for k, v in fresh.state_dict().items():
        assert torch.equal(v, state[k])
