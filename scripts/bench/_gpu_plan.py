"""The pure parts of scripts/bench/bench_gpu.sh (no processes, no GPU): the ordered plan of
measurements, the time budget that admits or defers each one, the reading of rlfast's
progress.csv for the time a learning run first reached a mean training return, and the
reading of nvidia-smi's utilisation samples. scripts/bench/_gpu.py runs what is planned here;
the replay section's own plan is in scripts/bench/_gpu_replay.py.
"""
from __future__ import annotations

import csv
import io
import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from _common import median

# ---- the plan ---------------------------------------------------------------------------------


@dataclass
class Item:
    """One measurement: ``kind`` "train" (a scripts/bench/bench_atari_train.py contender at ``envs``
    environments), "sampler" (scripts/bench/bench_sampler.py on one sampler, random and CNN agent),
    "learn" (the Pong learning run), or one of the replay section's ``REPLAY_KINDS`` ("dqn",
    "sac": ``runs`` child processes, each measured for ``window`` seconds of warm-up and
    window after its start-up, with the ``sets`` overrides of ``rlfast train --set``).
    ``before_learn``: tried before the learning run (else after it, with what is left)."""

    kind: str
    name: str
    envs: int = 0
    before_learn: bool = True
    tags: tuple[str, ...] = ()
    runs: int = 1
    window: float = 0.0
    sets: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        return f"{self.kind}:{self.name}@{self.envs}" if self.envs else f"{self.kind}:{self.name}"


def build_plan(small: int, main: int, big: int | None) -> list[Item]:
    """Every measurement of issue 37 in priority order: first what the acceptance figures
    need (the random-agent ceiling, PPO at ``main`` and ``small`` envs, the gpu sampler's
    CNN/random ratio, the LeanRL-style anchor), then the learning run, then the rest of the
    matrix (samplers x overlap x compile, the other sampler tables, ``big`` envs)."""
    T = "train"
    plan = [
        Item(T, "rlfast-random", main),
        Item(T, "rlfast-cpu", main),
        Item(T, "rlfast-gpu", main),
        Item(T, "rlfast-cpu", small),
        Item(T, "rlfast-compile", small, tags=("compile", "rlfast-compile")),
        Item("sampler", "gpu", main),
        Item(T, "rlfast-overlap", main, tags=("rlfast-overlap",)),
        Item(T, "rlfast-compile", main, tags=("compile", "rlfast-compile")),
        Item(T, "leanrl-alevec", small, tags=("compile",)),
        Item(T, "cleanrl-alevec", small),
        Item("learn", "pong"),
    ]
    after = [
        Item(T, "rlfast-gpu", small),
        Item(T, "rlfast-compile-overlap", main, tags=("compile", "rlfast-compile",
                                                      "rlfast-overlap")),
        Item(T, "rlfast-alternating", main),
        Item("sampler", "cpu", main),
        Item("sampler", "alternating", main),
        Item(T, "cleanrl-alevec", main),
        Item(T, "leanrl-alevec", main, tags=("compile",)),
        Item(T, "rlfast-random", small),
        Item(T, "rlfast-overlap", small, tags=("rlfast-overlap",)),
        Item(T, "rlfast-compile-overlap", small, tags=("compile", "rlfast-compile",
                                                       "rlfast-overlap")),
        Item(T, "rlfast-gpu-compile", main, tags=("compile", "rlfast-compile")),
        Item(T, "rlfast-gpu-overlap", main, tags=("rlfast-overlap",)),
        Item(T, "rlfast-gpu-compile-overlap", main, tags=("compile", "rlfast-compile",
                                                          "rlfast-overlap")),
        Item(T, "rlfast-alternating", small),
        Item(T, "rlfast-alternating-overlap", main, tags=("rlfast-overlap",)),
        Item(T, "rlfast-alternating-compile", main, tags=("compile", "rlfast-compile")),
        Item(T, "rlfast-alternating-compile-overlap", main,
             tags=("compile", "rlfast-compile", "rlfast-overlap")),
    ]
    if big:
        after += [Item(T, "rlfast-random", big), Item(T, "rlfast-cpu", big),
                  Item(T, "rlfast-gpu", big), Item(T, "rlfast-compile", big,
                                                   tags=("compile", "rlfast-compile"))]
    for item in after:
        item.before_learn = False
    return plan + after


