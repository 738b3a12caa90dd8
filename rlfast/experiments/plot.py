"""``rlfast plot``: learning curves of runs and sweeps, and the sweep's summary table.

A run directory holds the logger's ``progress.csv`` (a header, then one row per log
interval). A sweep started by ``run_experiments`` is ``EXPERIMENT_DIR/<variant dirs>/
run_<ID>/progress.csv``; the *variant* of a run is the path from the directory given on
the command line to the run directory's parent. ``rlfast plot`` draws one line per
variant (the mean over its runs, with a min-max or +-std band when it has several) and
prints one summary row per run, then the mean over the runs of each variant.

Averaging runs that logged at slightly different steps: every run's curve is linearly
interpolated between its own logged points onto the union of all the runs' x values,
restricted to the range that every run covers (from the latest first point to the earliest
last point). Each point of the mean therefore averages every run and nothing is
extrapolated; when the runs logged at the same steps (the usual case) no value is
interpolated at all. Should the runs not overlap, each point averages the runs that cover it.

matplotlib is optional (``pip install rlfast[plot]``) and imported only when a figure is
drawn, through the non-interactive Agg canvas, so importing this module costs nothing and
never changes the pyplot backend of the caller (a notebook, say).
"""
from __future__ import annotations

import argparse
import csv
import dataclasses
import difflib
import math
import os
import sys
from collections.abc import Iterable

import numpy as np

__all__ = ["BANDS", "X_COLUMNS", "MatplotlibMissing", "PlotError", "Run", "add_plot_parser",
           "find_runs", "group_by_variant", "plot_main", "plot_runs", "read_progress", "smooth",
           "summary_table", "variant_curve"]

PROGRESS_FILE = "progress.csv"
STEPS_COLUMN = "Diagnostics/CumSteps"
X_COLUMNS = {"CumSteps": STEPS_COLUMN, "time": "Diagnostics/CumTime (s)"}
X_LABELS = {STEPS_COLUMN: "environment steps", "Diagnostics/CumTime (s)": "wall-clock time (s)"}
BANDS = ("minmax", "std", "none")
INSTALL_HINT = "pip install rlfast[plot]"


class PlotError(ValueError):
    """A directory that is not there, no run found, or a column no run has."""


class MatplotlibMissing(ImportError):
    """matplotlib, the optional extra that drawing needs, is not installed."""


@dataclasses.dataclass
class Run:
    """One run: its variant label, its name (the run directory's name), the run directory,
    and the columns of its ``progress.csv`` as float arrays (NaN for empty cells)."""

    variant: str
    name: str
    path: str
    columns: dict[str, np.ndarray]

    @property
    def rows(self) -> int:
        """Number of rows logged so far."""
        return max((len(v) for v in self.columns.values()), default=0)


def _number(cell: str | None) -> float:
    try:
        return float(cell) if cell else math.nan
    except ValueError:
        return math.nan


