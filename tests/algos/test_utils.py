"""Tests for rlfast.algos.utils against independent per-element loop references."""

import numpy as np
import pytest
import torch

from rlfast.algos.utils import (
    discount_return,
    discount_return_n_step,
    discount_return_tl,
    generalized_advantage_estimation,
    generalized_advantage_estimation_tl,
    valid_from_done,
)

SEEDS = (0, 1, 2)
BACKENDS = ("numpy", "torch")
SHAPES = [(1, None), (5, None), (17, None), (1, 1), (5, 1), (5, 3), (17, 1), (17, 3)]
DONE_KINDS = ("bool", "float")


# ----------------------------------------------------------------------------------------
# Independent references: plain Python loops over every (t, b) element, on lists of lists.
# ----------------------------------------------------------------------------------------

def ref_discount_return(r, d, boot, gamma):
    T, B = len(r), len(r[0])
    out = [[0.0] * B for _ in range(T)]
    for b in range(B):
        running = boot[b]
        for t in range(T - 1, -1, -1):
            running = r[t][b] + gamma * running * (1.0 - d[t][b])
            out[t][b] = running
    return out


def ref_gae(r, v, d, boot, gamma, lam, to=None):
    T, B = len(r), len(r[0])
    adv = [[0.0] * B for _ in range(T)]
    ret = [[0.0] * B for _ in range(T)]
    for b in range(B):
        next_v, next_a = boot[b], 0.0
        for t in range(T - 1, -1, -1):
            if to is not None and to[t][b]:
                a = 0.0
            else:
                nd = 1.0 - d[t][b]
                delta = r[t][b] + gamma * next_v * nd - v[t][b]
                a = delta + gamma * lam * nd * next_a
            adv[t][b] = a
            ret[t][b] = a + v[t][b]
            next_v, next_a = v[t][b], a
    return adv, ret


def ref_n_step(r, d, n, gamma, truncated):
    T, B = len(r), len(r[0])
    T_out = T if truncated else T - n + 1
    ret = [[0.0] * B for _ in range(T_out)]
    done_n = [[0.0] * B for _ in range(T_out)]
    for t in range(T_out):
        for b in range(B):
            total, ended = 0.0, 0.0
            for k in range(n):
                if t + k >= T:
                    break
                total += gamma ** k * r[t + k][b]
                if d[t + k][b]:
                    ended = 1.0
                    break
            ret[t][b], done_n[t][b] = total, ended
    return ret, done_n


def ref_valid(d):
    T, B = len(d), len(d[0])
    out = [[1.0] * B for _ in range(T)]
    for b in range(B):
        seen = False
        for t in range(T):
            out[t][b] = 0.0 if seen else 1.0
            if d[t][b]:
                seen = True
    return out


def ref_discount_return_tl(r, d, boot, gamma, to, v):
    T, B = len(r), len(r[0])
    out = [[0.0] * B for _ in range(T)]
    for b in range(B):
        running = boot[b]
        for t in range(T - 1, -1, -1):
            if to[t][b]:
                running = v[t][b]
            else:
                running = r[t][b] + gamma * running * (1.0 - d[t][b])
            out[t][b] = running
    return out


# ----------------------------------------------------------------------------------------
# Data helpers.
# ----------------------------------------------------------------------------------------

def make_data(seed, T, B, done_kind):
    """Random float64 data as numpy arrays [T] or [T, B], with timeouts implying done."""
    rng = np.random.default_rng(seed)
    shape = (T,) if B is None else (T, B)
    reward = rng.normal(size=shape)
    value = rng.normal(size=shape)
    done = rng.random(shape) < 0.3
    timeout = done & (rng.random(shape) < 0.5)
    boot = rng.normal(size=shape[1:])
    gamma = float(rng.uniform(0.8, 1.0))
    lam = float(rng.uniform(0.8, 1.0))
    if done_kind == "float":
        done, timeout = done.astype(np.float64), timeout.astype(np.float64)
    return dict(reward=reward, value=value, done=done, timeout=timeout, boot=boot,
                gamma=gamma, lam=lam)


