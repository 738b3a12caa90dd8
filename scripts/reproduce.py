#!/usr/bin/env python
"""Reproduce a published result: train one row of the results table and record how it went.

Each row of ``ROWS`` names an algorithm, a task, the preset (with any ``--set`` values), a
budget in agent steps, the published figure it is held against with its source, and a
threshold on one metric:

* ``train``: the mean return of the last ``window`` completed training episodes
  (``runner.log_traj_window``), the figure SB3's zoo and CleanRL plot for Atari;
* ``eval``: the mean return of the evaluation episodes of a progress row (the preset's
  evaluation: greedy for continuous control, 4 sampled episodes for Atari).

``python scripts/reproduce.py ROW [--seed S]`` runs ``rlfast train`` in its own process
session, and while it runs samples, every ``--sample-s`` seconds, the resident memory of the
run's processes (master and workers), the 1-minute load average and the progress rows as they
appear (so each row gets a wall-clock time). At the end it writes, in the harness folder
(``data/reproduce/<row>_s<seed>_<time>/``; the run itself logs to ``run/`` inside it):

* ``record.json``: final and best evaluation and training returns, the steps and wall time at
  which the threshold was first reached, wall time, steps/s over time, RSS at the start (the
  first progress row), peak and end, the load average, the machine and the commit;
* ``curve.png``: the learning curve with the published figure and the threshold drawn on it.

``--keep`` also copies both into ``docs/results/`` (the records the results page quotes, kept in
the repository; only a run that reached its budget: a stopped one says how to go on), and
``--page`` rewrites that page, ``docs/results/README.md``, and the table in the project's README
from the kept records. ``--record DIR`` rebuilds the record and picture of a finished (or
stopped) harness folder, ``--resume DIR`` goes on with a stopped run from its newest snapshot (a
run longer than one sitting: its segments' wall times add up, the gaps between them do not
count; ``harness.json`` is rewritten at every sample, so a harness killed with its run still
leaves what ran; a row of a replay-based algorithm snapshots its replay buffer too, so that its
resumed run learns from the replay it had; the record says, per sitting, where it resumed and
whether its replay was refilled from empty), ``--table`` prints the table of kept records
(``--results DIR`` reads another folder), and ``--list`` the rows. Rows ending in ``_smoke`` are
short budgets that check the harness, the record and the picture, not the score; the tests run
them.

Ctrl-C or SIGTERM stops the run cleanly (SIGINT to its process group: rlfast saves a snapshot
and stops its workers) and still writes the record of what ran.
"""
from __future__ import annotations

import argparse
import csv
import datetime
import json
import math
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "bench"))
from _common import REPO_ROOT, child_env, machine, stop_group  # noqa: E402
from soak import _child_setup, process_tree_stats  # noqa: E402

RESULTS_DIR = os.path.join(REPO_ROOT, "docs", "results")
ZOO = ("RL Baselines3 Zoo, benchmark.md (one run, final evaluation return at the budget; "
       "https://github.com/DLR-RM/rl-baselines3-zoo/blob/master/benchmark.md)")


@dataclass(frozen=True)
class Row:
    """One line of the results table: what to train and what it is held against."""

    name: str
    algo: str
    env: str
    steps: int
    threshold: float
    metric: str  # "train" or "eval"
    published: float | None
    source: str
    sets: tuple[str, ...] = ()
    args: tuple[str, ...] = ()  # other ``rlfast train`` arguments (e.g. ``--sampler``)
    window: int = 32  # training episodes averaged for the "train" metric
    note: str = ""

    @property
    def smoke(self) -> bool:
        return self.name.endswith("_smoke")


# The algorithms that learn from a replay buffer: their rows snapshot it (--snapshot-replay), so
# that a row resumed after a stop learns from the replay it had, not one refilled from empty.
REPLAY_ALGOS = frozenset({"dqn", "cat_dqn", "rainbow", "r2d1", "ddpg", "td3", "sac"})


def _rows(*rows: Row) -> dict[str, Row]:
    return {row.name: row for row in rows}


CLEANRL_PPO = ("CleanRL, ppo_atari.py on PongNoFrameskip-v4 at 10M agent steps (40M frames, "
               "4 times this row's budget): 20.36 ± 0.20 "
               "(mean ± std of 3 seeds; openai/baselines' PPO2: 20.512 ± 0.50); "
               "https://docs.cleanrl.dev/rl-algorithms/ppo/#ppo_ataripy")
MINATAR = ("MinAtar (Young & Tian 2019, arXiv:1903.03176), DQN with replay and a target "
           "network, mean of 30 seeds of the moving average of returns over 100 episodes, read "
           "off the README's learning-curve figure at 2M frames (a MinAtar frame is one step); "
           "https://github.com/kenjyoung/MinAtar#results")
