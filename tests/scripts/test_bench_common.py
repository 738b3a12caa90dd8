"""scripts/_bench_common.sb3_log_dir: SB3's logger folder goes away with the benchmark."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
# What a benchmark's main does: take the folder, let a child write into it (as SB3's learn
# does in the children), exit.
CODE = """
import os, subprocess, sys
sys.path.insert(0, sys.argv[1])
from _bench_common import sb3_log_dir
sb3_log_dir()
folder = os.environ["SB3_LOGDIR"]
subprocess.run([sys.executable, "-c", "import os; open(os.path.join(os.environ['SB3_LOGDIR'], "
                "'progress.csv'), 'w').write('x')"], check=True)
assert os.listdir(folder) == ["progress.csv"]
print(folder)
"""


def _run(tmp_path, **env):
    base = {k: v for k, v in os.environ.items() if k != "SB3_LOGDIR"}
    done = subprocess.run([sys.executable, "-c", CODE, str(SCRIPTS)], capture_output=True,
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
