"""``rlfast tune``: search spaces, a real small search (outputs, pruning), a search killed
and continued, a polite SIGTERM, and the command-line errors.

The searches are tiny (ppo on CartPole-v1, 4096 steps with two environments) and run the
CLI as ``sys.executable -m rlfast`` with absolute paths, so the tests pass from any working
directory; every process they start is checked gone (and killed on failure) at the end.
"""
import json
import os
import signal
import subprocess
import sys
import time

import optuna
import psutil
import pytest

from rlfast.cli import _parser, main
from rlfast.experiments.assembly import train_config
from rlfast.experiments.config import apply_overrides, flatten
from rlfast.experiments.presets import PRESETS, get_preset
from rlfast.experiments.search_spaces import SEARCH_SPACES, check_space, spec_contains
from rlfast.experiments.tune import STUDY_NAME, aligned_log_interval
from rlfast.utils.misc import available_cpus
from tests.integration._guards import session_pids

TINY = ["--steps", "4096", "--set", "sampler.batch_B=2"]
TIMEOUT_S = 120
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ENVS = {"discrete": "CartPole-v1", "continuous": "Pendulum-v1"}


def _study(log_dir):
    # Loading would create the database, and opening it while the search initializes it
    # would race with the search: wait until the search has started its first trial.
    if not (log_dir / "study.db").is_file() or not (log_dir / "trial_0").is_dir():
        raise FileNotFoundError(log_dir / "study.db")
    return optuna.load_study(study_name=STUDY_NAME, storage=f"sqlite:///{log_dir}/study.db")


def _states(log_dir):
    return {t.number: t.state.name for t in _study(log_dir).get_trials(deepcopy=False)}


def _assert_session_gone(sid, timeout=15.0):
    """Wait for every process of the session to end; kill and fail if some remain."""
    deadline = time.monotonic() + timeout
    while session_pids(sid) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = session_pids(sid)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert not left, f"processes left behind: {left}"


def _tune(log_dir, *extra):
    return [sys.executable, "-m", "rlfast", "tune", "ppo", "CartPole-v1", "--log-dir",
            str(log_dir), *TINY, *extra]


# ------------------------------------------------------------------------ search spaces

@pytest.mark.parametrize("algo", sorted(SEARCH_SPACES))
def test_search_space_keys_are_config_keys_of_every_family(algo):
    space = SEARCH_SPACES[algo]
    check_space(space, where=algo)
    for family, preset in PRESETS[algo].items():
        keys = flatten(preset)
        missing = [k for k in space if k not in keys]
        assert not missing, f"{algo} {family} preset lacks {missing}"
        if family not in ENVS:
            continue  # atari: checked on the family preset above
        config = get_preset(algo, ENVS[family])
        for key, spec in space.items():
            for value in (spec if isinstance(spec, list) else spec[1:]):
                assert spec_contains(spec, value)
                changed = apply_overrides(config, [f"{key}={value!r}"])
                assert flatten(changed)[key] == value


def test_log_interval_is_aligned_to_every_batch_size():
    flat = flatten(get_preset("a2c", "CartPole-v1"))  # batch_B 16, interval 20000
    interval = aligned_log_interval(flat, SEARCH_SPACES["a2c"], 200_000)
    for batch_T in SEARCH_SPACES["a2c"]["sampler.batch_T"]:
        assert interval % (batch_T * 16) == 0
    assert 200_000 // interval >= 4
    flat["sampler.batch_B"] = 2
    assert aligned_log_interval(flat, SEARCH_SPACES["ppo"], 4096) == 1024


# ------------------------------------------------------- a real search, with pruning

@pytest.fixture(scope="module")
def pruned_search(tmp_path_factory):
    """Three sequential trials that differ only in the learning rate: two learn, the
    third (1e-8) cannot, so the median pruner must stop it at its second row."""
    root = tmp_path_factory.mktemp("tune")
    (root / "space.json").write_text(json.dumps(
        {"algo.learning_rate": ["loguniform", 1e-8, 1e-2]}))
    (root / "enqueue.json").write_text(json.dumps(
        [{"algo.learning_rate": 0.003}, {"algo.learning_rate": 0.004},
         {"algo.learning_rate": 1e-8}]))
    log_dir = root / "search"
    argv = _tune(log_dir, "--trials", "3", "--parallel", "1",
                 "--search-space", str(root / "space.json"),
                 "--enqueue", str(root / "enqueue.json"))
    result = subprocess.run(argv, cwd=root, capture_output=True, text=True,
                            timeout=TIMEOUT_S)
    return log_dir, result, argv


