"""``rlfast tune ALGO ENV --trials N``: an Optuna hyperparameter search over ``rlfast train``.

Each trial samples the algorithm's search space (``rlfast.experiments.search_spaces``, or
``--search-space FILE``) and trains ``rlfast train ALGO ENV`` as a subprocess in
``<log-dir>/trial_<n>``, pinned to a free run slot of the machine's affinity code. The parent
reads the child's ``progress.csv`` as it grows (every ``POLL_S``) and reports each
evaluation row to Optuna; a trial that falls below the median of the completed ones is
pruned: its child gets SIGTERM (then SIGKILL after a grace period) and the trial ends
PRUNED.

Settings and why:

* Trial value: the mean ``ReturnAverage`` (greedy evaluation return) of the trial's last two
  log rows. Two rows rather than the best or the last one reward a policy that is good and
  stays good at the end of training, which is what ``rlfast train --config`` reproduces.
* Intermediate values: every row after the pre-training evaluation (``CumSteps`` 0 says
  nothing about the hyperparameters), with ``step = Diagnostics/CumSteps``; NaN returns
  (no evaluation episode finished) are skipped. The log interval is chosen (unless the
  user sets ``runner.log_interval_steps``) as a multiple of every batch size the space can
  produce, so that all trials log at the same steps (Optuna's median compares equal steps),
  and small enough for ``MIN_LOG_ROWS`` rows.
* Pruner: ``MedianPruner(n_startup_trials=2, n_warmup_steps=<log interval> + 1)``: nothing
  is pruned before two trials have completed, and never on a trial's first training row
  (one interval is too early to judge on CartPole-like tasks); from the second row on, a
  trial whose best return so far is below the median of the completed trials at that step
  is stopped.
* Samplers: ``RandomSampler(seed)`` or ``TPESampler(seed, n_startup_trials=max(2, min(10,
  N // 3)))``; the seed is offset by the number of trials already in the study, so that a
  continued search does not replay its first samples. With ``--parallel`` > 1 Optuna
  reseeds per thread, so parallel searches are not bit-reproducible.
* Study: SQLite at ``<log-dir>/study.db``, study name ``rlfast-tune``, reopened by the same
  command: COMPLETE and PRUNED trials count toward ``--trials``; trials left RUNNING by a
  search that was killed are marked FAIL (and their orphaned ``rlfast train``, if any, is
  stopped). A study made by a different command (algorithm, environment, seed, space or
  fixed config) is refused.
* Slots: ``--parallel K`` runs K trials at once, each in its own run slot of the affinity
  code (``--affinity CODE``, or the available cores split evenly: ``encode_affinity(
  n_cpu_core=K * (cores // K), cpu_per_run=cores // K)``), taken from a thread-safe pool.
* Outputs: ``trials.md`` (number, state, value, steps reached, sampled values; a pruned
  trial's value is Optuna's, its last reported return) and ``best_config.json``: the best
  trial's sampled values plus the settings this command changed from the preset (``--set``,
  ``--config``, ``--steps``), nested as ``rlfast train --config`` takes them. The log
  interval picked here for pruning is left out: it changes only when evaluations happen.
* ``--search-space FILE`` replaces the space and ``--enqueue FILE`` has the first trials
  evaluate given values (Optuna's ``enqueue_trial``): for custom searches and warm starts,
  and what makes the pruning test deterministic (tests/experiments/test_tune.py).

Ctrl-C or SIGTERM stops every running child, marks their trials FAIL, writes the report of
what finished and exits 130 / 143; running the same command again continues the search.
"""
from __future__ import annotations

import argparse
import csv
import dataclasses
import datetime
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
import warnings
from typing import Any

import psutil

from rlfast.experiments.config import (ConfigError, apply_config_values, apply_overrides,
                                       flatten, load_config_file, nest, read_json)
from rlfast.experiments.search_spaces import (SEARCH_SPACES, enqueue_params, space_from_json,
                                              space_to_json, suggest)

