"""``rlfast train cem|cmaes|openai_es``: runs through the command line, writes the RL runs'
files, plays back with ``rlfast eval``, refuses options it cannot honour, pins to an affinity
code, and stops cleanly on SIGTERM with a snapshot and no process left."""
import csv
import json
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from rlfast.cli import main
from tests.integration._guards import live_children

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_train_then_eval_and_plot(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["train", "cmaes", "CartPole-v1", "--log-dir", str(run), "--no-progress",
                 "--set", "runner.n_generations=3", "--set", "strategy.popsize=8"]) == 0
    out = capsys.readouterr().out
    assert "Final evaluation return:" in out and "3 generations" in out
    params = json.loads((run / "params.json").read_text())
    assert params["es"] is True and params["algo"] == "cmaes"
    assert params["config"]["strategy"]["popsize"] == 8
    with open(run / "progress.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 3 and {"BestReturn", "Sigma", "ReturnAverage"} <= set(rows[0])
    assert main(["eval", str(run), "--episodes", "2", "--seed", "5"]) == 0
    out = capsys.readouterr().out
    assert "Return over 2 episodes" in out
    pytest.importorskip("matplotlib")
    assert main(["plot", str(run), "-o", str(tmp_path / "p.png")]) == 0
    assert (tmp_path / "p.png").stat().st_size > 0


@pytest.mark.parametrize("argv,message", [
    (["--sampler", "cpu"], "does not take --sampler"),
    (["--n-envs", "4"], "does not take --n-envs"),
    (["--world-size", "2"], "does not take --world-size"),
    (["--set", "strategy.elite=0.1"], "unknown config key 'strategy.elite'"),
    (["--set", "strategy.popsize=1"], "popsize"),
])
def test_bad_options_exit_2_with_the_reason(tmp_path, capsys, argv, message):
    assert main(["train", "cem", "CartPole-v1", "--log-dir", str(tmp_path / "r"),
                 "--no-progress", *argv]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "r" / "progress.csv").exists()


def test_non_vector_tasks_are_refused(tmp_path, capsys):
    assert main(["train", "openai_es", "atari:pong", "--log-dir", str(tmp_path / "r")]) == 2
    assert "image game" in capsys.readouterr().err


def test_affinity_code_gives_the_workers(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["train", "cem", "CartPole-v1", "--log-dir", str(run), "--no-progress",
                 "--affinity", "0slt_1cpu_0gpu", "--set", "runner.n_generations=2"]) == 0
    log = (run / "debug.log").read_text()
    assert "workers=1): workers on cpus [[0]]" in log, log


def test_sigterm_stops_with_a_snapshot_and_no_process_left(tmp_path):
    run = tmp_path / "run"
    env = dict(os.environ, PYTHONPATH=REPO)
    before = set(live_children())
    proc = subprocess.Popen(
        [sys.executable, "-m", "rlfast", "train", "openai_es", "Pendulum-v1", "--log-dir",
         str(run), "--no-progress", "--set", "runner.n_generations=100000"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path, env=env,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            progress = run / "progress.csv"
            if progress.exists() and len(progress.read_text().splitlines()) >= 3:
                break
            time.sleep(0.2)
        workers = [c.pid for c in psutil.Process(proc.pid).children(recursive=True)]
        assert len(workers) >= 1
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 143, err[-2000:]
    assert "interrupted (SIGTERM)" in err
    assert (run / "params.pkl").exists()
    time.sleep(0.5)
    assert not [p for p in workers if psutil.pid_exists(p) and
                psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
    assert set(live_children()) - before == set()
