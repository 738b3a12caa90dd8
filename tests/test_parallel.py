"""tests/_parallel.py: the guard that keeps IN_PROCESS_MODULES free of processes and shared
memory, the scopes and queue order of ``pytest -n 2``, and the turn that keeps the exclusive
modules apart; tests/_leaks.py: the /dev/shm check scoped to the test's own entries."""
import multiprocessing
import os
import subprocess
import sys
import threading
import types
import uuid

import psutil
import pytest
import torch

from tests import _leaks, _parallel


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
    assert _parallel.scope_of(request.node.nodeid) == "tests/test_parallel.py"
    assert _parallel.is_process_module("tests/test_parallel.py")
    assert not _parallel.EXCLUSIVE_MODULES & listed  # exclusive ones are process modules
    missing = [m for m in _parallel.EXCLUSIVE_MODULES if not (root / m).is_file()]
    assert missing == []
    for module in _parallel.EXCLUSIVE_MODULES:
        assert _parallel.scope_of(module + "::test_x") == _parallel.EXCLUSIVE_GROUP
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


def test_queue_starts_with_the_exclusive_scope_then_in_process_then_largest_process_modules():
    scopes = {"tests/a/test_small_process.py": 2, "tests/algos/test_ppo.py": 30,
              _parallel.EXCLUSIVE_GROUP: 5, "tests/a/test_big_process.py": 9,
              "tests/regression/test_behaviour_unchanged.py": 3,
              "tests/learning/test_sync_learning.py": 1,  # a process module
              "tests/learning/test_sac_mujoco.py": 1}  # an in-process one
    order = sorted(scopes, key=lambda scope: _parallel._scope_order(scope, scopes[scope]))
    assert order == [_parallel.EXCLUSIVE_GROUP, "tests/learning/test_sac_mujoco.py",
                     "tests/algos/test_ppo.py", "tests/regression/test_behaviour_unchanged.py",
                     "tests/learning/test_sync_learning.py", "tests/a/test_big_process.py",
                     "tests/a/test_small_process.py"]


def _worker_config(tmp_path):
    """A stand-in for a pytest-xdist worker's config: what process_turn reads."""
    return types.SimpleNamespace(workerinput={"testrunuid": uuid.uuid4().hex},
                                 option=types.SimpleNamespace(basetemp=str(tmp_path / "gw0")))


def _enters(config, path, timeout: float) -> tuple[threading.Event, threading.Event,
                                                       threading.Thread]:
    """Start a thread that takes ``path``'s turn and holds it until told: (entered, leave,
    thread)."""
    entered, leave = threading.Event(), threading.Event()

    def hold():
        with _parallel.process_turn(config, path):
            entered.set()
            leave.wait(timeout)

    thread = threading.Thread(target=hold, daemon=True)
    thread.start()
    return entered, leave, thread


def test_exclusive_module_waits_for_process_modules_and_holds_them_off(monkeypatch, tmp_path):
    exclusive, process, in_process = ("tests/x/test_load.py", "tests/x/test_runs.py",
                                      "tests/algos/test_ppo.py")
    monkeypatch.setattr(_parallel, "EXCLUSIVE_MODULES", frozenset({exclusive}))
    config = _worker_config(tmp_path)
    first = _enters(config, process, 30)
    second = _enters(config, process, 30)  # process modules run side by side
    assert first[0].wait(10) and second[0].wait(10)
    excl = _enters(config, exclusive, 30)
    assert not excl[0].wait(0.5)  # waits for both process modules
    later = _enters(config, process, 30)  # came after the exclusive one: waits behind it
    assert not later[0].wait(0.3)
    with _parallel.process_turn(config, in_process):  # takes no turn: never waits
        pass
    first[1].set(), second[1].set()
    assert excl[0].wait(10)
    assert not later[0].wait(0.5)  # held off while the exclusive module runs
    excl[1].set()
    assert later[0].wait(10)
    later[1].set()
    for _, _, thread in (first, second, excl, later):
        thread.join(10)


def test_no_turn_is_taken_outside_xdist(monkeypatch):
    monkeypatch.setattr(_parallel, "EXCLUSIVE_MODULES", frozenset({"tests/x/test_load.py"}))
    config = types.SimpleNamespace(option=types.SimpleNamespace(basetemp=None))
    assert _parallel._lock_paths(config) is None
    with _parallel.process_turn(config, "tests/x/test_load.py"):
        with _parallel.process_turn(config, "tests/x/test_load.py"):
            pass


@pytest.fixture
def shm_dir(tmp_path):
    """A folder standing in for /dev/shm (a file made in the real one would show up in the
    leak checks of a process test running meanwhile on the other worker), and a name of a
    kind that the leak check looks for."""
    folder = tmp_path / "shm"
    folder.mkdir()
    return str(folder), f"psm_rlfast_test_{os.getpid()}_{uuid.uuid4().hex[:8]}"


def test_leak_check_reports_an_entry_that_nobody_holds(shm_dir):
    folder, name = shm_dir
    before = _leaks.shm_entries(folder)
    with open(os.path.join(folder, name), "wb") as f:
        f.write(b"x" * 64)
    assert _leaks.new_shm_entries(before, folder=folder) == [name]
    assert _leaks.new_shm_entries(before, prefixes=("pymp-",), folder=folder) == []
    assert _leaks.new_shm_entries(before, prefixes=("pymp-",), folder=folder,
                                  also=lambda n: str(os.getpid()) in n) == [name]
    assert _leaks.new_shm_entries(before | {name}, folder=folder) == []  # there before


def test_leak_check_waits_out_a_transient_entry(shm_dir):
    folder, name = shm_dir
    before = _leaks.shm_entries(folder)
    path = os.path.join(folder, name)
    open(path, "wb").close()
    remover = threading.Timer(0.3, os.unlink, args=(path,))
    remover.start()
    assert _leaks.new_shm_entries(before, folder=folder) == []
    remover.join()


def test_leak_check_leaves_out_what_another_worker_still_holds(monkeypatch, shm_dir):
    """An entry that a process of the other xdist worker has mapped belongs to that worker's
    test, still running; once no process holds it, it is a leak."""
    folder, name = shm_dir
    before = _leaks.shm_entries(folder)
    path = os.path.join(folder, name)
    holder = subprocess.Popen([sys.executable, "-c", f"""
import mmap, sys
f = open({path!r}, "w+b"); f.write(b"x" * 4096); f.flush()
m = mmap.mmap(f.fileno(), 4096); f.close()  # mapped, no descriptor left open
print("ready", flush=True); sys.stdin.readline()
"""], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "ready"
        assert name in _leaks._shm_paths_of(holder.pid, folder)  # found through its maps
        monkeypatch.setattr(_leaks, "_other_workers", lambda: {holder.pid})
        assert _leaks.new_shm_entries(before, folder=folder) == []
        monkeypatch.setattr(_leaks, "_other_workers", lambda: set())  # ours: a leak
        assert _leaks.new_shm_entries(before, folder=folder) == [name]
        monkeypatch.setattr(_leaks, "_other_workers", lambda: {holder.pid})
    finally:
        holder.communicate("\n", timeout=30)
    assert _leaks.new_shm_entries(before, folder=folder) == [name]  # nobody holds it now


def test_other_workers_are_the_sibling_xdist_workers(monkeypatch):
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    assert _leaks._other_workers() == set()
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw0")
    siblings = _leaks._other_workers()
    assert os.getpid() not in siblings
    assert siblings == {p.pid for p in psutil.Process(os.getppid()).children()} - {os.getpid()}