__all__ = ["add_tune_parser", "tune_main", "TRIAL_STEPS", "STUDY_NAME"]

STUDY_NAME = "rlfast-tune"
STUDY_FILE = "study.db"
BEST_CONFIG_FILE = "best_config.json"
TRIALS_FILE = "trials.md"
POLL_S = 0.5
MIN_LOG_ROWS = 4  # training rows per trial, at least: the pruner needs several
PRUNER_STARTUP_TRIALS = 2
_MISSING = object()
INTERRUPT_WAIT_S = 2.0  # a child ended by SIGINT/SIGTERM: wait this long for our own signal
_INTERRUPTED = (128 + signal.SIGINT, 128 + signal.SIGTERM, -signal.SIGINT, -signal.SIGTERM)

# Trial budgets (environment steps) chosen for a search rather than taken from the preset.
# CartPole-v1, measured with `rlfast tune ALGO CartPole-v1 --trials 12 --parallel 2` on 2
# cores: with 100k (ppo) and 200k (a2c) steps per trial the best trial ended at 500 (two
# final evaluations), in about a minute each, pruning 4 and 9 trials; shorter budgets leave
# a linear-decay PPO little time to settle. Pinned here so that a preset change does not
# silently change what a search on CartPole costs and finds.
TRIAL_STEPS: dict[tuple[str, str], int] = {
    ("ppo", "CartPole-v1"): 100_000,
    ("a2c", "CartPole-v1"): 200_000,
}


class TrialFailed(Exception):
    """A trial's ``rlfast train`` exited with an error (or logged no evaluation return)."""


class SearchInterrupted(Exception):
    """The search received SIGINT or SIGTERM; the running trials were stopped."""