REPLAY_KINDS = ("dqn", "sac")


@dataclass
class Estimator:
    """Seconds each kind of measurement is expected to take, learnt as they run: a child's
    start-up and shut-down (``overhead``, the largest seen), what torch.compile adds
    (``compile``), a sampler contender's start-up (``sampler_overhead``), a replay run's
    start-up, filling of the replay up to learning start, and shut-down (``replay_overhead``
    until one of that kind ran, then the largest seen of its kind: ``replay_overhead_of``)."""

    warmup: float
    seconds: float
    overhead: float
    compile: float
    sampler_overhead: float
    learn_seconds: float
    learn_overhead: float = 20.0
    replay_overhead: float = 20.0
    seen: dict = field(default_factory=dict)

    def estimate(self, item: Item) -> float:
        if item.kind in REPLAY_KINDS:
            extra = self.compile if "compile" in item.tags else 0.0
            return item.runs * (self.replay_overhead_of(item.kind) + item.window) + extra
        if item.kind == "train":
            extra = self.compile if "compile" in item.tags else 0.0
            return self.overhead + extra + self.warmup + self.seconds
        if item.kind == "sampler":  # one process: the AtariVectorEnv peer, two agents
            return self.sampler_overhead * 3 + 3 * (self.seconds + 1.0)
        return self.learn_seconds + self.learn_overhead

    def replay_overhead_of(self, kind: str) -> float:
        return self.seen.get("replay:" + kind, self.replay_overhead)

    def observe(self, item: Item, wall: float) -> None:
        """Learn from a measurement that ran ``wall`` seconds."""
        if item.kind in REPLAY_KINDS:
            spent = wall - item.runs * item.window
            if "compile" in item.tags:
                overhead = item.runs * self.replay_overhead_of(item.kind)
                self.compile = max(0.0, spent - overhead)
                self.seen["compile"] = True
            else:
                key = "replay:" + item.kind
                self.seen[key] = max(spent / item.runs, self.seen.get(key, 0.0), 1.0)
        elif item.kind == "train":
            spent = wall - self.warmup - self.seconds
            if "compile" in item.tags:
                self.compile = max(0.0, spent - self.overhead)
                self.seen["compile"] = True
            else:
                self.overhead = max(spent, self.overhead if self.seen.get("overhead") else 0.0)
                self.seen["overhead"] = True
        elif item.kind == "sampler":
            self.sampler_overhead = max(1.0, (wall - 3 * (self.seconds + 1.0)) / 3)


class Budget:
    """The wall-clock budget of the whole run. ``admit`` says whether a measurement of
    ``estimate`` seconds fits while keeping ``reserve`` seconds for what must come later."""

    def __init__(self, total: float, clock: Callable[[], float] = time.monotonic):
        self.total, self.clock, self.start = float(total), clock, clock()

    def elapsed(self) -> float:
        return self.clock() - self.start

    def left(self) -> float:
        return self.total - self.elapsed()

    def admit(self, estimate: float, reserve: float = 0.0, margin: float = 5.0) -> bool:
        return estimate + reserve + margin <= self.left()


