#!/usr/bin/env python
"""Subnormal floats on the CPU: a learner's updates with them flushed to zero (rlfast's master,
``torch.set_flush_denormal(True)``) against torch's default, which keeps them (what a plain
PyTorch training loop, SB3 or CleanRL runs with).

For each case (an algorithm's preset on a task) the experiment is built in this process with
the serial sampler and trained as the runner would, twice with the same seed: one run with
subnormals kept, one with them flushed, each until ``--warm`` updates past the start of
learning (subnormals come from training: Adam's moment estimates of weights whose gradients
are tiny or zero decay into them; a flushed step rewrites them as zeros, so the two sides
cannot share one run). Then ``--rounds`` rounds each time ``--itrs`` more training
iterations (collect a batch, then ``optimize_agent``) of each run, in alternating order (see
``_common.interleave``). Torch runs on one thread, as the MinAtar presets' learners do.

Reported per case: the median milliseconds per update on each side, their paired ratio
(default / flushed: > 1 means flushing is faster), and the share of optimizer-state elements
that are subnormal when the warm-up ends (with flushing off, as torch's default would leave
them).

``--dry-run`` checks the plumbing in seconds (a few updates, learning early).

Usage: python scripts/bench/bench_denormals.py [--cases rainbow:minatar:breakout ...]
           [--warm 2000] [--itrs 4] [--rounds 5] [--dry-run] [--out FILE]
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import torch

from rlfast.experiments.config import apply_overrides
from rlfast.experiments.presets import build_experiment, get_preset

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import (interleave, machine, markdown_table, median, paired_ratios,  # noqa: E402
                     write_json)

DEFAULT_CASES = ("rainbow:minatar:breakout", "dqn:minatar:breakout", "sac:Pendulum-v1")
DRY_SETS = ("algo.min_steps_learn=200", "algo.replay_size=2000")


def parse_case(case: str) -> tuple[str, str]:
    """``algo:env`` (the env id may hold a colon itself, as ``minatar:breakout`` does)."""
    algo, sep, env = case.partition(":")
    if not sep or not algo or not env:
        raise SystemExit(f"a case is ALGO:ENV (e.g. rainbow:minatar:breakout); got {case!r}")
    return algo, env


def subnormal_share(optimizer: torch.optim.Optimizer) -> float:
    """The share of the optimizer's floating state elements that are subnormal."""
    tiny = torch.finfo(torch.float32).tiny
    total = subnormal = 0
    for state in optimizer.state.values():
        for value in state.values():
            if isinstance(value, torch.Tensor) and value.is_floating_point() and value.dim():
                total += value.numel()
                subnormal += int(((value != 0) & (value.abs() < tiny)).sum())
    return subnormal / total if total else 0.0


class Trainer:
    """The runner's iteration (collect, then optimize) driven by hand on one built run."""

    def __init__(self, algo: str, env: str, sets: tuple[str, ...]):
        config = apply_overrides(get_preset(algo, env), list(sets))
        self.runner = build_experiment(algo, env, config, sampler="serial", seed=0)
        self.runner.startup()
        torch.set_num_threads(1)
        self.sampler, self.agent, self.algo = (self.runner.sampler, self.runner.agent,
                                               self.runner.algo)
        self.itr = 0
        self.updates = 0

    def step(self) -> int:
        """One iteration; returns the updates it made."""
        self.agent.sample_mode(self.itr)
        samples = self.sampler.obtain_samples(self.itr)[0]
        self.agent.train_mode(self.itr)
        before = getattr(self.algo, "update_counter", 0)
        self.algo.optimize_agent(self.itr, samples)
        self.itr += 1
        made = getattr(self.algo, "update_counter", 0) - before
        self.updates += made
        return made

    def close(self) -> None:
        self.runner.shutdown()


def measure(trainer: Trainer, itrs: int, flush: bool) -> float:
    """Milliseconds per update over ``itrs`` iterations with flushing ``flush``."""
    torch.set_flush_denormal(flush)
    start, made = time.perf_counter(), 0
    for _ in range(itrs):
        made += trainer.step()
    return (time.perf_counter() - start) * 1e3 / max(made, 1)


def run_case(case: str, warm: int, itrs: int, rounds: int, dry: bool) -> dict:
    algo, env = parse_case(case)
    sides = ("default", "flushed")
    trainers: dict[str, Trainer] = {}
    try:
        for side in sides:  # the same seed: each side trains the same run its own way
            trainers[side] = Trainer(algo, env, DRY_SETS if dry else ())
            torch.set_flush_denormal(side == "flushed")
            while trainers[side].updates < warm:
                trainers[side].step()
        torch.set_flush_denormal(False)  # else subnormal inputs read as zeros
        share = subnormal_share(trainers["default"].algo.optimizer)
        times: dict[str, list[float]] = {side: [] for side in sides}
        for _, order in interleave(sides, rounds):
            for side in order:
                times[side].append(measure(trainers[side], itrs, side == "flushed"))
    finally:
        torch.set_flush_denormal(False)
        for trainer in trainers.values():
            trainer.close()
    ratios = paired_ratios(times["default"], times["flushed"])
    return dict(case=case, warm_updates=warm, subnormal_share=share, ms_per_update=times,
                median_default_ms=median(times["default"]),
                median_flushed_ms=median(times["flushed"]), ratios=ratios,
                median_ratio=median(ratios))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", nargs="+", default=list(DEFAULT_CASES))
    parser.add_argument("--warm", type=int, default=2000, help="updates before measuring")
    parser.add_argument("--itrs", type=int, default=4, help="iterations per measurement")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--dry-run", action="store_true")
    parser.add_argument("--out", default=None, help="write the results as JSON")
    args = parser.parse_args(argv)
    if not torch.set_flush_denormal(False) or not torch.set_flush_denormal(True):
        print("this CPU cannot flush subnormals: nothing to compare")
        return 0
    torch.set_flush_denormal(False)
    warm, itrs, rounds = (20, 1, 2) if args.dry_run else (args.warm, args.itrs, args.rounds)
    results = [run_case(case, warm, itrs, rounds, args.dry_run) for case in args.cases]
    print(f"machine: {machine()}; one torch thread")
    print(markdown_table(
        ["case", "warm-up updates", "subnormal optimizer state", "default ms/update",
         "flushed ms/update", "default / flushed (median of paired rounds)"],
        [[r["case"], r["warm_updates"], f"{100 * r['subnormal_share']:.1f}%",
          f"{r['median_default_ms']:.3f}", f"{r['median_flushed_ms']:.3f}",
          f"{r['median_ratio']:.2f}x"] for r in results]))
    if args.out:
        write_json(args.out, dict(machine=machine(), torch=torch.__version__, rounds=rounds,
                                  itrs=itrs, results=results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
