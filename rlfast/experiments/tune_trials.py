"""Running the trials of ``rlfast tune`` (:mod:`rlfast.experiments.tune` is the command).

``Search`` runs a study's remaining trials ``setup.parallel`` at a time, each on a run slot
taken from a thread-safe pool: a trial samples the search space and trains ``rlfast train
ALGO ENV`` as a subprocess in ``<log-dir>/trial_<n>``, pinned to its slot's affinity code;
the parent reads the child's ``progress.csv`` as it grows (every ``POLL_S``, with
``ProgressReader``) and reports each evaluation row to Optuna; a trial that falls below the
median of the completed ones is pruned: its child gets SIGTERM (then SIGKILL after a grace
period) and the trial ends PRUNED. A trial whose sampled values leave its budget no update
(``trial_learning_problem``) is PRUNED before its child starts. Also here: ``TuneSetup``
(the checked search the trials run), the trial's value, stopping every child on SIGINT /
SIGTERM, and finding and stopping a child that a killed search left running. The settings
and why are in the docstring of :mod:`rlfast.experiments.tune`.
"""
from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from typing import Any

import psutil

from rlfast.experiments.search_spaces import space_to_json, suggest

__all__ = ["TuneSetup", "Search", "TrialFailed", "SearchInterrupted", "ProgressReader",
           "POLL_S", "INTERRUPT_WAIT_S", "finished_trials", "trial_learning_problem",
           "override_text", "process_alive", "stop_orphan"]

POLL_S = 0.5
INTERRUPT_WAIT_S = 2.0  # a child ended by SIGINT/SIGTERM: wait this long for our own signal
_INTERRUPTED = (128 + signal.SIGINT, 128 + signal.SIGTERM, -signal.SIGINT, -signal.SIGTERM)


class TrialFailed(Exception):
    """A trial's ``rlfast train`` exited with an error (or logged no evaluation return)."""


class SearchInterrupted(Exception):
    """The search received SIGINT or SIGTERM; the running trials were stopped."""


@dataclasses.dataclass
class TuneSetup:
    """Everything a search needs, checked before anything runs."""

    algo: str
    env: str
    trials: int
    search: str
    steps: int
    seed: int
    log_dir: str
    space: dict
    base_config: dict  # the trials' config before sampling (flat); log interval excluded
    user_changes: dict  # flat keys the command line changed from the preset
    train_args: list  # rlfast train options shared by every trial
    log_interval: int
    slot_codes: list
    enqueue: list
    trial_env: dict = dataclasses.field(default_factory=dict)  # extra env vars of the trials
    # The trials' resolved config before sampling (nested, the space's keys at their preset
    # values): what trial_learning_problem builds a sampled trial from ({}: not checked).
    config: dict = dataclasses.field(default_factory=dict)
    notes: list = dataclasses.field(default_factory=list)  # start-up lines (overridden --steps)

    @property
    def parallel(self) -> int:
        return len(self.slot_codes)

    def signature(self) -> dict:
        """What makes two commands the same search (stored in the study)."""
        return dict(algo=self.algo, env=self.env, seed=self.seed,
                    space=space_to_json(self.space),
                    config=json.loads(json.dumps(self.base_config, default=str)))


def trial_learning_problem(setup: TuneSetup, params: dict) -> str | None:
    """Why a trial of ``setup`` with the sampled ``params`` would end before its algorithm's
    first update (e.g. SAC drawing ``algo.min_steps_learn`` 5000 on a 3000-step budget), or
    None. The trial's run is built, not started, from ``setup.config`` with ``params`` set
    as its ``rlfast train`` gets them (``--set``), and checked by
    :func:`rlfast.experiments.budget.learning_budget_warning`. A configuration that does
    not build is None here: the trial's ``rlfast train`` reports it."""
    from rlfast.experiments import catalog
    from rlfast.experiments.config import apply_overrides
    from rlfast.experiments.budget import learning_budget_warning
    from rlfast.experiments.presets import build_experiment

    if not setup.config or not catalog.algorithm(setup.algo).replay:
        return None  # on-policy algorithms learn from their first batch
    try:
        config = apply_overrides(setup.config, [f"{key}={override_text(value)}"
                                                for key, value in params.items()])
        runner = build_experiment(setup.algo, setup.env, config, sampler="serial",
                                  device="cpu")
    except (ValueError, TypeError):
        return None
    return learning_budget_warning(setup.algo, runner, steps_label=f"--steps {setup.steps}")


def finished_trials(study: Any) -> int:
    """The study's finished trials (COMPLETE or PRUNED): those that count toward
    ``--trials``."""
    from optuna.trial import TrialState
    return len(study.get_trials(deepcopy=False,
                                states=(TrialState.COMPLETE, TrialState.PRUNED)))