def schedule(plan: Sequence[Item], budget: Budget, estimator: Estimator,
             run: Callable[[Item, float], str], log: Callable[[str], None] = print,
             min_learn: float = 60.0) -> dict[str, str]:
    """Run ``plan`` in order within ``budget``: ``run(item, timeout)`` measures one item and
    returns its outcome ("ok", "skipped: ...", "failed: ..."). Items before the learning run
    must leave it its time (``estimator.learn_seconds``); one that does not fit then is
    deferred and tried again after the learning run; the learning run gets what is left, at
    most its time, and is skipped under ``min_learn``. An item whose tags include that of a
    contender found unavailable ("skipped: not available") is skipped without running.
    Returns the outcome of every item by key."""
    outcomes: dict[str, str] = {}
    unavailable: set[str] = set()
    learn = next((i for i in plan if i.kind == "learn"), None)
    order = [i for i in plan if i.before_learn and i.kind != "learn"]
    deferred: list[Item] = []
    later = [i for i in plan if not i.before_learn and i.kind != "learn"]

    def attempt(item: Item, reserve: float, defer: bool) -> None:
        gone = unavailable.intersection(item.tags)
        if gone:
            outcomes[item.key] = f"skipped: {sorted(gone)[0]} not available"
            log(f"[{budget.elapsed():5.0f} s, {budget.left():4.0f} s left] {item.key}: "
                f"{outcomes[item.key]}")
            return
        estimate = estimator.estimate(item)
        if not budget.admit(estimate, reserve):
            if defer:
                deferred.append(item)
                outcomes[item.key] = "deferred"
            else:
                outcomes[item.key] = f"skipped: does not fit (needs ~{estimate:.0f} s)"
            log(f"[{budget.elapsed():5.0f} s, {budget.left():4.0f} s left] {item.key}: "
                f"{outcomes[item.key]}")
            return
        timeout = max(estimate, min(budget.left() - reserve, 2 * estimate + 30))
        log(f"[{budget.elapsed():5.0f} s, {budget.left():4.0f} s left] {item.key} "
            f"(~{estimate:.0f} s) ...")
        started = budget.clock()
        outcome = run(item, timeout)
        wall = budget.clock() - started
        outcomes[item.key] = outcome
        if outcome == "ok":
            estimator.observe(item, wall)
        elif outcome.startswith("skipped: not available"):
            own = [t for t in item.tags if t.startswith("rlfast-")]
            unavailable.update(own if len(own) == 1 else [])
        log(f"[{budget.elapsed():5.0f} s, {budget.left():4.0f} s left] {item.key}: {outcome} "
            f"({wall:.0f} s)")

    learn_reserve = estimator.estimate(learn) if learn is not None else 0.0
    for item in order:
        attempt(item, learn_reserve, defer=True)
    if learn is not None:
        cap = min(estimator.learn_seconds, budget.left() - estimator.learn_overhead)
        if cap < min_learn:
            outcomes[learn.key] = f"skipped: does not fit ({max(cap, 0):.0f} s left for it)"
            log(f"{learn.key}: {outcomes[learn.key]}")
        else:
            estimator.learn_seconds = cap
            attempt(learn, 0.0, defer=False)
    for item in deferred + later:
        attempt(item, 0.0, defer=False)
    return outcomes


# ---- rlfast's progress.csv: when did the mean training return reach the target -----------


def read_progress(text: str) -> list[dict[str, float]]:
    """The rows of a progress.csv as floats (unparsable cells NaN); a last line still being
    written (fewer cells than the header) is left out."""
    reader = csv.reader(io.StringIO(text))
    try:
        header = next(reader)
    except StopIteration:
        return []
    rows = []
    for cells in reader:
        if len(cells) != len(header):
            continue
        row = {}
        for key, cell in zip(header, cells):
            try:
                row[key] = float(cell)
            except ValueError:
                row[key] = math.nan
        rows.append(row)
    return rows


def _column(row: dict, suffixes: Iterable[str]) -> str | None:
    for suffix in suffixes:
        for key in row:
            if key == suffix or key.endswith("/" + suffix):
                return key
    return None


