"""``rlfast tune ALGO ENV --trials N``: an Optuna hyperparameter search over ``rlfast train``.

This module holds the command: its parser and checks (``prepare`` resolves the search
space, the trial budget, the log interval and one run slot per parallel trial into a
``TuneSetup``), the study (``open_study``: created or reopened in ``<log-dir>/study.db``,
trials a killed search left RUNNING marked FAIL) and the report (``write_report``:
``trials.md``, ``best_config.json`` and the printed table). Running the trials, each an
``rlfast train`` subprocess in ``<log-dir>/trial_<n>`` that is pruned when it falls below
the median of the completed ones, is :mod:`rlfast.experiments.tune_trials`.

Settings and why:

* Trial value: the mean ``ReturnAverage`` (greedy evaluation return) of the trial's last two
  log rows. Two rows rather than the best or the last one reward a policy that is good and
  stays good at the end of training, which is what ``rlfast train --config`` reproduces.
  Among trials tied on the best value (easy tasks have several at the maximum),
  ``best_config.json`` takes the one with the highest "curve mean" (its mean evaluation
  return over all training rows): the one that learned fastest, whose settings leave the
  most margin when retrained on other seeds or worker counts.
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
* Device: ``--device`` (default ``auto``) is passed on to every trial's ``rlfast train``.
  Without ``--affinity`` it is resolved here, once: on a GPU the slots become contexts of
  that GPU (``n_gpu=1, contexts_per_gpu=K``), so the K trials share it and split the
  cores; see ``trial_devices``. With ``--affinity`` the code decides, as in ``rlfast
  train``.
* Outputs: ``trials.md`` (number, state, value, steps reached, sampled values; a pruned
  trial's value is Optuna's, its last reported return) and ``best_config.json``: the best
  trial's sampled values plus the settings this command changed from the preset (``--set``,
  ``--config``, ``--steps``), nested as ``rlfast train --config`` takes them. The log
  interval picked here for pruning is left out: it changes only when evaluations happen.
* A trial that would end before its algorithm's first update (a replay-based algorithm
  whose sampled ``algo.min_steps_learn``, or batch shape, leaves the budget no update) is
  PRUNED before it trains: it would complete with evaluation returns of an untrained
  policy, and could become the best trial. TPE ranks such a trial (no intermediate value)
  below every trial that reported one. A search whose fixed settings leave no trial an
  update, with a space that draws none of the keys that decide it, is refused (exit 2).
* ``--search-space FILE`` replaces the space and ``--enqueue FILE`` has the first trials
  evaluate given values (Optuna's ``enqueue_trial``): for custom searches and warm starts,
  and what makes the pruning test deterministic (tests/experiments/test_tune.py).

Ctrl-C or SIGTERM stops every running child, marks their trials FAIL, writes the report of
what finished and exits 130 / 143; running the same command again continues the search.
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import signal
import sys
import time
import warnings
from typing import Any

from rlfast.experiments import catalog
from rlfast.experiments.arguments import add_wandb_arguments
from rlfast.experiments.assembly import affinity_for_run, check_env_id, resolve_config
from rlfast.experiments.config import (ConfigError, apply_overrides, flatten, load_config_file,
                                       nest, read_json)
from rlfast.experiments.budget import learning_budget_warning, learning_start_keys
from rlfast.experiments.presets import build_experiment, get_preset
from rlfast.experiments.run_dir import check_log_dir, safe_dir_name
from rlfast.experiments.search_spaces import enqueue_params, space_from_json
from rlfast.experiments.tune_trials import (ProgressReader, Search, TuneSetup, finished_trials,
                                            override_text, process_alive, stop_orphan)

# Re-exported: these lived here before the trials moved to tune_trials.
from rlfast.experiments.tune_trials import (INTERRUPT_WAIT_S, POLL_S,  # noqa: F401
                                            SearchInterrupted, TrialFailed)

__all__ = ["add_tune_parser", "tune_main", "TRIAL_STEPS", "STUDY_NAME"]

STUDY_NAME = "rlfast-tune"
STUDY_FILE = "study.db"
BEST_CONFIG_FILE = "best_config.json"
TRIALS_FILE = "trials.md"
MIN_LOG_ROWS = 4  # training rows per trial, at least: the pruner needs several
PRUNER_STARTUP_TRIALS = 2
_MISSING = object()

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


def add_tune_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``tune ALGO ENV --trials N [--search random|tpe] [--parallel K] ...``."""
    parser = subparsers.add_parser(
        "tune", help="search hyperparameters with Optuna (trials run rlfast train)",
        description="Search the hyperparameters of ALGO on ENV: each of N trials trains "
                    "`rlfast train` with values sampled from the algorithm's search space; "
                    "poor trials are pruned early. Results: <log-dir>/trials.md and "
                    "best_config.json (for rlfast train --config). Run the same command "
                    "again to continue an interrupted search.")
    searchable = [n for n in catalog.algorithm_names() if catalog.algorithm(n).search_space]
    parser.add_argument("algo", help=f"algorithm preset with a search space: "
                                     f"{', '.join(searchable)}")
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
    parser.add_argument("--device", default="auto", metavar="auto|cpu|cuda|cuda:N",
                        help="where every trial's learner computes, passed on to each "
                             "trial's rlfast train: auto (default: GPU 0 when CUDA is "
                             "available, else the CPU), cpu, cuda or cuda:N; the parallel "
                             "trials share that GPU. With --affinity the code decides")
    parser.add_argument("--search-space", default=None, metavar="FILE",
                        help='JSON object replacing the search space: {"algo.learning_rate": '
                             '["loguniform", 1e-4, 1e-2], "algo.epochs": [4, 8]} (a list of '
                             'choices, or [uniform|loguniform|int|intlog, low, high])')
    parser.add_argument("--enqueue", default=None, metavar="FILE",
                        help="JSON object (or list of objects) of search-space values that "
                             "the first trials of a new study evaluate before the sampler "
                             "proposes its own (e.g. a best_config.json); keys left out are "
                             "sampled")
    add_wandb_arguments(parser, "each trial")  # one W&B run per trial, grouped by study
    return parser


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
    algo, env = args.algo, args.env
    names = catalog.algorithm_names()
    spaces = {n: catalog.algorithm(n).search_space for n in names}
    with_space = ", ".join(sorted(n for n in names if spaces[n]))
    if algo not in names:
        without = ", ".join(sorted(n for n in names if not spaces[n]))
        raise ConfigError(f"unknown algorithm {algo!r}; rlfast tune has search spaces for "
                          f"{with_space}" + (f" (the other algorithms, {without}, need "
                                             f"--search-space FILE)" if without else ""))
    if args.search_space is None and not spaces[algo]:
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
    fixed: set = set()
    file_values = None
    if args.config is not None:
        file_values = load_config_file(args.config)
        fixed.update(file_values)
    notes: list[str] = []  # --steps replaced by --config or --set: said once, at the start
    config = resolve_config(preset, {"runner.n_steps": steps}, config_values=file_values,
                            source=f"--config {args.config}", overrides=args.overrides,
                            notes=notes if args.steps is not None else None)
    fixed.update(item.split("=", 1)[0].strip() for item in args.overrides)
    flat = flatten(config)
    steps = flat["runner.n_steps"]  # --config or --set may have changed it

    if args.search_space is not None:
        space = space_from_json(read_json(args.search_space, "--search-space"),
                                f"--search-space {args.search_space}")
    else:
        space = dict(spaces[algo])
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
            apply_overrides(config, [f"{key}={override_text(value)}"])

    check_trials_can_learn(algo, env, config, space, steps,
                           f"--steps {steps}" if args.steps == steps else None)

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

    slot_codes, trial_device, trial_env = trial_devices(args.parallel, args.affinity,
                                                        getattr(args, "device", "auto"))
    train_args += ["--device", trial_device]
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
                                               now.strftime("%H%M%S"),
                                               safe_dir_name(f"tune_{algo}_{env}")))
    check_log_dir(log_dir, "--log-dir")
    os.makedirs(log_dir, exist_ok=True)
    if getattr(args, "wandb", None) is not None:  # each trial a W&B run, the study its group
        train_args += ["--wandb", args.wandb, "--wandb-group", os.path.basename(log_dir)]
        if args.wandb_artifacts:
            train_args.append("--wandb-artifacts")
    base = {k: v for k, v in flat.items() if k not in space}
    return TuneSetup(algo=algo, env=env, trials=args.trials, search=args.search, steps=steps,
                     seed=args.seed, log_dir=log_dir, space=space, base_config=base,
                     user_changes=user_changes, train_args=train_args,
                     log_interval=log_interval, slot_codes=slot_codes, enqueue=enqueue,
                     trial_env=trial_env, config=config, notes=notes)


