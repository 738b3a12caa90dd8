"""Launching experiments: a sweep's runs queued over the run slots of one machine, or
submitted to a Slurm cluster as submitit jobs (``run_experiments(..., backend="slurm")``),
and the two things a launch script writes them from: affinity codes (a run's share of the
machine) and hyperparameter variants.

The affinity codes (:mod:`rlfast.utils.affinity`) and variants (:mod:`rlfast.utils.variant`)
live in ``rlfast.utils``, so that the runners, a layer below this one, can decode a code
without importing the launcher; this package re-exports their public names, so a launch
script imports everything from here. The launcher starts training scripts as child
processes and never imports ``rlfast.cli``. The Slurm backend (:mod:`rlfast.launching.slurm`,
:mod:`rlfast.launching.slurm_job`) is imported on demand: it needs ``pip install
rlfast[slurm]``.
"""
from rlfast.launching.children import TERMINATE_GRACE_S, kill_after_grace, stop_children
from rlfast.launching.command import experiment_command, launch_experiment
from rlfast.launching.report import RunResult, report_sweep
from rlfast.launching.run_files import NUM_LAUNCHED_FILE, TREE_FILE, write_atomic
from rlfast.launching.sweep import run_experiments
from rlfast.utils.affinity import (affinity_from_code, encode_affinity, get_n_run_slots,
                                   make_affinity, prepend_run_slot, validate_affinity)
from rlfast.utils.variant import (VariantLevel, load_variant, make_random_variants,
                                  make_variants, save_variant, update_config)

__all__ = ["encode_affinity", "make_affinity", "affinity_from_code", "get_n_run_slots",
           "prepend_run_slot", "validate_affinity", "VariantLevel", "make_variants",
           "make_random_variants", "update_config", "load_variant", "save_variant",
           "run_experiments", "launch_experiment", "experiment_command", "RunResult",
           "report_sweep", "stop_children", "kill_after_grace", "write_atomic",
           "TERMINATE_GRACE_S", "NUM_LAUNCHED_FILE", "TREE_FILE"]
