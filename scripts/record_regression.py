"""Record what tests/regression/test_behaviour_unchanged.py holds new runs to.

    python scripts/record_regression.py --baseline          # seed 0's progress + platform.json
    python scripts/record_regression.py --spread --seeds 9  # seeds 0-8: the tolerant check's spread
    python scripts/record_regression.py --kernel-variants   # how other float kernels fare

``--baseline`` re-records ``tests/regression/data/<algo>_progress.csv`` (seed 0, the full
20,000 steps) and ``platform.json``, the fingerprint of this machine that the exact check
requires. Do it only when behaviour changes on purpose (a new default, a fixed bug), and say
why in the commit: the exact check exists to catch every other change.

``--spread`` runs each algorithm with seeds ``0 .. N-1`` (for the test's steps) and writes
``spread.json``: per row, the mean, sample standard deviation, min and max of
``ReturnAverage`` over the seeds, and the smallest first-to-last gain; the tolerant check
(other platforms) derives its tolerances from these.

``--kernel-variants`` runs seed 0 here under other float kernels (torch's AVX2 and default
CPU capability, MKL and oneDNN limited to AVX2 or SSE4, MKL's conditional-numerical-
reproducibility mode): what another CPU does to the same run. It prints, per variant, whether
the exact check still holds and what the tolerant check says: the evidence that the tolerance
admits other kernels. Nothing is written.

Runs go ``--jobs`` at a time (default 2), each one process of ``rlfast train`` as the test
starts it.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
from tests.regression import _baseline as b  # noqa: E402

KERNEL_VARIANTS = {
    "torch AVX2, MKL AVX2, oneDNN AVX2": dict(ATEN_CPU_CAPABILITY="avx2",
                                              MKL_ENABLE_INSTRUCTIONS="AVX2",
                                              ONEDNN_MAX_CPU_ISA="AVX2"),
    "torch default, MKL SSE4.2, oneDNN SSE4.1": dict(ATEN_CPU_CAPABILITY="default",
                                                     MKL_ENABLE_INSTRUCTIONS="SSE4_2",
                                                     ONEDNN_MAX_CPU_ISA="SSE41"),
    "MKL_CBWR=COMPATIBLE": dict(MKL_CBWR="COMPATIBLE"),
    "MKL_CBWR=AVX2": dict(MKL_CBWR="AVX2"),
    "MKL_CBWR=AVX512": dict(MKL_CBWR="AVX512"),
}


def _run(algo: str, steps: int, seed: int, extra_env: dict | None = None) -> dict:
    """One seeded run as the test makes it; its columns."""
    tmp = tempfile.mkdtemp(prefix=f"record_regression_{algo}_{seed}_")
    try:
        log_dir = os.path.join(tmp, "run")
        env = dict(os.environ, **(extra_env or {}))
        done = subprocess.run(b.command(algo, log_dir, steps, seed), cwd=tmp, env=env,
                              capture_output=True, text=True, timeout=1800)
        if done.returncode != 0:
            raise RuntimeError(f"{algo} seed {seed} failed:\n{done.stderr[-3000:]}")
        columns = b.read_columns(os.path.join(log_dir, "progress.csv"))
        with open(os.path.join(log_dir, "progress.csv")) as f:
            columns["_csv"] = f.read()
        return columns
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _map(jobs: int, calls: list) -> list:
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(lambda call: call[0](*call[1:]), calls))


def record_baseline(algos: list, jobs: int) -> None:
    results = _map(jobs, [(_run, algo, b.RECORDED_STEPS, 0) for algo in algos])
    for algo, columns in zip(algos, results):
        path = os.path.join(b.DATA, f"{algo}_progress.csv")
        with open(path, "w") as f:
            f.write(columns["_csv"])
        print(f"wrote {os.path.relpath(path, REPO)} ({len(columns['ReturnAverage'])} rows)")
    with open(b.PLATFORM_FILE, "w") as f:
        json.dump(b.fingerprint(), f, indent=2, sort_keys=True)
        f.write("\n")
    print(f"wrote {os.path.relpath(b.PLATFORM_FILE, REPO)}")


def record_spread(algos: list, n_seeds: int, jobs: int) -> None:
    if n_seeds < 3:
        raise SystemExit("--seeds must be >= 3 for a standard deviation worth the name")
    calls = [(_run, algo, b.STEPS[algo], seed) for algo in algos for seed in range(n_seeds)]
    results = iter(_map(jobs, calls))
    spread = {}
    if os.path.exists(b.SPREAD_FILE):
        with open(b.SPREAD_FILE) as f:
            spread = json.load(f)
    for algo in algos:
        returns = [next(results)["ReturnAverage"] for _ in range(n_seeds)]
        rows = list(zip(*returns))
        spread[algo] = {
            "env": b.RUNS[algo], "steps": b.STEPS[algo], "seeds": list(range(n_seeds)),
            "mean": [statistics.fmean(r) for r in rows],
            "std": [statistics.stdev(r) for r in rows],
            "min": [min(r) for r in rows], "max": [max(r) for r in rows],
            "min_gain": min(r[-1] - r[0] for r in returns),
            "returns": {str(seed): r for seed, r in enumerate(returns)},
        }
        print(f"{algo}: rows {len(rows)}, std per row "
              + ", ".join(f"{s:.1f}" for s in spread[algo]["std"])
              + f"; smallest gain {spread[algo]['min_gain']:.1f}")
    spread["platform"] = b.fingerprint()
    with open(b.SPREAD_FILE, "w") as f:
        json.dump(spread, f, indent=1, sort_keys=True)
        f.write("\n")
    print(f"wrote {os.path.relpath(b.SPREAD_FILE, REPO)}")


def check_kernel_variants(algos: list, jobs: int) -> int:
    calls = [(_run, algo, b.STEPS[algo], 0, env) for algo in algos
             for env in KERNEL_VARIANTS.values()]
    results = iter(_map(jobs, calls))
    failures = 0
    print(f"{'algo':5} {'kernels':42} {'exact':6} tolerant check")
    for algo in algos:
        expected, spread = b.recorded_columns(algo), b.load_spread(algo)
        for name in KERNEL_VARIANTS:
            actual = next(results)
            exact = "same" if not b.exact_problems(expected, actual) else "differ"
            problems = b.tolerant_problems(expected, actual, spread)
            failures += bool(problems)
            worst = max(abs(g - v) / s if s else 0.0 for g, v, s in
                        zip(actual["ReturnAverage"], expected["ReturnAverage"], spread["std"]))
            verdict = "pass" if not problems else "FAIL: " + "; ".join(problems)
            print(f"{algo:5} {name:42} {exact:6} {verdict} (largest row deviation "
                  f"{worst:.2f} seed std)")
    return failures


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", action="store_true",
                        help="re-record seed 0 and platform.json")
    parser.add_argument("--spread", action="store_true", help="record spread.json")
    parser.add_argument("--kernel-variants", action="store_true",
                        help="judge seed 0 under other float kernels (writes nothing)")
    parser.add_argument("--algos", nargs="+", choices=sorted(b.RUNS), default=sorted(b.RUNS))
    parser.add_argument("--seeds", type=int, default=9, help="seeds 0..N-1 for --spread")
    parser.add_argument("--jobs", type=int, default=2, help="runs at a time")
    args = parser.parse_args(argv)
    if not (args.baseline or args.spread or args.kernel_variants):
        parser.error("say what to do: --baseline, --spread and/or --kernel-variants")
    if args.jobs < 1:
        parser.error(f"--jobs must be >= 1; got {args.jobs}")
    if args.baseline:
        record_baseline(args.algos, args.jobs)
    if args.spread:
        record_spread(args.algos, args.seeds, args.jobs)
    if args.kernel_variants:
        return 1 if check_kernel_variants(args.algos, args.jobs) else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
