"""The recorded seeded runs of tests/regression, the platform they were recorded on, and the two
checks a new run is held to; shared by the test and ``scripts/record_regression.py``.

**Exact check** (the platform's fingerprint equals the recording's): every ``Return*`` column
and the counters come out identical, so any change in the order of random draws, environment
steps or updates shows. Float kernels differ between CPUs (oneDNN and MKL dispatch on the ISA
and vendor; torch's own kernels on its CPU capability), so bit-for-bit holds only where the
baseline was recorded: the fingerprint names the CPU (vendor, family/model/stepping, model
name), the ISA flags these libraries dispatch on, torch's CPU capability, the kernel-selecting
environment variables, the torch/numpy/gymnasium versions and the thread counts.

**Tolerant check** (any other platform). Rounding differences compound over the updates until
the run behaves like the same code under another seed, so the tolerance is the seed-to-seed
spread, recorded by ``record_regression.py`` over ``spread.json``'s seeds:

1. the counters (``Diagnostics/CumSteps``, ``Diagnostics/Iteration``), and so the number of
   rows, exactly: they depend on no float;
2. each row's ``ReturnAverage`` within ``K_SIGMA`` seed standard deviations (at that row,
   at least ``MIN_TOLERANCE_FRACTION`` of the run's return range) of the recorded value;
3. the learning milestone: the last row's ``ReturnAverage`` exceeds the first row's by at least
   ``MILESTONE_FRACTION`` of the smallest gain any recorded seed made.

It still catches a change that alters what is learned (no learning, a broken loss, a wrong
schedule: points 2 and 3) or how many steps and iterations run (point 1), but not a change
within the spread of seeds; the exact check on the recording platform does that.
"""
from __future__ import annotations

import csv
import json
import math
import os
import platform
import sys
from typing import Any

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
PLATFORM_FILE = os.path.join(DATA, "platform.json")
SPREAD_FILE = os.path.join(DATA, "spread.json")
COUNTERS = ["Diagnostics/CumSteps", "Diagnostics/Iteration"]
RECORDED_STEPS = 20000  # the --steps the recorded runs were made with
STEPS = {"ppo": RECORDED_STEPS, "dqn": RECORDED_STEPS, "sac": 6000}
RUNS = {"ppo": "CartPole-v1", "dqn": "CartPole-v1", "sac": "Pendulum-v1"}
K_SIGMA = 4.0
MIN_TOLERANCE_FRACTION = 0.05
MILESTONE_FRACTION = 0.5
# The ISA flags (from /proc/cpuinfo) that oneDNN, MKL and torch's own kernels dispatch on.
KERNEL_ISA_FLAGS = ("sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512dq", "avx512bw",
                    "avx512vl", "avx512_vnni", "avx512_bf16", "avx512_fp16", "avx_vnni",
                    "amx_tile", "amx_bf16", "amx_int8")