def read_progress(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """The columns of one ``progress.csv``, header name to float64 array. Empty or
    non-numeric cells and the missing cells of a row cut short (a run still writing) are
    NaN; an empty file gives no columns."""
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.reader(f)
        header = next(reader, None)
        rows = [row for row in reader if row]
    if header is None:
        return {}
    return {name: np.array([_number(row[i]) if i < len(row) else math.nan for row in rows],
                           dtype=np.float64)
            for i, name in enumerate(header)}


def _run_dirs(root: str) -> list[str]:
    """Every directory at or below ``root`` that holds a progress.csv, in sorted order."""
    found = []
    for here, dirs, files in os.walk(root):
        dirs.sort()
        if PROGRESS_FILE in files:
            found.append(here)
    return found


def _root_label(root: str) -> str:
    label = os.path.normpath(root)
    return os.path.basename(os.path.abspath(root)) if label in (".", "..") else label


def _variant_label(root: str, run_dir: str, several_roots: bool) -> str:
    """The path from ``root`` to the run's parent; a root that is itself a run directory,
    or whose runs sit right below it, is labelled by its own path. With several roots,
    labels keep the root so that equal variant paths of two sweeps stay apart."""
    if os.path.normpath(run_dir) == os.path.normpath(root):
        return _root_label(root)
    rel = os.path.relpath(os.path.dirname(run_dir), root)
    if rel == ".":
        return _root_label(root) if several_roots else os.path.basename(os.path.abspath(root))
    return os.path.join(_root_label(root), rel) if several_roots else rel


def find_runs(paths: str | os.PathLike | Iterable[str | os.PathLike]) -> list["Run"]:
    """Every run at or below ``paths``: a path is a run directory (it holds progress.csv) or
    any directory above runs, searched recursively in sorted order. Raises ``PlotError``
    for a path that is missing or not a directory; a run reached twice is listed once."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    roots = [os.fspath(p) for p in paths]
    runs, seen = [], set()
    for root in roots:
        if not os.path.exists(root):
            raise PlotError(f"{root} does not exist")
        if not os.path.isdir(root):
            raise PlotError(f"{root} is not a directory")
        for run_dir in _run_dirs(root):
            real = os.path.realpath(run_dir)
            if real in seen:
                continue
            seen.add(real)
            runs.append(Run(variant=_variant_label(root, run_dir, len(roots) > 1),
                            name=os.path.basename(os.path.abspath(run_dir)), path=run_dir,
                            columns=read_progress(os.path.join(run_dir, PROGRESS_FILE))))
    return runs


def group_by_variant(runs: Iterable[Run]) -> dict[str, list[Run]]:
    """Runs by variant label, variants and runs in the order first seen."""
    groups: dict[str, list[Run]] = {}
    for run in runs:
        groups.setdefault(run.variant, []).append(run)
    return groups


def smooth(values: Iterable[float], k: int) -> np.ndarray:
    """Trailing moving average: point ``i`` is the mean of the finite values among points
    ``i-k+1 .. i`` (fewer at the start), NaN only when none of them is finite. Same length
    as ``values``; ``k=1`` returns a copy unchanged."""
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"smoothing window k must be an integer >= 1; got {k!r}")
    values = np.asarray(values, dtype=np.float64)
    if values.ndim != 1:
        raise ValueError(f"smooth() takes a 1-D series; got shape {values.shape}")
    if k == 1 or values.size == 0:
        return values.copy()
    padded = np.concatenate([np.full(k - 1, np.nan), values])
    windows = np.lib.stride_tricks.sliding_window_view(padded, k)
    finite = np.isfinite(windows)
    counts = finite.sum(axis=1)
    sums = np.where(finite, windows, 0.0).sum(axis=1)
    out = np.full(values.shape, np.nan)
    np.divide(sums, counts, out=out, where=counts > 0)
    return out


def _x_column(x: str) -> str:
    """``CumSteps`` / ``time`` to their progress.csv column; any other name is a column."""
    return X_COLUMNS.get(x, x)


def _series(run: Run, x_column: str, y: str, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(x, smoothed y) of the rows where both are finite, sorted by x. Smoothing runs over
    the kept rows, so a NaN row is skipped rather than drawn; of rows logged at the same x
    the last one counts."""
    xs, ys = run.columns.get(x_column), run.columns.get(y)
    if xs is None or ys is None:
        return np.empty(0), np.empty(0)
    keep = np.isfinite(xs) & np.isfinite(ys)
    xs, ys = xs[keep], smooth(ys[keep], k)
    order = np.argsort(xs, kind="stable")
    xs, ys = xs[order], ys[order]
    last = np.append(xs[1:] != xs[:-1], True)
    return xs[last], ys[last]


def variant_curve(runs: Iterable[Run], x: str = "CumSteps", y: str = "ReturnAverage",
                  smooth: int = 1, band: str = "minmax"
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(x, mean, low, high) of the runs of one variant: each run's (smoothed) curve
    interpolated onto the common grid described in the module docstring, the mean over
    the runs, and the band: the min and max over runs (``minmax``), mean -/+ the
    population std (``std``), or the mean itself (``none``, and always for one run).
    Runs without a finite point are left out; with none left, four empty arrays."""
    if band not in BANDS:
        raise ValueError(f"band must be one of {', '.join(BANDS)}; got {band!r}")
    x_column = _x_column(x)
    series = [s for s in (_series(r, x_column, y, smooth) for r in runs) if len(s[0])]
    if not series:
        return np.empty(0), np.empty(0), np.empty(0), np.empty(0)
    if len(series) == 1:
        xs, ys = series[0]
        return xs, ys, ys.copy(), ys.copy()
    grid = np.unique(np.concatenate([xs for xs, _ in series]))
    start, stop = max(xs[0] for xs, _ in series), min(xs[-1] for xs, _ in series)
    if start <= stop:
        grid = grid[(grid >= start) & (grid <= stop)]
    stack = np.stack([np.where((grid >= xs[0]) & (grid <= xs[-1]), np.interp(grid, xs, ys),
                               np.nan) for xs, ys in series])
    mean = np.nanmean(stack, axis=0)  # no all-NaN column: every grid x is some run's own
    if band == "minmax":
        return grid, mean, np.nanmin(stack, axis=0), np.nanmax(stack, axis=0)
    if band == "std":
        std = np.nanstd(stack, axis=0)
        return grid, mean, mean - std, mean + std
    return grid, mean, mean.copy(), mean.copy()


def _figure_tools():
    """matplotlib's Figure and Agg canvas, or an ImportError that says how to get them."""
    try:
        import matplotlib
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as e:
        raise MatplotlibMissing(f"plotting needs matplotlib, an optional extra of rlfast: "
                          f"{INSTALL_HINT}") from e
    return matplotlib, Figure, FigureCanvasAgg


def plot_runs(runs: Iterable[Run], x: str = "CumSteps", y: str = "ReturnAverage",
              smooth: int = 1, band: str = "minmax", out: str | os.PathLike = "plot.png",
              title: str | None = None) -> str:
    """Draw one line per variant (``variant_curve``) with its band shaded, and save the
    figure to ``out`` (format from the extension; missing directories are created).
    ``x`` is ``CumSteps``, ``time`` or a column name, ``y`` a column name. A variant with
    no finite point is left out with a warning on stderr. Returns the path written."""
    matplotlib, Figure, FigureCanvasAgg = _figure_tools()
    groups = group_by_variant(runs)
    fig = Figure(figsize=(8, 5), dpi=100)
    FigureCanvasAgg(fig)  # Agg, whatever pyplot's backend is
    ax = fig.add_subplot()
    colors = matplotlib.rcParams["axes.prop_cycle"].by_key().get("color", [])
    if len(groups) > len(colors):
        cmap = matplotlib.colormaps["viridis"]
        colors = [cmap(i / max(len(groups) - 1, 1)) for i in range(len(groups))]
    drawn = 0
    for color, (variant, members) in zip(colors, groups.items()):
        xs, mean, low, high = variant_curve(members, x, y, smooth, band)
        if not len(xs):
            print(f"rlfast: warning: no finite {y} in {variant}; left out of the plot",
                  file=sys.stderr)
            continue
        ax.plot(xs, mean, color=color, label=variant, marker="o" if len(xs) == 1 else None)
        if not np.array_equal(low, high):
            ax.fill_between(xs, low, high, color=color, alpha=0.2, linewidth=0)
        drawn += 1
    x_column = _x_column(x)
    ax.set_xlabel(X_LABELS.get(x_column, x_column))
    ax.set_ylabel(y if smooth == 1 else f"{y} (mean of last {smooth} points)")
    if title:
        ax.set_title(title)
    ax.grid(alpha=0.3)
    if drawn:
        ax.legend(loc="best", fontsize="small")
    out = os.fspath(out)
    try:
        os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
        fig.savefig(out)
    except OSError as e:
        raise PlotError(f"cannot write {out}: {e.strerror or e}") from None
    return out


def _run_stats(run: Run, y: str, steps_key: str) -> dict:
    """Rows, last steps, final (last row, NaN when it has none) and best ``y``."""
    values = run.columns.get(y, np.empty(0))
    steps = run.columns.get(steps_key, np.empty(0))
    finite = values[np.isfinite(values)]
    return dict(rows=run.rows, steps=steps[-1] if len(steps) else math.nan,
                final=values[-1] if len(values) else math.nan,
                best=finite.max() if len(finite) else math.nan)


def _mean(values: list[float]) -> float:
    finite = [v for v in values if math.isfinite(v)]
    return sum(finite) / len(finite) if finite else math.nan


def _fmt(value: float, integer: bool = False) -> str:
    if not math.isfinite(value):
        return "nan" if math.isnan(value) else str(value)
    if integer and float(value).is_integer():
        return str(int(value))
    if integer or value == 0 or abs(value) >= 0.01:
        return f"{value:.{1 if integer else 2}f}"
    return f"{value:.3g}"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    """Aligned text table: the first two columns left-aligned, the numbers right-aligned."""
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(header)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths)).rstrip(),
             "  ".join("-" * w for w in widths)]
    for row in rows:
        lines.append("  ".join(c.ljust(w) if i < 2 else c.rjust(w)
                               for i, (c, w) in enumerate(zip(row, widths))).rstrip())
    return lines


