#!/usr/bin/env python
"""Learner threads under load: steps/s of the serial-sampler algorithms with and without an
affinity code, with OpenMP's two wait policies, on an idle machine and beside a busy process.

What it checks (issue 52): ``--affinity 0slt_2cpu_0gpu_2cpr_0hto`` gives the learner two torch
threads on a 2-core machine. With OpenMP's default wait policy a thread waiting for work spins,
and beside any other busy process each spinning thread burns the time slices its partner needs:
SAC on Pendulum ran 14 steps/s with the code against 100-118 without it. rlfast now sets
``OMP_WAIT_POLICY=PASSIVE`` before torch loads (``rlfast/__init__.py``). This benchmark runs
each case as ``rlfast train ALGO ENV`` in a child process with ``OMP_WAIT_POLICY`` set to
``ACTIVE`` (the old behaviour, torch's default) or ``PASSIVE`` (rlfast's default), with the
affinity code or without one, alone or beside ``--load`` busy processes (each a Python loop
that never sleeps), interleaved over ``--rounds`` rounds with the order reversed every other
round. A case's figure is its steps/s while learning: from the first progress row at or after
learning starts to the last (``Diagnostics/CumSteps`` over ``Diagnostics/CumTime``). The table
gives the median over rounds and two ratios: the code's steps/s over the same run without a
code (the acceptance asks that it never falls below 1/5), and PASSIVE over ACTIVE.

    python scripts/bench/bench_threads.py               # sac, td3, ddpg, dqn; 3 rounds
    python scripts/bench/bench_threads.py --algos sac --rounds 1 --steps 1500 --quick
"""
from __future__ import annotations

import argparse
import csv
import itertools
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import (child_env, interleave, machine, median, run_process,  # noqa: E402
                     stop_group, write_json)

CODE = "0slt_2cpu_0gpu_2cpr_0hto"
# workload -> (algorithm, env, sampler, settings that make learning start early and evaluation
# cheap, the step from which the rate is counted). The serial-sampler algorithms of the
# issue, with their MLPs, and PPO on Pong with the cpu sampler (a convolutional learner,
# whose updates use every core of the run), not run by default.
WORKLOADS = {
    "sac": ("sac", "Pendulum-v1", "serial", ("algo.min_steps_learn=500",), 500),
    "td3": ("td3", "Pendulum-v1", "serial", ("algo.min_steps_learn=500",), 500),
    "ddpg": ("ddpg", "Pendulum-v1", "serial", ("algo.min_steps_learn=500",), 500),
    "dqn": ("dqn", "CartPole-v1", "serial", ("algo.min_steps_learn=500",), 500),
    "ppo-pong": ("ppo", "atari:pong", "cpu", ("sampler.max_decorrelation_steps=100",
                                              "sampler.eval_max_steps=500"), 1),
}
DEFAULT_WORKLOADS = ["sac", "td3", "ddpg", "dqn"]
EVAL = ("sampler.eval_n_envs=1", "sampler.eval_max_trajectories=1")


def case_name(algo: str, code: bool, policy: str, loaded: bool) -> str:
    return f"{algo} {'code' if code else 'none'} {policy} {'loaded' if loaded else 'idle'}"


def learning_rate_of(progress: str, learn_from: int) -> float:
    """Steps/s from the first progress row at or after ``learn_from`` steps to the last."""
    with open(progress, newline="") as f:
        rows = [(float(r["Diagnostics/CumSteps"]), float(r["Diagnostics/CumTime (s)"]))
                for r in csv.DictReader(f)]
    rows = [r for r in rows if r[0] >= learn_from]
    if len(rows) < 2 or rows[-1][1] <= rows[0][1]:
        raise RuntimeError(f"{progress}: fewer than two progress rows after step {learn_from}")
    return (rows[-1][0] - rows[0][0]) / (rows[-1][1] - rows[0][1])


def busy_processes(n: int) -> list[subprocess.Popen]:
    """``n`` processes that each keep one core busy until stopped."""
    # SIGINT (how stop_group stops a child first) ends the loop without a traceback.
    code = "import signal\nsignal.signal(signal.SIGINT, signal.SIG_DFL)\nwhile True:\n    pass"
    return [subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
            for _ in range(n)]