def check_trials_can_learn(algo: str, env: str, config: dict, space: dict, steps: int,
                           steps_label: str | None = None) -> None:
    """Refuse (``ConfigError``) a search none of whose trials could learn: the fixed
    configuration ends before the algorithm's first update and the space draws nothing
    that moves it (:func:`~rlfast.experiments.budget.learning_start_keys`). Where the
    space does, each trial is checked as it is sampled (a trial that cannot learn is
    pruned before it trains, see :func:`rlfast.experiments.tune_trials.trial_learning_problem`)."""
    if not catalog.algorithm(algo).replay:
        return
    runner = build_experiment(algo, env, config, sampler="serial", device="cpu")
    if any(key in space for key in learning_start_keys(runner.algo)):
        return
    problem = learning_budget_warning(algo, runner, steps_label=steps_label)
    if problem is not None:
        raise ConfigError(f"no trial could learn: {problem}")


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


def trial_devices(parallel: int | None, affinity: str | None, device: str = "auto"
                  ) -> tuple[list[str], str, dict[str, str]]:
    """``(slot codes, the trials' --device, environment variables for the trials)``.

    With ``affinity`` the code decides each trial's device, as in ``rlfast train``: the
    trials get ``device`` as given (``auto`` follows the code; an explicit one that
    contradicts a slot is a ``ValueError`` now, before any trial). Without, ``device`` is
    resolved here (``auto``: GPU 0 when CUDA is available) and the slots made for it: on
    the CPU they are :func:`trial_slot_codes`' CPU-only codes and the trials get ``--device
    cpu``; on GPU N every slot is a context of one GPU (``1gpu_<K>cxg``: the cores split
    over the K trials, all on that GPU) and the trials get ``--device cuda:0`` with
    ``CUDA_VISIBLE_DEVICES`` naming GPU N alone, so that their GPU 0 is this process's N.
    """
    from rlfast.experiments.device import learner_device, resolve_device

    if affinity is not None:
        codes = trial_slot_codes(parallel, affinity)
        for code in codes:
            learner_device(device, affinity_for_run(code), code=code)
        return codes, str(device), {}
    cuda_idx = resolve_device(device)
    codes = trial_slot_codes(parallel, None, on_gpu=cuda_idx is not None)
    if cuda_idx is None:
        return codes, "cpu", {}
    env = {}
    if cuda_idx != 0:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        entries = [v.strip() for v in visible.split(",")] if visible else None
        env["CUDA_VISIBLE_DEVICES"] = entries[cuda_idx] if entries else str(cuda_idx)
    return codes, "cuda:0", env


