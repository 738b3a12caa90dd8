"""The async optimizer's pace: the updates the replay ratio allows, the throttled appending
of pending batches, resumed counters and the async columns."""
import math
import types

import pytest

from rlfast.runners.replay_pace import ReplayPace, check_copier
from rlfast.utils.logging import logger, logger_context

BATCH = 32  # environment steps per sampler iteration


def _algo(**kwargs):
    """What the pace reads of an algorithm: replay ratio 1 with training batches of 16, so two
    updates per batch in replay once learning began (after 2 batches)."""
    return types.SimpleNamespace(**dict(dict(
        min_itr_learn=2, learn_after_itr=0, replay_ratio=1.0, batch_size=16,
        update_counter=0, updates_per_optimize=1), **kwargs))


def test_updates_allowed_count_from_the_first_learning_batch():
    algo = _algo()
    pace = ReplayPace(algo, BATCH)
    for copied, allowed in ((0, 0), (2, 0), (3, 2), (5, 6)):
        pace.copied = copied
        assert pace.updates_allowed() == allowed
    algo.replay_ratio = 0.25  # 0.25 * 32 / 16 = half an update per batch: rounded down
    pace.copied = 3
    assert pace.updates_allowed() == 0
    pace.copied = 4
    assert pace.updates_allowed() == 1


def test_owes_updates_until_the_allowance_is_spent():
    algo = _algo()
    pace = ReplayPace(algo, BATCH)
    pace.copied = 3  # two updates allowed
    assert pace.owes_updates()
    algo.update_counter = 1
    assert pace.owes_updates()
    algo.update_counter = 2
    assert not pace.owes_updates()


@pytest.mark.parametrize("throttle, appended", [(False, [0, 1, 0, 1]), (True, [0, 1, 0])])
def test_pending_batches_append_in_order_and_the_throttle_holds_them(throttle, appended):
    """Four batches arrive before any update: without the throttle all go into replay; with
    it, appending stops once the optimizer owes an update (batch 2 makes two updates
    allowed), and the slot of batch 3 stays taken, so the sampler waits."""
    algo = _algo()
    slots = []
    pace = ReplayPace(algo, BATCH, append_slot=slots.append, sampler_throttle=throttle)
    for itr in range(4):
        pace.batch_arrived(itr, param_updates=0, to_append=True)
    assert pace.received == 4
    pace.append_pending()
    assert slots == appended
    assert pace.copied == len(appended)
    assert pace.pending == ([3] if throttle else [])


def test_no_append_for_a_copier_process():
    pace = ReplayPace(_algo(), BATCH)
    pace.batch_arrived(0, param_updates=0, to_append=False)
    assert pace.pending == [] and pace.received == 1


def test_resume_counts_the_restored_batches_and_the_refill():
    # Replay restored: learning continues where it was, allowances from the first batch.
    algo = _algo(update_counter=10)
    pace = ReplayPace(algo, BATCH)
    pace.resume(7)
    assert (pace.received, pace.copied) == (7, 7)
    assert pace.allowance == (2, 0)
    # Replay refilled: learning waits for learn_after_itr, then counts from the updates made.
    algo = _algo(update_counter=10, learn_after_itr=9)
    pace = ReplayPace(algo, BATCH)
    pace.resume(7)
    assert pace.allowance == (9, 10)
    assert pace.updates_allowed() == 10
    pace.copied = 10
    assert pace.updates_allowed() == 12


def test_async_columns(tmp_path):
    algo = _algo()
    pace = ReplayPace(algo, BATCH)
    with logger_context(str(tmp_path), 0, "pace", {}, override_prefix=True):
        pace.record_columns()  # nothing yet: no ratio
        logger.dump_tabular(with_prefix=False)
        pace.batch_arrived(0, param_updates=0, to_append=False)
        algo.update_counter = 4
        pace.batch_arrived(1, param_updates=1, to_append=False)
        pace.copied = 2
        pace.record_columns()
        logger.dump_tabular(with_prefix=False)
    rows = (tmp_path / "progress.csv").read_text().splitlines()
    header = rows[0].split(",")
    first, second = (dict(zip(header, r.split(","))) for r in rows[1:])
    assert math.isnan(float(first["Diagnostics/ReplayRatio"]))
    assert float(second["Diagnostics/ReplayRatio"]) == 4 * 16 / (2 * BATCH)
    assert float(second["Diagnostics/PolicyLag"]) == (0 + 3) / 2
    assert float(second["Diagnostics/UpdatesPerSecond"]) > 0


def test_copier_choices_are_checked():
    check_copier("optimizer", True)
    check_copier("process", False)
    with pytest.raises(ValueError, match="copier must be one of"):
        check_copier("thread", False)
    with pytest.raises(ValueError, match="sampler_throttle=True needs copier='optimizer'"):
        check_copier("process", True)