def to_backend(x, backend):
    return torch.from_numpy(np.array(x)) if backend == "torch" else np.array(x)


def as_lists(x):
    """[T] or [T, B] array -> list of lists [T][B] of Python floats."""
    a = np.asarray(x, dtype=np.float64)
    if a.ndim == 1:
        a = a[:, None]
    return a.tolist()


def boot_list(boot, B):
    return [float(boot)] if B is None else [float(x) for x in boot]


def check_close(out, expected_lists, backend, B):
    assert isinstance(out, torch.Tensor if backend == "torch" else np.ndarray)
    got = out.numpy() if isinstance(out, torch.Tensor) else out
    expected = np.array(expected_lists, dtype=np.float64)
    if B is None:
        expected = expected[:, 0]
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-10)


def to_numpy(x):
    return x.numpy() if isinstance(x, torch.Tensor) else np.asarray(x)


def snapshot(*arrays):
    return [to_numpy(a).copy() for a in arrays]


def assert_unchanged(arrays, snaps):
    for a, s in zip(arrays, snaps):
        np.testing.assert_array_equal(to_numpy(a), s)


def zeros_like_backend(shape, backend, dtype=np.float64):
    return to_backend(np.zeros(shape, dtype=dtype), backend)


# ----------------------------------------------------------------------------------------
# Random comparisons against the references.
# ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("T,B", SHAPES)
@pytest.mark.parametrize("done_kind", DONE_KINDS)
@pytest.mark.parametrize("use_dest", [False, True])
def test_discount_return_matches_reference(backend, T, B, done_kind, use_dest):
    for seed in SEEDS:
        data = make_data(seed, T, B, done_kind)
        r, d = to_backend(data["reward"], backend), to_backend(data["done"], backend)
        boot = to_backend(data["boot"], backend)
        snaps = snapshot(r, d, boot)
        dest = zeros_like_backend(r.shape, backend) if use_dest else None
        out = discount_return(r, d, boot, data["gamma"], return_dest=dest)
        if use_dest:
            assert out is dest
        expected = ref_discount_return(as_lists(data["reward"]), as_lists(data["done"]),
                                       boot_list(data["boot"], B), data["gamma"])
        check_close(out, expected, backend, B)
        assert_unchanged((r, d, boot), snaps)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("T,B", SHAPES)
@pytest.mark.parametrize("done_kind", DONE_KINDS)
@pytest.mark.parametrize("use_dest", [False, True])
def test_gae_matches_reference(backend, T, B, done_kind, use_dest):
    for seed in SEEDS:
        data = make_data(seed, T, B, done_kind)
        r, v = to_backend(data["reward"], backend), to_backend(data["value"], backend)
        d, boot = to_backend(data["done"], backend), to_backend(data["boot"], backend)
        snaps = snapshot(r, v, d, boot)
        adv_dest = zeros_like_backend(r.shape, backend) if use_dest else None
        ret_dest = zeros_like_backend(r.shape, backend) if use_dest else None
        adv, ret = generalized_advantage_estimation(
            r, v, d, boot, data["gamma"], data["lam"], advantage_dest=adv_dest,
            return_dest=ret_dest)
        if use_dest:
            assert adv is adv_dest and ret is ret_dest
        exp_adv, exp_ret = ref_gae(as_lists(data["reward"]), as_lists(data["value"]),
                                   as_lists(data["done"]), boot_list(data["boot"], B),
                                   data["gamma"], data["lam"])
        check_close(adv, exp_adv, backend, B)
        check_close(ret, exp_ret, backend, B)
        assert_unchanged((r, v, d, boot), snaps)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("T,B", SHAPES)
