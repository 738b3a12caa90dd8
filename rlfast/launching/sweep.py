"""``run_experiments``: a sweep of experiments run locally, queued over the run slots of one
machine (:mod:`rlfast.launching.local`), or on a Slurm cluster, one submitit job per run
(:mod:`rlfast.launching.slurm`).

It takes a training script, an affinity code describing the machine and how much of it each
run gets, and the variants / log directories from ``make_variants``; it checks them and plans
every (variant, run_ID) (:mod:`rlfast.launching.plan`), then hands the plan to the backend.
Each run is ``python SCRIPT SLOT_CODE LOG_DIR RUN_ID *ARGS``, with its stdout/stderr sent to
files in its log directory.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rlfast.launching.local import run_local_sweep
from rlfast.launching.plan import check_backend_options, plan_sweep
from rlfast.launching.report import RunResult

__all__ = ["run_experiments"]


def run_experiments(script: str, affinity_code: str, experiment_title: str,
                    runs_per_setting: int, variants: Sequence[Mapping],
                    log_dirs: Sequence[str], common_args: Sequence | None = None,
                    runs_args: Sequence[Sequence] | None = None, log_root: str | None = None,
                    python_executable: str | None = None, capture_output: bool = True,
                    dry_run: bool = False, backend: str = "local",
                    slurm: Mapping[str, Any] | None = None,
                    wait: bool = True) -> list[RunResult]:
    """Run every variant ``runs_per_setting`` times, queued over the code's run slots
    (``backend="local"``) or as one Slurm job per run (``backend="slurm"``).

    Run ``k`` of variant ``i`` logs under ``log_root/experiment_title/log_dirs[i]`` and gets
    argv ``SLOT_CODE LOG_DIR k *common_args *runs_args[i]``. Runs are queued run_ID-major
    (every variant's run 0 first), and each starts as soon as one of the
    ``get_n_run_slots(affinity_code)`` slots is free. ``log_root`` defaults to
    ``<data dir>/local/<yyyymmdd>`` (data dir: ``$RLFAST_DATA_DIR`` or ``./data``).

    A run exiting non-zero is reported on stderr (log dir, run_ID, slot, exit code and the
    end of its stderr file) and the others go on. Returns one ``RunResult`` per run in
    launch order; the caller checks ``returncode`` (a failure summary is also printed at
    the end). On KeyboardInterrupt (or any error) every running child and its descendants
    are terminated, killed after a grace period, and the exception re-raised. With
    ``dry_run`` nothing is started or written: the plan (nominal slot, command) is
    printed and returned with ``returncode=None``.

    ``backend="slurm"`` submits each run as its own submitit job, configured by the
    ``slurm`` dict (partition, time, gpus_per_node, ...; see
    :func:`rlfast.launching.slurm.check_slurm_options`), each on run slot 0 of
    ``affinity_code``; it needs ``pip install rlfast[slurm]``. It writes the same
    bookkeeping files and ``variant.json``, prints the job ids, and returns
    ``SlurmRunResult``s: ``RunResult``s (returncode 0 for a job that succeeded, 1 for one
    that failed) that also carry the submitit job as ``.job``. With ``wait=False`` it
    returns right after submitting, every ``returncode`` None (wait on ``result.job``).
    See :func:`rlfast.launching.slurm.run_slurm_sweep`.
    """
    check_backend_options(backend, slurm=slurm, wait=wait, capture_output=capture_output)
    plan = plan_sweep(script, affinity_code, experiment_title, runs_per_setting, variants,
                      log_dirs, common_args=common_args, runs_args=runs_args,
                      log_root=log_root, python_executable=python_executable)
    if backend == "slurm":
        from rlfast.launching.slurm import run_slurm_sweep  # loads submitit where installed
        return run_slurm_sweep(plan, slurm, dry_run=dry_run, wait=wait)
    return run_local_sweep(plan, capture_output=capture_output, dry_run=dry_run)
