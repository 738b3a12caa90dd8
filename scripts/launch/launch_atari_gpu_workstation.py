#!/usr/bin/env python
"""Example sweep for a GPU workstation: PPO on Atari Pong, two learning rates, alternating
sampler, on 8 CPU cores and 1 GPU.

Usage::

    python scripts/launch/launch_atari_gpu_workstation.py [--dry-run] [--log-root DIR]
        [--cores 8] [--gpus 1] [--hyperthread-offset 0] [--contexts-per-gpu 1]
        [--game pong] [--steps 10000000]

The machine is ``encode_affinity(n_cpu_core=8, n_gpu=1, hyperthread_offset=0,
alternating=True)``: one run at a time gets the GPU (agent forward passes and training) and
all 8 cores, as 16 sampler workers in two alternating groups (worker i and i+8 share a core,
or its hyperthread with ``--hyperthread-offset 8`` on an 8-core/16-thread CPU). The two runs
are queued one after the other (``--contexts-per-gpu 2`` runs both at once, 4 cores each).
Each run is ``train_atari.py SLOT_CODE LOG_DIR RUN_ID --algo ppo --game GAME``; the variants
use ``batch_B = 2 x cores`` environments (one per worker) and ``batch_T`` such that a batch
keeps the preset's 1024 steps. The script first checks for CUDA and enough cores and exits
with a message if they are missing; ``--dry-run`` prints the planned runs (slot code, log
dir, run_ID, command line) and starts nothing, on any machine.
"""
from __future__ import annotations

import argparse
import datetime
import os
import sys

from rlfast.launching import (VariantLevel, affinity_from_code, encode_affinity, make_variants,
                              prepend_run_slot, report_sweep, run_experiments)
from rlfast.utils.logging.context import get_data_dir

HERE = os.path.dirname(os.path.abspath(__file__))
LEARNING_RATES = [2.5e-4, 1e-4]
PRESET_BATCH_STEPS = 8 * 128  # get_preset("ppo", "atari:pong"): batch_B=8, batch_T=128


def hardware_problems(n_cores: int, n_gpus: int, hyperthread_offset: int) -> list[str]:
    """What this machine lacks for the planned layout (empty when it fits)."""
    import torch
    problems = []
    n_logical = os.cpu_count() or 1
    needed = hyperthread_offset + n_cores if hyperthread_offset else n_cores
    if n_logical < needed:
        problems.append(f"needs cpu ids 0..{needed - 1} ({n_cores} cores"
                        f"{' + hyperthreads' if hyperthread_offset else ''}); this machine "
                        f"has {n_logical} logical cpus")
    if not torch.cuda.is_available():
        problems.append(f"needs {n_gpus} CUDA GPU(s); torch.cuda.is_available() is False")
    elif torch.cuda.device_count() < n_gpus:
        problems.append(f"needs {n_gpus} CUDA GPU(s); found {torch.cuda.device_count()}")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true",
                        help="print the planned runs and commands; start nothing")
    parser.add_argument("--log-root", default=None,
                        help="directory for the experiment (default data/local/<yyyymmdd>)")
    parser.add_argument("--cores", type=int, default=8, help="physical CPU cores (default 8)")
    parser.add_argument("--gpus", type=int, default=1, help="GPUs (default 1)")
    parser.add_argument("--hyperthread-offset", type=int, default=0,
                        help="id offset of hyperthread siblings; 0 = do not use them")
    parser.add_argument("--contexts-per-gpu", type=int, default=1,
                        help="runs sharing each GPU at the same time (default 1)")
    parser.add_argument("--game", default="pong")
    parser.add_argument("--steps", type=int, default=10_000_000, help="steps per run")
    parser.add_argument("--title", default=None, help="experiment title")
    args = parser.parse_args()

    affinity_code = encode_affinity(n_cpu_core=args.cores, n_gpu=args.gpus,
                                    contexts_per_gpu=args.contexts_per_gpu,
                                    hyperthread_offset=args.hyperthread_offset,
                                    alternating=True)
    problems = hardware_problems(args.cores, args.gpus, args.hyperthread_offset)
    if problems and not args.dry_run:
        sys.exit("This example is for a GPU workstation; this machine does not fit:\n  - "
                 + "\n  - ".join(problems)
                 + "\nUse --dry-run to see the plan, or --cores/--gpus to describe this machine.")
    for problem in problems:
        print(f"[dry run] note: a real run would stop here: {problem}")

    n_workers = len(affinity_from_code(prepend_run_slot(0, affinity_code))["workers_cpus"])
    batch_B = n_workers
    batch_T = max(PRESET_BATCH_STEPS // batch_B, 1)
    learning_rate = VariantLevel(keys=[("algo", "learning_rate")],
                                 values=[[lr] for lr in LEARNING_RATES],
                                 dir_names=[f"lr_{lr:g}" for lr in LEARNING_RATES])
    variants, log_dirs = make_variants(learning_rate)
    for variant in variants:
        variant["sampler"] = dict(batch_B=batch_B, batch_T=batch_T)
        variant["runner"] = dict(n_steps=args.steps)
    log_root = args.log_root or os.path.join(get_data_dir(), "local",
                                             datetime.date.today().strftime("%Y%m%d"))
    title = args.title or f"ppo_{args.game}_alternating"
    results = run_experiments(
        script=os.path.join(HERE, "train_atari.py"), affinity_code=affinity_code,
        experiment_title=title, runs_per_setting=1, variants=variants, log_dirs=log_dirs,
        common_args=["--algo", "ppo", "--game", args.game], log_root=log_root,
        dry_run=args.dry_run)
    if args.dry_run:
        print("[dry run] variants: " + "; ".join(
            f"{d}: {v}" for d, v in zip(log_dirs, variants)))
        return 0
    return report_sweep(results, os.path.join(log_root, title))


if __name__ == "__main__":
    sys.exit(main())
