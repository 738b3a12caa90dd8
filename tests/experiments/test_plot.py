"""``rlfast plot``: finding runs, smoothing, the mean curve and band of a variant, the
summary table, the PNG it writes and its command-line errors."""
from __future__ import annotations

import argparse
import math
import os
import sys

import numpy as np
import pytest

from rlfast.experiments import plot
from rlfast.experiments.plot import (Run, add_plot_parser, find_runs, group_by_variant,
                                     plot_main, plot_runs, smooth, summary_table,
                                     variant_curve)
from rlfast.utils.logging.tabular_csv import TabularCsvFile

NAN = math.nan
# variant -> run -> (steps, ReturnAverage); lr_0.01's second run logged 50 steps later.
SWEEP = {
    "lr_0.001": {"run_0": ([0, 100, 200, 300], [1, 2, NAN, 4]),
                 "run_1": ([0, 100, 200, 300], [3, 9, 5, 8])},
    "lr_0.01": {"run_0": ([0, 100, 200, 300], [10, 20, 30, 40]),
                "run_1": ([50, 150, 250, 350], [0, 10, 20, 30])},
}


def write_run(run_dir, steps, returns, extra_first_row_only=False):
    """A progress.csv as the logger writes it (Diagnostics/ prefix, ReturnStd, ...)."""
    out = TabularCsvFile(os.path.join(run_dir, "progress.csv"))
    for itr, (step, ret) in enumerate(zip(steps, returns)):
        out.write_row({"Diagnostics/Iteration": itr - 1, "Diagnostics/CumSteps": step,
                       "Diagnostics/CumTime (s)": step / 100.0, "ReturnAverage": ret,
                       "ReturnStd": 0.5, "ReturnMin": ret - 1, "ReturnMax": ret + 1})
    out.close()
    return run_dir


@pytest.fixture
def sweep(tmp_path):
    exp_dir = tmp_path / "exp"
    for variant, runs in SWEEP.items():
        for name, (steps, returns) in runs.items():
            write_run(exp_dir / variant / name, steps, returns)
    return exp_dir