def summary_table(runs: Iterable[Run], y: str = "ReturnAverage",
                  steps_key: str = STEPS_COLUMN) -> str:
    """One row per run (variant, run, rows logged, last steps, final and best ``y``), then
    one row per variant with the mean over its runs of each (NaNs left out of the means).
    ``final`` is the last row's value, NaN when that row had none (e.g. an evaluation
    without a completed episode); ``best`` is the largest finite value."""
    runs = list(runs)
    stats = [(run, _run_stats(run, y, steps_key)) for run in runs]
    lines = [f"Runs ({y}):", ""]
    lines += _table(["variant", "run", "rows", "steps", "final", "best"],
                    [[run.variant, run.name, str(s["rows"]), _fmt(s["steps"], integer=True),
                      _fmt(s["final"]), _fmt(s["best"])] for run, s in stats])
    by_variant: dict[str, list[dict]] = {}
    for run, s in stats:
        by_variant.setdefault(run.variant, []).append(s)
    lines += ["", f"Mean over the runs of each variant ({y}):", ""]
    lines += _table(["variant", "runs", "rows", "steps", "final", "best"],
                    [[variant, str(len(ss)), _fmt(_mean([s["rows"] for s in ss]), integer=True),
                      _fmt(_mean([s["steps"] for s in ss]), integer=True),
                      _fmt(_mean([s["final"] for s in ss])), _fmt(_mean([s["best"] for s in ss]))]
                     for variant, ss in by_variant.items()])
    return "\n".join(lines)


