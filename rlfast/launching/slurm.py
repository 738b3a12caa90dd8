"""Sweeps on a Slurm cluster: every run of ``run_experiments(..., backend="slurm")`` is its own
submitit job, requeued and resumed from its last snapshot when Slurm preempts it or its time
runs out.

Each job runs a :class:`SweepRun`: the same ``python SCRIPT SLOT_CODE LOG_DIR RUN_ID *ARGS``
command the local launcher runs (SLOT_CODE is the sweep's affinity code with run slot 0
prepended: every job gets a whole allocation of that shape), as a child process whose output
is appended to ``LOG_DIR/run_<ID>.stdout.txt`` / ``.stderr.txt``. Before Slurm ends a job it
sends submitit's signal (USR2 by default); submitit then calls :meth:`SweepRun.checkpoint`,
which stops the training child with SIGTERM (rlfast runners save a final snapshot and exit with
143), and submitit requeues a copy with ``resume=True`` that runs
``python -m rlfast resume LOG_DIR/run_<ID>`` (or starts the run afresh when it has no snapshot
yet). The training script must log resumable params (``rlfast.experiments.presets.run_params``;
see ``scripts/launch/train_ppo_cartpole.py``).

submitit is an optional dependency: ``pip install rlfast[slurm]``.
"""
from __future__ import annotations

import importlib
import math
import os
import re
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from rlfast.launching.local import stderr_excerpt
from rlfast.launching.plan import SweepPlan
from rlfast.launching.report import RunResult, print_failures
from rlfast.launching.run_files import NUM_LAUNCHED_FILE, write_atomic, write_tree_file
from rlfast.launching.slurm_job import RunFailedError, SweepRun
from rlfast.utils.affinity import prepend_run_slot
from rlfast.utils.checks import check_choice, check_int, check_positive
from rlfast.utils.variant import save_variant

__all__ = ["run_slurm_sweep", "SweepRun", "SlurmRunResult", "RunFailedError",
           "check_slurm_options", "parse_time_minutes", "submitit_parameters",
           "require_submitit", "SLURM_KEYS"]

