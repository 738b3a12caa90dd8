"""Shared memory left behind by a test, told apart from what a concurrent test holds.

Under ``python -m pytest -n 2`` two process tests may run at once, one on each pytest-xdist
worker (see tests/_parallel.py). Each test checks that its run left no process and no
``/dev/shm`` entry behind. Processes are already scoped: a test looks at the descendants of
its own worker, or at the sessions and command lines of the runs it started. ``/dev/shm`` is
one folder for the whole machine, so :func:`new_shm_entries` scopes it instead:

- an entry counts only if it is of a kind that Python and torch make for shared memory
  (``pymp-``, ``psm_``, ``torch_``) or that the caller names (semaphores: ``sem.mp-``);
- it must be there at two looks a second apart, under the same name: the entries rlfast's
  runs make (a ``RawArray``'s arena, torch's file-descriptor segments, multiprocessing's
  semaphores) are unlinked within microseconds of their creation, so a look that falls in
  another test's window sees a different one each time;
- it must not be held (open or mapped) by a process of another xdist worker: that test's run
  is still using it, and that test checks it when its run ends.

An entry that nobody holds after its run has ended is a leak, whoever made it: it fails the
test that sees it, and the test that made it. Without xdist there is no other worker and the
third rule excludes nothing.
"""
from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable

import psutil

SHM_DIR = "/dev/shm"
SHM_PREFIXES = ("pymp-", "psm_", "torch_")


def shm_entries(folder: str = SHM_DIR) -> set[str]:
    """The names in ``/dev/shm`` (or ``folder``) now (none where there is no such folder)."""
    try:
        return set(os.listdir(folder))
    except FileNotFoundError:
        return set()


def _other_workers() -> set[int]:
    """Pids of the pytest-xdist workers beside this one (none outside xdist)."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return set()
    try:
        siblings = psutil.Process(os.getppid()).children()
    except psutil.Error:
        return set()
    return {p.pid for p in siblings if p.pid != os.getpid()}


def _shm_paths_of(pid: int, folder: str = SHM_DIR) -> set[str]:
    """The names in ``/dev/shm`` (or ``folder``) that process ``pid`` has open or mapped."""
    names = set()
    prefix = folder.rstrip("/") + "/"
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith(prefix):
                names.add(target[len(prefix):].split(" ", 1)[0])
        with open(f"/proc/{pid}/maps") as maps:
            for line in maps:
                at = line.find(prefix)
                if at >= 0:
                    names.add(line[at + len(prefix):].split(" ", 1)[0].rstrip("\n"))
    except OSError:  # gone, or not ours to read
        pass
    return names


def held_by_other_workers(names: Iterable[str], folder: str = SHM_DIR) -> set[str]:
    """Those of ``names`` (in ``folder``) that a process of another xdist worker's tree
    holds now."""
    names = set(names)
    workers = _other_workers()
    if not names or not workers:
        return set()
    held = set()
    for proc in psutil.process_iter(["pid"]):
        try:
            lineage = {proc.pid} | {p.pid for p in proc.parents()}
        except psutil.Error:
            continue
        if lineage & workers:
            held |= _shm_paths_of(proc.pid, folder) & names
    return held


def new_shm_entries(before: set[str], prefixes: tuple[str, ...] = SHM_PREFIXES,
                    also: Callable[[str], bool] | None = None,
                    folder: str = SHM_DIR) -> list[str]:
    """Entries of ``/dev/shm`` added since ``before`` that this test left behind: of the
    kinds in ``prefixes`` (or for which ``also(name)`` is true), there at two looks a second
    apart, and held by no process of another xdist worker (see the module docstring).
    ``folder`` stands in for ``/dev/shm`` in the tests of this check."""
    def suspects() -> set[str]:
        return {n for n in shm_entries(folder) - before
                if n.startswith(prefixes) or (also is not None and also(n))}

    new = suspects()
    if new:
        time.sleep(1.0)
        new &= suspects()
    return sorted(new - held_by_other_workers(new, folder))
