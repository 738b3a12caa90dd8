#!/usr/bin/env python
"""Multi-rank synchronous training (SyncRl) against one process (MinibatchRl): PPO on
``atari:pong``, whole training (sampling and updates), env steps/s and updates/s.

Contenders, side by side in one run, interleaved over ``--rounds`` rounds (the order reversed
every other round, so that drift in the machine's load hits every contender alike):

- ``MinibatchRl``: one process, the ``ppo`` preset's sampler and batch (what a user runs
  without rlfast's multi-rank runner), its master training on one torch thread as the
  presets do, and (``--all-core-updates``, default on) the same with one torch thread per
  core, so that a multi-rank gain is not just the other cores joining the updates;
- ``SyncRl xN`` for each N of ``--world-sizes``: N ranks spawned on this machine (gloo on
  CPU, NCCL with ``--device cuda``), each with the preset's ``batch_B`` environments and its
  share of the cores (one rank per GPU with ``--device cuda``), gradients all-reduced by
  DistributedDataParallel every minibatch. N=1 is the overhead of the process group and DDP
  alone.

Every run is one child process (``--child``; ``--quick`` forks it from this process, which
has imported torch and rlfast once: a smoke test's figures, not measurements) that trains
for ``--seconds`` of wall time after a ``--warmup`` (figures from rank 0's log rows: steps
and updates between the first row after the warmup and the last). Global env steps/s
counts every rank's steps; updates/s counts
synchronous (all-rank) gradient steps. The ratio column divides by MinibatchRl's median.

Weak scaling: N ranks sample N times the environments per iteration, so on a machine with
spare cores (and GPUs) env steps/s should grow with N while updates/s stays near one rank's.
On 2 CPU cores there is nothing spare: expect little gain.

Usage: python scripts/bench/bench_sync.py [--rounds 3] [--seconds 30] [--warmup 10]
           [--world-sizes 1 2] [--device cpu|cuda] [--quick] [--json OUT]
"""
from __future__ import annotations

import argparse
import csv
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import (child_env, interleave, machine, markdown_table, medians,  # noqa: E402
                     parse_result, preload_child_modules, print_result, ratio_cell, run_process,
                     run_forked, write_json)


def _child(args: argparse.Namespace) -> None:
    """Train one contender until its time is up; print one JSON line of figures."""
    from rlfast.experiments.presets import build_experiment, get_preset
    from rlfast.runners import MinibatchRl, SyncRl
    from rlfast.utils.logging import logger_context

    config = get_preset("ppo", args.env)
    config["sampler"].update(eval_n_envs=0, eval_max_steps=None, max_decorrelation_steps=0)
    if args.quick:  # one update per iteration
        config["sampler"].update(batch_T=8, batch_B=4)
        config["algo"].update(epochs=1, minibatches=1)
    batch = config["sampler"]["batch_T"] * config["sampler"]["batch_B"]
    world = args.child_world
    sampler = "gpu" if args.device == "cuda" else "cpu"
    built = build_experiment("ppo", args.env, config, sampler=sampler, seed=args.seed,
                             distributed=world > 0, world_size=max(world, 1))
    world_envs = max(world, 1)
    def timed(base: type) -> type:
        class Timed(base):
            """Stops (rank 0 decides; SyncRl broadcasts it) ``warmup + seconds`` after the
            first log row."""
            started: float | None = None

            def log_and_snapshot(self, itr: int) -> None:
                super().log_and_snapshot(itr)
                if self.started is None:
                    self.started = time.time()
                self.stop_requested = time.time() - self.started > args.warmup + args.seconds

        return Timed

    Timed, TimedSync = timed(MinibatchRl), timed(SyncRl)

    common = dict(algo=built.algo, agent=built.agent, sampler=built.sampler, seed=args.seed,
                  n_steps=10 ** 12, log_interval_steps=batch * world_envs,
                  progress_bar=False)
    if world == 0:
        runner = Timed(affinity=built.affinity, **common)
    elif world < 0:  # one process, updates on every core
        from rlfast.utils.misc import available_cpus
        affinity = dict(built.affinity, master_torch_threads=len(available_cpus()))
        runner = Timed(affinity=affinity, **common)
    else:
        runner = TimedSync(affinity=built.ranks.affinities, world_size=world, **common)
    with tempfile.TemporaryDirectory() as log_dir:
        with logger_context(log_dir, 0, "bench_sync", {}, snapshot_mode="none",
                            override_prefix=True):
            runner.train()
        with open(os.path.join(log_dir, "progress.csv")) as f:
            rows = list(csv.DictReader(f))
    first = next((r for r in rows if float(r["Diagnostics/CumTime (s)"]) >= args.warmup),
                 rows[0])
    last = rows[-1]
    seconds = float(last["Diagnostics/CumTime (s)"]) - float(first["Diagnostics/CumTime (s)"])
    steps = int(last["Diagnostics/CumSteps"]) - int(first["Diagnostics/CumSteps"])
    updates = (int(float(last["Diagnostics/CumUpdates"]))
               - int(float(first["Diagnostics/CumUpdates"])))
    print_result(dict(steps_per_s=steps / max(seconds, 1e-9),
                      updates_per_s=updates / max(seconds, 1e-9),
                      seconds=seconds, envs=config["sampler"]["batch_B"] * world_envs))