def test_search_writes_study_table_and_best_config(pruned_search, tmp_path, capsys):
    log_dir, result, _ = pruned_search
    assert result.returncode == 0, result.stderr
    assert (log_dir / "study.db").is_file()
    states = _states(log_dir)
    assert len(states) == 3 and states[0] == states[1] == "COMPLETE"
    table = (log_dir / "trials.md").read_text()
    assert table.startswith("| trial | state | value | curve mean | steps | algo.learning_rate |")
    assert len(table.strip().splitlines()) == 2 + 3
    assert table in result.stdout
    best = _study(log_dir).best_trial
    best_path = log_dir / "best_config.json"
    assert (f"Best trial {best.number}: value {best.value:.2f}; train it with: rlfast train "
            f"ppo CartPole-v1 --config {best_path}") in result.stdout
    # Nested, accepted by rlfast train --config, and it reproduces the trial's settings.
    saved = json.loads(best_path.read_text())
    assert saved == {"algo": {"learning_rate": best.params["algo.learning_rate"]},
                     "runner": {"n_steps": 4096}, "sampler": {"batch_B": 2}}
    config = train_config(_parser().parse_args(
        ["train", "ppo", "CartPole-v1", "--config", str(best_path)]))
    assert config["algo"]["learning_rate"] == best.params["algo.learning_rate"]
    assert config["runner"]["n_steps"] == 4096 and config["sampler"]["batch_B"] == 2
    # Each trial trained as rlfast train would, in its own directory, pinned to a slot.
    params = json.loads((log_dir / "trial_0" / "params.json").read_text())
    assert params["config"]["algo"]["learning_rate"] == 0.003
    assert params["affinity"].startswith("0slt_")
    assert params["config"]["runner"]["log_interval_steps"] == 1024


def test_a_poor_trial_is_pruned_and_its_child_is_gone(pruned_search):
    log_dir, result, _ = pruned_search
    assert result.returncode == 0, result.stderr
    trial = _study(log_dir).trials[2]
    assert trial.params["algo.learning_rate"] == 1e-8
    assert trial.state.name == "PRUNED", result.stdout
    assert "[trial 2] PRUNED at 2048 steps" in result.stdout
    assert max(trial.intermediate_values) == 2048  # stopped at its second training row
    assert not psutil.pid_exists(trial.user_attrs["child_pid"])


def test_rerun_counts_finished_trials_and_refuses_another_command(pruned_search, capsys):
    log_dir, result, argv = pruned_search
    assert result.returncode == 0, result.stderr
    args = argv[argv.index("tune"):]
    assert main(args) == 0  # same command: 3 of 3 finished, nothing to run
    out = capsys.readouterr().out
    assert "nothing to run" in out and "Best trial" in out
    assert len(_states(log_dir)) == 3
    assert main([*args, "--seed", "1"]) == 2
    err = capsys.readouterr().err
    assert "rlfast: error:" in err and "seed" in err


# --------------------------------------------------------------- interrupt and continue

# `rlfast tune --parallel 2` refuses to start with fewer than two CPUs to run on (a clear
# error, tested above); the interrupt tests below need two trials running at once.
needs_two_cpus = pytest.mark.skipif(len(available_cpus()) < 2,
                                    reason="--parallel 2 needs two available CPUs")


