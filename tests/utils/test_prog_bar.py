"""Tests for rlfast.utils.prog_bar.ProgBarCounter."""
import pytest

from rlfast.utils.prog_bar import ProgBarCounter


def test_runs_through_counts_and_completes(capfd):
    bar = ProgBarCounter(1000)
    assert bar.active
    seen_ticks = []
    for count in range(0, 1001, 37):
        bar.update(count)
        seen_ticks.append(bar._ticks)
        assert bar.current_count == count
    assert seen_ticks == sorted(seen_ticks)  # Monotone.
    assert seen_ticks[-1] == (999 * ProgBarCounter.N_TICKS) // 1000
    bar.stop()
    bar.stop()  # Idempotent.
    assert not bar.active
    captured = capfd.readouterr()
    assert "100%" in captured.err and captured.out == ""


def test_clamps_and_ignores_backwards():
    bar = ProgBarCounter(10, disable=True)
    bar.update(7)
    bar.update(3)
    assert bar.current_count == 7
    bar.update(50)
    assert bar.current_count == 10
    bar.stop()


def test_zero_total_and_disabled_are_silent(capfd):
    for bar in (ProgBarCounter(0), ProgBarCounter(5, disable=True)):
        assert not bar.active
        with bar:
            for c in range(6):
                bar.update(c)
    captured = capfd.readouterr()
    assert captured.err == "" and captured.out == ""


def test_update_to_full_finishes_without_stop(capfd):
    with ProgBarCounter(3) as bar:
        for c in (1, 2, 3):
            bar.update(c)
        assert not bar.active  # Reaching the total finishes the bar.
    assert "100%" in capfd.readouterr().err


@pytest.mark.parametrize("bad", [-1, 2.5, "10", True])
def test_bad_total_count(bad):
    with pytest.raises(ValueError, match="total_count"):
        ProgBarCounter(bad)