# Smoke rows shrink the budget and the evaluation so that each takes well under a minute; they
# exercise the same code path as their full row (same algorithm, environment and preset).
# The Rainbow rows run the preset with its loss compiled (torch.compile; the same loss to
# float rounding, checked against the eager one under changing noise): serial, 12k steps of
# minatar:breakout, 2 interleaved rounds on the 2-core Xeon, 170 -> 215 steps/s (1.27x).
# The Pong row runs the first quarter of the published runs (CleanRL's ppo_atari.py, the zoo's
# PPO): their 84x84 frames (rlfast's default is rlpyt's 104x80) and their learning-rate
# schedule, a linear anneal over their 10M agent steps, so at this row's 2.5M the rate is
# still 0.75 of its start (the preset anneals over the run's own budget, which at 2.5M steps
# put the rate at a quarter of its start by 1.9M). Run with the preset's own schedule and
# frames, seed 0 peaked at 17.97 (the record of commit 4588b7f). The network stays the preset's
# (rlpyt's policy-gradient convolutions, smaller than the published runs' Nature CNN).
_PONG_AS_PUBLISHED = ("env.obs_type=84x84", "algo.lr_anneal_steps=10000000")
_PONG_NOTE = "84x84 frames and the published runs' 10M-step learning-rate anneal"
_COMPILED = ("algo.compile=True",)
_COMPILED_NOTE = "loss compiled (algo.compile=True)"
_MINATAR_SMOKE = ("algo.min_steps_learn=400", "algo.replay_size=1000",
                  "sampler.max_decorrelation_steps=50", "sampler.eval_n_envs=1",
                  "sampler.eval_max_steps=200", "sampler.eval_max_trajectories=1",
                  "runner.log_interval_steps=300")
ROWS = _rows(
    Row("pong_ppo", "ppo", "atari:pong", 2_500_000, threshold=18.0, metric="train",
        published=20.36, source=CLEANRL_PPO, sets=_PONG_AS_PUBLISHED,
        note="10M frames, a quarter of the published runs' 40M; threshold: mean training "
             "return of the last 32 episodes; the zoo's PPO reaches 20.99 at 40M frames; "
             + _PONG_NOTE),
    Row("halfcheetah_ppo", "ppo", "HalfCheetah-v5", 1_000_000, threshold=5237.0,
        metric="eval", published=5819.0, source=ZOO + "; PPO HalfCheetah-v3 at 1M steps",
        note="threshold: 0.9 of the zoo's figure"),
    Row("hopper_ppo", "ppo", "Hopper-v5", 1_000_000, threshold=2169.0, metric="eval",
        published=2410.0, source=ZOO + "; PPO Hopper-v3 at 1M steps",
        note="threshold: 0.9 of the zoo's figure"),
    Row("halfcheetah_sac", "sac", "HalfCheetah-v5", 1_000_000, threshold=8000.0,
        metric="eval", published=9535.0, source=ZOO + "; SAC HalfCheetah-v3 at 1M steps"),
    Row("breakout_dqn", "dqn", "minatar:breakout", 2_000_000, threshold=9.0, metric="train",
        published=10.0, source=MINATAR, window=100,
        note="threshold: 0.9 of the published figure, over the paper's 100-episode window"),
    Row("breakout_rainbow", "rainbow", "minatar:breakout", 2_000_000, threshold=9.0,
        metric="train", published=10.0, source=MINATAR, window=100, sets=_COMPILED,
        note="held against MinAtar's DQN figure; threshold 0.9 of it; " + _COMPILED_NOTE),
    Row("space_invaders_dqn", "dqn", "minatar:space_invaders", 2_000_000, threshold=36.0,
        metric="train", published=40.0, source=MINATAR, window=100,
        note="threshold: 0.9 of the published figure, over the paper's 100-episode window"),
    Row("space_invaders_rainbow", "rainbow", "minatar:space_invaders", 2_000_000,
        threshold=36.0, metric="train", published=40.0, source=MINATAR, window=100,
        sets=_COMPILED, note="held against MinAtar's DQN figure; threshold 0.9 of it; "
        + _COMPILED_NOTE),
    Row("pong_ppo_smoke", "ppo", "atari:pong", 512, threshold=-21.0, metric="train",
        published=20.36, source=CLEANRL_PPO, args=("--sampler", "serial"),
        sets=_PONG_AS_PUBLISHED + (
              "sampler.batch_B=2", "sampler.eval_n_envs=1", "sampler.eval_max_steps=100",
              "sampler.eval_max_trajectories=1", "runner.log_interval_steps=256",
              "sampler.max_decorrelation_steps=50", "algo.epochs=1", "algo.minibatches=2")),
    Row("halfcheetah_ppo_smoke", "ppo", "HalfCheetah-v5", 2048, threshold=-1000.0,
        metric="eval", published=5819.0, source=ZOO, args=("--sampler", "serial"),
        sets=("sampler.batch_B=4", "sampler.batch_T=256", "sampler.eval_n_envs=1",
              "sampler.eval_max_steps=1000", "sampler.eval_max_trajectories=1",
              "runner.log_interval_steps=2048", "algo.epochs=1",
              "agent.model_kwargs.hidden_sizes=[32,32]")),
    Row("halfcheetah_sac_smoke", "sac", "HalfCheetah-v5", 300, threshold=-1000.0,
        metric="eval", published=9535.0, source=ZOO,
        sets=("algo.min_steps_learn=200", "algo.batch_size=32", "algo.replay_ratio=32",
              "algo.replay_size=1000", "agent.model_kwargs.hidden_sizes=[32,32]",
              "agent.q_model_kwargs.hidden_sizes=[32,32]", "sampler.eval_n_envs=1",
              "sampler.eval_max_steps=1000", "sampler.eval_max_trajectories=1",
              "runner.log_interval_steps=300")),
    Row("breakout_dqn_smoke", "dqn", "minatar:breakout", 600, threshold=-1.0, metric="train",
        published=10.0, source=MINATAR, window=100, sets=_MINATAR_SMOKE,
        args=("--sampler", "serial")),
    Row("breakout_rainbow_smoke", "rainbow", "minatar:breakout", 600, threshold=-1.0,
        metric="train", published=10.0, source=MINATAR, window=100, sets=_MINATAR_SMOKE,
        args=("--sampler", "serial")),
)