def training_returns(rows: Sequence[dict]) -> list[dict]:
    """Per log row: env steps, training time, env steps/s since the previous row, the mean
    return of the training episodes completed in it and how many there were. rlfast's
    evaluating runner (what ``rlfast train`` runs) writes ``Diagnostics/TrainReturn`` and the
    cumulative count ``Diagnostics/CumCompletedTrajs``; the online runner writes
    ``ReturnAverage`` over its window, with ``Diagnostics/NewCompletedTrajs``."""
    if not rows:
        return []
    ret = _column(rows[0], ("TrainReturn",))
    online = ret is None
    if online:
        ret = _column(rows[0], ("ReturnAverage",))
    steps_key = _column(rows[0], ("CumSteps",))
    time_key = _column(rows[0], ("CumTime (s)",))
    sps_key = _column(rows[0], ("StepsPerSecond",))
    count_key = _column(rows[0], ("NewCompletedTrajs",) if online else ("CumCompletedTrajs",))
    out, previous = [], 0.0
    for row in rows:
        count = row.get(count_key, math.nan) if count_key else math.nan
        if not online and not math.isnan(count):
            count, previous = count - previous, count
        value = row.get(ret, math.nan) if ret else math.nan
        out.append(dict(steps=row.get(steps_key, math.nan), train_s=row.get(time_key, math.nan),
                        steps_per_s=row.get(sps_key, math.nan) if sps_key else math.nan,
                        mean_return=value, episodes=count))
    return out


def rolling_return(points: Sequence[dict], min_episodes: int) -> list[float]:
    """For each row, the mean return over the latest rows holding at least ``min_episodes``
    training episodes (weighted by their counts; NaN until that many completed). Rows with no
    count (NaN) count as one episode."""
    out = []
    for i in range(len(points)):
        total = n = 0.0
        for p in reversed(points[: i + 1]):
            value, count = p["mean_return"], p["episodes"]
            if math.isnan(count):
                count = 1.0
            if count <= 0 or math.isnan(value):
                continue
            total += value * count
            n += count
            if n >= min_episodes:
                break
        out.append(total / n if n >= min_episodes else math.nan)
    return out


def steady_steps_per_s(points: Sequence[dict], skip_s: float) -> float | None:
    """Median env steps/s of the rows logged after ``skip_s`` seconds of training (start-up
    and the first compilations left out); None without such rows."""
    values = [p["steps_per_s"] for p in points
              if p["train_s"] >= skip_s and not math.isnan(p["steps_per_s"])]
    return median(values) if values else None


def first_reaching(points: Sequence[dict], target: float, min_episodes: int) -> dict | None:
    """The first row whose rolling mean training return (``rolling_return``) is at least
    ``target``, with its index, steps, training time and that mean; None if none is."""
    for i, (point, mean) in enumerate(zip(points, rolling_return(points, min_episodes))):
        if not math.isnan(mean) and mean >= target:
            return dict(point, row=i, rolling_return=mean)
    return None


# ---- nvidia-smi utilisation samples ---------------------------------------------------------

SMI_QUERY = "timestamp,utilization.gpu,utilization.memory,memory.used"


def parse_smi_line(line: str) -> tuple[float, float, float, float] | None:
    """(epoch seconds, GPU util %, memory util %, memory used MiB) of one line of
    ``nvidia-smi --query-gpu=timestamp,utilization.gpu,utilization.memory,memory.used
    --format=csv,noheader,nounits``; None for anything else (a header, a blank)."""
    cells = [c.strip() for c in line.split(",")]
    if len(cells) != 4:
        return None
    try:
        stamp = datetime.strptime(cells[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
        return stamp, float(cells[1]), float(cells[2]), float(cells[3])
    except ValueError:
        return None


def utilisation(samples: Sequence[tuple], t_start: float, t_end: float) -> dict | None:
    """Mean GPU util %, mean memory util % and peak memory MiB over the samples inside
    [t_start, t_end]; None when none fell inside."""
    inside = [s for s in samples if t_start <= s[0] <= t_end]
    if not inside:
        return None
    return dict(gpu_util=sum(s[1] for s in inside) / len(inside),
                mem_util=sum(s[2] for s in inside) / len(inside),
                mem_used_max=max(s[3] for s in inside), samples=len(inside))


def window_utilisation(samples: Sequence[tuple], figures: dict | None) -> dict | None:
    """``utilisation`` over the window of a measurement's ``figures`` (its ``t_start`` and
    ``t_end``); None without samples or without a window."""
    if not samples or not figures or "t_start" not in figures:
        return None
    return utilisation(samples, figures["t_start"], figures["t_end"])
