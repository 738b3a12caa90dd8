#!/usr/bin/env python
"""Sweep PPO on CartPole-v1 over two learning rates x two seeds on a 2-core machine.

Usage::

    python scripts/launch/launch_ppo_cartpole_sweep.py [--log-root DIR] [--steps N]
                                                       [--cores 2] [--title ppo_cartpole_lr]

The machine is described by ``encode_affinity(n_cpu_core=2, n_gpu=0, cpu_per_run=1,
hyperthread_offset=0)``: two run slots of one core each, so two runs train at a time while
the other two wait in the queue. Each run calls ``train_ppo_cartpole.py`` with its slot code,
log directory and run_ID (= seed). Results land in
``LOG_ROOT/ppo_cartpole_lr/lr_<rate>/run_<ID>/progress.csv``; LOG_ROOT defaults to
``data/local/<yyyymmdd>`` (or ``$RLFAST_DATA_DIR/local/<yyyymmdd>``). Summarise with::

    rlfast plot LOG_ROOT/ppo_cartpole_lr
"""
from __future__ import annotations

import argparse
import datetime
import os
import sys
import time

from rlfast.launching import (VariantLevel, encode_affinity, make_variants, report_sweep,
                              run_experiments)
from rlfast.utils.logging.context import get_data_dir

HERE = os.path.dirname(os.path.abspath(__file__))
LEARNING_RATES = [3e-3, 1e-3]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--log-root", default=None,
                        help="directory for the experiment (default data/local/<yyyymmdd>)")
    parser.add_argument("--steps", type=int, default=100_000,
                        help="environment steps per run (default 100000)")
    parser.add_argument("--cores", type=int, default=2,
                        help="physical cores to use, one run per core (default 2)")
    parser.add_argument("--title", default="ppo_cartpole_lr", help="experiment title")
    args = parser.parse_args()

    affinity_code = encode_affinity(n_cpu_core=args.cores, n_gpu=0, cpu_per_run=1,
                                    hyperthread_offset=0)
    learning_rate = VariantLevel(keys=[("algo", "learning_rate")],
                                 values=[[lr] for lr in LEARNING_RATES],
                                 dir_names=[f"lr_{lr:g}" for lr in LEARNING_RATES])
    variants, log_dirs = make_variants(learning_rate)
    for variant in variants:  # --steps per run, logged five times.
        variant["runner"] = dict(n_steps=args.steps,
                                 log_interval_steps=max(args.steps // 5, 1))
    log_root = args.log_root or os.path.join(get_data_dir(), "local",
                                             datetime.date.today().strftime("%Y%m%d"))
    start = time.time()
    results = run_experiments(
        script=os.path.join(HERE, "train_ppo_cartpole.py"), affinity_code=affinity_code,
        experiment_title=args.title, runs_per_setting=2, variants=variants,
        log_dirs=log_dirs, log_root=log_root)
    exp_dir = os.path.join(log_root, args.title)
    if not os.path.relpath(exp_dir).startswith(".."):
        exp_dir = os.path.relpath(exp_dir)
    print(f"Sweep took {time.time() - start:.0f} s ({affinity_code}).")
    return report_sweep(results, exp_dir)


if __name__ == "__main__":
    sys.exit(main())
