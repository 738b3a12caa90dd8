#!/usr/bin/env python
"""Benchmark: the preset generalization suite. ``rlfast train ALGO ENV`` with its DEFAULT preset
against Stable-Baselines3 with rl-baselines3-zoo's tuned settings, on many tasks (issue 17).

For every row (environment, algorithm; see ``_presets_zoo.py`` for the budgets, their
reasons and the zoo settings with their sources) and every seed, rlfast and SB3 each train for
the row's environment-step budget in their own process, interleaved (rlfast seed 0, SB3 seed 0,
rlfast seed 1, ...); rlfast gets nothing but ``--steps`` and ``--seed``, SB3 gets the zoo's
settings (schedules, action noise, VecNormalize and its discount included), and each framework
keeps its own torch thread defaults (SB3 on the CPU, like rlfast's CPU presets).

- Final return: after training, untimed, each trained agent plays the SAME 10 greedy episodes:
  a fresh environment reset with seed 10_000 + k for episode k. rlfast's agent is the run's
  snapshot (``rlfast.experiments.playback``: ``load_trained_agent`` and ``run_episodes`` in
  evaluation mode, one episode per seed); SB3's acts with ``predict(obs, deterministic=True)``,
  its observations normalized with the training VecNormalize statistics where the zoo
  normalizes (frozen; rewards are never normalized at evaluation). A seed's final return is
  the mean over its 10 episodes; a row reports mean +- std over seeds (sample std, ddof=1;
  0 for a single seed).
- Time: training only. rlfast: ``Diagnostics/CumTime (s)`` of the run's last progress.csv row
  (iterations without the periodic evaluations; the process start, imports and sampler start
  are not in it); SB3: the wall time of ``model.learn`` (no callbacks). A row's time is the
  mean over seeds, its ratio rlfast / SB3.
- Criterion (PASS/FAIL): rlfast mean >= SB3 mean - SB3 std (one seed std), and rlfast time
  lower than SB3's. ``diff`` = (rlfast mean - SB3 mean) / SB3 std. A row with a failed run is
  ERROR; the failed cell shows the last line of the run's error, and the suite goes on.

Usage: python scripts/bench/bench_presets.py [--rows CartPole-v1:ppo,Pendulum-v1:sac]
           [--seeds 0,1,2] [--steps N] [--out DIR] [--quick] [--list]
           [--slots N [--cores-per-slot K]]
``--slots N``: on a many-core machine, run N (row, seed) pairs side by side, each pinned to
its own K CPUs (default 2) with K OpenMP threads, rlfast then SB3 on the same CPUs; the machine
line says so. Pairs start in ``--rows`` order, so put the longest rows first.
``--out DIR`` writes DIR/bench_presets.md (machine line and table) and DIR/bench_presets.json
(every run's numbers), rewritten after each row. The suite takes hours on a small machine, so
it can be run in pieces into one DIR: the rows already in DIR/bench_presets.json stay (in
suite order, each with the commit it was measured at), a row run again replaces its old
record, and the table lists the suite's rows not measured yet. Merging needs the same seeds.
``--quick``: one tiny row, one seed (a test).
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import (REPO_ROOT, child_env, commit, load_average, machine,  # noqa: E402
                     markdown_table, write_json)
from _presets_zoo import ROWS, ROWS_BY_KEY, Row  # noqa: E402

EVAL_EPISODES = 10
EVAL_SEED0 = 10_000  # episode k of every evaluation starts from env seed EVAL_SEED0 + k
QUICK_ROW = ("CartPole-v1", "ppo")
QUICK_STEPS = 4096
CUMTIME = "Diagnostics/CumTime (s)"
CUMSTEPS = "Diagnostics/CumSteps"
FRAMEWORKS = ("rlfast", "sb3")


# ---- the child processes: each prints one JSON line last ----------------------------------

def _child_rlfast_eval(run_dir: str) -> dict:
    """Final return of an rlfast run: its snapshot's agent on the shared evaluation episodes."""
    from rlfast.experiments.playback import load_trained_agent, run_episodes

    params, agent, make_env = load_trained_agent(run_dir)
    env = make_env()
    try:
        returns = [run_episodes(agent, env, 1, seed=EVAL_SEED0 + k,
                                TrajInfoCls=make_env.TrajInfoCls,
                                itr=params["snapshot"]["itr"] + 1)[0]["Return"]
                   for k in range(EVAL_EPISODES)]
    finally:
        env.close()
    return dict(episode_returns=[float(r) for r in returns])