def _start_search(log_dir, trials):
    argv = _tune(log_dir, "--trials", str(trials), "--parallel", "2", "--search", "random",
                 "--set", "sampler.eval_n_envs=4", "--set", "sampler.eval_max_trajectories=4")
    proc = subprocess.Popen(argv, cwd=log_dir.parent, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    return proc, argv


def _wait_for(proc, condition, what):
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        assert proc.poll() is None, f"search ended before {what}: {proc.communicate()}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        try:
            if condition():
                return
        except (FileNotFoundError, KeyError):
            pass  # the study is not created yet
        time.sleep(0.2)


def _running_child(log_dir):
    """A RUNNING trial whose rlfast train has logged a row, or None."""
    for t in _study(log_dir).get_trials(deepcopy=False):
        if t.state.name == "RUNNING" and "child_pid" in t.user_attrs and \
                (log_dir / f"trial_{t.number}" / "progress.csv").is_file():
            return t
    return None


@needs_two_cpus
def test_sigkill_then_restart_continues_the_study(tmp_path):
    log_dir = tmp_path / "search"
    proc, argv = _start_search(log_dir, trials=3)
    try:
        _wait_for(proc, lambda: "COMPLETE" in _states(log_dir).values()
                  and _running_child(log_dir) is not None, "a complete and a running trial")
        os.killpg(proc.pid, signal.SIGKILL)  # the harsh case: search and children at once
        proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        _assert_session_gone(proc.pid)
    before = {t.number: (t.state.name, t.value) for t in _study(log_dir).trials}
    stale = [n for n, (state, _) in before.items() if state == "RUNNING"]
    assert stale

    result = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True,
                            timeout=TIMEOUT_S, start_new_session=True)
    assert result.returncode == 0, result.stderr
    after = {t.number: (t.state.name, t.value) for t in _study(log_dir).trials}
    for number, (state, value) in before.items():
        if state in ("COMPLETE", "PRUNED"):
            assert after[number] == (state, value)  # kept as they were
    for number in stale:
        assert after[number][0] == "FAIL"
        assert f"[trial {number}] left running by an earlier search: marked FAIL" in \
            result.stdout
    assert sum(state in ("COMPLETE", "PRUNED") for state, _ in after.values()) == 3
    assert "Best trial" in result.stdout


@needs_two_cpus
def test_sigterm_stops_the_children_and_leaves_the_study_consistent(tmp_path):
    log_dir = tmp_path / "search"
    proc, _ = _start_search(log_dir, trials=6)
    try:
        _wait_for(proc, lambda: _running_child(log_dir) is not None, "a running trial")
        child = _running_child(log_dir).user_attrs["child_pid"]
        proc.send_signal(signal.SIGTERM)  # the search alone: it must stop its children
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        _assert_session_gone(proc.pid)
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "rlfast: interrupted (SIGTERM)" in err
    assert not psutil.pid_exists(child)
    states = _states(log_dir)
    assert "RUNNING" not in states.values() and "FAIL" in states.values()
    assert (log_dir / "trials.md").is_file()


# ------------------------------------------------------------------------- bad input

