"""``rlfast train`` / ``rlfast resume`` end to end, as separate processes:

* a DQN run SIGKILLed in the middle of its snapshot saves, again and again, always leaves a
  loadable snapshot and replay sidecar, and ``rlfast resume`` takes it to completion with
  an intact ``progress.csv`` and nothing left over;
* the console of a default run is a short summary (the tables go to ``debug.log``), and
  ``--verbose`` prints the tables;
* a PPO run stopped by SIGTERM and resumed logs exactly the rows of the uninterrupted run
  (also when the SIGTERM arrives during a log step's evaluation: the signal waits until the
  row and its snapshot are written).

Every subprocess is ``sys.executable -m rlfast`` started in its own session from
``tmp_path``, so the tests behave the same from any shell, directory or job control state.
"""
import csv
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from rlfast.cli import main as rlfast_main
from rlfast.runners.snapshots import REPLAY_SUFFIX, check_resumable
from rlfast.utils.logging.console import summary_header
from rlfast.utils.logging.snapshot import load_snapshot
from tests.integration._guards import live_children, watchdog  # noqa: F401 - fixture

ROOT = Path(__file__).resolve().parents[2]
STEPS_KEY = "Diagnostics/CumSteps"


def _env():
    """The child's environment: this checkout's rlfast first on the path."""
    env = dict(os.environ)
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + paths)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _popen(args, cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE):
    return subprocess.Popen([sys.executable, "-m", "rlfast", *args], cwd=cwd, env=_env(),
                            stdout=stdout, stderr=stderr, text=True, start_new_session=True)


def _run(args, cwd, timeout):
    """Run ``rlfast ARGS`` to completion; return (returncode, stdout, stderr)."""
    proc = _popen(args, cwd, stdout=subprocess.PIPE)
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        _reap(proc)
    return proc.returncode, out, err


def _reap(proc):
    """Kill ``proc`` if it still runs, and wait for it (no zombie, no orphan)."""
    if proc.poll() is None:
        proc.kill()
    try:
        proc.communicate(timeout=30)
    except ValueError:  # streams already closed by an earlier communicate
        proc.wait(timeout=30)


def _csv(path):
    """(header, rows as lists of strings) of a CSV file; ([], []) when missing."""
    try:
        with open(path, newline="", encoding="utf-8") as f:
            rows = list(csv.reader(f))
    except FileNotFoundError:
        return [], []
    return (rows[0], rows[1:]) if rows else ([], [])


def _column(path, key):
    header, rows = _csv(path)
    i = header.index(key)
    return [r[i] for r in rows]


def _no_children_left():
    deadline = time.monotonic() + 10
    while live_children() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert live_children() == []


# ------------------------------------------------------------------ 1. kill and resume

INTERVAL = 320  # environment steps per log interval (and snapshot): 10 iterations of 4 x 8
# Each kill is a fresh process (~4 s of CPU, most of it importing torch) killed in its first
# or second save, so the snapshot gains at most two intervals per kill: 10 after N_KILLS,
# within the TOTAL - 4 intervals that leave the final resume a few saves of its own.
TOTAL = 20 * INTERVAL
N_KILLS = 5
# Startup on a busy machine (seen over 10 s on a heavily loaded one); a save follows every
# ~0.1 s after. A kill that falls back to a random delay seldom lands in a save, so the wait is
# long enough for that to be rare.
FIRST_SAVE_WAIT_S = 20.0
DQN_TRAIN = ["train", "dqn", "CartPole-v1", "--sampler", "serial", "--snapshot-replay",
             "--snapshot-mode", "last", "--steps", str(TOTAL), "--no-progress",
             # Frequent snapshots, each with a 17 MB replay file: saving is a large share of
             # the run time, so that kills land in saves.
             "--set", f"runner.log_interval_steps={INTERVAL}",
             "--set", "algo.replay_size=500000", "--set", "algo.min_steps_learn=500",
             "--set", "sampler.eval_n_envs=1", "--set", "sampler.eval_max_steps=200",
             "--set", "sampler.eval_max_trajectories=1"]
_SIDECAR = re.compile(r"params\.pkl\.(\d+)\." + re.escape(REPLAY_SUFFIX) + r"\Z")
_SIDECAR_TMP = re.compile(r"\.params\.pkl\.(\d+)\." + re.escape(REPLAY_SUFFIX)
                          + r"\.[0-9a-f]+\.tmp\Z")
_SNAPSHOT_TMP = re.compile(r"\.params\.pkl\.[0-9a-f]+\.tmp\Z")