# Environment variables that choose or limit those kernels, or the thread counts.
KERNEL_ENV = ("ATEN_CPU_CAPABILITY", "MKL_ENABLE_INSTRUCTIONS", "MKL_CBWR", "ONEDNN_MAX_CPU_ISA",
              "DNNL_MAX_CPU_ISA", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def _cpuinfo() -> dict[str, str]:
    """The first processor's entries of /proc/cpuinfo (empty where there is none)."""
    info: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if not line.strip():
                    break
                key, _, value = line.partition(":")
                info[key.strip()] = value.strip()
    except OSError:
        pass
    return info


def _default_torch_threads(environ, cores: int) -> int:
    """torch's intra-op thread count in a new process: ``OMP_NUM_THREADS`` when set, else
    one per available core (OpenMP's default under the process's CPU affinity)."""
    try:
        return max(1, int(environ.get("OMP_NUM_THREADS", "")))
    except ValueError:
        return cores


def fingerprint(environ: dict | None = None) -> dict[str, Any]:
    """What decides the float kernels a run on this machine uses (see the module docstring).
    ``environ`` (default ``os.environ``) is the environment the run will get."""
    import gymnasium
    import numpy
    import torch

    environ = os.environ if environ is None else environ
    info = _cpuinfo()
    flags = set(info.get("flags", "").split())
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count()
    return {
        "machine": platform.machine(),
        "cpu_vendor": info.get("vendor_id") or platform.processor(),  # uname -p only if needed
        "cpu_model": info.get("model name", ""),
        "cpu_family_model_stepping": "/".join(info.get(k, "?") for k in
                                              ("cpu family", "model", "stepping")),
        "isa_flags": sorted(flags.intersection(KERNEL_ISA_FLAGS)),
        "torch": torch.__version__,
        "torch_cpu_capability": _cpu_capability(environ),
        "numpy": numpy.__version__,
        "gymnasium": gymnasium.__version__,
        "python": ".".join(map(str, sys.version_info[:2])),
        "available_cores": cores,
        # What a fresh ``rlfast train`` starts with, not this process's count (the test
        # suite runs on one thread; the recorded runs are child processes).
        "torch_threads": _default_torch_threads(environ, cores),
        "kernel_env": {k: environ[k] for k in KERNEL_ENV if k in environ},
    }


def _cpu_capability(environ) -> str:
    """torch's CPU capability in a process started with ``environ`` (ATEN_CPU_CAPABILITY can
    only lower what the CPU offers, and is read once at import)."""
    import torch

    mine = torch.backends.cpu.get_cpu_capability()
    wanted = environ.get("ATEN_CPU_CAPABILITY")
    order = ["DEFAULT", "AVX2", "AVX512"]
    if wanted and wanted.upper() in order and mine in order:
        return order[min(order.index(wanted.upper()), order.index(mine))]
    return mine


def recorded_platform() -> dict[str, Any]:
    with open(PLATFORM_FILE) as f:
        return json.load(f)


def platform_differences(now: dict, recorded: dict) -> list[str]:
    """The fingerprint entries that differ, as ``key: recorded -> now``."""
    return [f"{k}: {recorded.get(k)!r} -> {now.get(k)!r}"
            for k in sorted(set(now) | set(recorded)) if now.get(k) != recorded.get(k)]


def command(algo: str, log_dir: str, steps: int, seed: int = 0) -> list[str]:
    return [sys.executable, "-m", "rlfast", "train", algo, RUNS[algo], "--steps", str(steps),
            "--sampler", "serial", "--seed", str(seed), "--log-dir", log_dir,
            "--no-progress", "--snapshot-mode", "none"]


def read_columns(path: str) -> dict[str, list[float]]:
    """The ``Return*`` and counter columns of a progress.csv, as floats."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    names = [k for k in rows[0] if k.startswith("Return") or k in COUNTERS] if rows else []
    return {k: [float(row[k]) for row in rows] for k in names}


def recorded_columns(algo: str, steps: int | None = None) -> dict[str, list[float]]:
    """The recorded run's columns, cut to the rows up to ``steps`` (default ``STEPS[algo]``):
    a serial run is a prefix of a longer one where nothing depends on the total step count
    (see the test module)."""
    expected = read_columns(os.path.join(DATA, f"{algo}_progress.csv"))
    steps = STEPS[algo] if steps is None else steps
    if steps < RECORDED_STEPS:
        recorded_steps = expected["Diagnostics/CumSteps"]
        assert recorded_steps[-1] == RECORDED_STEPS  # one step per iteration: no rounding
        n_rows = sum(1 for s in recorded_steps if s <= steps)
        assert recorded_steps[n_rows - 1] == steps and n_rows >= 4
        expected = {k: v[:n_rows] for k, v in expected.items()}
    return expected


def _same(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


def _counter_problems(expected: dict, actual: dict) -> list[str]:
    problems = []
    for name in COUNTERS:
        if name not in actual:
            problems.append(f"column {name!r} missing")
        elif actual[name] != expected[name]:
            problems.append(f"{name}: {actual[name]} now, recorded {expected[name]}")
    return problems


def exact_problems(expected: dict, actual: dict) -> list[str]:
    """Every difference between the recorded columns and a new run's (empty: identical)."""
    problems = []
    for name, values in expected.items():
        if name not in actual:
            problems.append(f"column {name!r} missing")
            continue
        got = actual[name]
        if len(got) != len(values):
            problems.append(f"{name}: {len(got)} rows, recorded {len(values)}")
            continue
        diffs = [(i, v, g) for i, (v, g) in enumerate(zip(values, got)) if not _same(v, g)]
        if diffs:
            problems.append(f"{name} differs (row, recorded, now): {diffs}")
    return problems


def tolerances(spread: dict) -> list[float]:
    """Per row: how far ``ReturnAverage`` may be from the recorded one (module docstring, 2)."""
    low, high = min(spread["min"]), max(spread["max"])
    floor = MIN_TOLERANCE_FRACTION * (high - low)
    return [max(K_SIGMA * s, floor) for s in spread["std"]]


def tolerant_problems(expected: dict, actual: dict, spread: dict) -> list[str]:
    """What the tolerant check finds wrong with a new run (empty: it passes); ``spread`` is
    the algorithm's entry of spread.json."""
    problems = _counter_problems(expected, actual)
    if problems:
        return problems
    recorded, now = expected["ReturnAverage"], actual.get("ReturnAverage")
    if now is None:
        return ["column 'ReturnAverage' missing"]
    if len(spread["std"]) != len(recorded):
        return [f"spread.json has {len(spread['std'])} rows for {len(recorded)} recorded: "
                f"record it again (scripts/record_regression.py)"]
    for i, (v, g, tol) in enumerate(zip(recorded, now, tolerances(spread))):
        if not abs(g - v) <= tol:  # NaN fails too
            problems.append(f"ReturnAverage row {i}: {g:.2f} now, recorded {v:.2f}, tolerance "
                            f"{tol:.2f} ({K_SIGMA:g} seed std {tol / K_SIGMA:.2f})")
    need = MILESTONE_FRACTION * spread["min_gain"]
    if not now[-1] - now[0] >= need:
        problems.append(f"milestone: ReturnAverage rose by {now[-1] - now[0]:.2f} from the first "
                        f"row to the last, under {need:.2f} ({MILESTONE_FRACTION:g} of the "
                        f"smallest gain of the recorded seeds, {spread['min_gain']:.2f})")
    return problems


def load_spread(algo: str) -> dict:
    with open(SPREAD_FILE) as f:
        return json.load(f)[algo]