def _sb3_arguments(zoo: dict, n_actions: int) -> dict:
    """SB3 constructor keywords from a zoo entry: ``lin_X`` strings become linear schedules,
    ``noise_type``/``noise_std`` an action noise, ``activation_fn`` names a torch.nn class."""
    import numpy as np
    import torch
    from stable_baselines3.common.noise import NormalActionNoise, OrnsteinUhlenbeckActionNoise

    kwargs = {k: v for k, v in zoo.items()
              if k not in ("algo", "n_envs", "normalize", "noise_type", "noise_std")}
    for key, value in kwargs.items():
        if isinstance(value, str) and value.startswith("lin_"):
            start = float(value[len("lin_"):])
            kwargs[key] = lambda progress_remaining, start=start: progress_remaining * start
    if "noise_type" in zoo:
        noise = {"normal": NormalActionNoise,
                 "ornstein-uhlenbeck": OrnsteinUhlenbeckActionNoise}[zoo["noise_type"]]
        kwargs["action_noise"] = noise(mean=np.zeros(n_actions),
                                       sigma=zoo["noise_std"] * np.ones(n_actions))
    policy_kwargs = dict(kwargs.get("policy_kwargs", {}))
    if isinstance(policy_kwargs.get("activation_fn"), str):
        policy_kwargs["activation_fn"] = getattr(torch.nn, policy_kwargs["activation_fn"])
    if policy_kwargs:
        kwargs["policy_kwargs"] = policy_kwargs
    return kwargs


def _child_sb3(env_id: str, algo: str, steps: int, seed: int) -> dict:
    """Train SB3 with the zoo settings of the row (timed: ``model.learn``), then play the
    shared evaluation episodes (untimed)."""
    import gymnasium as gym
    import numpy as np
    import stable_baselines3
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    zoo = ROWS_BY_KEY[(env_id, algo)].zoo
    venv = make_vec_env(env_id, n_envs=zoo.get("n_envs", 1), seed=seed)
    if zoo.get("normalize"):
        norm_kwargs = dict(zoo["normalize"]) if isinstance(zoo["normalize"], dict) else {}
        if "gamma" in zoo:  # the zoo gives VecNormalize the algorithm's discount
            norm_kwargs["gamma"] = zoo["gamma"]
        venv = VecNormalize(venv, **norm_kwargs)
    n_actions = int(np.prod(venv.action_space.shape or (1,)))
    model = getattr(stable_baselines3, zoo["algo"])(
        "MlpPolicy", venv, seed=seed, device="cpu", verbose=0, **_sb3_arguments(zoo, n_actions))
    start = time.perf_counter()
    model.learn(total_timesteps=steps)
    train_time = time.perf_counter() - start
    if isinstance(venv, VecNormalize):
        venv.training, venv.norm_reward = False, False
    env = gym.make(env_id)
    returns = []
    for k in range(EVAL_EPISODES):
        obs, _ = env.reset(seed=EVAL_SEED0 + k)
        total, done = 0.0, False
        while not done:
            if isinstance(venv, VecNormalize):
                obs = venv.normalize_obs(obs)
            action, _ = model.predict(obs, deterministic=True)
            if isinstance(env.action_space, gym.spaces.Discrete):
                action = int(action)
            obs, reward, terminated, truncated, _ = env.step(action)
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
    env.close()
    return dict(episode_returns=returns, train_time_s=train_time, steps=int(model.num_timesteps))


# ---- running the children ------------------------------------------------------------------