@pytest.mark.parametrize("argv, message", [
    (["nope", "CartPole-v1", "--trials", "2"], "unknown algorithm 'nope'"),
    (["ppo", "NoSuchEnv-v9", "--trials", "2"], "NoSuchEnv-v9"),
    (["ppo", "CartPole-v1", "--trials", "0"], "--trials must be >= 1; got 0"),
    (["ppo", "CartPole-v1", "--trials", "2", "--parallel", "0"], "--parallel must be >= 1"),
    (["ppo", "CartPole-v1", "--trials", "2", "--parallel", "999"],
     "--parallel 999 exceeds the "),  # ... N available CPU cores (physical, when HT)
    (["ppo", "CartPole-v1", "--trials", "2", "--set", "algo.nope=1"], "algo.nope"),
    (["dqn", "Pendulum-v1", "--trials", "2"], "Pendulum-v1"),
], ids=["algo", "env", "trials", "parallel-0", "parallel-cores", "set", "action-space"])
def test_bad_input_exits_2_before_anything_runs(tmp_path, capsys, argv, message):
    log_dir = tmp_path / "search"
    assert main(["tune", *argv, "--log-dir", str(log_dir)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rlfast: error: ") and message in err
    assert not log_dir.exists()


@pytest.mark.parametrize("option, content, message", [
    ("--search-space", {"algo.learning_rate": ["loguniform", 0, 1]}, "a log scale needs low > 0"),
    ("--search-space", {"algo.nope": [1, 2]}, "'algo.nope' is not a config key"),
    ("--search-space", {"algo.epochs": ["uniform", 0.5, 2.5]}, "algo.epochs"),
    ("--enqueue", {"algo": {"learning_rate": 0.5}}, "outside the search space"),
    ("--enqueue", "{", "not valid JSON"),
], ids=["log-low", "space-key", "space-type", "enqueue-range", "enqueue-json"])
def test_bad_space_and_enqueue_files_exit_2(tmp_path, capsys, option, content, message):
    path = tmp_path / "input.json"
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    log_dir = tmp_path / "search"
    assert main(["tune", "ppo", "CartPole-v1", "--trials", "2", option, str(path),
                 "--log-dir", str(log_dir)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rlfast: error: ") and message in err
    assert not log_dir.exists()


def test_best_config_breaks_ties_by_the_fastest_learner(tmp_path, capsys):
    """Trials tied on the best value: best_config.json takes the one whose evaluation rows
    average highest (it learned fastest); the value itself still comes first."""
    import optuna
    from optuna.distributions import FloatDistribution

    from rlfast.experiments.tune import write_report
    from rlfast.experiments.tune_trials import TuneSetup

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="maximize")
    dist = {"algo.learning_rate": FloatDistribution(1e-5, 1e-1, log=True)}
    curves = {0: [(0, 20.0), (1000, 100.0), (2000, 500.0), (3000, 500.0)],   # tied, slower
              1: [(0, 20.0), (1000, 400.0), (2000, 500.0), (3000, 500.0)],   # tied, faster
              2: [(0, 20.0), (1000, 499.0), (2000, 499.0), (3000, 499.0)]}   # lower value
    for number, rows in curves.items():
        trial_dir = tmp_path / f"trial_{number}"
        trial_dir.mkdir()
        lines = ["Diagnostics/CumSteps,ReturnAverage"] + [f"{s},{r}" for s, r in rows]
        (trial_dir / "progress.csv").write_text("\n".join(lines) + "\n")
        value = (rows[-1][1] + rows[-2][1]) / 2
        study.add_trial(optuna.trial.create_trial(
            params={"algo.learning_rate": 10.0 ** -(number + 2)}, distributions=dist,
            value=value))
    setup = TuneSetup(algo="ppo", env="CartPole-v1", trials=3, search="tpe", steps=3000, seed=0,
                      log_dir=str(tmp_path),
                      space={"algo.learning_rate": ("loguniform", 1e-5, 1e-1)},
                      base_config={}, user_changes={}, train_args=[], log_interval=1000,
                      slot_codes=["0slt_1cpu_0gpu"], enqueue=[])
    best = write_report(setup, study)
    assert best.number == 1
    assert json.loads((tmp_path / "best_config.json").read_text()) == {
        "algo": {"learning_rate": 1e-3}}
    table = (tmp_path / "trials.md").read_text()
    assert "| 1 | COMPLETE | 500.00 | 466.67 | 3000 |" in table, table


_OPEN_AT_ONCE = """
import sys, time
from rlfast.experiments.tune import _open_storage
start_at = float(sys.argv[2])
while time.time() < start_at:  # every process opens the new database at the same moment
    time.sleep(0.001)
print(len(_open_storage(sys.argv[1]).get_all_studies()))
"""


def test_processes_opening_a_new_study_database_at_once_all_succeed(tmp_path):
    # Plain subprocesses: a multiprocessing pool would leave its resource tracker running
    # for the rest of the session, which the process-accounting tests would count.
    path = str(tmp_path / "study.db")
    start_at = time.time() + 4.0
    procs = [subprocess.Popen([sys.executable, "-c", _OPEN_AT_ONCE, path, str(start_at)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              cwd=tmp_path, env=dict(os.environ, PYTHONPATH=REPO_ROOT))
             for _ in range(4)]
    results = [proc.communicate(timeout=120) for proc in procs]
    assert [(proc.returncode, out.strip()) for proc, (out, _) in zip(procs, results)] == \
        [(0, "0")] * 4, [err[-1500:] for _, err in results]
