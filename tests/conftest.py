"""Suite-wide settings: one torch thread (small models; avoids oversubscribing CI's cores), and
the scheduling that lets ``python -m pytest -n 2`` run the in-process modules beside the
process tests (see tests/_parallel.py)."""
import pytest
import torch

from tests import _parallel

torch.set_num_threads(1)


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist's: the suite runs without it too
def pytest_xdist_make_scheduler(config, log):
    return _parallel.make_scheduler(config, log)


@pytest.fixture(autouse=True)
def _in_process_guard(request, monkeypatch):
    path = _parallel.module_path(request.node)
    if path in _parallel.IN_PROCESS_MODULES:
        _parallel.forbid_processes(monkeypatch, path)
    elif path in _parallel.SERIAL_RUN_MODULES:
        _parallel.forbid_processes(monkeypatch, path, serial_runs=True)
    yield
