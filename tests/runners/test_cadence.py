"""The log schedule every runner follows: how many iterations, which of them log, and which
end an interval before the last (the async runner's rows)."""
import pytest

from rlfast.runners.cadence import LogCadence


def _logging_itrs(cadence):
    return [itr for itr in range(cadence.n_itr) if cadence.logs_after(itr)]


def test_plan_rounds_steps_up_and_intervals_down_to_whole_iterations():
    cadence = LogCadence.plan(n_steps=1000, log_interval_steps=250, itr_batch_size=64)
    assert cadence.n_itr == 16  # ceil(1000 / 64): the last iteration completes n_steps
    assert cadence.log_interval_itrs == 3  # 250 // 64
    assert cadence.itr_batch_size == 64


@pytest.mark.parametrize("n_steps, interval, batch, n_itr, every", [
    (10, 1, 64, 1, 1),  # fewer steps than a batch: still one iteration
    (1024, 10, 256, 4, 1),  # an interval shorter than a batch: every iteration logs
    (256, 10_000, 32, 8, 312),  # an interval past the end: only the last iteration logs
])
def test_plan_never_gives_zero(n_steps, interval, batch, n_itr, every):
    cadence = LogCadence.plan(n_steps, interval, batch)
    assert (cadence.n_itr, cadence.log_interval_itrs) == (n_itr, every)


def test_rows_at_every_interval_and_after_the_last_iteration():
    cadence = LogCadence.plan(n_steps=10 * 32, log_interval_steps=3 * 32, itr_batch_size=32)
    assert _logging_itrs(cadence) == [2, 5, 8, 9]
    assert [i for i in range(cadence.n_itr) if cadence.interval_ends(i)] == [2, 5, 8]
    # The last iteration ends an interval too: it logs once, and is not an interval row.
    cadence = LogCadence.plan(n_steps=9 * 32, log_interval_steps=3 * 32, itr_batch_size=32)
    assert _logging_itrs(cadence) == [2, 5, 8]
    assert [i for i in range(cadence.n_itr) if cadence.interval_ends(i)] == [2, 5]


def test_rows_of_the_minibatch_runner_test_run():
    """1024 steps of 128-step iterations, a row every 256 steps (tests/runners/
    test_minibatch_rl.py logs after 256, 512, 768 and 1024 steps)."""
    cadence = LogCadence.plan(1024, 256, 128)
    assert [cadence.steps_after(i) for i in _logging_itrs(cadence)] == [256, 512, 768, 1024]


def test_steps_after_and_left():
    cadence = LogCadence.plan(n_steps=1000, log_interval_steps=100, itr_batch_size=64)
    assert cadence.steps_after(0) == 64
    assert cadence.steps_left(0) == 16 * 64 - 64
    assert cadence.steps_left(cadence.n_itr - 1) == 0
    assert cadence.steps_left(cadence.n_itr + 5) == 0  # never negative
