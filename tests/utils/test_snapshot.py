"""Snapshot integrity: the digest save_itr_params stores, and load_snapshot's checks."""
import warnings

import numpy as np
import pytest
import torch

from rlfast.utils.logging import SnapshotCorruptError, load_snapshot, logger
from rlfast.utils.logging.snapshot import SNAPSHOT_DIGEST_KEY, snapshot_digest

# A weight with a distinctive byte pattern, so a test can find its data in the file.
PATTERN = torch.arange(256, dtype=torch.float32) * 0.5 + 1000.0


@pytest.fixture(autouse=True)
def clean_logger():
    logger.reset()
    yield
    logger.reset()


def _snapshot():
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.ones(3)).sum().backward()
    optimizer.step()
    return dict(itr=4, cum_steps=1280, agent_state_dict=dict(model.state_dict(), pattern=PATTERN),
                optimizer_state_dict=optimizer.state_dict(), obs_mean=np.arange(3.0),
                count=np.int64(7), half=torch.ones(2, dtype=torch.bfloat16))


def _save(tmp_path, params):
    logger.set_snapshot_dir(tmp_path)
    logger.set_snapshot_mode("last")
    return logger.save_itr_params(params["itr"], params)


def _assert_equal(a, b):
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    elif isinstance(a, np.ndarray):
        np.testing.assert_array_equal(a, b)
    elif isinstance(a, dict):
        assert list(a) == list(b)
        for key in a:
            _assert_equal(a[key], b[key])
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b)
        for x, y in zip(a, b):
            _assert_equal(x, y)
    else:
        assert a == b and type(a) is type(b)


def test_intact_snapshot_loads_equal_without_the_digest_entry(tmp_path):
    params = _snapshot()
    path = _save(tmp_path, params)
    raw = torch.load(path, weights_only=False)  # The test's own file: no safe loading needed.
    assert isinstance(raw[SNAPSHOT_DIGEST_KEY], str)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # A verified snapshot loads without a warning.
        loaded = load_snapshot(path)
    _assert_equal(params, loaded)
    assert SNAPSHOT_DIGEST_KEY not in loaded
    assert logger.load_snapshot is load_snapshot


def test_one_flipped_bit_in_tensor_data_is_an_error(tmp_path):
    path = _save(tmp_path, _snapshot())
    data = bytearray(open(path, "rb").read())
    start = bytes(data).find(PATTERN.numpy().tobytes())
    assert start > 0
    data[start + 301] ^= 0x04  # One mantissa bit of one weight: still a valid float.
    with open(path, "wb") as f:
        f.write(bytes(data))
    damaged = torch.load(path, weights_only=False)["agent_state_dict"]["pattern"]
    assert not torch.equal(damaged, PATTERN)  # torch.load alone returns them silently.
    with pytest.raises(SnapshotCorruptError, match=r"params\.pkl is corrupt: the sha256 of its "
                                                   r"content .* differs from the one stored"):
        load_snapshot(path)


@pytest.mark.parametrize("keep", [0.5, 0.98])
def test_truncated_snapshot_is_an_error(tmp_path, keep):
    path = _save(tmp_path, _snapshot())
    data = open(path, "rb").read()
    with open(path, "wb") as f:
        f.write(data[:int(len(data) * keep)])
    with pytest.raises(SnapshotCorruptError, match=r"params\.pkl is not a valid rlfast snapshot: "
                                                   r"it is truncated, corrupt"):
        load_snapshot(path)


def test_garbage_and_non_dict_files_are_errors(tmp_path):
    garbage = tmp_path / "garbage.pkl"
    garbage.write_bytes(b"not a snapshot at all")
    with pytest.raises(SnapshotCorruptError, match="garbage.pkl is not a valid rlfast snapshot"):
        load_snapshot(garbage)
    listed = tmp_path / "list.pkl"
    torch.save([torch.ones(2)], listed)
    with pytest.raises(SnapshotCorruptError, match="list.pkl holds a list"):
        load_snapshot(listed)
    with pytest.raises(FileNotFoundError, match="missing.pkl"):
        load_snapshot(tmp_path / "missing.pkl")


def test_snapshot_that_runs_code_on_load_is_refused(tmp_path):
    """weights_only loading: a pickle that would call a function is not executed."""

    class Exploit:
        def __reduce__(self):
            return (print, ("ran code while loading",))

    path = tmp_path / "evil.pkl"
    torch.save({"w": torch.ones(1), "x": Exploit()}, path)
    with pytest.raises(SnapshotCorruptError, match=r"evil\.pkl .*Unsupported global"):
        load_snapshot(path)


def test_snapshot_without_digest_loads_with_a_warning(tmp_path):
    path = tmp_path / "old.pkl"
    torch.save({"itr": 1, "w": torch.ones(2)}, path)
    with pytest.warns(UserWarning, match=r"old\.pkl has no 'snapshot_sha256' entry"):
        loaded = load_snapshot(path)
    assert loaded["itr"] == 1 and torch.equal(loaded["w"], torch.ones(2))


def test_digest_covers_names_dtypes_shapes_values_and_not_order():
    base = dict(a=torch.zeros(2, 3), b=[1, 2.5], c="x")
    digest = snapshot_digest(base)
    assert digest == snapshot_digest(dict(c="x", b=[1, 2.5], a=torch.zeros(2, 3)))
    assert digest == snapshot_digest(dict(base, **{SNAPSHOT_DIGEST_KEY: "ignored"}))
    changed = [dict(base, a=torch.zeros(3, 2)),
               dict(base, a=torch.zeros(2, 3, dtype=torch.float64)),
               dict(base, a=torch.zeros(2, 3).index_fill(1, torch.tensor([2]), 1e-30)),
               dict(base, b=[1, 2.4]), dict(base, b=(1, 2.5)), dict(base, c="y"),
               {"A": base["a"], "b": base["b"], "c": base["c"]}]
    assert len({digest, *(snapshot_digest(c) for c in changed)}) == len(changed) + 1
    # Views, non-contiguous and conjugated tensors hash by value.
    t = torch.arange(6.0).reshape(2, 3)
    assert snapshot_digest({"t": t.t()}) == snapshot_digest({"t": t.t().contiguous()})
    z = torch.tensor([1 + 2j])
    assert snapshot_digest({"z": z.conj()}) == snapshot_digest({"z": torch.tensor([1 - 2j])})