# The keys of ``run_experiments(..., slurm=...)`` and what they set.
SLURM_KEYS = {
    "partition": "Slurm partition (--partition)",
    "time": "time limit: minutes, or a Slurm time string such as '12:00:00' or '1-00:00:00'",
    "gpus_per_node": "GPUs per node (--gpus-per-node)",
    "cpus_per_task": "CPU cores for the job's one task (--cpus-per-task)",
    "mem_gb": "memory per node in GB (--mem)",
    "nodes": "nodes per job (default 1); the training command starts once, on the first",
    "account": "Slurm account (--account)",
    "qos": "quality of service (--qos)",
    "constraint": "node features (--constraint)",
    "additional": "dict of any other sbatch options, e.g. {'mail-type': 'END'}",
    "folder": "submitit's folder for job pickles and logs (default <experiment dir>/slurm/%j)",
    "executor": "'slurm' (default) or 'local': the same jobs on this machine (for testing)",
    "max_parallel": "at most this many jobs of the sweep's job array run at once",
}
EXECUTORS = ("slurm", "local")
LOCAL_TIMEOUT_MIN = 7 * 24 * 60  # the local executor kills a job at its time limit
POLL_S = {"slurm": 10.0, "local": 0.5}  # how often a waiting sweep checks its jobs
INSTALL_HINT = "pip install rlfast[slurm]"
_TIME = re.compile(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?")


class SlurmRunResult(RunResult):
    """A ``RunResult`` (still the same four fields: log_dir, run_ID, slot, returncode) that
    also carries the submitit job as ``job`` (None in a dry run): ``job.job_id``,
    ``job.result()``, ``job.paths.stdout`` for submitit's own log."""
    job: Any = None

    def __new__(cls, log_dir: str, run_ID: int, slot: int, returncode: int | None,
                job: Any = None) -> "SlurmRunResult":
        self = super().__new__(cls, log_dir, run_ID, slot, returncode)
        self.job = job
        return self


def require_submitit() -> Any:
    """The ``submitit`` module, or an ImportError that says how to install it."""
    try:
        return importlib.import_module("submitit")
    except ImportError as e:
        raise ImportError(f"run_experiments(backend='slurm') needs submitit, which is not "
                          f"installed; install it with `{INSTALL_HINT}`.") from e


def parse_time_minutes(value: int | float | str) -> int:
    """A Slurm time limit as whole minutes (rounded up): a number of minutes, or a Slurm
    time string ``M``, ``M:S``, ``H:M:S``, ``D-H``, ``D-H:M`` or ``D-H:M:S``."""
    if isinstance(value, str):
        match = _TIME.fullmatch(value.strip())
        if match is None:
            raise ValueError(f"slurm time {value!r} is not a Slurm time: use minutes, 'M:S', "
                             f"'H:M:S', 'D-H', 'D-H:M' or 'D-H:M:S' (e.g. '12:00:00').")
        days, first, second, third = match.groups()
        parts = [int(p) for p in (first, second, third) if p is not None]
        if days is not None:  # D-H, D-H:M or D-H:M:S
            hours, minutes, seconds = parts + [0] * (3 - len(parts))
            hours += 24 * int(days)
        elif len(parts) == 3:  # H:M:S
            hours, minutes, seconds = parts
        else:  # M or M:S
            hours, minutes, seconds = 0, parts[0], parts[1] if len(parts) == 2 else 0
        minutes_total = math.ceil((3600 * hours + 60 * minutes + seconds) / 60)
    else:
        minutes_total = math.ceil(check_positive(value, "slurm time (minutes)"))
    if minutes_total < 1:
        raise ValueError(f"slurm time must be at least one minute; got {value!r}.")
    return minutes_total


def check_slurm_options(slurm: Mapping[str, Any] | None) -> dict[str, Any]:
    """Validate the ``slurm`` dict of ``run_experiments``: no unknown key (the error lists
    the valid ones), values of the right kind, ``time`` converted to minutes and required
    for the Slurm executor (submitit would otherwise ask Slurm for 5 minutes). Returns a
    new dict with ``executor`` and ``nodes`` filled in."""
    if slurm is None:
        slurm = {}
    if not isinstance(slurm, Mapping):
        raise TypeError(f"slurm must be a dict of Slurm options; got {type(slurm).__name__}.")
    unknown = sorted(set(slurm) - set(SLURM_KEYS))
    if unknown:
        valid = "".join(f"\n  {k}: {v}" for k, v in SLURM_KEYS.items())
        raise ValueError(f"Unknown slurm option(s) {unknown}. Valid options:{valid}")
    options = {k: v for k, v in slurm.items() if v is not None}
    options["executor"] = check_choice(options.get("executor", "slurm"), "slurm executor",
                                       EXECUTORS)
    options["nodes"] = check_int(options.get("nodes", 1), "slurm nodes", minimum=1)
    if "time" in options:
        options["time"] = parse_time_minutes(options["time"])
    elif options["executor"] == "slurm":
        raise ValueError("slurm time is required (minutes or 'HH:MM:SS'), e.g. "
                         "slurm=dict(time='12:00:00', ...); without it submitit asks Slurm "
                         "for 5 minutes.")
    for key, minimum in (("gpus_per_node", 0), ("cpus_per_task", 1), ("max_parallel", 1)):
        if key in options:
            options[key] = check_int(options[key], f"slurm {key}", minimum=minimum)
    if "mem_gb" in options:
        options["mem_gb"] = check_positive(options["mem_gb"], "slurm mem_gb")
    for key in ("partition", "account", "qos", "constraint", "folder"):
        if key in options and not isinstance(options[key], (str, os.PathLike)):
            raise TypeError(f"slurm {key} must be a string; got {options[key]!r}.")
    if "additional" in options and not isinstance(options["additional"], Mapping):
        raise TypeError(f"slurm additional must be a dict of sbatch options; got "
                        f"{options['additional']!r}.")
    return options


def submitit_parameters(options: Mapping[str, Any], name: str) -> dict[str, Any]:
    """``submitit.AutoExecutor.update_parameters`` keywords for checked ``options``: the
    generic ``timeout_min``, ``gpus_per_node``, ``cpus_per_task``, ``mem_gb``, ``nodes``,
    ``tasks_per_node`` and ``name``, and the Slurm-only ``slurm_partition``,
    ``slurm_account``, ``slurm_qos``, ``slurm_constraint``,
    ``slurm_additional_parameters`` and ``slurm_array_parallelism`` (which the local
    executor ignores). A local executor without ``time`` gets a week."""
    params: dict[str, Any] = {"name": name, "nodes": options["nodes"], "tasks_per_node": 1}
    if "time" in options:
        params["timeout_min"] = options["time"]
    elif options["executor"] == "local":
        params["timeout_min"] = LOCAL_TIMEOUT_MIN
    for key in ("gpus_per_node", "cpus_per_task", "mem_gb"):
        if key in options:
            params[key] = options[key]
    for key in ("partition", "account", "qos", "constraint"):
        if key in options:
            params[f"slurm_{key}"] = str(options[key])
    if "additional" in options:
        params["slurm_additional_parameters"] = dict(options["additional"])
    if "max_parallel" in options:
        params["slurm_array_parallelism"] = options["max_parallel"]
    return params


def _error_line(error: BaseException) -> str:
    """The ``SomeError: message`` line of a failed job's traceback (submitit wraps the job's
    exception, traceback and all, in its own), or the error itself."""
    lines = [line for line in str(error).splitlines()
             if re.match(r"^[\w.]*(Error|Exception|Interrupt|Exit)\w*: ", line)]
    return lines[-1] if lines else f"{type(error).__name__}: {str(error).strip()[:300]}"


def _make_executor(submitit: Any, options: Mapping[str, Any], folder: str,
                   params: Mapping[str, Any]) -> Any:
    try:
        executor = submitit.AutoExecutor(folder=folder, cluster=options["executor"])
    except RuntimeError as e:  # SlurmExecutor: "Could not detect srun"
        raise RuntimeError(f"{e} Submitting Slurm jobs needs a Slurm login node; use "
                           f"slurm=dict(executor='local', ...) to run the same jobs on this "
                           f"machine.") from e
    executor.update_parameters(**params)
    return executor


def _cancel(jobs: Sequence[Any], local: bool) -> None:
    """Cancel unfinished jobs; local ones are waited for (their controllers are children
    of this process), Slurm ones are only scancel'ed."""
    unfinished = [job for job in jobs if not job.done()]
    for job in unfinished:
        try:
            job.cancel(check=False)
        except Exception as e:  # keep cancelling the others
            print(f"could not cancel job {job.job_id}: {e}", file=sys.stderr)
    if local:
        for job in unfinished:
            process = getattr(job, "_process", None)  # LocalJob's controller process
            if process is not None:
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()


def run_slurm_sweep(plan: SweepPlan, slurm: Mapping[str, Any] | None, dry_run: bool = False,
                    wait: bool = True) -> list[SlurmRunResult]:
    """Submit each run of ``plan`` (from ``run_experiments``) as a :class:`SweepRun` job, on
    run slot 0 of its affinity code, in one job array, and wait for them.

    Writes ``experiments_tree.txt``, each ``variant.json`` and ``num_launched.txt`` (kept
    up to date while waiting), prints the job ids, and returns one ``SlurmRunResult`` per
    run in submission order: returncode 0 when the job succeeded, 1 when it failed (a
    failure summary with the end of the run's stderr is printed on stderr, as by the local
    backend). With ``wait=False`` it returns right after submitting (returncode None;
    ``result.job`` is the submitit job: ``result.job.result()`` waits for it; local-executor
    jobs are child processes of this one, which such a wait also reaps). An interrupt
    (Ctrl-C) while waiting cancels the unfinished jobs and re-raises. ``dry_run`` prints the
    submitit parameters and each run's command and submits nothing (it does not need
    submitit).
    """
    options = check_slurm_options(slurm)
    folder = os.path.abspath(os.fspath(options.get("folder") or
                                       os.path.join(plan.exp_dir, "slurm", "%j")))
    params = submitit_parameters(options, plan.experiment_title)
    slot_code = prepend_run_slot(0, plan.affinity_code)
    runs = [SweepRun(plan.script, slot_code, run.log_dir, run.run_ID, run.args,
                     plan.python_executable) for run in plan.runs]
    where = "Slurm jobs" if options["executor"] == "slurm" else "local submitit jobs"
    if dry_run:
        return _print_slurm_plan(plan, runs, where, slot_code, folder, params)

    submitit = require_submitit()
    executor = _make_executor(submitit, options, folder, params)
    write_tree_file(plan.exp_dir,
                    f"script: {plan.script}\naffinity code: {plan.affinity_code} (each job "
                    f"runs {slot_code})\nbackend: slurm ({options['executor']} executor); "
                    f"submitit folder: {folder}\nsubmitit parameters: {params}\n"
                    f"total runs: {len(runs)}", plan.experiment_title, plan.log_dirs)
    jobs = _submit(executor, plan, runs)
    returncodes: dict[int, int] = {}
    _record_progress(plan.exp_dir, jobs, runs, returncodes, where)
    if not wait:
        print(f"Submitted {len(runs)} jobs; not waiting (each result's .job is its submitit "
              f"job).", flush=True)
        return [SlurmRunResult(run.log_dir, run.run_ID, 0, None, job)
                for job, run in zip(jobs, runs)]
    try:
        _wait_for_jobs(submitit, jobs, runs, returncodes, plan.exp_dir, options["executor"],
                       lambda: _record_progress(plan.exp_dir, jobs, runs, returncodes, where))
    except BaseException:
        print(f"Cancelling {len(runs) - len(returncodes)} unfinished job(s)...",
              file=sys.stderr, flush=True)
        _cancel(jobs, local=options["executor"] == "local")
        raise
    results = [SlurmRunResult(run.log_dir, run.run_ID, 0, returncodes[k], job)
               for k, (job, run) in enumerate(zip(jobs, runs))]
    print_failures([r for r in results if r.returncode], len(results),
                   lambda r: f"job {r.job.job_id}: run_ID {r.run_ID}, {r.log_dir}")
    return results


def _print_slurm_plan(plan: SweepPlan, runs: Sequence[SweepRun], where: str, slot_code: str,
                      folder: str, params: Mapping[str, Any]) -> list[SlurmRunResult]:
    """The dry run: print the submitit parameters and each job's command; submit nothing."""
    print(f"[dry run] {len(runs)} {where} of {plan.script}, each on run slot 0 of "
          f"{plan.affinity_code} ({slot_code}); experiment dir {plan.exp_dir}; submitit "
          f"folder {folder}\n[dry run] submitit parameters: "
          + ", ".join(f"{k}={v!r}" for k, v in params.items()))
    for run in runs:
        print(f"[dry run] run_ID {run.run_ID}  {run.log_dir}\n    "
              f"{subprocess.list2cmdline(run.start_command())}")
    return [SlurmRunResult(run.log_dir, run.run_ID, 0, None) for run in runs]


def _submit(executor: Any, plan: SweepPlan, runs: Sequence[SweepRun]) -> list[Any]:
    """Save each run's variant, submit the runs as one job array and print the job ids."""
    for run in plan.runs:
        save_variant(run.variant, run.log_dir)
    with executor.batch():
        jobs = [executor.submit(run) for run in runs]
    for k, (job, run) in enumerate(zip(jobs, runs)):
        print(f"[submit {k + 1}/{len(runs)}] job {job.job_id}: run_ID {run.run_ID} of "
              f"{os.path.relpath(run.log_dir, plan.exp_dir)}", flush=True)
    return jobs


def _record_progress(exp_dir: str, jobs: Sequence[Any], runs: Sequence[SweepRun],
                     returncodes: Mapping[int, int], where: str) -> None:
    """Rewrite ``num_launched.txt``: the counts and each job's state."""
    total = len(runs)
    failed = sum(1 for code in returncodes.values() if code)
    lines = [f"submitted {total} / {total} runs as {where}; finished {len(returncodes)}; "
             f"failed {failed}; waiting {total - len(returncodes)}"]
    states = ["waiting" if k not in returncodes else "failed" if returncodes[k] else "done"
              for k in range(total)]
    lines += [f"  job {job.job_id}: run_ID {run.run_ID}  {run.log_dir}  ({state})"
              for job, run, state in zip(jobs, runs, states)]
    write_atomic(os.path.join(exp_dir, NUM_LAUNCHED_FILE), "\n".join(lines) + "\n")


def _wait_for_jobs(submitit: Any, jobs: Sequence[Any], runs: Sequence[SweepRun],
                   returncodes: dict[int, int], exp_dir: str, executor_kind: str,
                   record_progress: Callable[[], None]) -> None:
    """Wait for the jobs as they complete, filling ``returncodes`` (job index -> 0 or 1) and
    reporting each: ``[done]`` on stdout, ``[FAILED]`` with the end of the run's stderr and
    the job's error on stderr."""
    index = {id(job): k for k, job in enumerate(jobs)}
    for job in submitit.helpers.as_completed(jobs, poll_frequency=POLL_S[executor_kind]):
        k = index[id(job)]
        run = runs[k]
        try:
            job.results()
            returncodes[k] = 0
            print(f"[done] job {job.job_id}: run_ID {run.run_ID} of "
                  f"{os.path.relpath(run.log_dir, exp_dir)}", flush=True)
        except Exception as e:
            returncodes[k] = 1
            print(f"[FAILED] job {job.job_id}: run_ID {run.run_ID}; log dir {run.log_dir}"
                  f"{stderr_excerpt(run.log_dir, run.run_ID)}\n    {_error_line(e)} "
                  f"(submitit log: {job.paths.stderr})", file=sys.stderr, flush=True)
        record_progress()