def _rank_free_env() -> dict:
    """This environment without the variables of an enclosing distributed launch: a
    contender sets up its own ranks."""
    return {k: v for k, v in child_env().items()
            if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
            and not k.startswith("SLURM_")}


def _forked_child(args: argparse.Namespace, world: int) -> None:
    """The body of a forked contender (``--quick``): the rank-free environment, then the
    child's measurement."""
    env = _rank_free_env()
    for key in [k for k in os.environ if k not in env]:
        del os.environ[key]
    _child(argparse.Namespace(**dict(vars(args), child=True, child_world=world)))


def _run(args: argparse.Namespace, world: int) -> dict:
    """One contender in a child process: a new interpreter, or (``--quick``) a fork of this
    one; its figures."""
    timeout_s = 600 + 2 * (args.warmup + args.seconds)
    if args.quick:
        finished = run_forked(lambda: _forked_child(args, world), timeout_s)
    else:
        cmd = [sys.executable, os.path.abspath(__file__), "--child", "--child-world",
               str(world), "--env", args.env, "--device", args.device, "--seconds",
               str(args.seconds), "--warmup", str(args.warmup), "--seed", str(args.seed)]
        finished = run_process(cmd, timeout_s, env=_rank_free_env())
    if finished[0] is None:
        raise RuntimeError(f"contender world={world} did not finish within {timeout_s:.0f} s")
    return parse_result(f"contender world={world}", *finished)


def _name(world: int) -> str:
    if world == 0:
        return "MinibatchRl (1 process)"
    if world < 0:
        return "MinibatchRl, updates on every core"
    return f"SyncRl x{world}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--warmup", type=float, default=10.0)
    parser.add_argument("--world-sizes", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--all-core-updates", action=argparse.BooleanOptionalAction,
                        default=True, help="also run MinibatchRl with as many torch threads "
                        "as cores (the presets' master uses one)")
    parser.add_argument("--env", default="atari:pong")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true",
                        help="tiny batches, one update per iteration, one round of a few "
                             "seconds, every contender forked from this process (smoke test)")
    parser.add_argument("--json", default=None, help="also write the figures here")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--child-world", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args)
        return
    if args.quick:  # the window: from the first log row to the first one 0.5 s later
        args.rounds, args.seconds, args.warmup = 1, 0.5, 0.0
        preload_child_modules()
    if any(w < 1 for w in args.world_sizes):
        parser.error("--world-sizes must be >= 1")
    if args.device == "cuda":
        import torch
        if not torch.cuda.is_available():
            parser.error("--device cuda needs a GPU")
        too_many = [w for w in args.world_sizes if w > torch.cuda.device_count()]
        if too_many:
            parser.error(f"one rank per GPU: world sizes {too_many} exceed the "
                         f"{torch.cuda.device_count()} GPUs here")
    print(f"Machine: {machine()}")
    contenders = [0] + ([-1] if args.all_core_updates else []) + list(args.world_sizes)
    results: dict[int, list[dict]] = {w: [] for w in contenders}
    for round_, order in interleave(contenders, args.rounds):
        for world in order:
            figures = _run(args, world)
            results[world].append(figures)
            print(f"round {round_ + 1}: {_name(world)}: {figures['steps_per_s']:,.0f} env "
                  f"steps/s, {figures['updates_per_s']:,.1f} updates/s", flush=True)
    meds = {w: dict(medians(results[w], ("steps_per_s", "updates_per_s")),
                    envs=results[w][0]["envs"]) for w in contenders}
    base = meds[0]
    print(f"\nPPO on {args.env}, {args.device}, medians of {args.rounds} round(s) of "
          f"{args.seconds:g} s after {args.warmup:g} s warm-up")
    print(markdown_table(
        ["contender", "envs (global)", "env steps/s", "updates/s", "steps/s ratio",
         "updates/s ratio"],
        [[_name(w), meds[w]["envs"], f"{meds[w]['steps_per_s']:,.0f}",
          f"{meds[w]['updates_per_s']:,.1f}",
          ratio_cell(meds[w]["steps_per_s"], base["steps_per_s"]),
          ratio_cell(meds[w]["updates_per_s"], base["updates_per_s"])] for w in contenders]))
    if args.json:
        write_json(args.json, dict(args=vars(args),
                                   runs={_name(w): results[w] for w in contenders},
                                   medians={_name(w): meds[w] for w in contenders}))


if __name__ == "__main__":
    main()