# ---- the run and its monitor ----------------------------------------------------------------
def train_command(row: Row, seed: int, log_dir: str, steps: int | None = None) -> list[str]:
    """The ``rlfast train`` command line of ``row``."""
    cmd = [sys.executable, "-m", "rlfast", "train", row.algo, row.env,
           "--steps", str(steps or row.steps), "--seed", str(seed), "--log-dir", log_dir,
           "--no-progress", "--set", f"runner.log_traj_window={row.window}"]
    for item in row.sets:
        cmd += ["--set", item]
    if row.algo in REPLAY_ALGOS:  # a resumed row goes on with its replay, not a refilled one
        cmd.append("--snapshot-replay")
    return cmd + list(row.args)


_RESUMED = re.compile(r"Resumed from iteration \d+ \((\d+) steps\)")
_REFILL = "Replay buffer not in the snapshot"
_ENV_RESTART = "Environments start new episodes"


def resume_events(output_path: str) -> list[dict]:
    """What each resume of a run did, in order, read off its console output: the steps it
    went on from, whether its replay buffer was refilled from empty (the snapshot held none)
    and whether its environments started new episodes."""
    events: list[dict] = []
    pending: dict = {}
    try:
        with open(output_path, errors="replace") as f:
            for line in f:
                if _REFILL in line:
                    pending["replay_refilled"] = True
                elif _ENV_RESTART in line:
                    pending["new_episodes"] = True
                else:
                    m = _RESUMED.search(line)
                    if m:
                        events.append(dict(resumed_at_steps=int(m.group(1)),
                                           replay_refilled=pending.get("replay_refilled", False),
                                           new_episodes=pending.get("new_episodes", False)))
                        pending = {}
    except FileNotFoundError:
        pass
    return events


def _column(fieldnames: list[str], suffix: str) -> str | None:
    for name in fieldnames:
        if name == suffix or name.endswith("/" + suffix):
            return name
    return None


def _number(text: Any) -> float:
    try:
        return float(text)
    except (TypeError, ValueError):
        return math.nan


def read_rows(path: str) -> list[dict[str, float]]:
    """Every complete row of a progress.csv as ``steps``, ``train`` (training-window mean
    return), ``eval`` (evaluation mean return, NaN without one), ``train_time`` (the run's
    CumTime) and ``sps``; [] when the file is missing."""
    try:
        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            names = list(reader.fieldnames or [])
            # TrainReturnWindow: the evaluating runners' window; without evaluation the
            # runner's TrainReturn is the window's mean already.
            train = _column(names, "TrainReturnWindow") or _column(names, "TrainReturn")
            cols = dict(steps=_column(names, "CumSteps"), train=train,
                        train_time=_column(names, "CumTime (s)"),
                        sps=_column(names, "StepsPerSecond"),
                        n_eval=_column(names, "NumEvalTrajs"))
            if cols["steps"] is None:
                return []
            out = []
            for raw in reader:
                row = {key: _number(raw.get(col)) if col else math.nan
                       for key, col in cols.items()}
                if math.isnan(row["steps"]):
                    continue  # a row being written
                has_eval = cols["n_eval"] is not None and row["n_eval"] > 0
                row["eval"] = _number(raw.get("ReturnAverage")) if has_eval else math.nan
                out.append(row)
            return out
    except OSError:
        return []


def interval_rates(rows: list[dict[str, float]]) -> list[float]:
    """Steps/s of each row's interval, from the run's own ``CumSteps`` and ``CumTime``
    (training time) against the row before; the row's ``StepsPerSecond`` column where either
    time is missing, and NaN for the first row or an interval without time (a resume's
    boundary). Not the column alone: rlfast before 305033d divided a short last interval's
    steps by the time of its one iteration, which made the last figure of a run 5-30x too high."""
    out = []
    for k, r in enumerate(rows):
        prev = rows[k - 1] if k else None
        if prev is None or math.isnan(r["train_time"]) or math.isnan(prev["train_time"]):
            out.append(r["sps"] if prev is not None else math.nan)
            continue
        dt, dn = r["train_time"] - prev["train_time"], r["steps"] - prev["steps"]
        out.append(dn / dt if dt > 0 and dn > 0 else math.nan)
    return out


