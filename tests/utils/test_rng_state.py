"""get_rng_state / set_rng_state: after a restore, Python's random, numpy's global RNG and
torch draw exactly what they drew right after the capture (the reference is those first
draws), also after a weights_only round trip through a snapshot."""
import random

import numpy as np
import pytest
import torch

from rlfast.utils.logging import load_snapshot, logger
from rlfast.utils.logging.snapshot import _numpy_safe_globals
from rlfast.utils.seed import get_rng_state, set_rng_state, set_seed


@pytest.fixture(autouse=True)
def clean_logger_and_generators():
    """The tests reseed the global generators: put them back as they were afterwards."""
    saved = random.getstate(), np.random.get_state(), torch.get_rng_state()
    logger.reset()
    yield
    logger.reset()
    random.setstate(saved[0])
    np.random.set_state(saved[1])
    torch.set_rng_state(saved[2])


def _draws():
    """Numbers from every generator, including numpy's cached Gaussian and Python's
    gauss() pair cache (both part of the state)."""
    return dict(python=[random.random() for _ in range(5)] + [random.gauss(0, 1)],
                randbits=random.getrandbits(64),
                numpy=np.random.rand(5).tolist() + [float(np.random.randn())],
                numpy_int=np.random.randint(0, 2**31, size=4).tolist(),
                torch=torch.rand(5).tolist() + torch.randn(3).tolist(),
                torch_int=torch.randint(0, 1000, (4,)).tolist())


def _scramble():
    set_seed(999)
    _draws()


def _capture_mid_stream():
    set_seed(1234)
    _draws()
    # Leave caches half used: Python's gauss() keeps its second value, numpy's randn too.
    random.gauss(0, 1)
    np.random.randn()
    return get_rng_state()


def test_restore_replays_the_same_numbers():
    state = _capture_mid_stream()
    expected = _draws()
    _scramble()
    assert _draws() != expected  # the generators really moved elsewhere
    set_rng_state(state)
    assert _draws() == expected
    # Restoring twice gives the same numbers again (the state was not consumed).
    set_rng_state(state)
    assert _draws() == expected


def test_state_is_not_aliased_by_later_draws():
    state = _capture_mid_stream()
    torch_state = state["torch"].clone()
    numpy_keys = np.array(state["numpy"][1], copy=True)
    _draws()
    assert torch.equal(state["torch"], torch_state)
    np.testing.assert_array_equal(state["numpy"][1], numpy_keys)


def test_state_survives_weights_only_torch_save(tmp_path):
    state = _capture_mid_stream()
    expected = _draws()
    torch.save(dict(rng_state=state), tmp_path / "rng.pt")
    with torch.serialization.safe_globals(_numpy_safe_globals()):
        loaded = torch.load(tmp_path / "rng.pt", weights_only=True)["rng_state"]
    _scramble()
    set_rng_state(loaded)
    assert _draws() == expected


def test_state_survives_logger_snapshot(tmp_path):
    state = _capture_mid_stream()
    expected = _draws()
    logger.set_snapshot_dir(tmp_path)
    logger.set_snapshot_mode("last")
    path = logger.save_itr_params(0, dict(rng_state=state))
    _scramble()
    set_rng_state(load_snapshot(path)["rng_state"])
    assert _draws() == expected


def test_state_contents():
    state = get_rng_state()
    assert {"python", "numpy", "torch"} <= set(state)
    version, internal, gauss = state["python"]
    assert type(internal) is list and len(internal) == 625  # a list: weights_only can hold it
    assert (version, tuple(internal), gauss) == random.getstate()
    assert state["numpy"][0] == "MT19937"
    assert isinstance(state["torch"], torch.Tensor) and state["torch"].dtype == torch.uint8


@pytest.mark.parametrize("missing", ["python", "numpy", "torch"])
def test_state_missing_a_key_is_refused_before_restoring_anything(missing):
    state = _capture_mid_stream()
    expected = _draws()
    broken = {k: v for k, v in state.items() if k != missing}
    _scramble()
    now = get_rng_state()
    with pytest.raises(ValueError, match=missing):
        set_rng_state(broken)
    # Nothing was restored: the generators go on from where they were.
    after_refusal = _draws()
    set_rng_state(now)
    assert after_refusal == _draws()
    assert after_refusal != expected
