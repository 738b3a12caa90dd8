"""``--snapshot-every MINUTES`` on ``rlfast train`` and ``rlfast resume``: a bad value is a
one-line error naming it, an evolution-strategies run refuses the option, the run records it
in params.json, and ``rlfast resume`` keeps it (or takes a new one)."""
import json

import pytest

from rlfast.cli import main
from rlfast.utils.logging import load_snapshot

TINY = ["train", "ppo", "CartPole-v1", "--steps", "256", "--sampler", "serial", "--n-envs", "2",
        "--no-progress", "--set", "sampler.batch_T=64", "--set", "runner.log_interval_steps=512",
        "--set", "sampler.eval_max_steps=100"]  # 2 iterations of 128 steps; a row at the end


def _error_line(capsys):
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


@pytest.mark.parametrize("value", ["0", "-2", "nan", "inf"])
def test_bad_minutes_are_a_one_line_error(tmp_path, capsys, value):
    log_dir = tmp_path / "run"
    assert main(TINY + ["--log-dir", str(log_dir), "--snapshot-every", value]) == 2
    line = _error_line(capsys)
    assert line.startswith("rlfast: error: --snapshot-every must be a positive finite number "
                           "of minutes"), line
    assert f"got {float(value)!r}" in line, line
    assert not log_dir.exists()  # refused before anything was written


def test_a_non_number_is_refused_by_argparse(capsys):
    with pytest.raises(SystemExit) as caught:
        main(TINY + ["--snapshot-every", "soon"])
    assert caught.value.code == 2
    assert "--snapshot-every" in capsys.readouterr().err


def test_snapshot_mode_none_is_refused(tmp_path, capsys):
    assert main(TINY + ["--log-dir", str(tmp_path / "run"), "--snapshot-every", "5",
                        "--snapshot-mode", "none"]) == 2
    line = _error_line(capsys)
    assert "--snapshot-every 5 needs snapshots" in line and "--snapshot-mode last" in line, line


def test_evolution_strategies_refuse_it(tmp_path, capsys):
    assert main(["train", "cem", "CartPole-v1", "--log-dir", str(tmp_path / "es"),
                 "--snapshot-every", "5"]) == 2
    line = _error_line(capsys)
    assert "does not take --snapshot-every" in line, line


def _snapshot_itrs(run_dir):
    return sorted(int(p.stem.split("_")[1]) for p in run_dir.glob("itr_*.pkl"))


def test_train_records_it_and_resume_keeps_or_replaces_it(tmp_path, capsys):
    """A cadence that is always due snapshots every iteration (rows alone: the last one);
    the resumed run keeps the cadence from params.json, and a new value replaces it."""
    from rlfast.cli import _parser
    from rlfast.experiments.resume import configure_resume

    run_dir = tmp_path / "run"
    assert main(TINY + ["--log-dir", str(run_dir), "--snapshot-every", "1e-9",
                        "--snapshot-mode", "all"]) == 0
    assert _snapshot_itrs(run_dir) == [0, 1]
    assert json.loads((run_dir / "params.json").read_text())["snapshot_every"] == 1e-9

    assert main(["resume", str(run_dir), "--steps", "512", "--no-progress"]) == 0
    assert _snapshot_itrs(run_dir) == [0, 1, 2, 3]  # the cadence went on after the resume
    assert load_snapshot(run_dir / "itr_3.pkl")["cum_steps"] == 512
    params = json.loads((run_dir / "params.json").read_text())
    assert params["snapshot_every"] == 1e-9
    assert [r["from_itr"] for r in params["resumes"]] == [1]

    args = _parser().parse_args(["resume", str(run_dir), "--steps", "1024",
                                 "--snapshot-every", "30"])
    run = configure_resume(args)
    assert run.runner.snapshots.every_minutes == 30.0
    assert run.log_params["snapshot_every"] == 30.0
    capsys.readouterr()
    assert main(["resume", str(run_dir), "--steps", "1024", "--snapshot-every", "0"]) == 2
    assert "--snapshot-every must be a positive finite number" in _error_line(capsys)
