"""scripts/reproduce.py, the reproduction harness: its rows, the record it builds from a run
(checked against figures worked out by hand from a synthetic run), the table and the kept
copies, and every smoke row run end to end through the harness (a real ``rlfast train``
process, sampled by the monitor; the score is not checked, the record and picture are)."""
from __future__ import annotations

import csv
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.scripts._script_module import script_module

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "reproduce.py"


@pytest.fixture(scope="module")
def rep():
    with script_module("reproduce.py", "rlfast_reproduce_script") as module:
        yield module


def _family(env: str) -> str:
    return env.split(":", 1)[0] if ":" in env else "mujoco"


def test_every_full_row_has_a_smoke_row_of_its_algorithm_and_env_family(rep):
    full = [r for r in rep.ROWS.values() if not r.smoke]
    smoke = {(r.algo, _family(r.env)) for r in rep.ROWS.values() if r.smoke}
    assert {(r.algo, _family(r.env)) for r in full} <= smoke
    for row in full:
        assert row.metric in ("train", "eval") and row.source and row.published is not None
        assert row.threshold <= row.published  # a threshold above the published figure is a typo


def test_every_row_names_real_preset_keys(rep):
    from rlfast.experiments.config import apply_overrides
    from rlfast.experiments.presets import get_preset
    for row in rep.ROWS.values():
        config = get_preset(row.algo, row.env)
        out = apply_overrides(config, list(row.sets) + [f"runner.log_traj_window={row.window}"])
        assert out["runner"]["log_traj_window"] == row.window


def test_train_command(rep):
    row = rep.ROWS["pong_ppo_smoke"]
    cmd = rep.train_command(row, seed=3, log_dir="/x/run")
    assert cmd[:5] == [sys.executable, "-m", "rlfast", "train", "ppo"]
    assert cmd[cmd.index("--seed") + 1] == "3" and cmd[cmd.index("--steps") + 1] == "512"
    assert cmd[cmd.index("--sampler") + 1] == "serial"
    assert cmd[cmd.index("--log-dir") + 1] == "/x/run"
    assert rep.train_command(row, 0, "/x", steps=99)[cmd.index("--steps") + 1] == "99"


def test_replay_rows_snapshot_their_replay(rep):
    from rlfast.experiments.presets import PRESETS
    with_replay = {algo for algo, families in PRESETS.items()
                   if any("replay_size" in cfg.get("algo", {}) for cfg in families.values())}
    assert rep.REPLAY_ALGOS == with_replay
    for row in rep.ROWS.values():
        cmd = rep.train_command(row, seed=0, log_dir="/x/run")
        assert ("--snapshot-replay" in cmd) == (row.algo in with_replay), row.name


def test_resume_events_read_off_the_console(rep, tmp_path):
    source = (SCRIPT.parents[1] / "rlfast" / "runners" / "snapshots.py").read_text()
    assert rep._REFILL in source and rep._ENV_RESTART in source  # the messages it looks for
    out = tmp_path / "output.txt"
    out.write_text(
        "2026 | rlfast train dqn ...\n    20,000   190   5.0\n"
        "2026 | Training interrupted by Ctrl-C (SIGINT) after 10 iterations (320 steps)\n"
        "2026 | rlfast resume dqn ...\n"
        "2026 | Replay buffer not in the snapshot (save it with --snapshot-replay): ...\n"
        "2026 | Environments start new episodes (their state was not saved, ...)\n"
        "2026 | Resumed from iteration 9 (320 steps); training to 2000 steps\n"
        "2026 | rlfast resume dqn ...\n"
        "2026 | Resumed replay buffer from /x/run/params.npz\n"
        "2026 | Resumed from iteration 30 (992 steps); training to 2000 steps\n")
    assert rep.resume_events(str(out)) == [
        dict(resumed_at_steps=320, replay_refilled=True, new_episodes=True),
        dict(resumed_at_steps=992, replay_refilled=False, new_episodes=False)]
    assert rep.resume_events(str(tmp_path / "missing.txt")) == []
    segments = [dict(started=str(i), wall_s=60.0, exit_code=0, machine="m", commit="c")
                for i in range(3)]
    sittings = rep._sittings(segments, rep.resume_events(str(out)))
    assert "resumed_at_steps" not in sittings[0] and sittings[1]["replay_refilled"]
    line = rep._sitting_line(2, sittings[1])
    assert "resumed at 320 steps" in line and "refilled from empty" in line
    assert "refilled" not in rep._sitting_line(3, sittings[2])


