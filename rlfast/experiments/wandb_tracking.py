"""``--wandb [PROJECT]``: a run's log rows, configuration and snapshots in Weights & Biases.

:class:`WandbTracking` opens a W&B run in the run's directory (``wandb/`` beside
``progress.csv``) and logs every row the logger dumps: the progress.csv columns that hold
numbers, with ``Diagnostics/CumSteps`` as the step axis. The W&B run's id is kept in the run
directory (``wandb_run_id``), so ``rlfast resume`` continues the same W&B run (rows of
iterations redone after the snapshot are logged again, with their own step counts). The
configuration is the run's ``params.json`` (algorithm, environment, seed, the resolved
config). ``artifacts=True`` uploads the run's snapshot files as one ``model`` artifact at the
end. Only the process that writes progress.csv tracks (rank 0 of a multi-rank run).
``WANDB_MODE=offline`` keeps everything local (``wandb sync`` uploads it later); the tests
use that mode and need no network.
"""
from __future__ import annotations

import os
import uuid
from typing import Any

__all__ = ["WandbTracking", "WANDB_EXTRA", "DEFAULT_PROJECT", "RUN_ID_FILE", "require_wandb"]

WANDB_EXTRA = "pip install 'rlfast[wandb]'"
DEFAULT_PROJECT = "rlfast"
RUN_ID_FILE = "wandb_run_id"
STEP_KEY = "Diagnostics/CumSteps"


def _import_wandb() -> Any:
    try:
        import wandb
    except ImportError as e:
        raise ImportError(f"--wandb needs the wandb package ({e}): {WANDB_EXTRA}") from None
    return wandb


def require_wandb() -> None:
    """A ``ConfigError`` naming the extra when wandb is not installed (checked while a run is
    configured, before anything starts)."""
    from rlfast.experiments.config import ConfigError
    try:
        _import_wandb()
    except ImportError as e:
        raise ConfigError(str(e)) from None


def run_id(exp_dir: str) -> str:
    """The W&B run id of the run in ``exp_dir``: read back when the run has one (a resume),
    else made and stored there."""
    path = os.path.join(exp_dir, RUN_ID_FILE)
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            text = f.read().strip()
        if text:
            return text
    made = uuid.uuid4().hex[:12]
    with open(path, "w", encoding="utf-8") as f:
        f.write(made + "\n")
    return made


class WandbTracking:
    """A context that tracks one rlfast run in W&B (see the module docstring).

    ``project``: the W&B project; ``exp_dir``: the run directory; ``params``: what
    params.json holds (the W&B config); ``name``: the run's display name; ``group``: a W&B
    group (``rlfast tune`` puts its trials in one); ``artifacts``: upload the snapshots.
    """

    def __init__(self, project: str, exp_dir: str, params: dict, name: str | None = None,
                 group: str | None = None, artifacts: bool = False):
        self.wandb = _import_wandb()
        self.project, self.exp_dir, self.params = project, exp_dir, params
        self.name, self.group, self.artifacts = name, group, bool(artifacts)
        self.run = None

    def __enter__(self) -> "WandbTracking":
        from rlfast.utils.logging import logger

        self.run = self.wandb.init(project=self.project, dir=self.exp_dir,
                                   id=run_id(self.exp_dir), resume="allow", name=self.name,
                                   group=self.group, config=self.params,
                                   settings=self.wandb.Settings(quiet=True, silent=True))
        self.run.define_metric(STEP_KEY)
        self.run.define_metric("*", step_metric=STEP_KEY)
        logger.add_row_sink(self.log_row)
        return self

    def log_row(self, row: dict) -> None:
        """Log the row's numeric values (blank cells and text are left out)."""
        values = {key: value for key, value in row.items()
                  if isinstance(value, (int, float)) and not isinstance(value, bool)
                  and value == value}
        if values:
            self.run.log(values)

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        from rlfast.utils.logging import logger
        from rlfast.utils.logging.context import snapshot_files

        logger.remove_row_sink(self.log_row)
        try:
            if self.artifacts and exc_type is None:
                files = snapshot_files(self.exp_dir)
                if files:
                    artifact = self.wandb.Artifact(f"{self.run.id}-snapshots", type="model")
                    for path in files:
                        artifact.add_file(path)
                    self.run.log_artifact(artifact)
        finally:
            try:
                self.run.finish(exit_code=0 if exc_type is None else 1)
            finally:
                # W&B keeps a service process (wandb-core) for the life of this one; end it
                # with the run, so that no child outlives the run that started it.
                self.wandb.teardown()