def add_tune_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``tune ALGO ENV --trials N [--search random|tpe] [--parallel K] ...``."""
    parser = subparsers.add_parser(
        "tune", help="search hyperparameters with Optuna (trials run rlfast train)",
        description="Search the hyperparameters of ALGO on ENV: each of N trials trains "
                    "`rlfast train` with values sampled from the algorithm's search space; "
                    "poor trials are pruned early. Results: <log-dir>/trials.md and "
                    "best_config.json (for rlfast train --config). Run the same command "
                    "again to continue an interrupted search.")
    parser.add_argument("algo", help=f"algorithm preset with a search space: "
                                     f"{', '.join(sorted(SEARCH_SPACES))}")
    parser.add_argument("env", help="gymnasium id, e.g. CartPole-v1")
    parser.add_argument("--trials", type=int, required=True, metavar="N",
                        help="finished (complete or pruned) trials the study should hold")
    parser.add_argument("--search", choices=("random", "tpe"), default="tpe",
                        help="Optuna sampler (default: tpe)")
    parser.add_argument("--parallel", type=int, default=None, metavar="K",
                        help="trials run at once, each on its own run slot (default: 1, or "
                             "the slot count of --affinity)")
    parser.add_argument("--steps", type=int, default=None,
                        help="environment steps per trial (default: the preset's, or a "
                             "tuned budget for ppo/a2c on CartPole-v1)")
    parser.add_argument("--seed", type=int, default=0,
                        help="seed of every trial's training and of the sampler (default 0)")
    parser.add_argument("--log-dir", default=None,
                        help="study.db, trials.md, best_config.json and trial_<n>/ go here "
                             "(default: data/local/<date>/<time>/tune_<algo>_<env>)")
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="KEY=VALUE",
                        help="fix a config value in every trial (a key of the search space "
                             "set here is not searched)")
    parser.add_argument("--config", default=None, metavar="FILE",
                        help="JSON overrides for every trial, as rlfast train --config")
    parser.add_argument("--affinity", default=None, metavar="CODE",
                        help="affinity code with one run slot per parallel trial (default: "
                             "the available cores split evenly over --parallel)")
    parser.add_argument("--search-space", default=None, metavar="FILE",
                        help='JSON object replacing the search space: {"algo.learning_rate": '
                             '["loguniform", 1e-4, 1e-2], "algo.epochs": [4, 8]} (a list of '
                             'choices, or [uniform|loguniform|int|intlog, low, high])')
    parser.add_argument("--enqueue", default=None, metavar="FILE",
                        help="JSON object (or list of objects) of search-space values that "
                             "the first trials of a new study evaluate before the sampler "
                             "proposes its own (e.g. a best_config.json); keys left out are "
                             "sampled")
    return parser


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

    @property
    def parallel(self) -> int:
        return len(self.slot_codes)

    def signature(self) -> dict:
        """What makes two commands the same search (stored in the study)."""
        return dict(algo=self.algo, env=self.env, seed=self.seed,
                    space=space_to_json(self.space),
                    config=json.loads(json.dumps(self.base_config, default=str)))


def tune_main(args: argparse.Namespace) -> int:
    """``rlfast tune``: run the search; 0 when a trial completed, 1 when none did, 2 for a
    command-line error (nothing run), 130 / 143 when interrupted."""
    try:
        import optuna
    except ImportError:
        print("rlfast: error: rlfast tune needs Optuna: pip install rlfast[tune]",
              file=sys.stderr)
        return 2
    try:
        setup = prepare(args)
    except (ConfigError, ValueError) as e:
        print(f"rlfast: error: {e}", file=sys.stderr)
        return 2
    optuna.logging.set_verbosity(optuna.logging.ERROR)  # this module prints each trial
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    try:
        study = open_study(setup)
    except (ConfigError, ValueError) as e:
        print(f"rlfast: error: {e}", file=sys.stderr)
        return 2
    search = Search(setup, study)
    signum = search.run()
    best = write_report(setup, study, quiet_if_none=signum is not None)
    if signum is not None:
        name = signal.Signals(signum).name
        print(f"rlfast: interrupted ({name}); {search.finished()} of {setup.trials} trials "
              f"finished. Run the same command to continue.", file=sys.stderr)
        return 128 + int(signum)
    return 0 if best is not None else 1


# ------------------------------------------------------------------------- configuration

def prepare(args: argparse.Namespace) -> TuneSetup:
    """Check the command line and resolve the search; ``ConfigError`` or ``ValueError``
    names the bad value. Nothing is started; only the log directory is created."""
    from rlfast.cli import check_env_id, check_log_dir
    from rlfast.experiments.presets import PRESETS, get_preset

    algo, env = args.algo, args.env
    with_space = ", ".join(sorted(SEARCH_SPACES))
    if algo not in PRESETS:
        raise ConfigError(f"unknown algorithm {algo!r}; rlfast tune has search spaces for "
                          f"{with_space} (the other presets, "
                          f"{', '.join(sorted(set(PRESETS) - set(SEARCH_SPACES)))}, need "
                          f"--search-space FILE)")
    if args.search_space is None and algo not in SEARCH_SPACES:
        raise ConfigError(f"rlfast tune has no search space for {algo!r}; pass "
                          f"--search-space FILE, or choose one of {with_space}")
    if args.trials < 1:
        raise ConfigError(f"--trials must be >= 1; got {args.trials}")
    if args.parallel is not None and args.parallel < 1:
        raise ConfigError(f"--parallel must be >= 1; got {args.parallel}")
    check_env_id(env)
    preset = get_preset(algo, env)  # ValueError if the algorithm cannot act in env
    steps = args.steps
    if steps is None:
        steps = TRIAL_STEPS.get((algo, env), preset["runner"]["n_steps"])
    if steps < 1:
        raise ConfigError(f"--steps must be >= 1; got {steps}")
    config = dict(preset, runner=dict(preset["runner"], n_steps=steps))
    fixed: set = set()
    if args.config is not None:
        file_values = load_config_file(args.config)
        config = apply_config_values(config, file_values, source=f"--config {args.config}")
        fixed.update(file_values)
    config = apply_overrides(config, args.overrides)
    fixed.update(item.split("=", 1)[0].strip() for item in args.overrides)
    flat = flatten(config)
    steps = flat["runner.n_steps"]  # --config or --set may have changed it

    if args.search_space is not None:
        space = space_from_json(read_json(args.search_space, "--search-space"),
                                f"--search-space {args.search_space}")
    else:
        space = dict(SEARCH_SPACES[algo])
    for key in space:
        if key not in flat:
            listing = "\n  ".join(sorted(flat))
            raise ConfigError(f"search space key {key!r} is not a config key of {algo} on "
                              f"{env}. Valid keys:\n  {listing}")
    space = {k: v for k, v in space.items() if k not in fixed}  # fixed by the user
    if not space:
        raise ConfigError("nothing to search: every search space key is fixed by --set or "
                          "--config")
    for key, spec in space.items():  # every value must be settable with --set
        for value in _spec_examples(spec):
            apply_overrides(config, [f"{key}={_cell(value)}"])

    log_interval = flat["runner.log_interval_steps"]
    if "runner.log_interval_steps" not in fixed:
        log_interval = aligned_log_interval(flat, space, steps)
    preset_flat = flatten(preset)
    user_changes = {k: v for k, v in flat.items()
                    if k not in space and preset_flat.get(k, _MISSING) != v}
    train_args = ["--seed", str(args.seed), "--steps", str(steps), "--no-progress"]
    if args.config is not None:
        train_args += ["--config", os.path.abspath(args.config)]
    for item in args.overrides:
        train_args += ["--set", item]
    if log_interval != flat["runner.log_interval_steps"]:
        train_args += ["--set", f"runner.log_interval_steps={log_interval}"]

    slot_codes = trial_slot_codes(args.parallel, args.affinity)
    enqueue = []
    if args.enqueue is not None:
        enqueue = enqueue_params(read_json(args.enqueue, "--enqueue"), space, flat,
                                 f"--enqueue {args.enqueue}")
    if args.log_dir is not None:
        log_dir = os.path.abspath(args.log_dir)
    else:
        from rlfast.utils.logging.context import get_data_dir
        now = datetime.datetime.now()
        log_dir = os.path.abspath(os.path.join(get_data_dir(), "local", now.strftime("%Y%m%d"),
                                               now.strftime("%H%M%S"), f"tune_{algo}_{env}"))
    check_log_dir(log_dir, "--log-dir")
    os.makedirs(log_dir, exist_ok=True)
    base = {k: v for k, v in flat.items() if k not in space}
    return TuneSetup(algo=algo, env=env, trials=args.trials, search=args.search, steps=steps,
                     seed=args.seed, log_dir=log_dir, space=space, base_config=base,
                     user_changes=user_changes, train_args=train_args,
                     log_interval=log_interval, slot_codes=slot_codes, enqueue=enqueue)


def _spec_examples(spec: Any) -> list:
    return list(spec) if isinstance(spec, list) else [spec[1], spec[2]]


def aligned_log_interval(flat: dict, space: dict, steps: int) -> int:
    """A log interval that every trial reaches at the same steps: a multiple of each
    sampler batch (``batch_T * batch_B``) the space can produce, at most the preset's and
    small enough for ``MIN_LOG_ROWS`` rows in ``steps``."""
    batch_Ts = _values(space, flat, "sampler.batch_T")
    batch_Bs = _values(space, flat, "sampler.batch_B")
    unit = 1
    for t in batch_Ts:
        for b in batch_Bs:
            unit = math.lcm(unit, int(t) * int(b))
    target = min(int(flat["runner.log_interval_steps"]), steps // MIN_LOG_ROWS)
    return max(unit, target // unit * unit)


def _values(space: dict, flat: dict, key: str) -> list:
    spec = space.get(key)
    return list(spec) if isinstance(spec, list) else [flat[key]]


def trial_slot_codes(parallel: int | None, affinity: str | None) -> list[str]:
    """One slotted affinity code per parallel trial. With ``affinity`` its slots (K defaults
    to their count); otherwise the available cores split into ``parallel`` equal runs,
    pinned when the cores are numbered from 0 (unpinned, ``0saf``, otherwise)."""
    from rlfast.cli import affinity_for_run
    from rlfast.utils.launching import encode_affinity, get_n_run_slots, prepend_run_slot
    from rlfast.utils.launching.affinity import detect_hyperthread_offset
    from rlfast.utils.misc import available_cpus

    if affinity is not None:
        n_slots = get_n_run_slots(affinity)
        parallel = n_slots if parallel is None else parallel
        if parallel > n_slots:
            raise ConfigError(f"--parallel {parallel} exceeds the {n_slots} run slot(s) of "
                              f"--affinity {affinity}")
        codes = [prepend_run_slot(k, affinity) for k in range(parallel)]
    else:
        parallel = 1 if parallel is None else parallel
        cpus = available_cpus()
        hto = detect_hyperthread_offset()
        if hto and cpus == list(range(2 * hto)):
            cores, pinned = hto, True  # physical cores; hyperthread siblings follow them
        else:
            cores, hto, pinned = len(cpus), 0, cpus == list(range(len(cpus)))
        if parallel > cores:
            raise ConfigError(f"--parallel {parallel} exceeds the {cores} available CPU "
                              f"cores")
        per_run = cores // parallel
        code = encode_affinity(n_cpu_core=per_run * parallel, cpu_per_run=per_run,
                               hyperthread_offset=hto, set_affinity=pinned)
        codes = [prepend_run_slot(k, code) for k in range(parallel)]
    for code in codes:
        affinity_for_run(code)  # ValueError: async code, or cores / GPUs this machine lacks
    return codes


# --------------------------------------------------------------------------------- study

def open_study(setup: TuneSetup) -> Any:
    """Create or reopen the study in ``<log-dir>/study.db``; refuse one made by another
    command, fail the trials a killed search left RUNNING, and enqueue ``--enqueue``."""
    import optuna
    from optuna.trial import TrialState

    storage = optuna.storages.RDBStorage(f"sqlite:///{os.path.join(setup.log_dir, STUDY_FILE)}")
    pruner = optuna.pruners.MedianPruner(n_startup_trials=PRUNER_STARTUP_TRIALS,
                                         n_warmup_steps=setup.log_interval + 1)
    study = optuna.create_study(storage=storage, study_name=STUDY_NAME, direction="maximize",
                                pruner=pruner, load_if_exists=True)
    signature = setup.signature()
    stored = study.user_attrs.get("rlfast")
    if stored is None:
        study.set_user_attr("rlfast", signature)
    elif stored != signature:
        changed = sorted(k for k in set(stored) | set(signature)
                         if stored.get(k) != signature.get(k))
        raise ConfigError(f"--log-dir {setup.log_dir} holds a study made by another command "
                          f"(differs in: {', '.join(changed)}); rerun that command to "
                          f"continue it, or choose another --log-dir")
    study_id = storage.get_study_id_from_name(STUDY_NAME)
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        pid = trial.user_attrs.get("tune_pid")
        if pid is not None and _alive(pid, trial.user_attrs.get("tune_started")):
            raise ConfigError(f"another rlfast tune (pid {pid}) is running this study in "
                              f"{setup.log_dir}")
        child = trial.user_attrs.get("child_pid")
        if child is not None and _alive(child, trial.user_attrs.get("child_started")):
            _stop_orphan(child)
        trial_id = storage.get_trial_id_from_study_id_trial_number(study_id, trial.number)
        storage.set_trial_state_values(trial_id, TrialState.FAIL)
        print(f"[trial {trial.number}] left running by an earlier search: marked FAIL",
              flush=True)
    n_existing = len(study.trials)
    if setup.search == "random":
        study.sampler = optuna.samplers.RandomSampler(seed=setup.seed + n_existing)
    else:
        study.sampler = optuna.samplers.TPESampler(
            seed=setup.seed + n_existing,
            n_startup_trials=max(2, min(10, setup.trials // 3)))
    if _finished(study) < setup.trials:
        for params in setup.enqueue:
            study.enqueue_trial(params, skip_if_exists=True)
    return study


def _finished(study: Any) -> int:
    from optuna.trial import TrialState
    return len(study.get_trials(deepcopy=False,
                                states=(TrialState.COMPLETE, TrialState.PRUNED)))


def _alive(pid: int, started: float | None) -> bool:
    """Whether process ``pid`` is the one that started at ``started`` (not a reused pid)."""
    try:
        proc = psutil.Process(pid)
        return (proc.status() != psutil.STATUS_ZOMBIE
                and (started is None or abs(proc.create_time() - started) < 0.5))
    except psutil.Error:
        return False


def _stop_orphan(pid: int) -> None:
    """Stop an ``rlfast train`` whose search was killed, and its descendants."""
    from rlfast.utils.launching.exp_launcher import TERMINATE_GRACE_S
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
    _, alive = psutil.wait_procs(procs, timeout=TERMINATE_GRACE_S)
    for p in alive:
        try:
            p.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(alive, timeout=1.0)


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
        return _finished(self.study)

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
        its last two log rows (see the module docstring)."""
        import optuna

        if self.stop.is_set():
            raise SearchInterrupted()
        params = {key: suggest(trial, key, spec) for key, spec in self.setup.space.items()}
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
            command += ["--set", f"{key}={_cell(value)}"]
        env = dict(os.environ, PYTHONUNBUFFERED="1")
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
    from rlfast.utils.launching.exp_launcher import _stop_children
    _stop_children([proc])