def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else "(no output)"


# ---- stopping: SIGTERM or SIGINT ends the live children and leaves nothing behind ----------

_CHILDREN: set = set()  # the live child processes (subprocess.Popen)
_STOPPING = threading.Event()


def _stop_on_signal(signum, frame) -> None:
    """SIGTERM / SIGINT in the main thread: no new child starts, the live ones are
    terminated, and SystemExit unwinds every ``with`` (temporary folders go away); the
    threads of ``--slots`` see their child end and return, and no record is written."""
    _STOPPING.set()
    for proc in list(_CHILDREN):
        proc.terminate()
    raise SystemExit(128 + signum)


def _end(proc: subprocess.Popen) -> None:
    """Terminate ``proc`` if it still runs, and reap it (SIGKILL after 10 s)."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _call(cmd: list[str], timeout: float, cpus: list[int] | None = None,
          extra_env: dict | None = None) -> tuple[bool, str, float]:
    """Run ``cmd``; (ok, stdout or the error's last line, wall seconds). With ``cpus`` the child
    runs on those CPUs alone (its affinity mask) with one OpenMP/MKL thread per CPU, so that
    torch does not start a thread per core of the whole machine. ``extra_env``: more
    environment variables for the child."""
    if _STOPPING.is_set():
        return False, "stopped by a signal", 0.0
    env = child_env(**(extra_env or {}))
    preexec = None
    if cpus is not None:
        env.update(OMP_NUM_THREADS=str(len(cpus)), MKL_NUM_THREADS=str(len(cpus)))
        preexec = lambda: os.sched_setaffinity(0, cpus)  # noqa: E731 (runs in the child)
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=REPO_ROOT, env=env, preexec_fn=preexec)
    _CHILDREN.add(proc)
    try:
        if _STOPPING.is_set():  # the signal came while it started
            proc.terminate()
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            return False, f"timed out after {timeout:.0f} s", time.perf_counter() - start
    finally:
        _end(proc)
        _CHILDREN.discard(proc)
    wall = time.perf_counter() - start
    if _STOPPING.is_set():
        return False, "stopped by a signal", wall
    if proc.returncode != 0:
        return False, _last_line(stderr or stdout), wall
    return True, stdout, wall


def _child_json(stdout: str) -> dict:
    return json.loads(stdout.strip().splitlines()[-1])


def run_rlfast(row: Row, steps: int, seed: int, timeout: float,
               cpus: list[int] | None = None) -> dict:
    """``rlfast train`` with the default preset, then the evaluation of its snapshot."""
    result: dict[str, Any] = dict(seed=seed, ok=False, load_before=load_average())
    if cpus is not None:
        result["cpus"] = list(cpus)
    with tempfile.TemporaryDirectory(prefix="bench_presets_") as tmp:
        run_dir = os.path.join(tmp, "run")
        ok, out, wall = _call([sys.executable, "-m", "rlfast", "train", row.algo, row.env,
                               "--steps", str(steps), "--seed", str(seed), "--log-dir", run_dir,
                               "--no-progress"], timeout, cpus)
        result["wall_s"] = wall
        if not ok:
            return dict(result, error=f"train: {out}")
        try:
            with open(os.path.join(run_dir, "progress.csv"), newline="") as f:
                last = list(csv.DictReader(f))[-1]
            result.update(train_time_s=float(last[CUMTIME]), steps=int(float(last[CUMSTEPS])))
        except (OSError, IndexError, KeyError, ValueError) as e:
            return dict(result, error=f"progress.csv: {type(e).__name__}: {e}")
        ok, out, _ = _call([sys.executable, os.path.abspath(__file__), "--child", "rlfast-eval",
                            "--run-dir", run_dir], timeout, cpus)
    if not ok:
        return dict(result, error=f"eval: {out}")
    return _finish(result, _child_json(out))


def run_sb3(row: Row, steps: int, seed: int, timeout: float,
            cpus: list[int] | None = None) -> dict:
    """SB3 with the zoo's settings, trained and evaluated in one child process."""
    result: dict[str, Any] = dict(seed=seed, ok=False, load_before=load_average())
    if cpus is not None:
        result["cpus"] = list(cpus)
    # SB3 makes a logger folder even when it logs nothing (SB3_LOGDIR, else a new
    # /tmp/SB3-<time>): give it one that goes away with the run.
    with tempfile.TemporaryDirectory(prefix="bench_presets_sb3_") as tmp:
        ok, out, wall = _call([sys.executable, os.path.abspath(__file__), "--child", "sb3",
                               "--env", row.env, "--algo", row.algo, "--steps", str(steps),
                               "--seed", str(seed)], timeout, cpus, dict(SB3_LOGDIR=tmp))
    result["wall_s"] = wall
    if not ok:
        return dict(result, error=out)
    return _finish(result, _child_json(out))


def _finish(result: dict, child: dict) -> dict:
    result.update(child)
    result["final_return"] = statistics.fmean(result["episode_returns"])
    result["ok"] = True
    return result


# ---- the schedule: one row after another, or (row, seed) pairs on parallel CPU slots ----------

def cpu_slots(n_slots: int, cores_per_slot: int) -> list[list[int]]:
    """``n_slots`` disjoint lists of ``cores_per_slot`` CPUs each, from this process's own
    CPUs in order; a clear error when there are too few."""
    cpus = sorted(os.sched_getaffinity(0))
    if n_slots < 1 or cores_per_slot < 1:
        raise SystemExit(f"bench_presets: --slots and --cores-per-slot must be >= 1; got "
                         f"{n_slots} and {cores_per_slot}")
    if n_slots * cores_per_slot > len(cpus):
        raise SystemExit(f"bench_presets: {n_slots} slots of {cores_per_slot} cores need "
                         f"{n_slots * cores_per_slot} CPUs; this process may use {len(cpus)}")
    return [cpus[i * cores_per_slot:(i + 1) * cores_per_slot] for i in range(n_slots)]


def _run_pair(row: Row, budget: int, seed: int, timeout: float,
              cpus: list[int] | None) -> dict[str, dict]:
    """One seed of a row: rlfast, then SB3, on the same CPUs."""
    results = {}
    for name, run in (("rlfast", run_rlfast), ("sb3", run_sb3)):
        result = run(row, budget, seed, timeout, cpus)
        results[name] = result
        status = (f"return {result['final_return']:.1f}, train {result['train_time_s']:.1f} s"
                  if result["ok"] else f"FAILED: {result['error']}")
        where = f" on CPUs {cpus}" if cpus is not None else ""
        print(f"  {row.env}:{row.algo} {name} seed {seed}{where}: {status}", file=sys.stderr,
              flush=True)
    return results


def measure(rows: list[Row], seeds: list[int], steps: int | None, timeout: float,
            slots: list[list[int]] | None, row_done) -> None:
    """Run every (row, seed) pair and call ``row_done(record)`` as each row completes.

    Without ``slots``: one pair after another, rlfast and SB3 interleaved, each child free to
    use the whole machine. With ``slots`` (lists of CPUs, from ``cpu_slots``): each pair runs
    on one free slot, rlfast then SB3 on the same CPUs, the slots in parallel; a many-core
    machine then measures like several small ones side by side. Pairs start in the order of
    ``rows`` (put the longest rows first)."""
    def budget(row: Row) -> int:
        return steps if steps is not None else row.budget

    def finish(row: Row, pairs: dict[int, dict[str, dict]]) -> None:
        runs = {name: [pairs[seed][name] for seed in seeds] for name in FRAMEWORKS}
        row_done(summarize(row, budget(row), runs))

    if not slots:
        for row in rows:
            finish(row, {seed: _run_pair(row, budget(row), seed, timeout, None)
                         for seed in seeds})
        return
    import concurrent.futures
    import queue
    import threading
    free: queue.Queue = queue.Queue()
    for slot in slots:
        free.put(slot)
    lock = threading.Lock()
    done: dict[tuple[str, str], dict[int, dict[str, dict]]] = {}

    def task(row: Row, seed: int) -> None:
        cpus = free.get()
        try:
            results = _run_pair(row, budget(row), seed, timeout, cpus)
        finally:
            free.put(cpus)
        if _STOPPING.is_set():
            return  # stopped by a signal: no record of unfinished runs
        with lock:
            pairs = done.setdefault((row.env, row.algo), {})
            pairs[seed] = results
            if len(pairs) == len(seeds):
                finish(row, pairs)

    with concurrent.futures.ThreadPoolExecutor(max_workers=len(slots)) as pool:
        futures = [pool.submit(task, row, seed) for row in rows for seed in seeds]
        for future in futures:
            future.result()


# ---- statistics, verdict and table ------------------------------------------------------

def mean_std(values: list[float]) -> tuple[float | None, float | None]:
    """Mean and sample standard deviation (ddof=1; 0 for one value); None for no values."""
    if not values:
        return None, None
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def merge_records(previous: list[dict], new: list[dict]) -> list[dict]:
    """One record per row, in suite order: ``new`` replaces a ``previous`` record of the same
    (env, algo); rows the suite no longer has are dropped."""
    by_key = {(r["env"], r["algo"]): r for r in previous}
    by_key.update({(r["env"], r["algo"]): r for r in new})
    return [by_key[(row.env, row.algo)] for row in ROWS if (row.env, row.algo) in by_key]


def load_previous(out_dir: str, seeds: list[int]) -> list[dict]:
    """The records of an earlier run into ``out_dir`` (none if there is no such file); a file
    measured with other seeds is refused, since its rows could not share one table."""
    path = os.path.join(out_dir, "bench_presets.json")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        data = json.load(f)
    if data.get("seeds") != seeds:
        raise SystemExit(f"bench_presets: {path} holds rows measured with seeds "
                         f"{data.get('seeds')}, this run uses {seeds}; use another --out DIR "
                         f"or the same --seeds")
    return list(data.get("rows", []))


def summarize(row: Row, steps: int, runs: dict[str, list[dict]]) -> dict:
    """A row's record: every run, the per-framework statistics, ``diff_sb3_std``,
    ``time_ratio`` and the verdict (PASS / FAIL / ERROR)."""
    record: dict[str, Any] = dict(env=row.env, algo=row.algo, budget=steps,
                                  budget_reason=row.reason if steps == row.budget
                                  else "set with --steps / --quick", commit=commit())
    for name in FRAMEWORKS:
        good = [r for r in runs[name] if r["ok"]]
        ret_mean, ret_std = mean_std([r["final_return"] for r in good])
        time_mean, _ = mean_std([r["train_time_s"] for r in good])
        record[name] = dict(runs=runs[name], return_mean=ret_mean, return_std=ret_std,
                            time_mean_s=time_mean)
    rl, sb = record["rlfast"], record["sb3"]
    both = rl["return_mean"] is not None and sb["return_mean"] is not None
    diff = rl["return_mean"] - sb["return_mean"] if both else None
    record["diff_sb3_std"] = (diff / sb["return_std"] if both and sb["return_std"] > 0
                              else None)
    record["time_ratio"] = rl["time_mean_s"] / sb["time_mean_s"] if both else None
    record["return_ok"] = both and rl["return_mean"] >= sb["return_mean"] - sb["return_std"]
    record["time_ok"] = both and rl["time_mean_s"] < sb["time_mean_s"]
    errors = [f"{name} seed {r['seed']}: {r['error']}" for name in FRAMEWORKS
              for r in runs[name] if not r["ok"]]
    record["errors"] = errors
    record["verdict"] = ("ERROR" if errors else
                         "PASS" if record["return_ok"] and record["time_ok"] else "FAIL")
    return record


HEADER = ["env", "algo", "budget", "rlfast return", "SB3 return", "diff (SB3 std)",
          "rlfast time (s)", "SB3 time (s)", "time ratio", "verdict", "commit"]


def _cell(record: dict, name: str) -> str:
    stats = record[name]
    if stats["return_mean"] is None:
        error = next(r["error"] for r in stats["runs"] if not r["ok"])
        return "failed: " + error.replace("|", "/")[:120]
    return f"{stats['return_mean']:.1f} ± {stats['return_std']:.1f}"


def table_row(record: dict) -> list[str]:
    """The table cells of one row record."""
    rl, sb = record["rlfast"], record["sb3"]
    diff = record["diff_sb3_std"]
    if diff is None:
        diff_cell = "n/a (SB3 std 0)" if record["time_ratio"] is not None else "-"
    else:
        diff_cell = f"{diff:+.2f}"
    verdict = record["verdict"]
    if verdict == "FAIL":
        why = ([] if record["return_ok"] else ["return"]) + ([] if record["time_ok"] else ["time"])
        verdict += f" ({', '.join(why)})"
    return [record["env"], record["algo"], f"{record['budget']:,}", _cell(record, "rlfast"),
            _cell(record, "sb3"), diff_cell,
            "-" if rl["time_mean_s"] is None else f"{rl['time_mean_s']:.1f}",
            "-" if sb["time_mean_s"] is None else f"{sb['time_mean_s']:.1f}",
            "-" if record["time_ratio"] is None else f"{record['time_ratio']:.2f}x", verdict,
            record.get("commit", "unknown")]


def render_table(records: list[dict]) -> str:
    """The markdown table of the rows (one line each), then the failed runs and the range of
    the machine's load average when the runs started (other jobs inflate wall times)."""
    lines = [markdown_table(HEADER, [table_row(r) for r in records], pad=True)]
    errors = [f"- {r['env']}:{r['algo']}: {e}" for r in records for e in r["errors"]]
    if errors:
        lines += ["", "Failed runs:"] + errors
    loads = [run["load_before"] for r in records for name in FRAMEWORKS
             for run in r[name]["runs"]]
    if loads:
        lines += ["", f"Load average (1 min) when the runs started: {min(loads):.2f} to "
                      f"{max(loads):.2f} on {os.cpu_count()} cores."]
    machines: dict[str, list[str]] = {}
    for r in records:
        machines.setdefault(r.get("machine", "not recorded"), []).append(f"{r['env']}:{r['algo']}")
    if len(machines) > 1:
        lines += ["", "The rows were measured on more than one machine:"]
        lines += [f"- {name}: {', '.join(keys)}" for name, keys in machines.items()]
    measured = {(r["env"], r["algo"]) for r in records}
    missing = [f"{row.env}:{row.algo}" for row in ROWS if (row.env, row.algo) not in measured]
    if missing and records:
        lines += ["", f"Not measured yet ({len(missing)} of {len(ROWS)} rows): "
                      + ", ".join(missing) + "."]
    return "\n".join(lines)


def machine_line() -> str:
    """The shared machine line plus the versions of the two frameworks and gymnasium."""
    import gymnasium
    try:
        import stable_baselines3
        sb3 = stable_baselines3.__version__
    except ImportError:
        sb3 = "not installed"
    return f"{machine()}, stable-baselines3 {sb3}, gymnasium {gymnasium.__version__}"


CRITERION = ("PASS: rlfast mean final return >= SB3 mean - one SB3 seed std, and rlfast "
             "training time lower. Final return: mean of the same 10 greedy episodes (env seeds "
             f"{EVAL_SEED0}..{EVAL_SEED0 + EVAL_EPISODES - 1}) per seed; mean ± std (ddof=1) "
             "over seeds. Time: training only, mean over seeds (rlfast: CumTime of "
             "progress.csv; SB3: model.learn).")


def write_outputs(out_dir: str, header: dict, records: list[dict]) -> None:
    """DIR/bench_presets.md and DIR/bench_presets.json."""
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "bench_presets.md"), "w") as f:
        f.write(f"Machine: {header['machine']}\n\nSeeds: {', '.join(map(str, header['seeds']))}"
                f"\n\n{render_table(records)}\n\n{CRITERION}\n")
    write_json(os.path.join(out_dir, "bench_presets.json"), dict(header, rows=records),
               allow_nan=False)


