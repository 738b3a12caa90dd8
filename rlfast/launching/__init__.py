"""Launching experiments: a sweep's runs queued over the run slots of one machine, or
submitted to a Slurm cluster as submitit jobs (``run_experiments(..., backend="slurm")``).

This layer sits above the runners: it may use ``rlfast.utils`` (affinity codes and variants
live in :mod:`rlfast.utils.launching`) and starts training scripts as child processes; it
never imports ``rlfast.cli``. The Slurm backend (:mod:`rlfast.launching.slurm`,
:mod:`rlfast.launching.slurm_job`) is imported on demand: it needs ``pip install
rlfast[slurm]``.
"""
from rlfast.launching.children import TERMINATE_GRACE_S, kill_after_grace, stop_children
from rlfast.launching.command import experiment_command, launch_experiment
from rlfast.launching.report import RunResult, report_sweep
from rlfast.launching.run_files import NUM_LAUNCHED_FILE, TREE_FILE, write_atomic
from rlfast.launching.sweep import run_experiments

__all__ = ["run_experiments", "launch_experiment", "experiment_command", "RunResult",
           "report_sweep", "stop_children", "kill_after_grace", "write_atomic",
           "TERMINATE_GRACE_S", "NUM_LAUNCHED_FILE", "TREE_FILE"]