@pytest.mark.parametrize("done_kind", DONE_KINDS)
@pytest.mark.parametrize("n_step", [1, 2, 3, 5])
@pytest.mark.parametrize("truncated", [False, True])
def test_n_step_matches_reference(backend, T, B, done_kind, n_step, truncated):
    if not truncated and n_step > T:
        data = make_data(0, T, B, done_kind)
        r, d = to_backend(data["reward"], backend), to_backend(data["done"], backend)
        with pytest.raises(ValueError, match="n_step"):
            discount_return_n_step(r, d, n_step, data["gamma"])
        return
    for seed in SEEDS:
        data = make_data(seed, T, B, done_kind)
        r, d = to_backend(data["reward"], backend), to_backend(data["done"], backend)
        snaps = snapshot(r, d)
        ret, done_n = discount_return_n_step(r, d, n_step, data["gamma"],
                                             do_truncated=truncated)
        exp_ret, exp_done = ref_n_step(as_lists(data["reward"]), as_lists(data["done"]),
                                       n_step, data["gamma"], truncated)
        check_close(ret, exp_ret, backend, B)
        check_close(done_n, exp_done, backend, B)
        assert done_n.dtype == d.dtype
        assert_unchanged((r, d), snaps)

        # Dest buffers are written in place and returned.
        ret_dest = zeros_like_backend(ret.shape, backend)
        done_dest = to_backend(np.zeros_like(to_numpy(done_n)), backend)
        ret2, done2 = discount_return_n_step(r, d, n_step, data["gamma"], return_dest=ret_dest,
                                             done_n_dest=done_dest, do_truncated=truncated)
        assert ret2 is ret_dest and done2 is done_dest
        check_close(ret_dest, exp_ret, backend, B)
        check_close(done_dest, exp_done, backend, B)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("T,B", SHAPES)
@pytest.mark.parametrize("done_kind", DONE_KINDS)
def test_valid_from_done_matches_reference(backend, T, B, done_kind):
    for seed in SEEDS:
        data = make_data(seed, T, B, done_kind)
        d = to_backend(data["done"], backend)
        snaps = snapshot(d)
        valid = valid_from_done(d)
        check_close(valid, ref_valid(as_lists(data["done"])), backend, B)
        assert valid.is_floating_point() if backend == "torch" else valid.dtype.kind == "f"
        assert_unchanged((d,), snaps)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("T,B", SHAPES)
@pytest.mark.parametrize("done_kind", DONE_KINDS)
@pytest.mark.parametrize("use_dest", [False, True])
def test_discount_return_tl_matches_reference(backend, T, B, done_kind, use_dest):
    for seed in SEEDS:
        data = make_data(seed, T, B, done_kind)
        r, v = to_backend(data["reward"], backend), to_backend(data["value"], backend)
        d, to = to_backend(data["done"], backend), to_backend(data["timeout"], backend)
        boot = to_backend(data["boot"], backend)
        snaps = snapshot(r, v, d, to, boot)
        dest = zeros_like_backend(r.shape, backend) if use_dest else None
        out = discount_return_tl(r, d, boot, data["gamma"], to, v, return_dest=dest)
        if use_dest:
            assert out is dest
        expected = ref_discount_return_tl(
            as_lists(data["reward"]), as_lists(data["done"]), boot_list(data["boot"], B),
            data["gamma"], as_lists(data["timeout"]), as_lists(data["value"]))
        check_close(out, expected, backend, B)
        assert_unchanged((r, v, d, to, boot), snaps)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("T,B", SHAPES)
@pytest.mark.parametrize("done_kind", DONE_KINDS)
@pytest.mark.parametrize("use_dest", [False, True])
def test_gae_tl_matches_reference(backend, T, B, done_kind, use_dest):
    for seed in SEEDS:
        data = make_data(seed, T, B, done_kind)
        r, v = to_backend(data["reward"], backend), to_backend(data["value"], backend)
        d, to = to_backend(data["done"], backend), to_backend(data["timeout"], backend)
        boot = to_backend(data["boot"], backend)
        snaps = snapshot(r, v, d, to, boot)
        adv_dest = zeros_like_backend(r.shape, backend) if use_dest else None
        ret_dest = zeros_like_backend(r.shape, backend) if use_dest else None
        adv, ret = generalized_advantage_estimation_tl(
            r, v, d, boot, data["gamma"], data["lam"], to, advantage_dest=adv_dest,
            return_dest=ret_dest)
        if use_dest:
            assert adv is adv_dest and ret is ret_dest
        exp_adv, exp_ret = ref_gae(as_lists(data["reward"]), as_lists(data["value"]),
                                   as_lists(data["done"]), boot_list(data["boot"], B),
                                   data["gamma"], data["lam"], to=as_lists(data["timeout"]))
        check_close(adv, exp_adv, backend, B)
        check_close(ret, exp_ret, backend, B)
        assert_unchanged((r, v, d, to, boot), snaps)


