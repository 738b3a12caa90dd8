"""A sweep's plan: ``run_experiments``' arguments checked before anything is written, and the
dry run that prints the plan without starting a run."""
import datetime
import os

import pytest

from rlfast.launching import prepend_run_slot, run_experiments
from tests.launching._recorder import CODE, children, recorder, two_variants  # noqa: F401


def test_dry_run_plans_without_starting(recorder, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("RLFAST_DATA_DIR", str(tmp_path / "data"))
    before = children()
    variants, log_dirs = two_variants()
    plan = run_experiments(recorder, CODE, "exp", 2, variants, log_dirs, dry_run=True)
    day = datetime.datetime.now().strftime("%Y%m%d")
    exp_dir = os.path.join(str(tmp_path / "data"), "local", day, "exp")
    assert [(r.log_dir, r.run_ID, r.slot, r.returncode) for r in plan] == [
        (os.path.join(exp_dir, "lr_a"), 0, 0, None), (os.path.join(exp_dir, "lr_b"), 0, 1, None),
        (os.path.join(exp_dir, "lr_a"), 1, 0, None), (os.path.join(exp_dir, "lr_b"), 1, 1, None)]
    assert not (tmp_path / "data").exists()
    assert prepend_run_slot(1, CODE) in capsys.readouterr().out
    assert children() <= before


def test_run_experiments_input_checks(recorder, tmp_path):
    variants, log_dirs = two_variants()
    with pytest.raises(ValueError, match="2 variants and 1 log_dirs"):
        run_experiments(recorder, CODE, "e", 1, variants, log_dirs[:1], log_root=str(tmp_path))
    with pytest.raises(ValueError, match="unique"):
        run_experiments(recorder, CODE, "e", 1, variants, ["d", "d"], log_root=str(tmp_path))
    with pytest.raises(ValueError, match="runs_args"):
        run_experiments(recorder, CODE, "e", 1, variants, log_dirs, runs_args=[[]],
                        log_root=str(tmp_path))
    with pytest.raises(ValueError, match="runs_per_setting"):
        run_experiments(recorder, CODE, "e", 0, variants, log_dirs, log_root=str(tmp_path))
    with pytest.raises(FileNotFoundError, match="missing.py"):
        run_experiments(str(tmp_path / "missing.py"), CODE, "e", 1, variants, log_dirs,
                        log_root=str(tmp_path))
    assert not (tmp_path / "e").exists()

