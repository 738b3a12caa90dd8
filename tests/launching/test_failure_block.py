"""A failed run's report shows its error line even when more stderr follows it: the
``[FAILED]`` block of the local and the Slurm launcher."""
from __future__ import annotations

import os
import types

import pytest

from rlfast.launching import run_experiments
from rlfast.launching import slurm as slurm_launcher
from rlfast.launching.local import is_error_line, stderr_excerpt
from tests.launching._recorder import CODE

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TRAIN_SCRIPT = os.path.join(REPO, "scripts", "launch", "train_ppo_cartpole.py")
KEYS = [f"algo.key_{k:02d}" for k in range(35)]
# A run that fails the way an unknown key used to: the error, then 35 lines of valid keys.
LOUD_FAILURE = "\n".join([
    "import sys",
    "print('Traceback (most recent call last):', file=sys.stderr)",
    "print('  File \"train.py\", line 3, in <module>', file=sys.stderr)",
    "print(\"rlfast.experiments.config.ConfigError: unknown config key 'algo.bad'. "
    "Valid keys:\", file=sys.stderr)",
    f"for key in {KEYS!r}:",
    "    print('  ' + key, file=sys.stderr)",
    "sys.exit(1)",
])


def _write_stderr(log_dir, lines, run_ID=0):
    os.makedirs(log_dir, exist_ok=True)
    with open(os.path.join(log_dir, f"run_{run_ID}.stderr.txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")


@pytest.mark.parametrize("line, is_error", [
    ("rlfast.experiments.config.ConfigError: unknown config key 'x'", True),
    ("ValueError: bad", True),
    ("KeyboardInterrupt", True),
    ("rlfast: error: unknown algorithm 'foo'", True),
    ("Fatal Python error: Segmentation fault", True),
    ('  File "x.py", line 3, in <module>', False),
    ("interrupted by signal 15", False),
    ("UserWarning: fused Adam", False),
    ("  algo.learning_rate", False),
])
def test_error_lines(line, is_error):
    assert is_error_line(line) is is_error


def test_error_line_above_the_tail_comes_first(tmp_path):
    lines = ["Traceback (most recent call last):", "  File \"t.py\", line 1",
             "ConfigError: unknown config key 'algo.bad'"] + KEYS
    _write_stderr(tmp_path, lines)
    shown = stderr_excerpt(str(tmp_path), 0).split("\n")[1:]
    assert shown == (["    | ConfigError: unknown config key 'algo.bad'",
                      f"    | ... ({len(KEYS) - 5} more lines)"]
                     + [f"    | {key}" for key in KEYS[-5:]])


def test_error_line_in_the_tail_is_shown_once(tmp_path):
    lines = ["warming up", "Traceback (most recent call last):", "  File \"t.py\", line 1",
             "ValueError: bad value", "cleaning up"]
    _write_stderr(tmp_path, ["noise"] * 10 + lines)
    assert stderr_excerpt(str(tmp_path), 0) == "".join(f"\n    | {line}" for line in lines)


def test_no_error_line_is_the_plain_tail(tmp_path):
    _write_stderr(tmp_path, [f"line {k}" for k in range(9)])
    excerpt = stderr_excerpt(str(tmp_path), 0, n_lines=3)
    assert excerpt == "\n    | line 6\n    | line 7\n    | line 8"


def test_long_lines_are_cut_and_a_missing_file_is_empty(tmp_path):
    _write_stderr(tmp_path, ["ValueError: " + "x" * 2000])
    excerpt = stderr_excerpt(str(tmp_path), 0)
    assert excerpt.startswith("\n    | ValueError: xxx") and excerpt.endswith(" ...")
    assert len(excerpt) < 600
    assert stderr_excerpt(str(tmp_path / "nowhere"), 0) == ""


def test_local_failed_block_shows_the_error_line(tmp_path, capsys):
    script = tmp_path / "loud.py"
    script.write_text(LOUD_FAILURE)
    results = run_experiments(str(script), CODE, "exp", 1, [{}], ["bad"],
                              log_root=str(tmp_path / "logs"))
    assert [r.returncode for r in results] == [1]
    err = capsys.readouterr().err
    block = err[err.index("[FAILED]"):]
    assert "| rlfast.experiments.config.ConfigError: unknown config key 'algo.bad'" in block
    assert "| ... (30 more lines)" in block and f"|   {KEYS[-1]}" in block
    assert f"|   {KEYS[0]}" not in block


def test_a_sweep_with_an_unknown_key_names_it_and_the_closest_key(tmp_path, capsys):
    """The real launch script with a misspelt variant key: the [FAILED] block says which key
    and what it was meant to be."""
    results = run_experiments(TRAIN_SCRIPT, CODE, "exp", 1, [{"algo": {"learnin_rate": 0.1}}],
                              ["typo"], log_root=str(tmp_path))
    assert [r.returncode for r in results] == [1]
    err = capsys.readouterr().err
    block = err[err.index("[FAILED]"):]
    assert "unknown config key 'algo.learnin_rate'; did you mean 'algo.learning_rate'?" in block


def test_slurm_failed_block_shows_the_error_line(tmp_path, capsys):
    """The Slurm launcher's report of a failed job, with submitit's side stood in for: a job
    whose ``results()`` raises as a failed submitit job does."""
    log_dir = str(tmp_path / "bad")
    _write_stderr(log_dir, ["Traceback (most recent call last):",
                            "ConfigError: unknown config key 'algo.bad'"] + KEYS)

    class FailedJob:
        job_id = "17"
        paths = types.SimpleNamespace(stderr=str(tmp_path / "17_0_log.err"))

        def results(self):
            raise RuntimeError("Job failed:\nTraceback ...\nRunFailedError: run_ID 0 exited "
                               "with code 1")

    fake_submitit = types.SimpleNamespace(helpers=types.SimpleNamespace(
        as_completed=lambda jobs, poll_frequency: iter(jobs)))
    returncodes = {}
    slurm_launcher._wait_for_jobs(fake_submitit, [FailedJob()],
                                  [types.SimpleNamespace(log_dir=log_dir, run_ID=0)],
                                  returncodes, str(tmp_path), "local", lambda: None)
    assert returncodes == {0: 1}
    err = capsys.readouterr().err
    assert err.startswith("[FAILED] job 17: run_ID 0")
    assert "| ConfigError: unknown config key 'algo.bad'" in err
    assert f"| {KEYS[-1]}" in err and "RunFailedError: run_ID 0 exited with code 1" in err
