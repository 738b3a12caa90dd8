"""tests/_parallel.py: the guard that keeps IN_PROCESS_MODULES free of processes and shared
memory, and the grouping of the suite's tests for ``pytest -n 2 --dist loadgroup``."""
import multiprocessing
import os
import subprocess
import sys

import pytest
import torch

from tests import _parallel


@pytest.mark.parametrize("start", [
    lambda: subprocess.Popen([sys.executable, "-c", "pass"]),
    lambda: subprocess.run([sys.executable, "-c", "pass"]),
    lambda: multiprocessing.get_context("fork").Process(target=print).start(),
    lambda: multiprocessing.get_context("spawn").Process(target=print).start(),
    lambda: os.fork(),
    lambda: torch.zeros(2).share_memory_(),
    lambda: torch.zeros(2).untyped_storage().share_memory_(),
], ids=["popen", "run", "fork_process", "spawn_process", "os_fork", "tensor", "storage"])
def test_guard_refuses_processes_and_shared_memory(monkeypatch, start):
    _parallel.forbid_processes(monkeypatch, "tests/some/test_module.py")
    with pytest.raises(AssertionError, match=r"tests/some/test_module\.py is listed in "
                                              r"tests/_parallel\.py's IN_PROCESS_MODULES"):
        start()


def test_guard_is_undone_after_the_test():
    # This module is not listed: processes are allowed here.
    assert _parallel.module_path.__module__ == "tests._parallel"
    assert subprocess.run([sys.executable, "-c", "pass"]).returncode == 0


def test_listed_modules_exist_and_tests_get_their_scope(request):
    root = request.config.rootpath
    listed = _parallel.IN_PROCESS_MODULES | _parallel.SERIAL_RUN_MODULES
    missing = [m for m in listed if not (root / m).is_file()]
    assert missing == []
    assert _parallel.module_path(request.node) == "tests/test_parallel.py"
    assert _parallel.scope_of(request.node.nodeid) == _parallel.PROCESSES_GROUP
    listed_test = "tests/algos/test_ppo.py::test_loss[case]"
    assert _parallel.scope_of(listed_test) == "tests/algos/test_ppo.py"
    assert _parallel.scope_of("tests/regression/test_behaviour_unchanged.py::test_x") == \
        "tests/regression/test_behaviour_unchanged.py"


def test_serial_run_modules_may_start_serial_runs_only(monkeypatch):
    _parallel.forbid_processes(monkeypatch, "tests/some/test_runs.py", serial_runs=True)
    serial = [sys.executable, "-c", "pass", "train", "ppo", "--sampler", "serial"]
    assert subprocess.run(serial).returncode == 0
    with pytest.raises(AssertionError, match="SERIAL_RUN_MODULES"):
        subprocess.run([sys.executable, "-c", "pass", "train", "ppo", "--sampler", "cpu"])
    with pytest.raises(AssertionError, match="SERIAL_RUN_MODULES"):
        multiprocessing.get_context("fork").Process(target=print).start()
