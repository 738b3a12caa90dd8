#!/usr/bin/env python
"""Sweep PPO on CartPole-v1 on a Slurm cluster: two learning rates x two seeds, one job each.

Usage (on a Slurm login node, from a shared filesystem; needs ``pip install rlfast[slurm]``)::

    python scripts/launch/launch_slurm_sweep.py --partition cpu --time 1:00:00 [--cpus 4]
        [--gpus-per-node 0] [--steps 100000] [--log-root DIR] [--title NAME]
        [--dry-run] [--no-wait] [--local]

Each run is one Slurm job (one job array for the sweep) of ``--cpus`` cores, submitted
through submitit with ``run_experiments(..., backend="slurm", slurm=dict(partition=...,
time=..., gpus_per_node=..., cpus_per_task=...))``. Every job runs
``train_ppo_cartpole.py SLOT_CODE LOG_DIR RUN_ID`` on run slot 0 of
``encode_affinity(n_cpu_core=CPUS, cpu_per_run=CPUS, set_affinity=False)``: Slurm binds the
job to its cores, so the code only sizes the run (one sampler worker per core) and pins
nothing. Before Slurm preempts a job or its time runs out, the run is stopped with a final
snapshot and the job is requeued to continue with ``rlfast resume``. The script waits for
the jobs and prints where the results are; ``--no-wait`` returns after submitting (the job
ids are printed), and ``--dry-run`` prints the submitit parameters and commands only.

``--local`` runs the same jobs on this machine with submitit's local executor (no Slurm
needed; partition and GPUs are ignored): a quick check of a sweep before a cluster run.
For GPU runs, point ``script`` at ``train_atari.py`` with a GPU affinity code
(``encode_affinity(n_cpu_core=CPUS, n_gpu=1, set_affinity=False)``) and ``--gpus-per-node 1``.
Results land in ``LOG_ROOT/TITLE/lr_<rate>/run_<ID>/`` and submitit's logs in
``LOG_ROOT/TITLE/slurm/<job id>/``.
"""
from __future__ import annotations

import argparse
import datetime
import os
import sys

from rlfast.launching import (VariantLevel, encode_affinity, make_variants, report_sweep,
                              run_experiments)
from rlfast.utils.logging.context import get_data_dir

HERE = os.path.dirname(os.path.abspath(__file__))
LEARNING_RATES = [3e-3, 1e-3]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partition", default=None, help="Slurm partition (cluster default)")
    parser.add_argument("--time", default="1:00:00",
                        help="time limit per job: minutes or H:M:S (default 1:00:00)")
    parser.add_argument("--cpus", type=int, default=2, help="cores per job (default 2)")
    parser.add_argument("--gpus-per-node", type=int, default=0,
                        help="GPUs per job (default 0: this script trains on CPU)")
    parser.add_argument("--steps", type=int, default=100_000,
                        help="environment steps per run (default 100000)")
    parser.add_argument("--log-root", default=None,
                        help="directory for the experiment, on a filesystem the compute "
                             "nodes share (default data/local/<yyyymmdd>)")
    parser.add_argument("--title", default="ppo_cartpole_slurm", help="experiment title")
    parser.add_argument("--local", action="store_true",
                        help="run the jobs on this machine with submitit's local executor")
    parser.add_argument("--dry-run", action="store_true",
                        help="print the submitit parameters and commands; submit nothing")
    parser.add_argument("--no-wait", action="store_true",
                        help="return after submitting instead of waiting for the jobs")
    args = parser.parse_args()

    affinity_code = encode_affinity(n_cpu_core=args.cpus, n_gpu=0, cpu_per_run=args.cpus,
                                    hyperthread_offset=0, set_affinity=False)
    learning_rate = VariantLevel(keys=[("algo", "learning_rate")],
                                 values=[[lr] for lr in LEARNING_RATES],
                                 dir_names=[f"lr_{lr:g}" for lr in LEARNING_RATES])
    variants, log_dirs = make_variants(learning_rate)
    for variant in variants:  # --steps per run, logged ten times; a batch per core at least.
        variant["runner"] = dict(n_steps=args.steps,
                                 log_interval_steps=max(args.steps // 10, 1))
        variant["sampler"] = dict(batch_B=max(16, args.cpus))
    slurm = dict(partition=args.partition, time=args.time, gpus_per_node=args.gpus_per_node,
                 cpus_per_task=args.cpus)
    if args.local:
        slurm = dict(executor="local", time=args.time)
    log_root = args.log_root or os.path.join(get_data_dir(), "local",
                                             datetime.date.today().strftime("%Y%m%d"))
    results = run_experiments(
        script=os.path.join(HERE, "train_ppo_cartpole.py"), affinity_code=affinity_code,
        experiment_title=args.title, runs_per_setting=2, variants=variants,
        log_dirs=log_dirs, log_root=log_root, backend="slurm", slurm=slurm,
        dry_run=args.dry_run, wait=not args.no_wait)
    if args.dry_run or args.no_wait:
        return 0
    return report_sweep(results, os.path.join(log_root, args.title))


if __name__ == "__main__":
    sys.exit(main())