# -------------------------------------------------------------------------------- trials

class Search:
    """Runs the remaining trials of a study, ``setup.parallel`` at a time, and stops them
    all on SIGINT / SIGTERM."""

    def __init__(self, setup: TuneSetup, study: Any):
        self.setup = setup
        self.study = study
        self.stop = threading.Event()
        self.signum: int | None = None
        self.slots: queue.Queue = queue.Queue()
        for k in range(setup.parallel):
            self.slots.put(k)
        self.print_lock = threading.Lock()
        self.tune_started = psutil.Process().create_time()

    def finished(self) -> int:
        return finished_trials(self.study)

    def run(self) -> int | None:
        """Optimize until ``setup.trials`` trials have finished; the signal number if the
        search was interrupted, else None."""
        remaining = self.setup.trials - self.finished()
        if remaining <= 0:
            self.say(f"the study already holds {self.finished()} finished trials "
                     f"(--trials {self.setup.trials}); nothing to run")
            return None
        self.say(f"rlfast tune {self.setup.algo} {self.setup.env}: {remaining} trial(s) of "
                 f"{self.setup.steps} steps, {self.setup.parallel} at a time; logging to "
                 f"{self.setup.log_dir}")
        for note in self.setup.notes:
            self.say(note)
        previous = self._install_handlers()
        try:
            self.study.optimize(self.objective, n_trials=remaining,
                                n_jobs=self.setup.parallel, catch=(TrialFailed,))
        except SearchInterrupted:
            pass
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
        return self.signum if self.stop.is_set() else None

    def _install_handlers(self) -> dict:
        if threading.current_thread() is not threading.main_thread():
            return {}

        def handler(signum: int, frame: Any) -> None:
            # Only flags: the trial threads stop their children and end their trials
            # (printing or raising here could break a write in progress).
            if self.signum is None:
                self.signum = signum
            self.stop.set()

        return {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}

    def say(self, text: str, err: bool = False) -> None:
        with self.print_lock:
            print(text, file=sys.stderr if err else sys.stdout, flush=True)

    def objective(self, trial: Any) -> float:
        """Train one sampled configuration; its value is the mean evaluation return of
        its last two log rows (see :mod:`rlfast.experiments.tune`)."""
        import optuna

        if self.stop.is_set():
            raise SearchInterrupted()
        params = {key: suggest(trial, key, spec) for key, spec in self.setup.space.items()}
        unlearned = trial_learning_problem(self.setup, params)
        if unlearned is not None:  # it would finish, logging returns, without learning
            trial.set_user_attr("unlearned", unlearned)
            self.say(f"[trial {trial.number}] PRUNED before training: {unlearned}")
            raise optuna.TrialPruned(unlearned)
        slot = self.slots.get()
        try:
            trial_dir = os.path.join(self.setup.log_dir, f"trial_{trial.number}")
            os.makedirs(trial_dir, exist_ok=True)
            trial.set_user_attr("tune_pid", os.getpid())
            trial.set_user_attr("tune_started", self.tune_started)
            started = time.monotonic()
            proc = self._start(trial_dir, slot, params)
            try:
                trial.set_user_attr("child_pid", proc.pid)
                trial.set_user_attr("child_started", psutil.Process(proc.pid).create_time())
            except psutil.Error:
                pass  # exited already; the watch below reports it
            try:
                rows, pruned = self._watch(trial, proc, trial_dir)
            finally:
                if proc.poll() is None:  # an error in this thread: leave no child behind
                    _stop_child(proc)
            elapsed = time.monotonic() - started
            steps = rows[-1][0] if rows else 0
            if pruned:
                self.say(f"[trial {trial.number}] PRUNED at {steps} steps ({elapsed:.0f} s)")
                raise optuna.TrialPruned(f"below the median at {steps} steps")
            if proc.returncode != 0 and proc.returncode in _INTERRUPTED:
                # Ctrl-C in a terminal signals the child too; the search's own handler
                # runs at once but may not have run yet.
                if self.stop.wait(INTERRUPT_WAIT_S):
                    raise SearchInterrupted()
            if proc.returncode != 0:
                message = (f"rlfast train exited with code {proc.returncode}; "
                           f"{os.path.join(trial_dir, 'train.stderr.txt')} ends:"
                           f"{_tail(os.path.join(trial_dir, 'train.stderr.txt'))}")
                self.say(f"[trial {trial.number}] FAIL: {message}", err=True)
                raise TrialFailed(message)
            returns = [ret for step, ret in rows if step > 0 and not math.isnan(ret)]
            if not returns:
                message = "no evaluation return was logged (raise sampler.eval_max_steps?)"
                self.say(f"[trial {trial.number}] FAIL: {message}", err=True)
                raise TrialFailed(message)
            value = sum(returns[-2:]) / len(returns[-2:])
            self.say(f"[trial {trial.number}] COMPLETE value {value:.2f} after {steps} steps "
                     f"({elapsed:.0f} s)")
            return value
        finally:
            self.slots.put(slot)

    def _start(self, trial_dir: str, slot: int, params: dict) -> subprocess.Popen:
        setup = self.setup
        command = [sys.executable, "-m", "rlfast", "train", setup.algo, setup.env,
                   "--log-dir", trial_dir, "--overwrite", "--affinity", setup.slot_codes[slot],
                   *setup.train_args]
        for key, value in params.items():
            command += ["--set", f"{key}={override_text(value)}"]
        env = dict(os.environ, PYTHONUNBUFFERED="1", **setup.trial_env)
        with open(os.path.join(trial_dir, "train.stdout.txt"), "ab") as out, \
                open(os.path.join(trial_dir, "train.stderr.txt"), "ab") as err:
            return subprocess.Popen(command, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                    env=env)

    def _watch(self, trial: Any, proc: subprocess.Popen,
               trial_dir: str) -> tuple[list[tuple[int, float]], bool]:
        """Report the child's new log rows until it exits, is pruned or the search stops;
        returns (rows as (steps, return), pruned)."""
        reader = ProgressReader(os.path.join(trial_dir, "progress.csv"))
        rows: list[tuple[int, float]] = []
        while True:
            try:
                proc.wait(timeout=POLL_S)
                done = True
            except subprocess.TimeoutExpired:
                done = False
            prune = False
            for step, ret in reader.new_rows():
                rows.append((step, ret))
                if step <= 0 or math.isnan(ret):
                    continue
                trial.report(ret, step)
                if not done and step < self.setup.steps and trial.should_prune():
                    prune = True
                    break
            if prune:
                _stop_child(proc)
                return rows, True
            if done:  # finished (a run that ended just as the search stops still counts)
                return rows, False
            if self.stop.is_set():
                _stop_child(proc)
                raise SearchInterrupted()