def run_case(algo: str, code: bool, policy: str, steps: int, interval: int,
             timeout: float) -> float:
    algo_name, env_id, sampler, sets, learn_from = WORKLOADS[algo]
    with tempfile.TemporaryDirectory(prefix="rlfast_bench_threads_") as tmp:
        log_dir = os.path.join(tmp, "run")
        cmd = [sys.executable, "-m", "rlfast", "train", algo_name, env_id, "--sampler", sampler,
               "--steps", str(steps), "--seed", "0", "--log-dir", log_dir, "--no-progress",
               "--set", f"runner.log_interval_steps={interval}"]
        for item in sets + EVAL:
            cmd += ["--set", item]
        if code:
            cmd += ["--affinity", CODE]
        returncode, _, err = run_process(cmd, timeout, env=child_env(OMP_WAIT_POLICY=policy))
        if returncode is None:
            raise RuntimeError(f"{' '.join(cmd)} ran past {timeout:.0f} s")
        if returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} exited {returncode}: {err[-2000:]}")
        return learning_rate_of(os.path.join(log_dir, "progress.csv"), learn_from)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--algos", nargs="+", choices=list(WORKLOADS), default=DEFAULT_WORKLOADS,
                        help=f"workloads (default {' '.join(DEFAULT_WORKLOADS)})")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=3000, help="steps per run (default 3000)")
    parser.add_argument("--interval", type=int, default=None,
                        help="steps between progress rows (default steps / 6)")
    parser.add_argument("--load", type=int, default=1,
                        help="busy processes beside the loaded cases (default 1)")
    parser.add_argument("--policies", nargs="+", choices=("ACTIVE", "PASSIVE"),
                        default=["ACTIVE", "PASSIVE"])
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per run")
    parser.add_argument("--quick", action="store_true", help="idle cases only (a smoke test)")
    parser.add_argument("--json", default=None, help="also write the figures here")
    args = parser.parse_args(argv)
    interval = args.interval or max(args.steps // 6, 100)
    loads = (False,) if args.quick else (False, True)
    cases = list(itertools.product(args.algos, (False, True), args.policies, loads))
    figures: dict[str, list[float]] = {case_name(*c): [] for c in cases}
    print(machine(), flush=True)
    for rnd, order in interleave(cases, args.rounds):
        for algo, code, policy, loaded in order:
            busy = busy_processes(args.load) if loaded else []
            try:
                sps = run_case(algo, code, policy, args.steps, interval, args.timeout)
            finally:
                for proc in busy:
                    stop_group(proc, grace=1.0)
            name = case_name(algo, code, policy, loaded)
            figures[name].append(sps)
            print(f"round {rnd + 1}: {name:<32} {sps:9.1f} steps/s", flush=True)
    med = {name: median(v) for name, v in figures.items()}
    print(f"\nmedian steps/s over {args.rounds} round(s); code = --affinity {CODE}; "
          f"loaded = beside {args.load} busy process(es)")
    print(f"{'algo':<10}{'load':<8}{'policy':<9}{'no code':>10}{'code':>10}{'code/none':>11}"
          f"{'PASSIVE/ACTIVE (code)':>23}")
    for algo, loaded in itertools.product(args.algos, loads):
        for policy in args.policies:
            none = med[case_name(algo, False, policy, loaded)]
            code = med[case_name(algo, True, policy, loaded)]
            versus = ""
            if policy == "PASSIVE" and "ACTIVE" in args.policies:
                versus = f"{code / med[case_name(algo, True, 'ACTIVE', loaded)]:.2f}x"
            print(f"{algo:<10}{'loaded' if loaded else 'idle':<8}{policy:<9}{none:>10.1f}"
                  f"{code:>10.1f}{code / none:>10.2f}x{versus:>23}")
    if args.json:
        write_json(args.json, dict(code=CODE, load=args.load, steps=args.steps,
                                   rounds=args.rounds, figures=figures, medians=med,
                                   time=time.strftime("%Y-%m-%dT%H:%M:%S")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