@dataclass
class Monitor:
    """Samples the run's processes and progress rows from a thread until ``stop``.

    ``offset`` is the wall time of the earlier segments of a resumed run, so that times go on
    from where they stopped; ``samples`` and ``row_wall`` start with theirs. ``on_sample`` runs
    after each sample (the harness writes ``harness.json`` there, so that a harness killed with
    its run still leaves a record of what ran)."""

    pid: int
    progress: str
    interval_s: float
    offset: float = 0.0
    samples: list[dict] = field(default_factory=list)
    row_wall: list[float] = field(default_factory=list)  # wall seconds each row appeared by
    on_sample: Any = None
    t0: float = field(default_factory=time.monotonic)
    _stop: threading.Event = field(default_factory=threading.Event)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()  # the rows written at the very end

    def elapsed(self) -> float:
        return self.offset + time.monotonic() - self.t0

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()
            if self.on_sample is not None:
                self.on_sample()

    def sample(self) -> None:
        now = self.elapsed()
        stats = process_tree_stats(self.pid)
        # An exiting process (a zombie not yet reaped) reads as 0 MB: not a sample.
        if stats is not None and stats["rss_master_mb"] > 0:
            self.samples.append(dict(wall_s=round(now, 1), load1=os.getloadavg()[0],
                                     rss_mb=round(stats["rss_master_mb"]
                                                  + stats["rss_workers_mb"], 1),
                                     rss_master_mb=round(stats["rss_master_mb"], 1),
                                     processes=1 + stats["n_workers"]))
        n_rows = len(read_rows(self.progress))
        self.row_wall += [round(now, 1)] * (n_rows - len(self.row_wall))


def _write_json(path: str, data: dict) -> None:
    """Write, then rename: a reader never sees half a file."""
    with open(path + ".tmp", "w") as f:
        json.dump(data, f, indent=1)
    os.replace(path + ".tmp", path)


