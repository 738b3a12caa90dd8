#!/usr/bin/env python
"""Train one Atari run (any preset algorithm) as one run of a sweep started by
``run_experiments``.

Usage::

    python scripts/launch/train_atari.py SLOT_CODE LOG_DIR RUN_ID [--algo ppo] [--game pong]

The sampler follows the slot's affinity: ``alternating`` when the code has ``1alt``, ``gpu``
when the slot has a GPU, else ``cpu``; the agent goes to the slot's ``cuda_idx`` (CPU when
None). LOG_DIR's ``variant.json`` is merged into ``get_preset(ALGO, "atari:GAME")``; results go
to ``LOG_DIR/run_<RUN_ID>`` with the last snapshot kept. The seed is RUN_ID. ``params.json``
holds ``run_params(...)``, so ``rlfast resume LOG_DIR/run_<RUN_ID>`` can continue the run (as
a Slurm sweep's requeued jobs do). SIGTERM stops the run after a final snapshot; the script
then exits with 143 (130 for Ctrl-C).
"""
from __future__ import annotations

import argparse
import os
import signal
import sys

from rlfast.experiments.assembly import resolve_config
from rlfast.experiments.presets import build_experiment, get_preset, run_params
from rlfast.launching import affinity_from_code, load_variant
from rlfast.runners import TrainingInterrupted
from rlfast.utils.logging import logger_context


def sampler_for(affinity: dict) -> str:
    if affinity.get("alternating"):
        return "alternating"
    return "gpu" if affinity.get("cuda_idx") is not None else "cpu"


def build_and_train(slot_affinity_code: str, log_dir: str, run_ID: int, algo: str,
                    game: str) -> None:
    affinity = affinity_from_code(slot_affinity_code)
    if isinstance(affinity, list) or "workers_cpus" not in affinity:
        sys.exit(f"{slot_affinity_code!r} is not a single-GPU synchronous affinity code; "
                 "this script runs the cpu, gpu or alternating sampler of one process.")
    env_id = f"atari:{game}"
    # the merge order of rlfast train: the preset, then the variant (as --config)
    config = resolve_config(get_preset(algo, env_id), config_values=load_variant(log_dir),
                            source=f"variant.json in {log_dir}")
    n_workers = len(affinity["workers_cpus"])
    if config["sampler"]["batch_B"] < n_workers:
        sys.exit(f"sampler.batch_B={config['sampler']['batch_B']} is smaller than the "
                 f"{n_workers} sampler workers of {slot_affinity_code!r}; set a larger "
                 "sampler.batch_B in the variant.")
    sampler = sampler_for(affinity)
    runner = build_experiment(algo, env_id, config, sampler=sampler, seed=run_ID,
                              affinity=affinity)
    runner.progress_bar = False  # stdout goes to a file under the launcher
    print(f"{algo} on {env_id}: {sampler} sampler, {n_workers} workers, "
          f"cuda_idx={affinity.get('cuda_idx')}", flush=True)
    params = run_params(algo, env_id, config, sampler, run_ID, affinity=slot_affinity_code)
    with logger_context(os.path.join(log_dir, f"run_{run_ID}"), run_ID, f"{algo}_{game}",
                        params, override_prefix=True, snapshot_mode="last"):
        runner.train()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("slot_affinity_code")
    parser.add_argument("log_dir")
    parser.add_argument("run_ID", type=int)
    parser.add_argument("--algo", default="ppo")
    parser.add_argument("--game", default="pong")
    args = parser.parse_args()
    try:
        build_and_train(args.slot_affinity_code, args.log_dir, args.run_ID, args.algo,
                        args.game)
    except KeyboardInterrupt as interrupt:  # the runner saved its snapshot and stopped
        signum = (interrupt.signum if isinstance(interrupt, TrainingInterrupted)
                  else signal.SIGINT)
        print(f"interrupted by signal {signum}", file=sys.stderr)
        sys.exit(128 + int(signum))
