#!/usr/bin/env python
"""Train one PPO run on CartPole-v1 as one run of a sweep started by ``run_experiments``.

Usage (the launcher calls it this way; it also works by hand)::

    python scripts/launch/train_ppo_cartpole.py SLOT_CODE LOG_DIR RUN_ID

SLOT_CODE is an affinity code with its run slot prepended (``0slt_2cpu_...``): the run's
master and sampler workers are pinned to that slot's CPUs. LOG_DIR holds the run's
``variant.json`` (written by the launcher), which is merged into the PPO CartPole preset;
results go to ``LOG_DIR/run_<RUN_ID>`` (progress.csv, debug.log, params.json, last
snapshot). The seed is RUN_ID, so run k of every variant sees the same seed.

``params.json`` holds ``run_params(...)`` (preset, environment, resolved config, sampler,
seed, SLOT_CODE), so ``rlfast resume LOG_DIR/run_<RUN_ID>`` can continue the run from its
last snapshot: a Slurm sweep's requeued jobs do (``run_experiments(..., backend="slurm")``).
SIGTERM (Slurm preemption, ``timeout``) stops the run after a final snapshot; the script
then exits with 143 (130 for Ctrl-C).
"""
from __future__ import annotations

import os
import signal
import sys

from rlfast.experiments.assembly import resolve_config
from rlfast.experiments.presets import build_experiment, get_preset, run_params
from rlfast.launching import affinity_from_code, load_variant
from rlfast.runners import TrainingInterrupted
from rlfast.utils.logging import logger_context

ALGO, ENV_ID = "ppo", "CartPole-v1"


def build_and_train(slot_affinity_code: str, log_dir: str, run_ID: int) -> None:
    affinity = affinity_from_code(slot_affinity_code)
    if isinstance(affinity, list) or "workers_cpus" not in affinity:
        sys.exit(f"{slot_affinity_code!r} is not a single-run CPU affinity code "
                 "(expected one dict with workers_cpus); this script runs the cpu sampler.")
    variant = load_variant(log_dir)
    # the merge order of rlfast train: the preset, then the variant (as --config), then nothing
    config = resolve_config(get_preset(ALGO, ENV_ID), config_values=variant,
                            source=f"variant.json in {log_dir}")
    n_workers = len(affinity["workers_cpus"])
    if config["sampler"]["batch_B"] < n_workers:
        sys.exit(f"batch_B={config['sampler']['batch_B']} is smaller than the {n_workers} "
                 f"sampler workers of {slot_affinity_code!r}; raise sampler.batch_B.")
    runner = build_experiment(ALGO, ENV_ID, config, sampler="cpu", seed=run_ID,
                              affinity=affinity)
    runner.progress_bar = False  # stdout goes to a file under the launcher
    params = run_params(ALGO, ENV_ID, config, "cpu", run_ID, affinity=slot_affinity_code)
    with logger_context(os.path.join(log_dir, f"run_{run_ID}"), run_ID, "ppo_cartpole",
                        params, override_prefix=True, snapshot_mode="last"):
        runner.train()


if __name__ == "__main__":
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    try:
        build_and_train(sys.argv[1], sys.argv[2], int(sys.argv[3]))
    except KeyboardInterrupt as interrupt:  # the runner saved its snapshot and stopped
        signum = (interrupt.signum if isinstance(interrupt, TrainingInterrupted)
                  else signal.SIGINT)
        print(f"interrupted by signal {signum}", file=sys.stderr)
        sys.exit(128 + int(signum))
