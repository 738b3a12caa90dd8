"""scripts/bench/_common.py, the helper every benchmark shares: SB3's logger folder goes away
with the benchmark; the machine facts; contenders interleaved over rounds; medians, ratios and
table cells; Markdown tables and JSON records; child processes run, parsed and stopped whole at
a timeout; and the measurement window."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
BENCH = SCRIPTS / "bench"
sys.path.insert(0, str(BENCH))
import _common as common  # noqa: E402

# What a benchmark's main does: take the folder, let a child write into it (as SB3's learn
# does in the children), exit.
CODE = """
import os, subprocess, sys
sys.path.insert(0, sys.argv[1])
from _common import sb3_log_dir
sb3_log_dir()
folder = os.environ["SB3_LOGDIR"]
subprocess.run([sys.executable, "-c", "import os; open(os.path.join(os.environ['SB3_LOGDIR'], "
                "'progress.csv'), 'w').write('x')"], check=True)
assert os.listdir(folder) == ["progress.csv"]
print(folder)
"""


def _run(tmp_path, **env):
    base = {k: v for k, v in os.environ.items() if k != "SB3_LOGDIR"}
    done = subprocess.run([sys.executable, "-c", CODE, str(BENCH)], capture_output=True,
                          text=True, timeout=60, env=dict(base, TMPDIR=str(tmp_path), **env))
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_the_folder_is_inherited_and_removed_at_exit(tmp_path):
    folder = _run(tmp_path)
    assert Path(folder).parent == tmp_path and Path(folder).name.startswith("rlfast_bench_sb3")
    assert os.listdir(tmp_path) == []


def test_a_folder_the_caller_set_is_kept(tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    assert _run(tmp_path, SB3_LOGDIR=str(mine)) == str(mine)
    assert os.listdir(mine) == ["progress.csv"] and os.listdir(tmp_path) == ["mine"]


def test_interleave_reverses_the_order_every_other_round():
    assert list(common.interleave("abc", 4)) == [
        (0, ["a", "b", "c"]), (1, ["c", "b", "a"]), (2, ["a", "b", "c"]), (3, ["c", "b", "a"])]
    assert list(common.interleave({"x": 1, "y": 2}, 1)) == [(0, ["x", "y"])]
    assert list(common.interleave("ab", 0)) == []


def test_medians_ratios_and_cells():
    runs = [dict(a=1.0, b=4.0), dict(a=3.0, b=2.0), dict(a=2.0, b=6.0)]
    assert common.medians(runs, ("a", "b")) == dict(a=2.0, b=4.0)
    assert math.isnan(common.median([]))
    assert common.paired_ratios([2.0, 9.0], [1.0, 3.0]) == [2.0, 3.0]
    assert common.ratio_cell(3.0, 2.0) == "1.50x"
    assert common.ratio_cell(None, 2.0) == common.ratio_cell(3.0, 0.0) == "n/a"
    assert common.ratio_cell(3.0, None) == "n/a"
    assert common.number(1234.56) == "1,235" and common.number(0.256, 2) == "0.26"
    assert common.number(None) == common.number(math.nan) == "-"
    assert (common.verdict(True), common.verdict(False), common.verdict(None)) == (
        "PASS", "FAIL", "not measured")


def test_markdown_table_aligns_and_pads():
    assert common.markdown_table(["a", "bb"], [[1, "x"], [22, None]], "lr") == (
        "| a | bb |\n|---|---:|\n| 1 | x |\n| 22 | None |")
    assert common.markdown_table(["a", "b", "c"], []) == "| a | b | c |\n|---|---|---|"
    assert common.markdown_table(["name", "n"], [["ab", 1234]], pad=True) == (
        "| name | n    |\n|------|------|\n| ab   | 1234 |")


def test_machine_facts_and_the_machine_line():
    facts = common.machine_facts()
    assert facts["cores"] == os.cpu_count() and 1 <= facts["usable_cores"] <= facts["cores"]
    assert len(facts["load_average"]) == 3 and all(x >= 0 for x in facts["load_average"])
    assert facts["commit"] and facts["torch"] in common.machine()
    assert common.machine().startswith(facts["cpu"] + ", ") and "torch" in common.machine()
    assert common.load_average() >= 0


def test_write_json_records_the_machine_first(tmp_path):
    path = tmp_path / "out.json"
    common.write_json(str(path), dict(figures=[1, 2]))
    data = json.loads(path.read_text())
    assert list(data) == ["machine", "facts", "figures"] and data["figures"] == [1, 2]
    assert data["machine"] == common.machine() and data["facts"]["commit"]
    assert path.read_text().startswith('{\n "machine"')  # indented by 1
    common.write_json(str(path), dict(x=1, machine="given"), indent=None)
    data = json.loads(path.read_text())
    assert data["machine"] == "given" and list(data) == ["machine", "facts", "x"]
    with pytest.raises(ValueError):
        common.write_json(str(path), dict(x=math.nan), allow_nan=False)


def test_run_process_returns_the_status_and_both_outputs(tmp_path):
    code = "import os, sys; print(os.environ['PYTHONPATH']); print('e', file=sys.stderr); " \
           "sys.exit(3)"
    returncode, out, err = common.run_process([sys.executable, "-c", code])
    assert returncode == 3 and err == "e\n"
    assert out.strip().split(os.pathsep)[0] == common.REPO_ROOT
    with open(tmp_path / "log.txt", "w") as log:
        finished = common.run_process([sys.executable, "-c", "print('to the file')"],
                                      output=log, cwd=str(tmp_path))
    assert finished == (0, "", "") and (tmp_path / "log.txt").read_text() == "to the file\n"


def test_run_process_stops_the_whole_group_at_its_timeout():
    code = ("import subprocess, sys, time\n"
            "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
            "print(p.pid, flush=True)\n"
            "time.sleep(60)\n")
    start = time.monotonic()
    returncode, out, _ = common.run_process([sys.executable, "-c", code], timeout=3.0, grace=0.0)
    assert returncode is None and time.monotonic() - start < 30
    grandchild = int(out.split()[0])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            if psutil.Process(grandchild).status() == psutil.STATUS_ZOMBIE:
                break
        except psutil.NoSuchProcess:
            break
        time.sleep(0.05)
    else:
        raise AssertionError(f"the child's own child {grandchild} outlived the timeout")


def test_results_are_printed_and_parsed_by_their_tag(capsys):
    common.print_result(dict(b=2))
    printed = capsys.readouterr().out
    assert printed.startswith(common.RESULT_TAG)
    assert common.parse_result("x", 0, "noise\n" + printed + "after\n") == dict(b=2)
    assert common.parse_result("x", 0, 'a\n{"c": 3}\n\n', tag=None) == dict(c=3)
    with pytest.raises(RuntimeError, match=r"x failed \(exit 1\):\nRLFAST_BENCH_RESULT .*\nboom"):
        common.parse_result("x", 1, printed, "boom")
    with pytest.raises(RuntimeError, match=r"x failed \(was stopped\)"):
        common.parse_result("x", None, printed)
    with pytest.raises(RuntimeError, match=r"x failed \(exit 0\)"):
        common.parse_result("x", 0, "no figures\n")


def test_window_opens_after_the_warmup_past_the_first_update(monkeypatch):
    now = [0.0]
    monkeypatch.setattr(common, "time", SimpleNamespace(perf_counter=lambda: now[0],
                                                        time=lambda: 1000.0 + now[0]))
    window = common.Window(seconds=2.0, warmup=1.0)
    seen = []
    for t, steps, updates in ((0.0, 10, 0), (1.0, 20, 1), (1.5, 30, 2), (2.0, 40, 3),
                              (3.0, 60, 5), (4.0, 80, 7), (5.0, 90, 8)):
        now[0] = t
        seen.append(window.observe(steps, updates))
    # the clock starts at t=1 (the first update), the window opens at t=2 and closes at t=4
    assert seen == [False, False, False, False, False, True, True]
    assert window.result() == dict(window_s=2.0, t_start=1002.0, t_end=1004.0, steps=40,
                                   updates=4, env_sps=20.0, ups=2.0)
    free = common.Window(seconds=1.0, warmup=0.0, settle=0)  # no update needed
    now[0] = 10.0
    assert free.observe(0, 0) is False and free.clock == 10.0
    with pytest.raises(RuntimeError, match="before its measurement window closed"):
        free.result()


def test_sb3_version_or_a_line_saying_rlfast_is_timed_alone(capsys):
    try:
        import stable_baselines3
    except ImportError:
        assert common.sb3_version() is None
        assert "stable-baselines3 is not installed: timing rlfast only" in capsys.readouterr().out
    else:
        assert common.sb3_version() == stable_baselines3.__version__
        assert capsys.readouterr().out == ""