def _cell(value: Any) -> str:
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


# -------------------------------------------------------------------------------- report

def write_report(setup: TuneSetup, study: Any, quiet_if_none: bool = False) -> Any:
    """Write ``trials.md`` and (when a trial completed) ``best_config.json``, print the
    table and the best trial's line; return the best trial or None (saying why unless
    ``quiet_if_none``)."""
    from optuna.trial import TrialState

    from rlfast.utils.launching.exp_launcher import _write_atomic

    keys = list(setup.space)
    header = ["trial", "state", "value", "steps", *keys]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for trial in study.get_trials(deepcopy=False):
        if trial.state == TrialState.WAITING:
            continue
        rows = ProgressReader(os.path.join(setup.log_dir, f"trial_{trial.number}",
                                           "progress.csv")).all_rows()
        value = "" if trial.value is None else f"{trial.value:.2f}"
        cells = [str(trial.number), trial.state.name, value, str(rows[-1][0] if rows else 0)]
        cells += [_fmt(trial.params[k]) if k in trial.params else "" for k in keys]
        lines.append("| " + " | ".join(cells) + " |")
    table = "\n".join(lines) + "\n"
    _write_atomic(os.path.join(setup.log_dir, TRIALS_FILE), table)
    print(table, end="", flush=True)
    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    if not complete:
        if quiet_if_none:
            return None
        print("No trial completed; see the FAIL lines above and trial_<n>/train.stderr.txt.",
              file=sys.stderr, flush=True)
        return None
    best = study.best_trial
    path = os.path.join(setup.log_dir, BEST_CONFIG_FILE)
    overrides = {**setup.user_changes, **best.params}
    _write_atomic(path, json.dumps(nest(overrides), indent=2, default=str) + "\n")
    print(f"Best trial {best.number}: value {best.value:.2f}; train it with: "
          f"rlfast train {setup.algo} {setup.env} --config {path}", flush=True)
    return best


def _fmt(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)