def test_tl_variants_equal_plain_without_timeouts():
    data = make_data(7, 17, 3, "bool")
    no_timeout = np.zeros_like(data["done"])
    args = (data["reward"], data["done"], data["boot"], data["gamma"])
    np.testing.assert_allclose(
        discount_return_tl(*args, no_timeout, data["value"]), discount_return(*args))
    gae = generalized_advantage_estimation(data["reward"], data["value"], data["done"],
                                           data["boot"], data["gamma"], data["lam"])
    gae_tl = generalized_advantage_estimation_tl(data["reward"], data["value"], data["done"],
                                                 data["boot"], data["gamma"], data["lam"],
                                                 no_timeout)
    for a, b in zip(gae, gae_tl):
        np.testing.assert_allclose(a, b)


# ----------------------------------------------------------------------------------------
# Hand-worked examples with exact numbers.
# ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
def test_discount_return_hand_example(backend):
    r = to_backend([1.0, 1.0, 1.0], backend)
    d = to_backend([False, True, False], backend)
    out = discount_return(r, d, 4.0, 0.5)
    # t=2: 1 + 0.5*4 = 3; t=1 ends the episode: 1; t=0: 1 + 0.5*1 = 1.5.
    np.testing.assert_allclose(to_numpy(out), [1.5, 1.0, 3.0])


@pytest.mark.parametrize("backend", BACKENDS)
def test_gae_hand_example(backend):
    r = to_backend([1.0, 1.0], backend)
    v = to_backend([0.5, 0.5], backend)
    d = to_backend([0.0, 0.0], backend)
    adv, ret = generalized_advantage_estimation(r, v, d, 1.0, 0.5, 0.5)
    # delta1 = 1 + 0.5*1 - 0.5 = 1; delta0 = 1 + 0.5*0.5 - 0.5 = 0.75; adv0 = 0.75 + 0.25*1.
    np.testing.assert_allclose(to_numpy(adv), [1.0, 1.0])
    np.testing.assert_allclose(to_numpy(ret), [1.5, 1.5])
    d = to_backend([1.0, 0.0], backend)
    adv, ret = generalized_advantage_estimation(r, v, d, 1.0, 0.5, 0.5)
    np.testing.assert_allclose(to_numpy(adv), [0.5, 1.0])
    np.testing.assert_allclose(to_numpy(ret), [1.0, 1.5])


@pytest.mark.parametrize("backend", BACKENDS)
def test_n_step_hand_example(backend):
    r = to_backend([1.0, 2.0, 3.0, 4.0], backend)
    d = to_backend([False, False, False, False], backend)
    ret, done_n = discount_return_n_step(r, d, 2, 0.5)
    np.testing.assert_allclose(to_numpy(ret), [2.0, 3.5, 5.0])
    np.testing.assert_array_equal(to_numpy(done_n), [False, False, False])
    d = to_backend([False, True, False, False], backend)
    ret, done_n = discount_return_n_step(r, d, 2, 0.5, do_truncated=True)
    np.testing.assert_allclose(to_numpy(ret), [2.0, 2.0, 5.0, 4.0])
    np.testing.assert_array_equal(to_numpy(done_n), [True, True, False, False])


@pytest.mark.parametrize("backend", BACKENDS)
def test_valid_from_done_hand_example(backend):
    d = to_backend([[0, 0], [0, 1], [1, 0], [0, 0], [1, 1]], backend)
    valid = valid_from_done(d)
    np.testing.assert_array_equal(to_numpy(valid),
                                  [[1, 1], [1, 1], [1, 0], [0, 0], [0, 0]])