def _is_tmp(name):
    return name.startswith(".") and name.endswith(".tmp")


def _listing(run_dir):
    """{name: inode} of the run directory (a file replaced by a rename gets a new inode)."""
    found = {}
    try:
        with os.scandir(run_dir) as entries:
            for entry in entries:
                try:
                    found[entry.name] = entry.inode()
                except OSError:
                    pass
    except FileNotFoundError:
        pass
    return found


def _save_events(listing, baseline):
    """The snapshot saves in progress or done since ``baseline``: {save key: phase}.

    A save writes the replay sidecar (``.params.pkl.<itr>.replay.npz.<hex>.tmp``, renamed
    to ``params.pkl.<itr>.replay.npz``), then the snapshot (``.params.pkl.<hex>.tmp``,
    renamed to ``params.pkl``), then deletes the older sidecars; the log row follows.
    Phase 0: the sidecar is being written; 1: the sidecar is in place (or the snapshot is
    being written); phase 2 (the snapshot is in place) is told by ``_kill_in_save``."""
    events = {}
    for name, inode in listing.items():
        if baseline.get(name) == inode:
            continue
        side_tmp, side = _SIDECAR_TMP.match(name), _SIDECAR.match(name)
        if side_tmp:
            events.setdefault(int(side_tmp.group(1)), 0)
        elif side:
            events[int(side.group(1))] = 1
        elif _SNAPSHOT_TMP.match(name):
            events.setdefault("snapshot", 1)
    if "snapshot" in events and len(events) > 1:
        del events["snapshot"]  # the snapshot of a sidecar already seen
    return events


def _kill_in_save(proc, run_dir, rng):
    """Poll the run directory every ~1 ms and SIGKILL ``proc`` as soon as the targeted
    snapshot save is seen in progress (the first or second save of this process, in a
    random phase); if no save shows within FIRST_SAVE_WAIT_S, kill after a random
    delay. Returns (baseline listing, how the kill was aimed)."""
    baseline = _listing(run_dir)
    target_save = rng.choice([1, 1, 2])
    target_phase = rng.choice([0, 0, 1, 2])
    start = time.monotonic()
    seen = {}  # save -> the furthest phase seen (saves stay counted once their files go)
    snapshot_when_seen = {}  # save -> the inode of params.pkl when the save was first seen
    while True:
        if proc.poll() is not None:
            _, err = proc.communicate()
            pytest.fail(f"the run exited ({proc.returncode}) before it was killed:\n{err[-3000:]}")
        listing = _listing(run_dir)
        for save, phase in _save_events(listing, baseline).items():
            if save == "snapshot" and any(isinstance(k, int) for k in seen):
                continue  # the snapshot of a sidecar already seen
            seen[save] = max(phase, seen.get(save, 0))
            snapshot_when_seen.setdefault(save, listing.get("params.pkl"))
        if seen:
            newest = max(seen, key=lambda k: (isinstance(k, int), k if isinstance(k, int) else 0))
            if listing.get("params.pkl") != snapshot_when_seen[newest]:
                seen[newest] = 2  # its snapshot is in place
            if len(seen) > target_save or (len(seen) == target_save
                                           and seen[newest] >= target_phase):
                proc.kill()  # past the aimed phase (it was too short to see): kill now too
                return baseline, f"save {len(seen)} phase {seen[newest]}"
        elif time.monotonic() - start > FIRST_SAVE_WAIT_S:
            time.sleep(rng.uniform(0.0, 0.5))
            proc.kill()
            return baseline, "random delay"
        time.sleep(0.001)


def _check_after_kill(run_dir, baseline):
    """The newest snapshot loads (digest checked) and its replay sidecar loads with numpy.
    Returns (snapshot cum_steps or None, whether the kill landed in a save, what it left)."""
    listing = _listing(run_dir)
    new_tmps = sorted(n for n in listing if _is_tmp(n) and n not in baseline
                      and n.startswith(".params.pkl"))
    snap_path = run_dir / "params.pkl"
    if not snap_path.exists():
        assert not any(_SIDECAR.match(n) for n in listing if baseline.get(n) == listing[n]), \
            "a replay file from before this attempt lost its snapshot"
        return None, bool(new_tmps), new_tmps
    snap = load_snapshot(snap_path)  # raises SnapshotCorruptError on a bad digest
    check_resumable(snap)
    named = snap["sidecar_files"][REPLAY_SUFFIX]
    assert _SIDECAR.match(named) and int(_SIDECAR.match(named).group(1)) == snap["itr"]
    with np.load(run_dir / named, allow_pickle=False) as replay:
        assert replay.files
        for key in replay.files:
            replay[key]  # every array reads back in full
    snapshot_replaced = baseline.get("params.pkl") != listing["params.pkl"]
    unnamed = sorted(n for n in listing if _SIDECAR.match(n) and n != named)
    # A sidecar written in this attempt whose snapshot is not (yet) in place, or older
    # sidecars not yet deleted behind a snapshot just replaced: the save was under way.
    pending = [n for n in unnamed if baseline.get(n) != listing[n] or snapshot_replaced]
    return int(snap["cum_steps"]), bool(new_tmps or pending), new_tmps + pending