def _synthetic_run(folder: Path, row: str = "pong_ppo") -> None:
    """A finished harness folder: five progress rows and six monitor samples."""
    (folder / "run").mkdir(parents=True)
    header = ["Diagnostics/CumSteps", "Diagnostics/CumTime (s)", "Diagnostics/StepsPerSecond",
              "Diagnostics/TrainReturnWindow", "NumEvalTrajs", "ReturnAverage"]
    rows = [[0, 0, "", "", 4, -21.0],
            [100, 10, 10.0, -20.0, 0, ""],
            [200, 20, 12.0, 18.5, 4, 5.0],   # first at or above 18: steps 200
            [300, 25, 14.0, 17.0, 4, 19.0],  # best eval
            # ties the best eval later: the earlier one counts; its StepsPerSecond column is
            # the old runner's short-last-interval figure (steps / one iteration's time)
            [400, 45, 90.0, 19.0, 4, 19.0]]
    with open(folder / "run" / "progress.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(rows)
    samples = [dict(wall_s=w, load1=load, rss_mb=m, rss_master_mb=m, processes=1)
               for w, load, m in [(1, 0.5, 100), (5, 1.0, 150), (12, 2.0, 300), (22, 2.0, 320),
                               (33, 3.0, 500), (44, 1.5, 310)]]
    harness = dict(row=row, command=["-m", "rlfast"], started="2026-01-01T00:00:00",
                   wall_s=45.0, exit_code=0, stopped_by=None, budget_steps=400, seed=7,
                   machine="test machine", commit="abc", samples=samples,
                   row_wall_s=[2.0, 11.0, 21.0, 31.0])  # the last row: seen only at the end
    (folder / "harness.json").write_text(json.dumps(harness))


def test_record_of_a_synthetic_run(rep, tmp_path):
    _synthetic_run(tmp_path)
    r = rep.build_record(str(tmp_path))
    assert r["row"] == "pong_ppo" and r["seed"] == 7 and r["steps_done"] == 400
    assert r["reached"] and r["steps_to_threshold"] == 200 and r["wall_s_to_threshold"] == 21.0
    assert (r["final_eval"], r["best_eval"], r["best_eval_steps"]) == (19.0, 19.0, 300)
    assert (r["final_train"], r["best_train"], r["best_train_steps"]) == (19.0, 19.0, 400)
    # Rates from CumSteps / CumTime per interval (10, 10, 20, 5 steps/s), not the column; the
    # first rate skips the warm-up row.
    assert r["sps_start"] == 10.0 and r["sps_end"] == 5.0
    assert [p["sps"] for p in r["sps_over_time"]] == [10.0, 10.0, 20.0, 5.0]
    # RSS at the start: the first sample at or after the first row with training time (11 s).
    assert (r["rss_start_mb"], r["rss_end_mb"], r["rss_peak_mb"]) == (300, 310, 500)
    assert r["load1_median"] == 1.75 and r["load1_max"] == 3.0  # median of 0.5 1 1.5 2 2 3
    assert [c["wall_s"] for c in r["curve"]] == [2.0, 11.0, 21.0, 31.0, 45.0]
    assert r["curve"][0]["train"] is None and r["curve"][1]["eval"] is None
    assert json.loads((tmp_path / "record.json").read_text())["steps_to_threshold"] == 200
    assert (tmp_path / "curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_record_of_a_run_that_never_reaches_its_threshold(rep, tmp_path):
    _synthetic_run(tmp_path, row="halfcheetah_ppo")  # eval >= 5237: never in these rows
    r = rep.build_record(str(tmp_path))
    assert not r["reached"] and r["steps_to_threshold"] is None and r["wall_s_to_threshold"] is None


def test_keep_and_table(rep, tmp_path):
    _synthetic_run(tmp_path / "h")
    rep.build_record(str(tmp_path / "h"))
    kept = rep.keep(str(tmp_path / "h"), str(tmp_path / "results"))
    assert kept.endswith("pong_ppo_s7.json") and os.path.exists(kept[:-5] + ".png")
    lines = rep.table(str(tmp_path / "results")).splitlines()
    assert len(lines) == 3 and lines[0].count("|") == lines[2].count("|") == 17
    cells = [c.strip() for c in lines[2].split("|")]
    assert cells[1:6] == ["pong_ppo", "ppo", "atari:pong", "400", "7"]
    assert "200" in cells[11] and cells[12] == "0.3 min" and cells[13] == "0.8 min"
    # Records of smoke rows stay out of the table unless asked for.
    smoke = json.loads(Path(kept).read_text())
    smoke["row"] = "pong_ppo_smoke"
    (tmp_path / "results" / "pong_ppo_smoke_s0.json").write_text(json.dumps(smoke))
    assert len(rep.table(str(tmp_path / "results")).splitlines()) == 3
    assert len(rep.table(str(tmp_path / "results"), include_smoke=True).splitlines()) == 4


@pytest.mark.parametrize("change,why", [
    (dict(stopped_by="SIGINT"), "stopped by SIGINT at 400 of 400 steps"),
    (dict(exit_code=1), "exit code 1 at 400 of 400 steps"),
    (dict(budget_steps=800), "short of its budget at 400 of 800 steps")])
def test_a_run_that_did_not_finish_is_not_kept(rep, tmp_path, change, why):
    _synthetic_run(tmp_path / "h")
    harness = json.loads((tmp_path / "h" / "harness.json").read_text())
    harness.update(change)
    (tmp_path / "h" / "harness.json").write_text(json.dumps(harness))
    rep.build_record(str(tmp_path / "h"))
    with pytest.raises(ValueError, match=f"pong_ppo seed 7 {why}; go on with .*--resume"):
        rep.keep(str(tmp_path / "h"), str(tmp_path / "results"))
    assert not (tmp_path / "results").exists()


def test_unknown_row_is_a_one_line_error():
    proc = subprocess.run([sys.executable, str(SCRIPT), "no_such_row"], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2 and "unknown row 'no_such_row'" in proc.stderr


def test_a_resumed_run_keeps_the_rows_it_trained_again(rep):
    rows = [dict(steps=s) for s in (0, 100, 200, 300, 200, 300, 400)]  # killed after 300
    kept, walls = rep._latest_rows(rows, [0, 1, 2, 3, 9, 10, 11])
    assert [r["steps"] for r in kept] == [0, 100, 200, 300, 400] and walls == [0, 1, 9, 10, 11]


SMOKE_ROWS = ["pong_ppo_smoke", "halfcheetah_ppo_smoke", "halfcheetah_sac_smoke",
              "breakout_rainbow_smoke"]


@pytest.mark.parametrize("row", SMOKE_ROWS)
def test_smoke_row_runs_through_the_harness(row, tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / row
    proc = subprocess.run([sys.executable, str(SCRIPT), row, "--seed", "1", "--out", str(out),
                           "--sample-s", "0.5"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    record = json.loads((out / "record.json").read_text())
    assert record["row"] == row and record["seed"] == 1 and record["exit_code"] == 0
    assert record["steps_done"] >= record["budget_steps"] > 0
    assert record["rss_peak_mb"] > 0 and record["rss_end_mb"] > 0
    assert record["sps_end"] > 0 and record["machine"] and record["commit"]
    assert len(record["curve"]) >= 2 and all(c["wall_s"] > 0 for c in record["curve"])
    if record["metric"] == "eval":
        assert record["final_eval"] is not None and math.isfinite(record["final_eval"])
    assert (out / "curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (out / "run" / "progress.csv").exists()


def test_page_quotes_the_kept_records_and_lists_the_rows_not_yet_run(rep, tmp_path):
    _synthetic_run(tmp_path / "h")
    rep.build_record(str(tmp_path / "h"))
    rep.keep(str(tmp_path / "h"), str(tmp_path / "results"))
    text = rep.page(str(tmp_path / "results"))
    assert "## pong_ppo, seed 7: ppo on atari:pong" in text
    assert "![learning curve of pong_ppo](pong_ppo_s7.png)" in text
    assert "reached train >= 18 at 200 steps, 0.3 min into the run" in text
    assert "Published: 20.36. Source: CleanRL" in text and "Machine: test machine" in text
    waiting = text.split("## Rows not yet run to their budget")[1]
    assert "`halfcheetah_ppo`" in waiting and "`pong_ppo`" not in waiting


def test_smoke_row_stopped_then_resumed_is_one_record(tmp_path):
    """breakout_dqn_smoke in two sittings: half its budget, then --resume to the whole."""
    out = tmp_path / "h"
    base = [sys.executable, str(SCRIPT), "--sample-s", "0.5"]
    first = subprocess.run(base + ["breakout_dqn_smoke", "--out", str(out), "--steps", "300"],
                           capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-2000:]
    wall_1 = json.loads((out / "record.json").read_text())["wall_s"]
    second = subprocess.run(base + ["--resume", str(out), "--steps", "600"],
                            capture_output=True, text=True, timeout=300)
    assert second.returncode == 0, second.stdout[-2000:] + second.stderr[-2000:]
    record = json.loads((out / "record.json").read_text())
    harness = json.loads((out / "harness.json").read_text())
    assert record["segments"] == 2 and record["steps_done"] >= 600
    assert [seg["command"][2] for seg in harness["segments"]] == ["train", "resume"]
    assert record["wall_s"] == pytest.approx(sum(seg["wall_s"] for seg in harness["segments"]),
                                             abs=0.5)
    assert record["wall_s"] > wall_1
    steps = [c["steps"] for c in record["curve"]]
    walls = [c["wall_s"] for c in record["curve"]]
    assert steps == sorted(set(steps)) and walls == sorted(walls) and walls[-1] > wall_1
    # A replay row snapshots its replay, so the resumed sitting learned from it at once.
    assert all("--snapshot-replay" in seg["command"] for seg in harness["segments"])
    resumed = record["sittings"][1]
    assert 300 <= resumed["resumed_at_steps"] < 600 and not resumed["replay_refilled"]
    assert "Resumed replay buffer from" in (out / "output.txt").read_text()


def test_the_readme_and_the_results_page_quote_the_kept_records(rep):
    """The README's results table and docs/results/README.md are what --page writes from the
    records in docs/results (rerun ``python scripts/reproduce.py --page`` after --keep)."""
    readme = (SCRIPT.parents[1] / "README.md").read_text(encoding="utf-8")
    assert rep.readme_with_table(readme, rep.table()) == readme
    page = (Path(rep.RESULTS_DIR) / "README.md").read_text(encoding="utf-8")
    assert page == rep.page()
    for name in os.listdir(rep.RESULTS_DIR):
        if name.endswith(".json"):
            assert os.path.exists(os.path.join(rep.RESULTS_DIR, name[:-5] + ".png"))
            assert f"({name[:-5]}.png)" in page


def test_readme_without_the_table_block_is_refused(rep):
    with pytest.raises(ValueError, match="results-table"):
        rep.readme_with_table("# no block here\n", "| t |")