def trial_slot_codes(parallel: int | None, affinity: str | None,
                     on_gpu: bool = False) -> list[str]:
    """One slotted affinity code per parallel trial. With ``affinity`` its slots (K defaults
    to their count); otherwise the available cores split into ``parallel`` equal runs,
    pinned when the cores are numbered from 0 (unpinned, ``0saf``, otherwise), and with
    ``on_gpu`` each run a context of GPU 0 (``1gpu_<parallel>cxg``)."""
    from rlfast.utils.affinity import (detect_hyperthread_offset, encode_affinity,
                                       get_n_run_slots, prepend_run_slot)
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
        if on_gpu:
            code = encode_affinity(n_cpu_core=per_run * parallel, n_gpu=1,
                                   contexts_per_gpu=parallel, hyperthread_offset=hto,
                                   set_affinity=pinned)
        else:
            code = encode_affinity(n_cpu_core=per_run * parallel, cpu_per_run=per_run,
                                   hyperthread_offset=hto, set_affinity=pinned)
        codes = [prepend_run_slot(k, code) for k in range(parallel)]
    for code in codes:
        affinity_for_run(code)  # ValueError: async code, or cores / GPUs this machine lacks
    return codes


# --------------------------------------------------------------------------------- study

def _open_storage(path: str, attempts: int = 10) -> Any:
    """Optuna's SQLite storage at ``path``. A new database is initialized (schema and
    version stamps) by whoever opens it first; two processes opening it at that moment (a
    search and a reader such as optuna-dashboard or a script polling the study) can collide
    with an integrity or locking error. That collision is retried, after a short pause,
    until the other side has finished the initialization."""
    import optuna
    from sqlalchemy.exc import IntegrityError, OperationalError

    for attempt in range(attempts):
        try:
            return optuna.storages.RDBStorage(f"sqlite:///{path}")
        except (IntegrityError, OperationalError):
            if attempt == attempts - 1:
                raise
            time.sleep(0.2 * (attempt + 1))