def test_sigkill_during_snapshot_saves_then_resume(tmp_path, watchdog):
    watchdog(240)
    rng = random.Random(1234)
    run_dir = tmp_path / "dqn"
    train_args = DQN_TRAIN + ["--log-dir", str(run_dir)]
    hits, aims, left, snapshot_steps = 0, [], [], []
    resume_attempts, resumed_from = 0, []
    t0 = time.monotonic()
    for kill in range(N_KILLS):
        cum_steps = snapshot_steps[-1] if snapshot_steps else None
        if cum_steps is None:  # no snapshot yet: (re)start the run
            args = train_args + (["--overwrite"] if kill else [])
            resume_attempts, resumed_from = 0, []
        else:
            assert cum_steps <= TOTAL - 4 * INTERVAL, "TOTAL too small for the kills"
            args = ["resume", str(run_dir), "--no-progress"]
            resume_attempts += 1
            resumed_from.append(cum_steps)
        proc = _popen(args, tmp_path)
        try:
            baseline, aim = _kill_in_save(proc, run_dir, rng)
        finally:
            _reap(proc)
        assert proc.returncode == -signal.SIGKILL
        steps, hit, leftovers = _check_after_kill(run_dir, baseline)
        if snapshot_steps and snapshot_steps[-1] is not None:
            assert steps is not None and steps >= snapshot_steps[-1], "the snapshot went back"
        snapshot_steps.append(steps)
        hits += hit
        aims.append(aim)
        left.append(leftovers)
    killed_s = time.monotonic() - t0

    assert snapshot_steps[-1] is not None, "no snapshot after all kills"
    resumed_from.append(snapshot_steps[-1])
    rc, out, err = _run(["resume", str(run_dir), "--no-progress"], tmp_path, timeout=120)
    assert rc == 0, err[-3000:]
    assert "Traceback" not in err
    print(f"\n{N_KILLS} kills in {killed_s:.1f} s, {hits} in a save; aimed: {aims}; "
          f"left behind: {left}; snapshot steps: {snapshot_steps}")
    assert hits >= (N_KILLS + 1) // 2, (hits, aims, left)

    # progress.csv: one intact header, whole rows, steps strictly increasing to the total.
    header, rows = _csv(run_dir / "progress.csv")
    assert STEPS_KEY in header and "ReturnAverage" in header and "Diagnostics/Iteration" in header
    assert len(set(header)) == len(header)
    assert all(len(r) == len(header) for r in rows)
    assert header not in rows
    steps = [int(r[header.index(STEPS_KEY)]) for r in rows]
    assert steps[0] == 0  # the pre-training evaluation
    assert all(a < b for a, b in zip(steps, steps[1:])), steps
    assert steps[-1] == TOTAL
    # Every log row is there: a row is written before its snapshot, so a kill between the
    # two resumes from the previous snapshot and writes the row again.
    missing = sorted(set(range(0, TOTAL + 1, INTERVAL)) - set(steps))
    assert missing == [], f"rows missing from progress.csv: {missing}"

    # Nothing left over: no temporary file, one replay file, the final snapshot's.
    names = os.listdir(run_dir)
    assert [n for n in names if _is_tmp(n)] == []
    snap = load_snapshot(run_dir / "params.pkl")
    assert snap["cum_steps"] == TOTAL
    assert [n for n in names if _SIDECAR.match(n)] == [snap["sidecar_files"][REPLAY_SUFFIX]]

    # params.json records every resume (the killed ones too), each from its snapshot.
    params = json.loads((run_dir / "params.json").read_text())
    resumes = params["resumes"]
    if "random delay" not in aims[-resume_attempts:] if resume_attempts else True:
        assert [r["from_steps"] for r in resumes] == resumed_from
        assert len(resumes) == resume_attempts + 1
    else:  # a resume killed at random may have died before it recorded itself
        assert len(resumes) <= resume_attempts + 1
        assert resumes[-1]["from_steps"] == resumed_from[-1]
    assert all(r["to_steps"] == TOTAL for r in resumes)
    _no_children_left()