# ---- command line ------------------------------------------------------------------------

def _parse_rows(text: str | None) -> list[Row]:
    if not text:
        return list(ROWS)
    rows = []
    for item in text.split(","):
        env, _, algo = item.strip().rpartition(":")
        if (env, algo) not in ROWS_BY_KEY:
            raise SystemExit(f"bench_presets: unknown row {item!r}; rows are "
                             + ", ".join(f"{r.env}:{r.algo}" for r in ROWS))
        rows.append(ROWS_BY_KEY[(env, algo)])
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default=None,
                        help="comma-separated ENV:ALGO rows (default: the whole suite)")
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated seeds (default 0,1,2)")
    parser.add_argument("--steps", type=int, default=None,
                        help="override every row's budget (default: each row's own)")
    parser.add_argument("--out", default=None, metavar="DIR",
                        help="write bench_presets.md and bench_presets.json into DIR")
    parser.add_argument("--quick", action="store_true",
                        help=f"one tiny row ({':'.join(QUICK_ROW)}, {QUICK_STEPS} steps, seed 0)")
    parser.add_argument("--list", action="store_true", help="print the rows and budgets; exit")
    parser.add_argument("--timeout", type=float, default=3600.0,
                        help="seconds one child process may take (default 3600)")
    parser.add_argument("--slots", type=int, default=None,
                        help="run (row, seed) pairs in parallel on this many CPU slots of "
                             "--cores-per-slot CPUs each (default: one pair at a time on the "
                             "whole machine); for many-core machines")
    parser.add_argument("--cores-per-slot", type=int, default=2,
                        help="CPUs per slot with --slots (default 2)")
    parser.add_argument("--child", choices=("sb3", "rlfast-eval"), help=argparse.SUPPRESS)
    parser.add_argument("--env", help=argparse.SUPPRESS)
    parser.add_argument("--algo", help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--run-dir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child == "sb3":
        print(json.dumps(_child_sb3(args.env, args.algo, args.steps, args.seed)))
        return 0
    if args.child == "rlfast-eval":
        print(json.dumps(_child_rlfast_eval(args.run_dir)))
        return 0
    if args.list:
        for row in ROWS:
            print(f"{row.env}:{row.algo}  {row.budget:>7,}  {row.reason}")
        return 0
    if args.quick:
        rows, seeds, steps = [ROWS_BY_KEY[QUICK_ROW]], [0], QUICK_STEPS
    else:
        rows, steps = _parse_rows(args.rows), args.steps
        seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    if steps is not None and steps < 1:
        parser.error(f"--steps must be >= 1; got {steps}")
    slots = cpu_slots(args.slots, args.cores_per_slot) if args.slots is not None else None
    header = dict(machine=machine_line(), seeds=seeds, eval_episodes=EVAL_EPISODES,
                  eval_seed0=EVAL_SEED0, criterion=CRITERION, python=platform.python_version())
    if slots:
        header["machine"] += (f"; {len(slots)} runs in parallel, each pinned to its own "
                              f"{args.cores_per_slot} CPUs with {args.cores_per_slot} "
                              f"OpenMP threads")
    print(f"Machine: {header['machine']}", flush=True)
    previous = load_previous(args.out, seeds) if args.out and not args.quick else []

    def row_done(record: dict) -> None:
        record["machine"] = header["machine"]
        records.append(record)
        if args.out:
            write_outputs(args.out, header, merge_records(previous, records))

    records: list[dict] = []
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, _stop_on_signal)
    measure(rows, seeds, steps, args.timeout, slots, row_done)
    records.sort(key=lambda r: rows.index(ROWS_BY_KEY[(r["env"], r["algo"])]))
    print(f"Seeds: {', '.join(map(str, seeds))}\n\n{render_table(records)}\n\n{CRITERION}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