def run_row(row: Row, seed: int, out_dir: str, sample_s: float, steps: int | None,
            resume: bool = False) -> dict:
    """Train ``row`` in ``out_dir/run`` under a :class:`Monitor`; returns the record.

    With ``resume`` the run in ``out_dir`` goes on from its newest snapshot (``rlfast
    resume``): a new segment, appended to ``harness.json``, whose times follow the earlier
    segments' (the record's wall time is their sum, not counting the gaps between them)."""
    os.makedirs(out_dir, exist_ok=True)
    log_dir = os.path.join(out_dir, "run")
    harness_path = os.path.join(out_dir, "harness.json")
    prev = None
    if resume:
        with open(harness_path) as f:
            prev = json.load(f)
        if prev["row"] != row.name or prev["seed"] != seed:
            raise SystemExit(f"reproduce: {out_dir} holds row {prev['row']} seed {prev['seed']}")
        cmd = [sys.executable, "-m", "rlfast", "resume", log_dir, "--no-progress"]
        if steps:
            cmd += ["--steps", str(steps)]
        if row.algo in REPLAY_ALGOS:  # also for a run started without it: its next stop keeps it
            cmd.append("--snapshot-replay")
    else:
        cmd = train_command(row, seed, log_dir, steps)
    started = datetime.datetime.now().isoformat(timespec="seconds")
    print("$ " + " ".join(cmd[1:]), flush=True)
    with open(os.path.join(out_dir, "output.txt"), "a" if resume else "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, cwd=REPO_ROOT, env=child_env(),
                                start_new_session=True, preexec_fn=_child_setup)
    monitor = Monitor(proc.pid, os.path.join(log_dir, "progress.csv"), sample_s,
                      offset=prev["wall_s"] if prev else 0.0,
                      samples=list(prev["samples"]) if prev else [],
                      row_wall=list(prev["row_wall_s"]) if prev else [])
    segments = list(prev.get("segments", [])) if prev else []
    budget = steps or (prev["budget_steps"] if prev else row.steps)
    stopped: list[str] = []
    this_machine, commit = machine(), _commit()

    def harness() -> dict:
        segment = dict(command=cmd[1:], started=started, commit=commit, machine=this_machine,
                       wall_s=round(monitor.elapsed() - monitor.offset, 1),
                       exit_code=proc.returncode, stopped_by=stopped[0] if stopped else None)
        return dict(row=row.name, command=(prev or segment)["command"],
                    started=(prev or segment)["started"], wall_s=round(monitor.elapsed(), 1),
                    exit_code=proc.returncode, stopped_by=segment["stopped_by"],
                    budget_steps=budget, seed=seed, machine=this_machine, commit=commit,
                    samples=monitor.samples, row_wall_s=monitor.row_wall,
                    segments=segments + [segment])

    monitor.on_sample = lambda: _write_json(harness_path, harness())
    monitor.start()

    def stop(signum: int, _frame: Any) -> None:
        stopped.append(signal.Signals(signum).name)
        os.killpg(proc.pid, signal.SIGINT)

    old = {s: signal.signal(s, stop) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        while proc.poll() is None:
            try:
                proc.wait(timeout=1.0)
            except subprocess.TimeoutExpired:
                pass
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
        stop_group(proc)
        monitor.stop()
    _write_json(harness_path, harness())
    return build_record(out_dir)


def _commit() -> str:
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True,
                             text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=REPO_ROOT, capture_output=True, text=True,
                               timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return sha + ("+local changes" if dirty else "") if sha else "unknown"


# ---- the record ---------------------------------------------------------------------------
def _finite(values: list[float]) -> list[float]:
    return [v for v in values if not math.isnan(v)]


def _latest_rows(rows: list[dict], walls: list[float]) -> tuple[list[dict], list[float]]:
    """Drop the rows a resumed run trained again: a run stopped without a final snapshot (a
    power cut, a SIGKILL) logged rows past its newest snapshot, and the resumed run logs those
    steps anew; the later rows stand."""
    kept: list[tuple[dict, float]] = []
    for row, wall in zip(rows, walls):
        while kept and kept[-1][0]["steps"] >= row["steps"]:
            kept.pop()
        kept.append((row, wall))
    return [r for r, _ in kept], [w for _, w in kept]


def build_record(out_dir: str) -> dict:
    """The record of the harness folder ``out_dir`` (``harness.json`` and ``run/``): written
    to ``record.json`` and drawn to ``curve.png`` there, and returned."""
    with open(os.path.join(out_dir, "harness.json")) as f:
        info = json.load(f)
    row = ROWS[info["row"]]
    rows = read_rows(os.path.join(out_dir, "run", "progress.csv"))
    walls = info["row_wall_s"] + [info["wall_s"]] * (len(rows) - len(info["row_wall_s"]))
    rows, walls = _latest_rows(rows, walls[:len(rows)])
    metric = [r[row.metric] for r in rows]
    hit = next((i for i, v in enumerate(metric) if not math.isnan(v) and v >= row.threshold),
               None)
    evals = [(r["steps"], r["eval"]) for r in rows if not math.isnan(r["eval"])]
    trains = [(r["steps"], r["train"]) for r in rows if not math.isnan(r["train"])]
    best_eval = max(evals, key=lambda sr: (sr[1], -sr[0])) if evals else None
    best_train = max(trains, key=lambda sr: (sr[1], -sr[0])) if trains else None
    samples = info["samples"]
    # RSS "at the start": the first sample after the first training row (buffers allocated,
    # the model built and the first update done), not the interpreter starting up.
    first_wall = next((w for r, w in zip(rows, walls) if r["train_time"] > 0), None)
    after = [s for s in samples if first_wall is not None and s["wall_s"] >= first_wall]
    sps = [dict(steps=int(r["steps"]), wall_s=w, sps=round(v, 1))
           for r, w, v in zip(rows, walls, interval_rates(rows)) if not math.isnan(v)]
    loads = [s["load1"] for s in samples]
    record = dict(
        row=row.name, algo=row.algo, env=row.env, sets=list(row.sets), seed=info["seed"],
        budget_steps=info["budget_steps"], steps_done=int(rows[-1]["steps"]) if rows else 0,
        published=row.published, source=row.source, threshold=row.threshold,
        metric=row.metric, window=row.window, note=row.note,
        reached=hit is not None,
        steps_to_threshold=int(rows[hit]["steps"]) if hit is not None else None,
        wall_s_to_threshold=walls[hit] if hit is not None else None,
        final_eval=evals[-1][1] if evals else None,
        best_eval=best_eval[1] if best_eval else None,
        best_eval_steps=int(best_eval[0]) if best_eval else None,
        final_train=trains[-1][1] if trains else None,
        best_train=best_train[1] if best_train else None,
        best_train_steps=int(best_train[0]) if best_train else None,
        wall_s=info["wall_s"], exit_code=info["exit_code"], stopped_by=info["stopped_by"],
        segments=len(info.get("segments", [])) or 1,
        sittings=_sittings(info.get("segments", []),
                           resume_events(os.path.join(out_dir, "output.txt"))),
        sps_start=sps[1]["sps"] if len(sps) > 1 else (sps[0]["sps"] if sps else None),
        sps_end=sps[-1]["sps"] if sps else None,
        rss_start_mb=after[0]["rss_mb"] if after else None,
        rss_end_mb=samples[-1]["rss_mb"] if samples else None,
        rss_peak_mb=max((s["rss_mb"] for s in samples), default=None),
        load1_median=round(statistics.median(loads), 2) if loads else None,
        load1_max=round(max(loads), 2) if loads else None,
        machine=info["machine"], commit=info["commit"], started=info["started"],
        command=info["command"],
        curve=[dict(steps=int(r["steps"]), wall_s=w,
                    train=None if math.isnan(r["train"]) else round(r["train"], 3),
                    eval=None if math.isnan(r["eval"]) else round(r["eval"], 3))
               for r, w in zip(rows, walls)],
        sps_over_time=sps,
        rss_over_time=[dict(wall_s=s["wall_s"], rss_mb=s["rss_mb"]) for s in samples],
    )
    _write_json(os.path.join(out_dir, "record.json"), record)
    plot_record(record, os.path.join(out_dir, "curve.png"))
    return record


def _sittings(segments: list[dict], events: list[dict]) -> list[dict]:
    """Each segment of a run as the record keeps it; a resumed one (every one after the first)
    with what its resume did (:func:`resume_events`)."""
    out = []
    for i, seg in enumerate(segments):
        item = {k: seg.get(k) for k in ("started", "wall_s", "exit_code", "machine", "commit")}
        if 0 < i <= len(events):
            item.update(events[i - 1])
        out.append(item)
    return out


def _sitting_line(i: int, seg: dict) -> str:
    line = (f"- Sitting {i}: started {seg['started']}, {_hours(seg['wall_s'])} on "
            f"{seg['machine']} (commit {seg['commit']})")
    if "resumed_at_steps" in seg:
        line += f"; resumed at {seg['resumed_at_steps']:,} steps"
        if seg.get("replay_refilled"):
            line += (", its replay buffer refilled from empty (the snapshot held none: the "
                     "run was started without --snapshot-replay)")
        if seg.get("new_episodes"):
            line += ", its environments starting new episodes"
    return line


def plot_record(record: dict, path: str) -> None:
    """The learning curve of ``record``, with the published figure and the threshold."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=100)
    curve = record["curve"]
    frames = 4 if record["env"].startswith("atari:") else 1
    xs = [c["steps"] for c in curve]
    train = [(x, c["train"]) for x, c in zip(xs, curve) if c["train"] is not None]
    evals = [(x, c["eval"]) for x, c in zip(xs, curve) if c["eval"] is not None]
    if train:
        ax.plot(*zip(*train), label=f"training return (last {record['window']} episodes)")
    if evals:
        ax.plot(*zip(*evals), "o-", markersize=3, label="evaluation return")
    if record["published"] is not None:
        ax.axhline(record["published"], color="k", linestyle="--", linewidth=1,
                   label=f"published: {record['published']:g}")
    ax.axhline(record["threshold"], color="tab:red", linestyle=":", linewidth=1,
               label=f"threshold ({record['metric']}): {record['threshold']:g}")
    ax.set_xlabel("agent steps" + (" (x4 = frames)" if frames == 4 else ""))
    ax.set_ylabel("return")
    hours = record["wall_s"] / 3600
    ax.set_title(f"{record['algo']} {record['env']}, seed {record['seed']}: "
                 f"{record['steps_done']:,} steps in {hours:.2f} h", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def unfinished(record: dict) -> str | None:
    """Why ``record`` is not a whole run (stopped by a signal, failed, or short of its
    budget), or None for a whole one."""
    done, budget = record.get("steps_done") or 0, record.get("budget_steps") or 0
    if record.get("stopped_by"):
        why = f"stopped by {record['stopped_by']}"
    elif record.get("exit_code") != 0:
        why = f"exit code {record.get('exit_code')}"
    elif done < budget:
        why = "short of its budget"
    else:
        return None
    return f"{why} at {done:,} of {budget:,} steps"


def keep(out_dir: str, results_dir: str = RESULTS_DIR) -> str:
    """Copy the record and picture of ``out_dir`` into ``results_dir`` as
    ``<row>_s<seed>.json`` / ``.png``; returns the JSON path. A run that did not finish is
    refused (``ValueError``): the results page quotes whole runs only."""
    with open(os.path.join(out_dir, "record.json")) as f:
        record = json.load(f)
    why = unfinished(record)
    if why:
        raise ValueError(f"not kept: {record['row']} seed {record['seed']} {why}; go on with "
                         f"scripts/reproduce.py --resume {out_dir} --keep")
    os.makedirs(results_dir, exist_ok=True)
    stem = os.path.join(results_dir, f"{record['row']}_s{record['seed']}")
    shutil.copyfile(os.path.join(out_dir, "record.json"), stem + ".json")
    shutil.copyfile(os.path.join(out_dir, "curve.png"), stem + ".png")
    return stem + ".json"


# ---- the table ----------------------------------------------------------------------------
def _fmt(value: Any, digits: int = 1) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return f"{value:,}"


def _hours(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return f"{seconds / 3600:.2f} h" if seconds >= 3600 else f"{seconds / 60:.1f} min"


def table(results_dir: str = RESULTS_DIR, include_smoke: bool = False) -> str:
    """The Markdown table of the records in ``results_dir``."""
    names = sorted(n for n in os.listdir(results_dir) if n.endswith(".json")) \
        if os.path.isdir(results_dir) else []
    lines = ["| row | algorithm | task | budget (steps) | seed | published | threshold "
             "| final eval | best eval | final train | reached at (steps) | wall to threshold "
             "| wall | steps/s start → end | RSS start → end (MB) | load (median) |",
             "|" + "---|" * 16]
    for name in names:
        with open(os.path.join(results_dir, name)) as f:
            r = json.load(f)
        if r["row"].endswith("_smoke") and not include_smoke:
            continue
        lines.append(
            f"| {r['row']} | {r['algo']} | {r['env']} | {r['budget_steps']:,} | {r['seed']} "
            f"| {_figure(r['published'])} | {r['metric']} ≥ {r['threshold']:g} "
            f"| {_fmt(r['final_eval'])} | {_fmt(r['best_eval'])} | {_fmt(r['final_train'])} "
            f"| {_fmt(r['steps_to_threshold']) if r['reached'] else 'not reached'} "
            f"| {_hours(r['wall_s_to_threshold'])} | {_hours(r['wall_s'])} "
            f"| {_fmt(r['sps_start'], 0)} → {_fmt(r['sps_end'], 0)} "
            f"| {_fmt(r['rss_start_mb'], 0)} → {_fmt(r['rss_end_mb'], 0)} "
            f"| {_fmt(r['load1_median'], 2)} |")
    return "\n".join(lines)


PAGE_INTRO = """# Results at published budgets

Each row trains one rlfast preset for a published budget and holds the result against a
published figure. Every number and picture on this page comes from a run of
`scripts/reproduce.py ROW --seed S --keep`, whose JSON record sits beside this file
(`<row>_s<seed>.json`); `python scripts/reproduce.py --page` rewrites the page from them,
with what each run showed (`<row>_s<seed>.md`, written after looking at the run) under its
picture.

How to read the table:
- *final* / *best eval*: the mean return of the evaluation episodes at the last progress row and
  the best one; *final train*: the mean return of the last `window` training episodes at the
  end.
- *reached at*: the first progress row at which the row's metric met its threshold.
- Wall times and steps/s depend on the machine and its load. Each row gives the 1-minute load
  average over its run (median); a 2-core machine runs one training job at a load of about
  2-3, so a higher figure means that other work shared the cores.
- Scores and steps-to-threshold do not depend on the load.
"""


def _relative(command: str) -> str:
    """A command line with the path of the checkout that ran it left out before ``data/``
    (the page is read, and rebuilt, from other checkouts)."""
    return re.sub(r"(?<!\S)/\S*?/(data/reproduce/)", r"\1", command.replace(REPO_ROOT + os.sep, ""))


def _figure(value: float | None) -> str:
    return "-" if value is None else f"{value:,.2f}".rstrip("0").rstrip(".")


def page(results_dir: str = RESULTS_DIR) -> str:
    """The results page (Markdown) of the kept records in ``results_dir``."""
    records = []
    for name in sorted(os.listdir(results_dir)) if os.path.isdir(results_dir) else []:
        if name.endswith(".json"):
            with open(os.path.join(results_dir, name)) as f:
                record = json.load(f)
            if not record["row"].endswith("_smoke"):
                records.append((name[:-5], record))
    parts = [PAGE_INTRO, "## The table\n", table(results_dir), ""]
    for stem, r in records:
        verdict = (f"reached {r['metric']} >= {r['threshold']:g} at {r['steps_to_threshold']:,} "
                   f"steps, {_hours(r['wall_s_to_threshold'])} into the run"
                   if r["reached"] else f"did not reach {r['metric']} >= {r['threshold']:g}")
        parts += [f"## {r['row']}, seed {r['seed']}: {r['algo']} on {r['env']}\n",
                  f"![learning curve of {r['row']}]({stem}.png)\n",
                  f"- Budget: {r['budget_steps']:,} agent steps; ran {r['steps_done']:,} in "
                  f"{_hours(r['wall_s'])}"
                  + (f" over {r['segments']} sittings (resumed from snapshots)"
                     if r.get("segments", 1) > 1 else "")
                  + f" (exit code {r['exit_code']}); {verdict}.",
                  f"- Published: {_figure(r['published'])}. Source: {r['source']}."
                  + (f" {r['note'][0].upper() + r['note'][1:]}." if r["note"] else ""),
                  f"- Final / best evaluation return: {_fmt(r['final_eval'])} / "
                  f"{_fmt(r['best_eval'])} (at {_fmt(r['best_eval_steps'])} steps); final / best "
                  f"training return (last {r['window']} episodes): {_fmt(r['final_train'])} / "
                  f"{_fmt(r['best_train'])}.",
                  f"- Steps/s at the start and the end: {_fmt(r['sps_start'], 0)} and "
                  f"{_fmt(r['sps_end'], 0)}; RSS of all the run's processes at the start, the end "
                  f"and the peak: {_fmt(r['rss_start_mb'], 0)}, {_fmt(r['rss_end_mb'], 0)} and "
                  f"{_fmt(r['rss_peak_mb'], 0)} MB; load average median "
                  f"{_fmt(r['load1_median'], 2)}, max {_fmt(r['load1_max'], 2)}.",
                  f"- Machine: {r['machine']}. Commit {r['commit']}, started {r['started']}.",
                  *([_sitting_line(i, seg) for i, seg in enumerate(r["sittings"], 1)]
                    if r.get("segments", 1) > 1 else []),
                  f"- Command: `python {_relative(' '.join(r['command']))}`", ""]
        findings = os.path.join(results_dir, stem + ".md")
        if os.path.exists(findings):  # what the run showed, written after looking at it
            with open(findings) as f:
                parts += [f.read().strip(), ""]
    done = {r["row"] for _, r in records}
    waiting = [row for row in ROWS.values() if not row.smoke and row.name not in done]
    if waiting:
        parts += ["## Rows not yet run to their budget\n"]
        parts += [f"- `{row.name}`: {row.algo} on {row.env}, {row.steps:,} steps, "
                  f"{row.metric} >= {row.threshold:g} (published {row.published:g})."
                  for row in waiting]
        parts.append("")
    return "\n".join(parts)


README = os.path.join(REPO_ROOT, "README.md")
TABLE_START = "<!-- results-table: python scripts/reproduce.py --table -->"
TABLE_END = "<!-- /results-table -->"


def readme_with_table(text: str, results_table: str) -> str:
    """``text`` (the README) with the block between the results-table markers replaced by
    ``results_table``; ValueError when the markers are missing."""
    start, end = text.find(TABLE_START), text.find(TABLE_END)
    if start < 0 or end < start:
        raise ValueError(f"the README has no {TABLE_START!r} ... {TABLE_END!r} block")
    return text[:start + len(TABLE_START)] + "\n" + results_table + "\n" + text[end:]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("row", nargs="?", help="the row to run (see --list)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=None,
                        help="override the row's budget (the record says so)")
    parser.add_argument("--out", default=None, help="harness folder (default "
                        "data/reproduce/<row>_s<seed>_<time>)")
    parser.add_argument("--sample-s", type=float, default=10.0,
                        help="seconds between samples of memory and progress (default 10)")
    parser.add_argument("--keep", action="store_true",
                        help="copy the record and picture into docs/results/")
    parser.add_argument("--record", metavar="DIR", help="rebuild the record of a harness folder")
    parser.add_argument("--resume", metavar="DIR", help="go on with the stopped run of a harness "
                        "folder from its newest snapshot (rlfast resume), as a new segment")
    parser.add_argument("--table", action="store_true", help="print the table of kept records")
    parser.add_argument("--smoke", action="store_true", help="with --table: smoke rows too")
    parser.add_argument("--results", default=RESULTS_DIR, help="folder of kept records")
    parser.add_argument("--list", action="store_true", help="list the rows")
    parser.add_argument("--page", action="store_true", help="rewrite the results page, "
                        "README.md in the folder of kept records, from its records (and, for "
                        "docs/results, the table in the project's README)")
    args = parser.parse_args(argv)
    if args.list:
        for row in ROWS.values():
            print(f"{row.name:24s} {row.algo:8s} {row.env:24s} {row.steps:>10,} steps  "
                  f"{row.metric} >= {row.threshold:g}  (published {row.published})")
        return 0
    if args.table:
        print(table(args.results, include_smoke=args.smoke))
        return 0
    if args.page:
        os.makedirs(args.results, exist_ok=True)
        path = os.path.join(args.results, "README.md")
        with open(path + ".tmp", "w") as f:
            f.write(page(args.results))
        os.replace(path + ".tmp", path)
        print("wrote", path)
        if os.path.abspath(args.results) == RESULTS_DIR:  # the README quotes these records
            with open(README, encoding="utf-8") as f:
                text = readme_with_table(f.read(), table(args.results))
            with open(README + ".tmp", "w", encoding="utf-8") as f:
                f.write(text)
            os.replace(README + ".tmp", README)
            print("wrote the table in", README)
        return 0
    if args.resume:
        with open(os.path.join(args.resume, "harness.json")) as f:
            info = json.load(f)
        record = run_row(ROWS[info["row"]], info["seed"], args.resume, args.sample_s, args.steps,
                         resume=True)
        args.record = args.resume
    elif args.record:
        record = build_record(args.record)
    else:
        if args.row not in ROWS:
            parser.error(f"unknown row {args.row!r}; rows: {', '.join(ROWS)}")
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
        out = args.out or os.path.join(REPO_ROOT, "data", "reproduce",
                                       f"{args.row}_s{args.seed}_{stamp}")
        record = run_row(ROWS[args.row], args.seed, out, args.sample_s, args.steps)
        args.record = out
    print(json.dumps({k: v for k, v in record.items()
                      if k not in ("curve", "sps_over_time", "rss_over_time", "command")},
                     indent=1))
    if args.keep:
        try:
            print("kept:", os.path.relpath(keep(args.record, args.results), REPO_ROOT))
        except ValueError as error:
            print(error)
            return 1
    return 0 if record["exit_code"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