# ------------------------------------------------------------------ 2. short console

_TABLE_RETURN = re.compile(r"\|\s*ReturnAverage\s")
PPO_DEFAULT_STEPS = 25_000  # the preset's 100k take ~15 s here; 25k show the same console


def test_console_is_short_and_verbose_prints_tables(tmp_path, watchdog):
    watchdog(300)
    run_dir = tmp_path / "ppo"
    t0 = time.monotonic()
    rc, out, err = _run(["train", "ppo", "CartPole-v1", "--steps", str(PPO_DEFAULT_STEPS),
                         "--log-dir", str(run_dir)], tmp_path, timeout=240)
    default_s = time.monotonic() - t0
    assert rc == 0, err[-3000:]
    lines = out.splitlines() + err.splitlines()
    assert len(lines) <= 30, "\n".join(lines)
    header = summary_header().strip()
    assert [line.strip() for line in lines].count(header) == 1, out
    csv_header, rows = _csv(run_dir / "progress.csv")
    logged_steps = [int(r[csv_header.index(STEPS_KEY)]) for r in rows]
    after_header = out.splitlines()[[ln.strip() for ln in out.splitlines()].index(header) + 1:]
    summary_steps = []
    for line in after_header:
        first = line.split()[0] if line.split() else ""
        if re.fullmatch(r"\d{1,3}(,\d{3})*", first):
            summary_steps.append(int(first.replace(",", "")))
    assert summary_steps == logged_steps, out
    assert len(logged_steps) >= 3
    assert "ReturnAverage" not in out
    # debug.log holds the whole table of every row: "<time> | ReturnAverage  <value>".
    debug = (run_dir / "debug.log").read_text().splitlines()
    assert sum(bool(_TABLE_RETURN.search(line)) for line in debug) == len(rows)
    assert sum(STEPS_KEY in line for line in debug) == len(rows)

    verbose_dir = tmp_path / "ppo_verbose"
    rc, vout, verr = _run(["train", "ppo", "CartPole-v1", "--sampler", "serial", "--steps", "2048",
                           "--set", "runner.log_interval_steps=1024",
                           "--set", "sampler.eval_n_envs=2",
                           "--set", "sampler.eval_max_steps=400",
                           "--log-dir", str(verbose_dir), "--verbose"], tmp_path, timeout=120)
    assert rc == 0, verr[-3000:]
    _, vrows = _csv(verbose_dir / "progress.csv")
    vlines = vout.splitlines()
    assert sum(bool(_TABLE_RETURN.search(line)) for line in vlines) == len(vrows) == 3
    assert len(vlines) > 30 * len(vrows)  # the tables: dozens of diagnostics per row
    print(f"\ndefault run ({PPO_DEFAULT_STEPS} steps): {default_s:.1f} s, {len(lines)} lines; "
          f"verbose: {len(vlines)} lines")
    _no_children_left()


# ------------------------------------------------------------------ 3. SIGTERM then resume

PPO_STEPS = 16384
PPO_RUN = ["train", "ppo", "CartPole-v1", "--sampler", "serial", "--steps", str(PPO_STEPS),
           # 1024 steps per iteration (64 x 16): a row every 2 iterations. The preset's
           # learning rate decays linearly to 0 at --steps, so every run here has the same.
           "--set", "runner.log_interval_steps=2048",
           "--set", "sampler.eval_n_envs=2", "--set", "sampler.eval_max_steps=1000",
           "--set", "sampler.eval_max_trajectories=2", "--no-progress"]


def _returns_table(run_dir):
    """The ``Return*`` columns and ``Diagnostics/CumSteps`` of every row of progress.csv."""
    header, rows = _csv(run_dir / "progress.csv")
    keys = [k for k in header if k.startswith("Return")] + [STEPS_KEY]
    assert len(keys) >= 6, header
    return keys, [[r[header.index(k)] for k in keys] for r in rows]


@pytest.fixture(scope="module")
def uninterrupted_ppo(tmp_path_factory):
    """The progress table of the PPO run trained in one go (in this process)."""
    base = tmp_path_factory.mktemp("uninterrupted")
    cwd = os.getcwd()
    os.chdir(base)
    try:
        assert rlfast_main(PPO_RUN + ["--log-dir", str(base / "a")]) == 0
    finally:
        os.chdir(cwd)
    keys, table = _returns_table(base / "a")
    assert [int(r[-1]) for r in table] == list(range(0, PPO_STEPS + 1, 2048))  # 9 rows
    return keys, table