def _stop_child(proc: subprocess.Popen) -> None:
    """SIGTERM the trial's ``rlfast train`` (it stops its workers and exits), SIGKILL
    whatever outlives the launcher's grace period."""
    from rlfast.launching.children import stop_children
    stop_children([proc])


def override_text(value: Any) -> str:
    """``value`` as the VALUE of ``--set KEY=VALUE`` (``repr`` keeps a float exact)."""
    return repr(value) if isinstance(value, float) else str(value)


def _tail(path: str, n_lines: int = 5) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()[-n_lines:]
    except OSError:
        return " (no stderr file)"
    return "".join(f"\n    | {line}" for line in lines) or " (empty)"


class ProgressReader:
    """The (``Diagnostics/CumSteps``, ``ReturnAverage``) rows of a growing progress.csv.

    The file is reread whole at each call (it is small, and the logger may rewrite it with
    a wider header); a last line without its newline is still being written and waits for
    the next call. ``new_rows`` returns the rows not returned before.
    """

    def __init__(self, path: str):
        self.path = path
        self.seen = 0

    def all_rows(self) -> list[tuple[int, float]]:
        try:
            with open(self.path, encoding="utf-8", newline="") as f:
                text = f.read()
        except OSError:
            return []
        if not text.endswith("\n"):
            text = text[:text.rfind("\n") + 1]
        rows = []
        for row in csv.DictReader(io.StringIO(text)):
            try:
                steps = int(float(row.get("Diagnostics/CumSteps") or "nan"))
            except ValueError:
                continue
            rows.append((steps, _number(row.get("ReturnAverage"))))
        return rows

    def new_rows(self) -> list[tuple[int, float]]:
        rows = self.all_rows()
        new, self.seen = rows[self.seen:], len(rows)
        return new


def _number(cell: str | None) -> float:
    try:
        return float(cell) if cell else math.nan
    except ValueError:
        return math.nan


# ----------------------------------------------------------- children of a killed search

def process_alive(pid: int, started: float | None) -> bool:
    """Whether process ``pid`` is the one that started at ``started`` (not a reused pid)."""
    try:
        proc = psutil.Process(pid)
        return (proc.status() != psutil.STATUS_ZOMBIE
                and (started is None or abs(proc.create_time() - started) < 0.5))
    except psutil.Error:
        return False


def stop_orphan(pid: int) -> None:
    """Stop an ``rlfast train`` whose search was killed, and its descendants."""
    from rlfast.launching.children import TERMINATE_GRACE_S, kill_after_grace
    try:
        proc = psutil.Process(pid)
        procs = [proc, *proc.children(recursive=True)]
    except psutil.Error:
        return
    for p in procs:
        try:
            p.terminate()
        except psutil.Error:
            pass
    kill_after_grace(procs, TERMINATE_GRACE_S)
