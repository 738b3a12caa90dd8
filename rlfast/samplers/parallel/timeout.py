"""How long a parallel sampler's master waits on a worker that is alive but silent.

The setting is the sampler's ``worker_timeout`` (see ``rlfast.samplers.base.
parse_worker_timeout``):

- ``"auto"``: ``AUTO_FACTOR`` (10) times the slowest batch measured so far, never below
  ``AUTO_MIN_S`` (60 s). Before anything is measured -- the startup, while workers build their
  environments (Atari's can be slow), and the first batch -- the floor is ``AUTO_UNMEASURED_S``
  (300 s). An evaluation scales the batch time by its steps per environment over a batch's
  (``eval_max_T / batch_T``, at least 1), or uses the slowest evaluation measured, whichever
  is longer;
- a number: exactly that many seconds for every wait;
- None (off): wait forever (for debugging under a debugger, for instance).

Each wait gets a :class:`~rlfast.utils.processes.Deadline` whose reason says how its seconds
were chosen and how to change them; the timeout error message ends with it.
"""
from __future__ import annotations

from rlfast.utils.processes import Deadline

AUTO_FACTOR = 10.0
AUTO_MIN_S = 60.0
AUTO_UNMEASURED_S = 300.0
HOW_TO_CHANGE = ("change it with --set sampler.worker_timeout=SECONDS, or "
                 "--set sampler.worker_timeout=off to wait forever")


def _check(setting) -> None:
    if not (setting is None or setting == "auto"
            or (isinstance(setting, (int, float)) and not isinstance(setting, bool)
                and setting >= 0)):
        raise ValueError(f"worker_timeout must be 'auto', seconds >= 0 or None (off); "
                         f"got {setting!r}")


class WorkerTimeout:
    """Turns the ``worker_timeout`` setting and the measured batch times into deadlines.

    ``batch_T``: time steps per training batch, to scale evaluations. Each deadline is made
    from the ``setting`` given to it (the sampler's current ``worker_timeout``: ``"auto"``,
    seconds, or None for off), so a sampler's setting may change between batches.
    """

    def __init__(self, batch_T: int):
        self.batch_T = int(batch_T)
        self.slowest_batch_s: float | None = None
        self.slowest_eval_s: float | None = None

    # ---- measurements -------------------------------------------------------------------
    def record_batch(self, seconds: float) -> None:
        """A training batch took ``seconds`` (from the command to the last reply)."""
        self.slowest_batch_s = max(seconds, self.slowest_batch_s or 0.0)

    def record_evaluation(self, seconds: float) -> None:
        """An evaluation took ``seconds``."""
        self.slowest_eval_s = max(seconds, self.slowest_eval_s or 0.0)

    # ---- deadlines ----------------------------------------------------------------------
    def startup(self, setting: float | str | None) -> Deadline:
        """The deadline for every worker's "ready" (environments built and reset)."""
        _check(setting)
        if setting == "auto":
            return Deadline(AUTO_UNMEASURED_S, self._auto(
                f"{AUTO_UNMEASURED_S:g} s for the workers to build their environments"))
        return self._fixed(setting)

    def batch(self, setting: float | str | None) -> Deadline:
        """The deadline for one training batch (every wait of it shares this one)."""
        _check(setting)
        if setting != "auto":
            return self._fixed(setting)
        if self.slowest_batch_s is None:
            return Deadline(AUTO_UNMEASURED_S, self._auto(
                f"{AUTO_UNMEASURED_S:g} s for the first batch, before any batch was timed"))
        seconds = max(AUTO_MIN_S, AUTO_FACTOR * self.slowest_batch_s)
        return Deadline(seconds, self._auto(
            f"{AUTO_FACTOR:g} x the slowest batch so far ({self.slowest_batch_s:.3g} s), "
            f"at least {AUTO_MIN_S:g} s"))

    def evaluation(self, setting: float | str | None, eval_max_T: int) -> Deadline:
        """The deadline for one evaluation of at most ``eval_max_T`` steps per environment."""
        _check(setting)
        if setting != "auto":
            return self._fixed(setting)
        estimates = []
        if self.slowest_batch_s is not None:
            # An evaluation never gets less than a batch: it also resets every eval env.
            scale = max(1.0, int(eval_max_T) / self.batch_T)
            scaled = self.slowest_batch_s * scale
            estimates.append((scaled, f"the slowest batch ({self.slowest_batch_s:.3g} s) x "
                                      f"max(1, {int(eval_max_T)} eval steps / {self.batch_T} "
                                      f"batch steps) = {scaled:.3g} s"))
        if self.slowest_eval_s is not None:
            estimates.append((self.slowest_eval_s,
                              f"the slowest evaluation so far ({self.slowest_eval_s:.3g} s)"))
        if not estimates:
            return Deadline(AUTO_UNMEASURED_S, self._auto(
                f"{AUTO_UNMEASURED_S:g} s for an evaluation before any batch was timed"))
        expected, how = max(estimates, key=lambda e: e[0])
        seconds = max(AUTO_MIN_S, AUTO_FACTOR * expected)
        return Deadline(seconds, self._auto(
            f"{AUTO_FACTOR:g} x {how}, at least {AUTO_MIN_S:g} s"))

    @staticmethod
    def _fixed(setting: float | None) -> Deadline:
        if setting is None:
            return Deadline(None, "sampler.worker_timeout=off")
        return Deadline(float(setting), f"sampler.worker_timeout={float(setting):g} "
                                        f"(seconds, fixed); {HOW_TO_CHANGE}")

    @staticmethod
    def _auto(how: str) -> str:
        return f"sampler.worker_timeout='auto': {how}; {HOW_TO_CHANGE}"