def _resume_and_compare(run_dir, uninterrupted, interrupted_at):
    assert rlfast_main(["resume", str(run_dir), "--no-progress"]) == 0
    keys, table = _returns_table(run_dir)
    assert keys == uninterrupted[0]
    assert table == uninterrupted[1]  # exact: the serial sampler's resume is bit-exact
    params = json.loads((run_dir / "params.json").read_text())
    assert [r["from_steps"] for r in params["resumes"]] == [interrupted_at]


def test_sigterm_then_resume_equals_uninterrupted_run(tmp_path, watchdog, monkeypatch,
                                                      uninterrupted_ppo):
    """``rlfast train`` in a subprocess gets SIGTERM once three rows are logged, exits 143,
    and ``rlfast resume`` logs exactly the rows of the uninterrupted run."""
    watchdog(300)
    monkeypatch.chdir(tmp_path)
    run_dir = tmp_path / "b"
    proc = _popen(PPO_RUN + ["--log-dir", str(run_dir)], tmp_path)
    try:
        deadline = time.monotonic() + 120
        while len(_csv(run_dir / "progress.csv")[1]) < 3:
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "no third row logged in time"
            time.sleep(0.002)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        _reap(proc)
    assert proc.returncode == 143, err[-3000:]
    assert "rlfast: interrupted (SIGTERM)" in err and "Traceback" not in err
    snapshot = load_snapshot(run_dir / "params.pkl")
    assert snapshot["cum_steps"] < PPO_STEPS, "the run finished before SIGTERM"
    _resume_and_compare(run_dir, uninterrupted_ppo, snapshot["cum_steps"])
    print(f"\nSIGTERM at {snapshot['cum_steps']} steps; resumed run equals the uninterrupted one")
    _no_children_left()


def _sigterm_self_at(monkeypatch, cls, method, at_itr):
    """Make ``cls.method(itr)`` send this process SIGTERM when ``itr == at_itr`` (once), as
    a batch system would at that moment; the runner's guard turns it into
    TrainingInterrupted right there."""
    original = getattr(cls, method)

    def wrapped(self, itr, *args, **kwargs):
        if itr == at_itr and not wrapped.sent:
            handler = signal.getsignal(signal.SIGTERM)
            assert callable(handler), f"no SIGTERM handler installed ({handler}): not sending"
            wrapped.sent = True
            os.kill(os.getpid(), signal.SIGTERM)
        return original(self, itr, *args, **kwargs)

    wrapped.sent = False
    monkeypatch.setattr(cls, method, wrapped)
    return wrapped


def _interrupt_in_process(tmp_path, monkeypatch, method, at_itr):
    from rlfast.samplers import SerialSampler

    monkeypatch.chdir(tmp_path)
    run_dir = tmp_path / "c"
    sent = _sigterm_self_at(monkeypatch, SerialSampler, method, at_itr)
    assert rlfast_main(PPO_RUN + ["--log-dir", str(run_dir)]) == 143
    assert sent.sent
    monkeypatch.undo()
    monkeypatch.chdir(tmp_path)
    return run_dir


def test_sigterm_between_log_rows_then_resume_equals_uninterrupted_run(
        tmp_path, watchdog, monkeypatch, uninterrupted_ppo):
    """SIGTERM as iteration 5 starts sampling: the runner saves a final snapshot of
    iteration 4, between two log rows, and the resumed run still logs exactly the rows of
    the uninterrupted run."""
    watchdog(300)
    run_dir = _interrupt_in_process(tmp_path, monkeypatch, "obtain_samples", at_itr=5)
    snapshot = load_snapshot(run_dir / "params.pkl")
    assert (snapshot["itr"], snapshot["cum_steps"]) == (4, 5 * 1024)
    assert len(_csv(run_dir / "progress.csv")[1]) == 3  # 0, 2048, 4096
    _resume_and_compare(run_dir, uninterrupted_ppo, 5 * 1024)
    _no_children_left()


def test_sigterm_during_evaluation_keeps_that_row(tmp_path, watchdog, monkeypatch,
                                                  uninterrupted_ppo):
    """SIGTERM during the evaluation at iteration 5 (the 6144-step row): the resumed run
    should still log the 6144-step row."""
    watchdog(300)
    run_dir = _interrupt_in_process(tmp_path, monkeypatch, "evaluate_agent", at_itr=5)
    assert rlfast_main(["resume", str(run_dir), "--no-progress"]) == 0
    _, table = _returns_table(run_dir)
    assert [int(r[-1]) for r in table] == [int(r[-1]) for r in uninterrupted_ppo[1]]
