"""What a resume changes and records: the configuration changes a resume makes (refused
unless ``--force``) and the ``resumes`` entry it appends to ``params.json``. Shared by
``rlfast resume`` of gradient-based and of evolution-strategies runs."""
from __future__ import annotations

import argparse
import datetime
import os
from typing import Any

from rlfast.experiments.config import ConfigError

__all__ = ["checked_changes", "resume_record", "config_changes"]


def checked_changes(run_dir: str, params: dict, old_config: dict, config: dict,
                    args: argparse.Namespace, ignore: tuple = (), extra: dict | None = None
                    ) -> tuple[dict[str, list], str | None]:
    """The configuration changes of a resume (config keys outside ``ignore``, then
    ``extra``, then the affinity code) and the affinity code to use; a ``ConfigError``
    listing them unless ``args.force``."""
    changes = {k: v for k, v in config_changes(old_config, config).items() if k not in ignore}
    changes.update(extra or {})
    affinity_code = args.affinity if args.affinity is not None else params.get("affinity")
    if affinity_code != params.get("affinity"):
        changes["affinity"] = [params.get("affinity"), affinity_code]
    if changes and not args.force:
        listed = "; ".join(f"{k}: {old!r} -> {new!r}" for k, (old, new) in changes.items())
        raise ConfigError(f"resuming {run_dir} with a changed configuration ({listed}); pass "
                          f"--force to accept it (it is recorded in params.json)")
    return changes, affinity_code


def resume_record(params: dict, args: argparse.Namespace, run_dir: str, snapshot: dict,
                  snapshot_path: str, from_steps: int, to_steps: int | None,
                  changes: dict, sampler: str | None, device: str | None = None
                  ) -> tuple[list, argparse.Namespace]:
    """``params.json``'s ``resumes`` list with this resume appended (time, snapshot, from and
    to steps, the learner's device, forced changes), and the ``train``-like arguments the
    resumed run logs with."""
    record = dict(time=datetime.datetime.now().isoformat(timespec="seconds"),
                  snapshot=os.path.basename(snapshot_path), from_itr=int(snapshot["itr"]),
                  from_steps=from_steps, to_steps=to_steps)
    if device is not None:
        record["device"] = device
    if changes:
        record["forced_changes"] = changes
    run_args = argparse.Namespace(
        algo=params["algo"], env=params["env"], seed=params["seed"], sampler=sampler,
        snapshot_mode=params.get("snapshot_mode", "last"), overwrite=False,
        tensorboard=bool(params.get("tensorboard", False)),
        no_progress=args.no_progress, verbose=args.verbose, log_dir=run_dir)
    return list(params.get("resumes", [])) + [record], run_args


def config_changes(old: Any, new: Any, prefix: str = "") -> dict[str, list]:
    """``{dotted key: [old, new]}`` for every value that differs between two configs."""
    if isinstance(old, dict) and isinstance(new, dict):
        changes: dict[str, list] = {}
        for key in sorted(set(old) | set(new), key=str):
            changes.update(config_changes(old.get(key), new.get(key), f"{prefix}{key}."))
        return changes
    if old != new:
        return {prefix.rstrip("."): [old, new]}
    return {}
