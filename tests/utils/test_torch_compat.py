"""rlfast.utils.torch_compat: the torch APIs that changed between setup.py's floor and today,
chosen by what the installed torch offers. The DDP wrapping runs on a real two-rank gloo group,
with today's constructor and with one that lacks ``forward_sync_buffers`` (torch 2.4-2.12)."""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest
import torch

from rlfast.utils import torch_compat
from rlfast.utils.logging.snapshot import SNAPSHOT_DIGEST_KEY, load_snapshot, snapshot_digest
from tests.utils.test_distributed import _run_ranks

_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
import _legacy_ddp  # noqa: E402


def test_legacy_constructor_has_no_forward_sync_buffers():
    _legacy_ddp.install()
    try:
        keywords = torch_compat.ddp_keywords()
        assert "broadcast_buffers" in keywords and "forward_sync_buffers" not in keywords
        with pytest.raises(TypeError, match="forward_sync_buffers"):
            torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(1, 1),
                                                      forward_sync_buffers=False)
    finally:
        _legacy_ddp.uninstall()
    assert torch_compat.ddp_keywords() == torch_compat._keywords_of(_legacy_ddp._REAL)


@pytest.mark.parametrize("legacy", [False, True], ids=["installed", "without_forward_sync"])
def test_wrap_ddp_syncs_once_and_averages_gradients(legacy):
    results = _run_ranks("wrap_ddp", {"legacy": legacy})
    r0, r1 = results[0], results[1]
    if legacy:
        assert r0["type"] == r1["type"] == "LegacyDistributedDataParallel"
    # Rank 0's parameters and buffer everywhere after wrapping ...
    for p0, p1 in zip(r0["params"], r1["params"]):
        np.testing.assert_array_equal(p0, p1)
    np.testing.assert_array_equal(r0["stat_after_wrap"], [1.0, 1.0])
    np.testing.assert_array_equal(r1["stat_after_wrap"], [1.0, 1.0])
    # ... but no broadcast at each forward: rank 1's own change of its buffer stays.
    np.testing.assert_array_equal(r0["stat_after_forward"], [1.0, 1.0])
    np.testing.assert_array_equal(r1["stat_after_forward"], [11.0, 11.0])
    # d(sum(W x + b))/dW = the batch's sum of x: 4 * 1 on rank 0, 4 * 2 on rank 1; mean 6.
    np.testing.assert_array_equal(r0["weight_grad"], np.full((2, 3), 6.0, np.float32))
    np.testing.assert_array_equal(r1["weight_grad"], r0["weight_grad"])


def test_wrap_ddp_without_either_keyword_names_the_problem(monkeypatch):
    class NoBufferKeyword(torch.nn.parallel.DistributedDataParallel):
        def __init__(self, module, device_ids=None):  # noqa: D401 - a constructor of no use
            raise AssertionError("never constructed")

    monkeypatch.setattr(torch.nn.parallel, "DistributedDataParallel", NoBufferKeyword)
    with pytest.raises(TypeError, match="neither forward_sync_buffers nor broadcast_buffers"):
        torch_compat.wrap_ddp(torch.nn.Linear(1, 1), torch.device("cpu"))


@pytest.fixture
def restore_safe_globals():
    serialization = torch.serialization
    before = list(serialization.get_safe_globals())
    yield
    serialization.clear_safe_globals()
    serialization.add_safe_globals(before)


@pytest.mark.parametrize("scoped", [True, False], ids=["safe_globals", "add_safe_globals"])
def test_snapshot_with_numpy_loads_with_either_allow_list(tmp_path, monkeypatch,
                                                          restore_safe_globals, scoped):
    if not scoped:  # torch 2.4: no safe_globals context manager
        monkeypatch.delattr(torch.serialization, "safe_globals", raising=False)
    path = str(tmp_path / "snap.pkl")
    saved = {"itr": 3, "obs_mean": np.arange(4, dtype=np.float32), "count": np.int64(7),
             "weight": torch.ones(2)}
    torch.save(dict(saved, **{SNAPSHOT_DIGEST_KEY: snapshot_digest(saved)}), path)
    loaded = load_snapshot(path)
    np.testing.assert_array_equal(loaded["obs_mean"], saved["obs_mean"])
    assert loaded["count"] == 7 and loaded["itr"] == 3
    assert torch.equal(loaded["weight"], saved["weight"])


@pytest.mark.parametrize("legacy", [False, True], ids=["installed", "without_forward_sync"])
def test_wrap_ddp_on_a_cuda_device_places_the_module_there(monkeypatch, legacy):
    """The CUDA branch's arguments, checked on the CPU with a constructor that records them."""
    calls, broadcasts = [], []

    class Recording(torch.nn.parallel.DistributedDataParallel):
        if legacy:
            def __init__(self, module, device_ids=None, output_device=None,
                         broadcast_buffers=True):
                calls.append(dict(device_ids=device_ids, output_device=output_device,
                                  broadcast_buffers=broadcast_buffers))
        else:
            def __init__(self, module, device_ids=None, output_device=None,
                         broadcast_buffers=None, forward_sync_buffers=None):
                calls.append(dict(device_ids=device_ids, output_device=output_device,
                                  broadcast_buffers=broadcast_buffers,
                                  forward_sync_buffers=forward_sync_buffers))

    monkeypatch.setattr(torch.nn.parallel, "DistributedDataParallel", Recording)
    monkeypatch.setattr(torch_compat, "_broadcast_buffers_once", broadcasts.append)
    module = torch.nn.Linear(2, 2)
    wrapped = torch_compat.wrap_ddp(module, torch.device("cuda", 1))
    assert isinstance(wrapped, Recording)
    if legacy:
        assert calls == [dict(device_ids=[1], output_device=1, broadcast_buffers=False)]
        assert broadcasts == [module]
    else:
        assert calls == [dict(device_ids=[1], output_device=1, broadcast_buffers=None,
                              forward_sync_buffers=False)]
        assert broadcasts == []