def open_study(setup: TuneSetup) -> Any:
    """Create or reopen the study in ``<log-dir>/study.db``; refuse one made by another
    command, fail the trials a killed search left RUNNING, and enqueue ``--enqueue``."""
    import optuna
    from optuna.trial import TrialState

    storage = _open_storage(os.path.join(setup.log_dir, STUDY_FILE))
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
        if pid is not None and process_alive(pid, trial.user_attrs.get("tune_started")):
            raise ConfigError(f"another rlfast tune (pid {pid}) is running this study in "
                              f"{setup.log_dir}")
        child = trial.user_attrs.get("child_pid")
        if child is not None and process_alive(child, trial.user_attrs.get("child_started")):
            stop_orphan(child)
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
    if finished_trials(study) < setup.trials:
        for params in setup.enqueue:
            study.enqueue_trial(params, skip_if_exists=True)
    return study


# -------------------------------------------------------------------------------- report

def write_report(setup: TuneSetup, study: Any, quiet_if_none: bool = False) -> Any:
    """Write ``trials.md`` and (when a trial completed) ``best_config.json``, print the
    table and the best trial's line; return the best trial or None (saying why unless
    ``quiet_if_none``)."""
    from optuna.trial import TrialState

    from rlfast.launching.run_files import write_atomic

    keys = list(setup.space)
    header = ["trial", "state", "value", "curve mean", "steps", *keys]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    curve_means = {}
    for trial in study.get_trials(deepcopy=False):
        if trial.state == TrialState.WAITING:
            continue
        rows = ProgressReader(os.path.join(setup.log_dir, f"trial_{trial.number}",
                                           "progress.csv")).all_rows()
        returns = [r for steps, r in rows if steps > 0 and r == r]
        curve_means[trial.number] = sum(returns) / len(returns) if returns else float("nan")
        value = "" if trial.value is None else f"{trial.value:.2f}"
        curve = "" if not returns else f"{curve_means[trial.number]:.2f}"
        cells = [str(trial.number), trial.state.name, value, curve,
                 str(rows[-1][0] if rows else 0)]
        cells += [_fmt(trial.params[k]) if k in trial.params else "" for k in keys]
        lines.append("| " + " | ".join(cells) + " |")
    table = "\n".join(lines) + "\n"
    write_atomic(os.path.join(setup.log_dir, TRIALS_FILE), table)
    print(table, end="", flush=True)
    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    if not complete:
        if quiet_if_none:
            return None
        print("No trial completed; see the FAIL lines above and trial_<n>/train.stderr.txt.",
              file=sys.stderr, flush=True)
        return None
    # The best value; among trials tied on it (several reach the maximum on easy tasks), the
    # one that learned fastest: the highest mean evaluation return over its training rows.
    top = max(t.value for t in complete)
    best = max((t for t in complete if t.value >= top - 1e-9),
               key=lambda t: (_finite(curve_means.get(t.number)), -t.number))
    path = os.path.join(setup.log_dir, BEST_CONFIG_FILE)
    overrides = {**setup.user_changes, **best.params}
    write_atomic(path, json.dumps(nest(overrides), indent=2, default=str) + "\n")
    print(f"Best trial {best.number}: value {best.value:.2f}; train it with: "
          f"rlfast train {setup.algo} {setup.env} --config {path}", flush=True)
    return best


def _finite(value: float | None) -> float:
    return value if value is not None and value == value else float("-inf")


def _fmt(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)

