"""The one-line-per-interval console summary of a training run.

A run's log rows hold dozens of diagnostics; on the terminal a researcher wants to see
progress at a glance: environment steps, speed, evaluation return, training return, loss,
time and time left. In the logger's ``"lines"`` console mode ``dump_tabular`` prints
:func:`summary_line` of each row (under :func:`summary_header` every ``HEADER_EVERY`` rows)
instead of the whole table, which still goes to ``debug.log``, ``progress.csv`` and
TensorBoard.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

__all__ = ["summary_header", "summary_line", "format_duration", "HEADER_EVERY"]

HEADER_EVERY = 25
_WIDTHS = (11, 8, 24, 13, 10, 9, 9)
_TITLES = ("steps", "SPS", "eval return (mean ± std)", "train return", "loss", "time", "ETA")
# Loss columns in order of preference (PG and DQN: loss; SAC, TD3, DDPG: the critic's).
_LOSS_KEYS = ("lossAverage", "LossAverage", "qLossAverage", "q1LossAverage", "piLossAverage")


def _number(row: Mapping[str, Any], key: str) -> float:
    value = row.get(key)
    item = getattr(value, "item", None)
    if callable(item) and getattr(value, "ndim", None) == 0:
        value = item()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return math.nan
    return float(value)


def format_duration(seconds: float) -> str:
    """``42s``, ``3m07s``, ``2h05m``, ``3d04h``; ``-`` when unknown."""
    if not math.isfinite(seconds) or seconds < 0:
        return "-"
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours}h{minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d{hours:02d}h"


def _fmt(value: float, spec: str) -> str:
    return "-" if not math.isfinite(value) else format(value, spec)


def summary_header() -> str:
    """The column titles of :func:`summary_line`."""
    return "  ".join(t.rjust(w) for t, w in zip(_TITLES, _WIDTHS))


def summary_line(row: Mapping[str, Any]) -> str:
    """One aligned line from a log row's diagnostics.

    Reads ``Diagnostics/CumSteps``, ``StepsPerSecond``, ``CumTime (s)``, ``ETA (s)`` and
    ``TrainReturn``; the evaluation return is ``ReturnAverage ± ReturnStd`` when the row is
    an evaluation (it has ``Diagnostics/NumEvalTrajs``), and otherwise ``ReturnAverage`` is
    the return of recent training episodes. Missing values print as ``-``. A multi-agent
    row (it has ``TeamReturnAverage``) ends with the team return and each agent's return
    (``Return/<agent>Average``), e.g. ``team -62.10  agent_0 -20.61  agent_1 -20.77``.
    """
    evaluated = "Diagnostics/NumEvalTrajs" in row
    mean, std = _number(row, "ReturnAverage"), _number(row, "ReturnStd")
    if evaluated:
        eval_text = "-" if not math.isfinite(mean) else f"{mean:10.2f} ± {std:<8.2f}"
        train = _number(row, "Diagnostics/TrainReturn")
    else:
        eval_text, train = "-", mean
    loss = math.nan
    for key in _LOSS_KEYS:
        loss = _number(row, key)
        if math.isfinite(loss):
            break
    steps = _number(row, "Diagnostics/CumSteps")
    cells = (_fmt(steps, ",.0f"), _fmt(_number(row, "Diagnostics/StepsPerSecond"), ",.0f"),
             eval_text, _fmt(train, ".2f"), _fmt(loss, ".4g"),
             format_duration(_number(row, "Diagnostics/CumTime (s)")),
             format_duration(_number(row, "Diagnostics/ETA (s)")))
    line = "  ".join(c.rjust(w) for c, w in zip(cells, _WIDTHS))
    team = _number(row, "TeamReturnAverage")
    if "TeamReturnAverage" in row:
        agents = [(key[len("Return/"):-len("Average")], _number(row, key)) for key in row
                  if key.startswith("Return/") and key.endswith("Average")]
        line += f"  team {_fmt(team, '.2f')}" + "".join(
            f"  {name} {_fmt(value, '.2f')}" for name, value in agents)
    return line
