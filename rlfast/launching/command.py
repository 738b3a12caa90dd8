"""One run of a sweep as a command: ``[taskset -c CPUS] python SCRIPT SLOT_CODE LOG_DIR RUN_ID
*ARGS``, and :func:`launch_experiment`, which starts it as a child process with its output in
its log directory. The local launcher and the Slurm job both run this command."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from rlfast.launching.run_files import run_output_stem
from rlfast.utils.affinity import affinity_from_code, get_n_run_slots, prepend_run_slot
from rlfast.utils.variant import save_variant

__all__ = ["experiment_command", "launch_experiment"]


def _sets_affinity(affinity: Any) -> bool:
    """False if any part of a decoded affinity has ``set_affinity`` off."""
    if isinstance(affinity, Mapping):
        return bool(affinity.get("set_affinity", True)) and all(
            _sets_affinity(v) for v in affinity.values() if isinstance(v, (Mapping, list)))
    if isinstance(affinity, (list, tuple)):
        return all(_sets_affinity(a) for a in affinity)
    return True


def _all_cpus(affinity: Any) -> set[int]:
    """``all_cpus`` of a decoded affinity; the union over the parts of a list."""
    if isinstance(affinity, Mapping):
        return {int(c) for c in affinity.get("all_cpus") or ()}
    if isinstance(affinity, (list, tuple)):
        return set().union(*(_all_cpus(a) for a in affinity))
    return set()


def _affinity_cpus(affinity: Any) -> list[int] | None:
    """CPUs a slot's affinity pins (union over multi-GPU parts), or None if it pins none or
    any part has ``set_affinity`` off."""
    if not _sets_affinity(affinity):
        return None
    return sorted(_all_cpus(affinity)) or None


def experiment_command(script: str, slot_code: str, log_dir: str, run_ID: int,
                       args: Sequence = (), python_executable: str | None = None,
                       pin: bool = True) -> list[str]:
    """The argv that ``launch_experiment`` runs: ``[taskset -c CPUS] python script slot_code
    log_dir run_ID *args``; taskset is used when ``pin`` is on, the slot pins CPUs and
    taskset is installed (Slurm jobs pass ``pin=False``: Slurm binds them itself)."""
    python_executable = python_executable or sys.executable
    command = [python_executable, str(script), slot_code, str(log_dir), str(run_ID),
               *(str(a) for a in args)]
    if not pin:
        return command
    cpus = _affinity_cpus(affinity_from_code(slot_code))
    taskset = shutil.which("taskset")
    if cpus and taskset:
        command = [taskset, "-c", ",".join(str(c) for c in cpus), *command]
    return command


def launch_experiment(script: str, run_slot: int, affinity_code: str, log_dir: str,
                      variant: Mapping, run_ID: int, args: Sequence,
                      python_executable: str | None = None, *,
                      capture_output: bool = True) -> subprocess.Popen:
    """Start one run: save ``variant`` to ``log_dir/variant.json`` and return the handle of
    ``[taskset -c CPUS] python script SLOT_CODE log_dir run_ID *args`` (SLOT_CODE is
    ``affinity_code`` with ``run_slot`` prepended).

    With ``capture_output`` (the default) the child's stdout and stderr go to
    ``log_dir/run_<run_ID>.stdout.txt`` and ``.stderr.txt`` (the parent's console stays
    readable); otherwise they are inherited. The child runs with ``PYTHONUNBUFFERED=1`` so
    those files fill as it goes.
    """
    n_slots = get_n_run_slots(affinity_code)
    if not 0 <= int(run_slot) < n_slots:
        raise ValueError(f"run_slot {run_slot} is out of range for affinity code "
                         f"{affinity_code!r}, which has {n_slots} run slot(s).")
    if not os.path.isfile(script):
        raise FileNotFoundError(f"Experiment script {script!r} does not exist.")
    slot_code = prepend_run_slot(int(run_slot), affinity_code)
    command = experiment_command(script, slot_code, log_dir, run_ID, args, python_executable)
    save_variant(variant, log_dir)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    if not capture_output:
        return subprocess.Popen(command, env=env)
    stem = run_output_stem(log_dir, run_ID)
    with open(f"{stem}.stdout.txt", "ab") as out, open(f"{stem}.stderr.txt", "ab") as err:
        return subprocess.Popen(command, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                env=env)