def _check_column(runs: list[Run], column: str, option: str) -> None:
    """Raise ``PlotError`` unless some run has ``column``, naming close matches and the
    columns that exist."""
    available = list(dict.fromkeys(name for run in runs for name in run.columns))
    if column in available:
        return
    if not available:
        raise PlotError(f"{option} {column!r}: no run has logged a row yet (every "
                        f"{PROGRESS_FILE} is empty)")
    by_lower = {name.lower(): name for name in available}
    close = [by_lower[m] for m in difflib.get_close_matches(column.lower(), by_lower, n=3,
                                                            cutoff=0.6)]
    hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    raise PlotError(f"{option} {column!r}: no run has this column{hint} "
                    f"(columns: {', '.join(available)})")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1; got {text!r}")
    return value


def add_plot_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add the ``plot`` subcommand to ``subparsers`` (of the ``rlfast`` parser); returns it."""
    parser = subparsers.add_parser(
        "plot", help="plot learning curves and summarise runs or a sweep",
        description="Plot the learning curves of runs (one line per variant: the mean over "
                    "its runs with a shaded band) and print a summary table.")
    parser.add_argument("run_dirs", nargs="+", metavar="RUN_DIR",
                        help="a run directory (holds progress.csv) or any directory above runs, "
                             "e.g. a sweep's experiment directory (searched recursively)")
    parser.add_argument("-o", "--output", default=None, metavar="FILE",
                        help="image to write (default: RUN_DIR/plot.png for one RUN_DIR, "
                             "else ./plot.png)")
    parser.add_argument("--x", choices=tuple(X_COLUMNS), default="CumSteps",
                        help="x axis: environment steps (default) or wall-clock training time")
    parser.add_argument("--y", default="ReturnAverage",
                        help="progress.csv column to plot and summarise (default ReturnAverage)")
    parser.add_argument("--smooth", type=_positive_int, default=1, metavar="K",
                        help="trailing moving average over the last K logged points (default 1: "
                             "none)")
    parser.add_argument("--band", choices=BANDS, default="minmax",
                        help="shading around a variant's mean: min-max over its runs (default), "
                             "+-one std, or none")
    parser.add_argument("--title", default=None, help="figure title")
    return parser


def _default_output(run_dirs: list[str]) -> str:
    return os.path.join(run_dirs[0], "plot.png") if len(run_dirs) == 1 else "plot.png"


def plot_main(args: argparse.Namespace) -> int:
    """``rlfast plot``: print the summary table, draw the figure and print its path.
    Returns 0, or 2 after ``rlfast: error: ...`` on stderr for a missing directory, no
    progress.csv, a column no run has, an unwritable output or a missing matplotlib."""
    try:
        runs = find_runs(args.run_dirs)
        if not runs:
            raise PlotError(f"no {PROGRESS_FILE} in or below {', '.join(args.run_dirs)}")
        _check_column(runs, args.y, "--y")
        _check_column(runs, X_COLUMNS[args.x], f"--x {args.x} reads")
        print(summary_table(runs, args.y))
        path = plot_runs(runs, x=args.x, y=args.y, smooth=args.smooth, band=args.band,
                         out=args.output or _default_output(args.run_dirs), title=args.title)
    except (PlotError, MatplotlibMissing) as e:
        print(f"rlfast: error: {e}", file=sys.stderr)
        return 2
    print(f"\nPlot: {path}")
    return 0
