"""Suite-wide settings: one torch thread (small models; avoids oversubscribing CI's cores), the
first-run work of libraries done before any test, and the scheduling that lets
``python -m pytest -n 2`` run the modules side by side (see tests/_parallel.py)."""
import importlib.util

import pytest
import torch

from tests import _parallel

torch.set_num_threads(1)


def pytest_sessionstart(session):
    """Work that a library does once per machine, and that may start a subprocess, done here
    (in every worker, before its first test and outside the in-process guard), so that a
    machine that never ran the suite passes it as one that did: matplotlib builds its font
    cache (running ``fc-list``) at its first import (``cma`` imports it too)."""
    if importlib.util.find_spec("matplotlib") is not None:
        import matplotlib.font_manager  # noqa: F401  (builds or reads the font cache)


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist's: the suite runs without it too
def pytest_xdist_make_scheduler(config, log):
    return _parallel.make_scheduler(config, log)


@pytest.fixture(autouse=True, scope="module")
def _process_turn(request):
    """A process module runs while no exclusive one runs on the other worker, and an
    exclusive one while no other process module runs (tests/_parallel.py)."""
    with _parallel.process_turn(request.config, request.node.nodeid.split("::", 1)[0]):
        yield


@pytest.fixture(autouse=True)
def _in_process_guard(request, monkeypatch):
    path = _parallel.module_path(request.node)
    if path in _parallel.IN_PROCESS_MODULES:
        _parallel.forbid_processes(monkeypatch, path)
    elif path in _parallel.SERIAL_RUN_MODULES:
        _parallel.forbid_processes(monkeypatch, path, serial_runs=True)
    yield
