"""Experiment logging: the module-level ``logger`` and the per-run ``logger_context``.

Use ``from rlfast.utils.logging import logger`` and call ``logger.log(...)``,
``logger.record_tabular(...)``, ``logger.dump_tabular()`` and
``logger.save_itr_params(...)`` anywhere; wrap a run in ``logger_context(...)`` to send
all of it to an experiment directory. Read a snapshot back with ``load_snapshot(path)``
(also ``logger.load_snapshot``), which checks the digest stored in it and raises
``SnapshotCorruptError`` for a damaged file. A save that runs out of space raises
``NoSpaceError`` (an ``OSError``) naming the file; the previous snapshot stays intact.
"""
from rlfast.utils.logging import logger
from rlfast.utils.logging.context import add_exp_param, check_progress, logger_context
from rlfast.utils.logging.serialization import NoSpaceError
from rlfast.utils.logging.snapshot import SnapshotCorruptError, load_snapshot

__all__ = ["logger", "logger_context", "add_exp_param", "check_progress", "load_snapshot",
           "SnapshotCorruptError", "NoSpaceError"]
