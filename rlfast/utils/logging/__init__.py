"""Experiment logging: the module-level ``logger`` and the per-run ``logger_context``.

Use ``from rlfast.utils.logging import logger`` and call ``logger.log(...)``,
``logger.record_tabular(...)``, ``logger.dump_tabular()`` and
``logger.save_itr_params(...)`` anywhere; wrap a run in ``logger_context(...)`` to send
all of it to an experiment directory.
"""
from rlfast.utils.logging import logger
from rlfast.utils.logging.context import add_exp_param, check_progress, logger_context

__all__ = ["logger", "logger_context", "add_exp_param", "check_progress"]
