"""The alarm of a prioritized device replay: a draw that found no priority to draw by.

A :class:`~rlfast.replays.device_tree.DeviceSumTree` draws without reading the host, so it
cannot raise when every valid leaf has priority 0 (the numpy ``SumTree`` does): the draw ends
on leaf 0 and its importance weights are NaN. It raises a sticky 0-d device flag instead, its
``draw_fault``, with one of the codes below. :class:`PriorityAlarm` is what a learner reads:
the flag joins the one host read of its ``optimize_agent`` call (see
:class:`~rlfast.algos.guarded_steps.GuardedSteps`), and a non-zero value raises
:class:`ZeroPriorityError` naming the buffer. No draw reads the host for it.
"""
from __future__ import annotations

from typing import Any

__all__ = ["ZeroPriorityError", "PriorityAlarm", "DRAW_OK", "TOO_FEW_POSITIVE", "ALL_ZERO"]

# Codes of DeviceSumTree.draw_fault (the larger one wins while the flag is up).
DRAW_OK, TOO_FEW_POSITIVE, ALL_ZERO = 0, 1, 2


class ZeroPriorityError(RuntimeError):
    """A prioritized device replay drew by priority while every valid priority was 0 (or, for
    a ``unique=True`` draw, while fewer valid leaves than the batch had a non-zero one): the
    draw is meaningless and its importance weights are NaN / inf."""


class PriorityAlarm:
    """The device flag of a prioritized device replay's failed draws, for a learner to read
    with its call's diagnostics: :attr:`flag` (the tree's ``draw_fault``, a 0-d device tensor,
    non-zero once a draw found no priority to draw by, and so until zeroed) and
    :meth:`check` (raise :class:`ZeroPriorityError` naming ``owner`` for a non-zero read of
    it). The learner zeroes the flag when its call begins and reads it with the call's one
    read (see :class:`~rlfast.algos.guarded_steps.GuardedSteps`), so no draw reads the host.
    ``tree``: the buffer's :class:`~rlfast.replays.device_tree.DeviceSumTree`.
    """

    def __init__(self, tree: Any, owner: str):
        self.tree, self.owner = tree, owner

    @property
    def flag(self) -> Any:
        """The 0-d device flag (int64 code; 0 while every draw was sound)."""
        return self.tree.draw_fault

    def check(self, value: float) -> None:
        """Raise :class:`ZeroPriorityError` if ``value`` (the flag as read on the host) is
        non-zero; the message names the buffer, the fault and its usual causes."""
        if value == DRAW_OK:
            return
        tree = self.tree
        n_valid = tree.n_valid_rows() * tree.B
        if value >= ALL_ZERO:
            what = (f"every valid priority is 0 (the sum tree's total over its {n_valid} valid "
                    f"leaves is 0), so a draw by priority is meaningless and its importance "
                    f"weights are NaN / inf")
        else:
            what = (f"a unique=True draw of n={tree.last_unique_n} found fewer than n valid "
                    f"leaves (of {n_valid}) with a non-zero priority, so it drew leaves of "
                    f"priority 0, whose importance weights are NaN / inf")
        raise ZeroPriorityError(
            f"{self.owner}: {what}. This usually means the priorities written back were all 0: "
            f"an |error| that is exactly 0 on every replayed sample (all rewards and values 0, "
            f"e.g. a zero-initialised head on a task that never rewards), input priorities "
            f"that are all 0, or default_priority=0. Keep priorities positive (add a small "
            f"epsilon to them, or give a positive default_priority)")

    def check_now(self) -> None:
        """Read the flag now (one host read) and :meth:`check` it: for callers outside a
        learner's call, e.g. after drawing from the buffer directly."""
        self.check(float(self.flag))
