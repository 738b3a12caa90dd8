"""``rlfast.utils.launching`` keeps the launcher's old import paths working after its move to
``rlfast.launching``, with a DeprecationWarning that names the new path, and without
importing ``rlfast.launching`` until one of them is used."""
import os
import subprocess
import sys
import textwrap
import warnings

import pytest

import rlfast.launching
import rlfast.utils.launching

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def _run_python(code: str) -> str:
    """Run ``code`` in a fresh interpreter (nothing imported yet) and return its stdout."""
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_old_public_path_works_and_warns():
    with pytest.warns(DeprecationWarning, match=r"rlfast\.launching\.run_experiments"):
        from rlfast.utils.launching import run_experiments
    assert run_experiments is rlfast.launching.run_experiments
    with pytest.warns(DeprecationWarning, match=r"rlfast\.launching\.report_sweep"):
        assert rlfast.utils.launching.report_sweep is rlfast.launching.report_sweep
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the names that stayed do not warn
        from rlfast.utils.launching import affinity_from_code, make_random_variants  # noqa: F401
    with pytest.raises(AttributeError, match="no_such_name"):
        rlfast.utils.launching.no_such_name


def test_importing_utils_launching_does_not_import_the_launcher():
    out = _run_python("""
        import sys
        import rlfast.utils.launching
        from rlfast.utils.launching import encode_affinity, make_variants, update_config
        print(sorted(m for m in sys.modules if m.startswith("rlfast.launching")))
    """)
    assert out.strip() == "[]"


def test_old_submodule_paths_alias_the_new_modules():
    """Old scripts' ``from rlfast.utils.launching.exp_launcher import report_sweep``, and a
    SweepRun pickled under the old path (a job submitted before the move, requeued after)."""
    out = _run_python("""
        import pickle, warnings
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            from rlfast.utils.launching.exp_launcher import report_sweep
            import rlfast.utils.launching.slurm as old_slurm
            from rlfast.utils.launching import slurm_job as old_job
        import rlfast.launching, rlfast.launching.slurm, rlfast.launching.slurm_job
        assert report_sweep is rlfast.launching.report_sweep
        assert old_slurm is rlfast.launching.slurm and old_job is rlfast.launching.slurm_job
        assert rlfast.launching.slurm.__spec__.name == "rlfast.launching.slurm"
        messages = [str(w.message) for w in caught if w.category is DeprecationWarning]
        assert len(messages) == 3, messages  # one per old module
        assert all(w.filename == "<string>" for w in caught), [w.filename for w in caught]
        for old, new in (("exp_launcher", "rlfast.launching;"), ("slurm", "launching.slurm;"),
                         ("slurm_job", "launching.slurm_job;")):
            assert any(f"rlfast.utils.launching.{old} has moved to" in m and new in m
                       for m in messages), (old, messages)
        SweepRun = rlfast.launching.slurm_job.SweepRun
        # protocol 2 names a class with a text GLOBAL opcode: the module can be swapped
        data = pickle.dumps(SweepRun("s.py", "0slt_1cpu", "/logs", 0), protocol=2).replace(
            b"rlfast.launching.slurm_job", b"rlfast.utils.launching.slurm_job")
        assert b"rlfast.utils.launching.slurm_job" in data
        assert type(pickle.loads(data)) is SweepRun
        print("ok")
    """)
    assert out.strip() == "ok"
