"""A sweep's plan: ``run_experiments``' arguments checked at the boundary, and every
(variant, run_ID) given its log directory and argv, in launch order, before any backend
starts one."""
from __future__ import annotations

import datetime
import os
from collections import namedtuple
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from rlfast.utils.affinity import get_n_run_slots
from rlfast.utils.checks import check_choice, check_int
from rlfast.utils.logging.context import get_data_dir

__all__ = ["BACKENDS", "PlannedRun", "SweepPlan", "check_backend_options",
           "check_sweep_arguments", "sweep_dir", "plan_sweep"]

BACKENDS = ("local", "slurm")

PlannedRun = namedtuple("PlannedRun", ["log_dir", "variant", "run_ID", "args"])
PlannedRun.__doc__ = ("One run of a sweep before it starts: its variant's log dir (absolute), "
                      "the variant, its run_ID and the arguments after SLOT_CODE LOG_DIR RUN_ID.")


class SweepPlan(NamedTuple):
    """Everything a backend needs to run a sweep: ``runs`` in launch order (run_ID-major:
    every variant's run 0 first), each under ``exp_dir``; ``log_dirs`` are the variant
    directories relative to it; ``n_slots`` is the number of run slots of
    ``affinity_code``."""
    script: str
    affinity_code: str
    experiment_title: str
    exp_dir: str
    log_dirs: list[str]
    runs_per_setting: int
    n_slots: int
    runs: list[PlannedRun]
    python_executable: str | None


def check_backend_options(backend: str, slurm: Mapping[str, Any] | None, wait: bool,
                          capture_output: bool) -> None:
    """Refuse options that the chosen backend does not take, saying which backend does."""
    check_choice(backend, "backend", BACKENDS)
    if backend == "local":
        if slurm is not None:
            raise ValueError("slurm options were given with backend='local'; pass "
                             "backend='slurm' to submit the runs as Slurm jobs.")
        if not wait:
            raise ValueError("wait=False needs backend='slurm'; the local backend runs "
                             "its children until they finish.")
    elif not capture_output:
        raise ValueError("capture_output=False is a local-backend option: Slurm jobs always "
                         "write run_<ID>.stdout.txt / .stderr.txt in the log dir.")


def check_sweep_arguments(script: str, runs_per_setting: int, variants: Sequence[Mapping],
                          log_dirs: Sequence[str],
                          runs_args: Sequence[Sequence] | None) -> tuple[str, int]:
    """Check that there is one unique log dir (and one ``runs_args`` list, if given) per
    variant, that ``runs_per_setting`` is a positive int and that the script exists; return
    the script's absolute path and ``runs_per_setting``."""
    script = os.path.abspath(script)
    runs_per_setting = check_int(runs_per_setting, "runs_per_setting", minimum=1)
    if len(variants) != len(log_dirs):
        raise ValueError(f"variants and log_dirs must have the same length; got "
                         f"{len(variants)} variants and {len(log_dirs)} log_dirs.")
    if len(set(log_dirs)) != len(log_dirs):
        raise ValueError(f"log_dirs must be unique (runs of different variants would share a "
                         f"directory); got {list(log_dirs)}.")
    if runs_args is not None and len(runs_args) != len(variants):
        raise ValueError(f"runs_args needs one list per variant; got {len(runs_args)} for "
                         f"{len(variants)} variants.")
    if not os.path.isfile(script):
        raise FileNotFoundError(f"Experiment script {script!r} does not exist.")
    return script, runs_per_setting


def sweep_dir(log_root: str | None, experiment_title: str) -> str:
    """``log_root/experiment_title``, absolute; ``log_root`` defaults to
    ``<data dir>/local/<yyyymmdd>`` (data dir: ``$RLFAST_DATA_DIR`` or ``./data``)."""
    if log_root is None:
        log_root = os.path.join(get_data_dir(), "local",
                                datetime.datetime.now().strftime("%Y%m%d"))
    return os.path.abspath(os.path.join(log_root, experiment_title))


def plan_sweep(script: str, affinity_code: str, experiment_title: str, runs_per_setting: int,
               variants: Sequence[Mapping], log_dirs: Sequence[str],
               common_args: Sequence | None = None,
               runs_args: Sequence[Sequence] | None = None, log_root: str | None = None,
               python_executable: str | None = None) -> SweepPlan:
    """Check the arguments of ``run_experiments`` and plan its runs: run ``k`` of variant
    ``i`` logs under ``exp_dir/log_dirs[i]`` with arguments ``*common_args *runs_args[i]``,
    queued run_ID-major. Raises on a bad argument or affinity code; writes nothing."""
    script, runs_per_setting = check_sweep_arguments(script, runs_per_setting, variants,
                                                     log_dirs, runs_args)
    common_args = list(common_args or [])
    runs_args = [list(a) for a in runs_args] if runs_args is not None else [[]] * len(variants)
    n_slots = get_n_run_slots(affinity_code)
    exp_dir = sweep_dir(log_root, experiment_title)
    runs = [PlannedRun(os.path.join(exp_dir, log_dirs[i]), variants[i], run_ID,
                       [*common_args, *runs_args[i]])
            for run_ID in range(runs_per_setting) for i in range(len(variants))]
    return SweepPlan(script, affinity_code, experiment_title, exp_dir, list(log_dirs),
                     runs_per_setting, n_slots, runs, python_executable)