def parse(argv):
    parser = argparse.ArgumentParser(prog="rlfast")
    add_plot_parser(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(["plot", *argv])


def check_png(path):
    import matplotlib.image

    assert os.path.getsize(path) > 10_000
    with open(path, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    pixels = matplotlib.image.imread(path)
    assert pixels.ndim == 3 and pixels.shape[0] > 100 and pixels.shape[1] > 100
    colours = np.unique(pixels[..., :3].reshape(-1, 3), axis=0)
    assert len(colours) >= 3


# -- finding and grouping runs ------------------------------------------------------------

def test_find_runs_labels_variants_and_reads_columns(sweep):
    runs = find_runs(sweep)
    assert [(r.variant, r.name) for r in runs] == [("lr_0.001", "run_0"), ("lr_0.001", "run_1"),
                                                   ("lr_0.01", "run_0"), ("lr_0.01", "run_1")]
    first = runs[0]
    assert first.rows == 4
    np.testing.assert_array_equal(first.columns["Diagnostics/CumSteps"], [0, 100, 200, 300])
    assert np.isnan(first.columns["ReturnAverage"][2])  # the logger's "nan" cell
    groups = group_by_variant(runs)
    assert list(groups) == ["lr_0.001", "lr_0.01"]  # two lines
    assert [len(members) for members in groups.values()] == [2, 2]


def test_find_runs_single_run_and_several_roots(sweep):
    run_dir = sweep / "lr_0.01" / "run_1"
    (single,) = find_runs(run_dir)
    assert single.name == "run_1" and single.variant == os.path.normpath(str(run_dir))
    both = find_runs([sweep / "lr_0.001", sweep / "lr_0.01", run_dir])  # run_dir seen twice
    assert len(both) == 4
    assert {r.variant for r in both} == {os.path.normpath(str(sweep / "lr_0.001")),
                                         os.path.normpath(str(sweep / "lr_0.01"))}


def test_empty_and_partial_progress_files(tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "progress.csv").write_text("")
    (tmp_path / "partial").mkdir()
    (tmp_path / "partial" / "progress.csv").write_text(
        "Diagnostics/CumSteps,ReturnAverage\n0,1.5\n100,\n200")  # cut off mid-write
    empty, partial = find_runs(tmp_path)
    assert empty.columns == {} and empty.rows == 0
    np.testing.assert_array_equal(partial.columns["Diagnostics/CumSteps"], [0, 100, 200])
    np.testing.assert_array_equal(partial.columns["ReturnAverage"], [1.5, NAN, NAN])


# -- smoothing ----------------------------------------------------------------------------

def reference_smooth(values, k):
    """Trailing mean of the finite values among the last k, one window at a time."""
    out = []
    for i in range(len(values)):
        window = np.asarray(values[max(0, i - k + 1):i + 1], dtype=float)
        window = window[np.isfinite(window)]
        out.append(window.mean() if len(window) else NAN)
    return np.array(out)


@pytest.mark.parametrize("k", [1, 2, 3, 7, 50])
def test_smooth_matches_convolution(k):
    values = np.random.default_rng(k).normal(size=40)
    n = len(values)
    expected = np.convolve(values, np.ones(k))[:n] / np.minimum(np.arange(1, n + 1), k)
    np.testing.assert_allclose(smooth(values, k), expected, rtol=1e-12, atol=1e-12)


def test_smooth_skips_nans():
    values = [NAN, 1.0, NAN, NAN, NAN, 4.0, 6.0, NAN]
    for k in (1, 2, 3, 4):
        result = smooth(values, k)
        assert result.shape == (len(values),)
        np.testing.assert_allclose(result, reference_smooth(values, k) if k > 1 else values)
    np.testing.assert_allclose(smooth(values, 3), [NAN, 1, 1, 1, NAN, 4, 5, 5])
    assert np.isnan(smooth([NAN, NAN], 5)).all()
    assert smooth([], 3).shape == (0,)


@pytest.mark.parametrize("k", [0, -1, 1.5, True])
def test_smooth_rejects_bad_window(k):
    with pytest.raises(ValueError, match="k must be an integer >= 1"):
        smooth([1.0, 2.0], k)


# -- the curve of a variant ---------------------------------------------------------------

def test_variant_curve_shared_steps_skips_nan_rows(sweep):
    runs = group_by_variant(find_runs(sweep))["lr_0.001"]
    x, mean, low, high = variant_curve(runs, "CumSteps", "ReturnAverage")
    # run_0 has no value at 200: its line goes straight from 2 (100) to 4 (300) -> 3.
    np.testing.assert_array_equal(x, [0, 100, 200, 300])
    np.testing.assert_allclose(mean, [(1 + 3) / 2, (2 + 9) / 2, (3 + 5) / 2, (4 + 8) / 2])
    np.testing.assert_allclose(low, [1, 2, 3, 4])
    np.testing.assert_allclose(high, [3, 9, 5, 8])


def test_variant_curve_interpolates_onto_the_overlap(sweep):
    runs = group_by_variant(find_runs(sweep))["lr_0.01"]
    x, mean, low, high = variant_curve(runs, "CumSteps", "ReturnAverage", band="std")
    # run_0: y = x/10 + 10 on [0, 300]; run_1: y = x/10 - 5 on [50, 350]; overlap [50, 300].
    np.testing.assert_array_equal(x, [50, 100, 150, 200, 250, 300])
    first, second = x / 10 + 10, x / 10 - 5
    np.testing.assert_allclose(mean, (first + second) / 2)
    np.testing.assert_allclose(low, mean - 7.5)
    np.testing.assert_allclose(high, mean + 7.5)
    _, _, low, high = variant_curve(runs, "CumSteps", "ReturnAverage", band="minmax")
    np.testing.assert_allclose(low, second)
    np.testing.assert_allclose(high, first)
    _, _, low, high = variant_curve(runs, "CumSteps", "ReturnAverage", band="none")
    np.testing.assert_allclose(low, mean)
    np.testing.assert_allclose(high, mean)


def test_variant_curve_time_axis_smoothing_and_one_run(sweep):
    runs = group_by_variant(find_runs(sweep))["lr_0.001"]
    x, mean, low, high = variant_curve(runs[:1], "time", "ReturnAverage", smooth=2)
    np.testing.assert_array_equal(x, [0.0, 1.0, 3.0])  # CumTime (s); the NaN row is gone
    np.testing.assert_allclose(mean, [1, 1.5, 3])  # over the kept points 1, 2, 4
    np.testing.assert_array_equal(low, mean)
    np.testing.assert_array_equal(high, mean)
    assert all(len(a) == 0 for a in variant_curve(runs, "CumSteps", "NoSuchColumn"))
    with pytest.raises(ValueError, match="band must be one of minmax, std, none"):
        variant_curve(runs, band="quartiles")


def test_variant_curve_runs_without_overlap(tmp_path):
    runs = [Run("v", "a", "a", {"Diagnostics/CumSteps": np.array([0., 10.]),
                                "ReturnAverage": np.array([1., 2.])}),
            Run("v", "b", "b", {"Diagnostics/CumSteps": np.array([20., 30.]),
                                "ReturnAverage": np.array([5., 7.])})]
    x, mean, low, high = variant_curve(runs)
    np.testing.assert_array_equal(x, [0, 10, 20, 30])
    np.testing.assert_allclose(mean, [1, 2, 5, 7])  # each point: the runs that cover it


# -- summary table ------------------------------------------------------------------------

def table_rows(text):
    return {tuple(line.split()[:2]): line.split()[2:] for line in text.splitlines()
            if line.startswith("lr_")}


def test_summary_table_per_run_and_per_variant(sweep):
    text = summary_table(find_runs(sweep), "ReturnAverage")
    runs_part, means_part = text.split("Mean over the runs of each variant")
    rows = table_rows(runs_part)
    #                               rows  steps  final    best
    assert rows[("lr_0.001", "run_0")] == ["4", "300", "4.00", "4.00"]
    assert rows[("lr_0.001", "run_1")] == ["4", "300", "8.00", "9.00"]
    assert rows[("lr_0.01", "run_0")] == ["4", "300", "40.00", "40.00"]
    assert rows[("lr_0.01", "run_1")] == ["4", "350", "30.00", "30.00"]
    means = table_rows(means_part)
    #                          runs  rows  steps  final    best
    assert means[("lr_0.001", "2")] == ["4", "300", "6.00", "6.50"]
    assert means[("lr_0.01", "2")] == ["4", "325", "35.00", "35.00"]


def test_summary_table_nan_final_is_shown_and_left_out_of_the_mean(tmp_path):
    write_run(tmp_path / "lr_a" / "run_0", [0, 100, 200], [1.0, 7.0, NAN])
    write_run(tmp_path / "lr_a" / "run_1", [0, 100, 200], [2.0, 3.0, 5.0])
    text = summary_table(find_runs(tmp_path), "ReturnAverage")
    runs_part, means_part = text.split("Mean over the runs of each variant")
    assert table_rows(runs_part)[("lr_a", "run_0")] == ["3", "200", "nan", "7.00"]
    assert table_rows(means_part)[("lr_a", "2")] == ["3", "200", "5.00", "6.00"]


# -- the figure and the command -----------------------------------------------------------

def test_plot_main_writes_png_and_prints_table(sweep, tmp_path, capsys):
    png = tmp_path / "figs" / "fig.png"
    assert plot_main(parse([str(sweep), "-o", str(png), "--smooth", "2", "--title", "t"])) == 0
    out = capsys.readouterr().out
    assert "lr_0.001" in out and "Mean over the runs of each variant (ReturnAverage)" in out
    assert f"Plot: {png}" in out
    check_png(png)


def test_plot_main_default_output_and_options(sweep, tmp_path, monkeypatch, capsys):
    run_dir = sweep / "lr_0.01" / "run_1"
    assert plot_main(parse([str(run_dir), "--x", "time", "--band", "none"])) == 0
    check_png(run_dir / "plot.png")  # one RUN_DIR: the image goes inside it
    monkeypatch.chdir(tmp_path)
    args = parse([str(sweep / "lr_0.001"), str(sweep / "lr_0.01"), "--y", "ReturnMax"])
    assert plot_main(args) == 0
    check_png(tmp_path / "plot.png")  # several: the current directory
    assert "plot.png" in capsys.readouterr().out


def test_plot_runs_library_call(sweep, tmp_path):
    out = plot_runs(find_runs(sweep), x="CumSteps", y="ReturnAverage", band="std",
                    out=tmp_path / "lib.png")
    assert out == str(tmp_path / "lib.png")
    check_png(out)


def test_cli_plot_subcommand(sweep, tmp_path):
    """Through the ``rlfast`` entry point (fails until cli.py adds the plot subcommand)."""
    from rlfast.cli import main

    png = tmp_path / "cli.png"
    assert main(["plot", str(sweep), "-o", str(png)]) == 0
    check_png(png)


def test_error_no_progress_csv(tmp_path, capsys):
    (tmp_path / "nothing" / "here").mkdir(parents=True)
    assert plot_main(parse([str(tmp_path / "nothing")])) == 2
    err = capsys.readouterr().err
    assert err.startswith("rlfast: error: no progress.csv in or below")


def test_error_bad_directory(tmp_path, capsys):
    assert plot_main(parse([str(tmp_path / "missing")])) == 2
    assert capsys.readouterr().err.startswith(f"rlfast: error: {tmp_path / 'missing'} "
                                              f"does not exist")
    (tmp_path / "file.txt").write_text("x")
    assert plot_main(parse([str(tmp_path / "file.txt")])) == 2
    assert "is not a directory" in capsys.readouterr().err


def test_error_unknown_y_names_close_matches(sweep, capsys):
    assert plot_main(parse([str(sweep), "--y", "ReturnAvg"])) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("rlfast: error: --y 'ReturnAvg': no run has this column")
    assert "did you mean 'ReturnAverage'" in captured.err
    assert "Diagnostics/CumSteps" in captured.err  # the columns that exist are listed


def test_error_missing_x_column(tmp_path, capsys):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "progress.csv").write_text("Diagnostics/CumSteps,ReturnAverage\n0,1\n")
    assert plot_main(parse([str(run_dir), "--x", "time"])) == 2
    assert "Diagnostics/CumTime (s)" in capsys.readouterr().err


def test_bad_smooth_rejected_by_parser(capsys):
    with pytest.raises(SystemExit):
        parse(["somewhere", "--smooth", "0"])
    assert "must be an integer >= 1" in capsys.readouterr().err


def test_missing_matplotlib_says_how_to_install(sweep, tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(ImportError, match=r"pip install rlfast\[plot\]"):
        plot_runs(find_runs(sweep), out=tmp_path / "x.png")
    assert plot_main(parse([str(sweep), "-o", str(tmp_path / "x.png")])) == 2
    assert "pip install rlfast[plot]" in capsys.readouterr().err
    assert plot.MatplotlibMissing.__mro__[1] is ImportError
