"""Smoke test of scripts/bench/bench_atari_train.py: ``--quick`` trains a subset of the contenders
(rlfast PPO with the cpu sampler, the two PPO peers and rlfast's synchronous DQN; every
contender is a child process of a few seconds, all of them would take about two minutes on
2 cores) on Pong and prints the machine, the PPO and DQN tables and the ratios, with finite
positive figures, or "skipped" for a peer whose package is not installed (CI installs neither
stable_baselines3 nor envpool)."""
from __future__ import annotations

import importlib.util
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench" / "bench_atari_train.py"
PPO = ["rlfast-cpu", "sb3", "cleanrl-envpool"]
DQN = ["rlfast-dqn"]
PACKAGE = {"sb3": "stable_baselines3", "sb3-dqn": "stable_baselines3",
           "cleanrl-envpool": "envpool"}


def _installed(name: str) -> bool:
    package = PACKAGE.get(name)
    return package is None or importlib.util.find_spec(package) is not None


def _rows(lines: list[str], header: str) -> dict[str, list[str]]:
    """The cells (after the name) of each row of the table whose header starts with
    ``header``, by contender name."""
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    rows = {}
    for line in lines[start + 2:]:
        if not line.startswith("| "):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        rows[cells[0]] = cells[1:]
    return rows


def _number(cell: str) -> float:
    return float(re.match(r"[\d,.]+", cell).group(0).replace(",", ""))


def test_quick_run_prints_machine_tables_and_ratios(tmp_path, request):
    pytest.importorskip("ale_py")
    out_json = tmp_path / "out.json"
    # The run's temporary folder, where SB3's logger folders land. Not under tmp_path: SB3's
    # SubprocVecEnv starts its workers through multiprocessing's forkserver, whose socket
    # lives in the temporary folder, and a socket path over 107 bytes fails ("AF_UNIX path
    # too long"), as it did under pytest's deep tmp_path in CI's fresh folders.
    scratch = Path(tempfile.mkdtemp(prefix="rlfast-bat-"))
    request.addfinalizer(lambda: shutil.rmtree(scratch, ignore_errors=True))
    env = {k: v for k, v in os.environ.items() if k != "SB3_LOGDIR"}
    proc = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--json", str(out_json),
                           "--contenders", *PPO, *DQN],
                          capture_output=True, text=True, timeout=240, cwd=tmp_path,
                          env=dict(env, TMPDIR=str(scratch)))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    left = [n for n in os.listdir(scratch) if n.startswith(("SB3-", "rlfast_bench_sb3"))]
    assert left == []  # no SB3 logger folder left behind
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("Machine: ") and "torch" in lines[0]
    ppo = _rows(lines, "| contender | env steps/s (median) | rounds | vs CleanRL+EnvPool")
    dqn = _rows(lines, "| contender | env steps/s (median) | rounds | vs SB3 DQN")
    assert list(ppo) == PPO and list(dqn) == DQN, (ppo, dqn)
    data = json.loads(out_json.read_text())
    assert data["machine"] == lines[0][len("Machine: "):]
    for table in (ppo, dqn):
        for name, cells in table.items():
            if name in PACKAGE and cells[0].startswith("skipped"):
                # only a peer whose package is missing (or cannot be imported) is skipped
                assert ("not importable" in cells[0] if _installed(name)
                        else "not installed" in cells[0]), cells
                # the PPO table has one more ratio (vs CleanRL+AtariVectorEnv) than the DQN one
                ratios = cells[2:]
                assert name not in data["medians"] and cells[1] == "0", cells
                assert len(ratios) >= 2 and ratios == ["n/a"] * len(ratios), cells
                continue
            steps = _number(cells[0])
            assert math.isfinite(steps) and steps > 0, (name, cells)
            assert cells[1] == "1", (name, cells)  # one round
            median = data["medians"][name]
            assert median["steps_per_s"] > 0 and median["updates_per_s"] > 0, (name, median)
    if "cleanrl-envpool" in data["medians"]:
        assert ppo["cleanrl-envpool"][2] == "1.00x"  # the baseline divides by itself
        assert re.fullmatch(r"\d+\.\d\dx", ppo["rlfast-cpu"][2]), ppo
    else:
        assert ppo["rlfast-cpu"][2] == "n/a"
    if "sb3" in data["medians"]:
        assert ppo["sb3"][3] == "1.00x"
    # No SB3 DQN row here, so no ratio; the updates per env step made are those the matched
    # replay ratio says (the window opens and closes at iteration boundaries: exactly).
    matched = next(line for line in lines if line.startswith("Matched replay ratio: "))
    per_step = re.search(r"\(([\d.]+)/step\)", matched).group(1)
    assert dqn["rlfast-dqn"][2] == "n/a" and dqn["rlfast-dqn"][3] == per_step, (dqn, matched)


def test_preset_net_contender_trains_the_pong_rows_network():
    """``rlfast-preset-net`` keeps the ``ppo`` Atari preset's network (what the Pong row of
    scripts/reproduce.py trains); every other PPO contender gets the Nature CNN. Both run the
    one workload on 84x84 frames."""
    from argparse import Namespace

    from rlfast.experiments.presets import get_preset
    from tests.scripts._script_module import script_module

    with script_module("bench/bench_atari_train.py", "bench_atari_train_under_test") as bench:
        args = Namespace(envs=8, steps_per_env=128)
        preset = bench._ppo_config("rlfast-preset-net", args)
        nature = bench._ppo_config("rlfast-cpu", args)
        assert preset["agent"]["model_kwargs"] == get_preset("ppo", "atari:pong")["agent"][
            "model_kwargs"]
        assert "channels" not in preset["agent"]["model_kwargs"]
        assert nature["agent"]["model_kwargs"]["channels"] == (32, 64, 64)
        for config in (preset, nature):
            assert config["env"]["obs_type"] == "84x84"
            assert config["sampler"]["batch_T"] == 128 and config["sampler"]["batch_B"] == 8
        assert bench.RLFAST_PPO_SAMPLER["rlfast-preset-net"] == "cpu"
        assert "rlfast-preset-net" in bench.CONTENDERS
