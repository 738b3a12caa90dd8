"""scripts/bench/bench_minatar.py: its pure helpers against hand computations, SB3's settings read
from rlfast's dqn preset, and ``--dry-run`` runs of one round on one game (rlfast's DQN
always, SB3's DQN when stable_baselines3 imports) that print the table, write the JSON and
leave no process or temporary folder behind; a run stopped on ``--timeout`` is reported
failed."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import uuid
from pathlib import Path

import psutil
import pytest

pytest.importorskip("minatar")
SCRIPTS = Path(__file__).resolve().parents[2] / "scripts" / "bench"
SCRIPT = SCRIPTS / "bench_minatar.py"
sys.path.insert(0, str(SCRIPTS))
import bench_minatar as bench  # noqa: E402

from rlfast.experiments.presets import get_preset  # noqa: E402

MARKER = "RLFAST_BENCH_MINATAR_TEST"
HEADER = "| contender | rounds | wall s | eval s | steps/s | CPU s | final return |"


# ---- pure helpers ----------------------------------------------------------------------------

def test_return_window_keeps_the_last_episodes():
    window = bench.ReturnWindow(100)
    assert window.mean() is None
    for r in range(150):
        window.add(r)
    assert window.mean() == sum(range(50, 150)) / 100 == 99.5
    with pytest.raises(ValueError, match="size >= 1"):
        bench.ReturnWindow(0)


def test_read_rlfast_progress_by_hand(tmp_path):
    path = tmp_path / "progress.csv"
    path.write_text(
        "Diagnostics/CumSteps,Diagnostics/TrainReturnWindow,Diagnostics/StepsPerSecond,"
        "Diagnostics/EvalTime (s),ReturnAverage\n"
        "0,nan,nan,0.5,0.0\n"
        "480,nan,2000.0,0.25,0.0\n"
        "960,1.5,120.0,0.25,2.0\n")
    got = bench.read_rlfast_progress(str(path), "Diagnostics/TrainReturnWindow")
    assert got == dict(steps=960, eval_s=1.0, final_return=1.5,
                       curve=[[480, None, 2000.0], [960, 1.5, 120.0]])
    assert bench.read_rlfast_progress(str(path), "ReturnAverage")["final_return"] == 2.0
    with pytest.raises(ValueError, match="lacks the column"):
        bench.read_rlfast_progress(str(path), "Nope")


def test_summarise_takes_medians_and_the_ratio_of_wall_less_eval():
    runs = [dict(wall_s=10.0, eval_s=1.0, cpu_s=5.0, steps_per_s=100.0, final_return=1.0),
            dict(wall_s=30.0, eval_s=3.0, cpu_s=7.0, steps_per_s=300.0, final_return=None),
            dict(wall_s=20.0, eval_s=2.0, cpu_s=6.0, steps_per_s=200.0, final_return=3.0)]
    s = bench.summarise(runs, baseline_train_s=9.0)
    assert s == dict(rounds=3, wall_s=20.0, eval_s=2.0, train_s=18.0, cpu_s=6.0,
                     steps_per_s=200.0, final_return=2.0, vs_baseline=2.0)
    assert bench.summarise(runs[:1])["vs_baseline"] is None


def test_epsilon_holds_until_learning_starts_then_anneals():
    eps = bench.EpsilonAfterLearningStarts(1.0, 0.1, learning_starts=100, anneal_steps=200,
                                           total=1000)
    # SB3's progress remaining is 1 - step / total
    values = [eps(1.0 - step / 1000) for step in (0, 100, 200, 300, 1000)]
    assert values == pytest.approx([1.0, 1.0, 0.55, 0.1, 0.1])


def test_sb3_settings_follow_the_dqn_preset():
    config = get_preset("dqn", "minatar:breakout")
    s = bench.sb3_settings(config, 2_000_000, dry_run=False)
    assert s["dqn"] == dict(
        learning_rate=2.5e-4, buffer_size=100_000, learning_starts=5000, batch_size=32, tau=1.0,
        gamma=0.99, train_freq=1, gradient_steps=1, target_update_interval=1000,
        max_grad_norm=10.0, exploration_initial_eps=1.0, exploration_final_eps=0.1,
        optimizer="RMSprop", optimizer_kwargs=dict(alpha=0.95, eps=0.01, centered=True))
    assert s["eps_steps"] == 100_000 and s["steps"] == 2_000_000 and s["torch_threads"] == 1
    assert s["env"] == dict(sticky_action_prob=0.1, difficulty_ramping=True,
                            use_minimal_action_set=False) and s["horizon"] is None
    dry = bench.sb3_settings(config, 2000, dry_run=True)
    assert (dry["dqn"]["learning_starts"], dry["dqn"]["buffer_size"], dry["eps_steps"]) == (
        bench.DRY_RUN["learning_starts"], bench.DRY_RUN["replay_size"],
        bench.DRY_RUN["eps_steps"])
    # Rainbow's extras have no SB3 DQN equivalent: refused, naming them.
    with pytest.raises(ValueError, match="double_dqn.*n_step_return.*prioritized_replay"):
        bench.sb3_settings(get_preset("rainbow", "minatar:breakout"), 2000, dry_run=False)
    assert bench.gym_id("space_invaders") == "MinAtar/SpaceInvaders-v0"


def test_missing_sb3_is_refused_in_one_line(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("SB3_LOGDIR", str(tmp_path))  # main() must not set one for pytest
    real = bench.importlib.util.find_spec
    monkeypatch.setattr(bench.importlib.util, "find_spec",
                        lambda name, *a: None if name == "stable_baselines3" else real(name, *a))
    with pytest.raises(SystemExit) as exit_info:
        bench.main(["--dry-run", "--contenders", "rlfast-dqn", "sb3-dqn"])
    assert exit_info.value.code == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert "sb3-dqn needs stable-baselines3: pip install -e '.[bench]'" in last


# ---- dry runs --------------------------------------------------------------------------------

def _leftover_processes(marker: str) -> list[int]:
    """Processes (of any user we may read) whose environment carries ``marker``."""
    left = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get(MARKER) == marker:
                left.append(proc.pid)
        except (psutil.Error, OSError):
            pass
    return left


def _run(tmp_path, *args):
    """The script with ``args`` from ``tmp_path``: (completed process, scratch folder)."""
    scratch = tmp_path / "tmp"  # its temporary folders (rlfast's logs, SB3's logger) land here
    scratch.mkdir()
    marker = uuid.uuid4().hex
    env = {k: v for k, v in os.environ.items() if k != "SB3_LOGDIR"}
    env.update(TMPDIR=str(scratch), **{MARKER: marker})
    proc = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=240, cwd=tmp_path, env=env)
    assert _leftover_processes(marker) == []
    # no run folder, no SB3 logger folder (torch keeps its inductor cache there by design)
    assert [n for n in os.listdir(scratch) if not n.startswith("torchinductor_")] == []
    return proc


def _row(stdout: str, game: str, name: str) -> list[str]:
    lines = stdout.splitlines()
    start = lines.index(f"minatar:{game}")
    assert lines[start + 1].startswith(HEADER)
    for line in lines[start + 3:]:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells[0] == name:
            return cells[1:]
    raise AssertionError(f"no row for {name} in\n{stdout}")


def _check_dry_run(tmp_path, name: str) -> None:
    out = tmp_path / "out.json"
    proc = _run(tmp_path, "--dry-run", "--steps", "1100", "--rounds", "1", "--games",
                "breakout", "--contenders", name, "--out", str(out))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.stdout.startswith("Machine: ")
    rounds, wall, eval_s, steps_per_s, cpu, final, ratio = _row(proc.stdout, "breakout", name)
    data = json.loads(out.read_text())
    assert data["machine"] == proc.stdout.splitlines()[0][len("Machine: "):]
    assert data["settings"]["dry_run"] and data["settings"]["steps"] == 1100
    assert data["status"] == {"breakout": {}}
    (run,) = data["runs"]["breakout"][name]
    assert run["seed"] == 0 and run["steps"] >= 1100
    assert run["wall_s"] > 0 and run["cpu_s"] > 0 and 0 <= run["eval_s"] < run["wall_s"]
    assert run["steps_per_s"] == pytest.approx(run["steps"] / (run["wall_s"] - run["eval_s"]))
    assert math.isfinite(run["final_return"]) and run["final_return"] >= 0
    assert run["curve"][-1][0] == run["steps"] and run["curve"][-1][1] == run["final_return"]
    assert all(a[0] < b[0] for a, b in zip(run["curve"], run["curve"][1:]))
    assert run["curve"][0][0] <= bench.DRY_RUN["log_every"]
    summary = data["summaries"]["breakout"][name]
    assert summary["rounds"] == 1 and summary["final_return"] == run["final_return"]
    assert (rounds, wall, final) == ("1", f"{run['wall_s']:.1f}", f"{run['final_return']:.2f}")
    assert steps_per_s == f"{run['steps_per_s']:,.0f}" and cpu == f"{run['cpu_s']:.1f}"
    assert ratio == ("1.00x" if name == bench.BASELINE else "n/a")  # no rlfast-dqn run: n/a


def test_dry_run_rlfast_dqn(tmp_path):
    _check_dry_run(tmp_path, "rlfast-dqn")


def test_dry_run_sb3_dqn(tmp_path):
    pytest.importorskip("stable_baselines3")
    _check_dry_run(tmp_path, "sb3-dqn")


def test_a_run_past_its_timeout_is_stopped_and_reported_failed(tmp_path):
    proc = _run(tmp_path, "--dry-run", "--games", "breakout", "--contenders", "rlfast-dqn",
                "--timeout", "0.5")
    assert proc.returncode == 1
    assert "rlfast-dqn on breakout (timed out)" in proc.stderr
    assert _row(proc.stdout, "breakout", "rlfast-dqn")[:2] == ["0", "failed"]