@pytest.mark.parametrize("backend", BACKENDS)
def test_tl_hand_examples(backend):
    r = to_backend([1.0, 1.0, 1.0], backend)
    d = to_backend([False, True, False], backend)
    to = to_backend([False, True, False], backend)
    v = to_backend([10.0, 20.0, 30.0], backend)
    # t=2: 1 + 0.5*4 = 3; t=1 is a timeout: value 20; t=0: 1 + 0.5*20 = 11.
    np.testing.assert_allclose(to_numpy(discount_return_tl(r, d, 4.0, 0.5, to, v)),
                               [11.0, 20.0, 3.0])
    v = to_backend([2.0, 4.0, 6.0], backend)
    adv, ret = generalized_advantage_estimation_tl(r, v, d, 8.0, 0.5, 0.5, to)
    # t=2: delta = 1 + 0.5*8 - 6 = -1; t=1 timeout: 0; t=0: delta = 1 + 0.5*4 - 2 = 1.
    np.testing.assert_allclose(to_numpy(adv), [1.0, 0.0, -1.0])
    np.testing.assert_allclose(to_numpy(ret), [3.0, 4.0, 5.0])


# ----------------------------------------------------------------------------------------
# Dtypes, extra trailing dims and input checks.
# ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
def test_float32_reward_keeps_dtype(backend):
    data = make_data(3, 5, 3, "bool")
    r = to_backend(data["reward"].astype(np.float32), backend)
    v = to_backend(data["value"].astype(np.float32), backend)
    d = to_backend(data["done"], backend)
    boot = to_backend(data["boot"].astype(np.float32), backend)
    outs = [discount_return(r, d, boot, 0.9),
            *generalized_advantage_estimation(r, v, d, boot, 0.9, 0.95),
            discount_return_n_step(r, d, 2, 0.9)[0]]
    for out in outs:
        assert out.dtype == r.dtype


def test_extra_trailing_dims_match_flattened():
    rng = np.random.default_rng(11)
    r, v = rng.normal(size=(6, 2, 3)), rng.normal(size=(6, 2, 3))
    d = rng.random((6, 2, 3)) < 0.3
    boot = rng.normal(size=(2, 3))

    def flat(x):
        return x.reshape(x.shape[0], -1) if x.ndim == 3 else x.reshape(-1)

    np.testing.assert_allclose(
        discount_return(r, d, boot, 0.9).reshape(6, 6),
        discount_return(flat(r), flat(d), flat(boot), 0.9))
    adv, _ = generalized_advantage_estimation(r, v, d, boot, 0.9, 0.9)
    adv_flat, _ = generalized_advantage_estimation(flat(r), flat(v), flat(d), flat(boot),
                                                   0.9, 0.9)
    np.testing.assert_allclose(adv.reshape(6, 6), adv_flat)


def test_input_checks():
    r = np.zeros((4, 2))
    d = np.zeros((4, 2), dtype=bool)
    with pytest.raises(ValueError, match="done"):
        discount_return(r, np.zeros((4, 3)), 0.0, 0.9)
    with pytest.raises(ValueError, match="discount"):
        discount_return(r, d, 0.0, 1.5)
    with pytest.raises(ValueError, match="gae_lambda"):
        generalized_advantage_estimation(r, r, d, 0.0, 0.9, -0.1)
    with pytest.raises(ValueError, match="bootstrap_value"):
        discount_return(r, d, np.zeros(3), 0.9)
    with pytest.raises(ValueError, match="return_dest"):
        discount_return(r, d, 0.0, 0.9, return_dest=np.zeros((4, 3)))
    with pytest.raises(TypeError, match="done"):
        discount_return(r, torch.zeros(4, 2), 0.0, 0.9)
    with pytest.raises(ValueError, match="n_step"):
        discount_return_n_step(r, d, 0, 0.9)
    with pytest.raises(ValueError, match="n_step"):
        discount_return_n_step(r, d, 5, 0.9)
    with pytest.raises(ValueError, match="timeout"):
        discount_return_tl(r, d, 0.0, 0.9, np.zeros(4), r)
