"""``rlfast train --world-size N --backend B``, and ``rlfast train`` as one rank of a run
started by torchrun or Slurm (faked through the environment): what is refused, what is built
and that nothing is written before training; when a rank group that torchrun restarted
resumes its run; and one real two-rank run end to end (a restarted one:
tests/integration/test_torchrun_restart.py)."""
from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import time

import pytest
import torch
import torch.distributed as dist

from rlfast.cli import _parser, main
from rlfast.experiments.assembly import configure_train, run_train
from rlfast.experiments.resume import (configure_train_or_restart, restartable_train_main,
                                       restarted_run)
from rlfast.runners import MinibatchRlEval, SyncRlEval
from rlfast.runners import rank_group
from rlfast.runners.rank_group import RankGroup, _restart_key_prefix, elastic_restart
from rlfast.utils.distributed import launch_env
from rlfast.utils.logging import logger
from tests._leaks import new_shm_entries, shm_entries
from tests.integration._guards import live_children
from tests.integration._guards import session_pids  # live processes of a session

LAUNCHER_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                 "MASTER_PORT", "GROUP_RANK", "ROLE_RANK", "TORCHELASTIC_RUN_ID",
                 "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_USE_AGENT_STORE")
RUN_TIMEOUT_S = 300  # a real run on two busy shared cores: imports, two ranks, evaluations


def _is_launcher_var(name: str) -> bool:
    return name in LAUNCHER_VARS or name.startswith("SLURM_")


@pytest.fixture(autouse=True)
def plain_process(tmp_path, monkeypatch):
    """No launcher around this test (even when pytest itself runs under srun or torchrun),
    the working directory and the data directory in tmp_path."""
    for name in list(os.environ):
        if _is_launcher_var(name):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RLFAST_DATA_DIR", str(tmp_path / "data"))
    yield
    assert not dist.is_initialized()


def _torchrun_rank(monkeypatch, rank, world=2):
    monkeypatch.setenv("RANK", str(rank))
    monkeypatch.setenv("WORLD_SIZE", str(world))
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", "29581")


def _args(tmp_path, *extra):
    return _parser().parse_args(["train", "ppo", "CartPole-v1", "--sampler", "serial",
                                 "--steps", "4000", "--no-progress",
                                 "--log-dir", str(tmp_path / "run"), *extra])


def _listing(root):
    return sorted(os.path.relpath(os.path.join(d, f), root)
                  for d, dirs, files in os.walk(root) for f in dirs + files)


# ---- options -------------------------------------------------------------------------------
def test_parser_accepts_world_size_and_backend(capsys):
    args = _parser().parse_args(["train", "ppo", "CartPole-v1", "--world-size", "4",
                                 "--backend", "gloo"])
    assert (args.world_size, args.backend) == (4, "gloo")
    args = _parser().parse_args(["train", "ppo", "CartPole-v1", "--backend", "nccl"])
    assert (args.world_size, args.backend) == (None, "nccl")
    args = _parser().parse_args(["train", "ppo", "CartPole-v1"])
    assert (args.world_size, args.backend) == (None, None)
    for bad in (["--backend", "mpi"], ["--world-size", "two"]):
        with pytest.raises(SystemExit) as exit_info:
            _parser().parse_args(["train", "ppo", "CartPole-v1", *bad])
        assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'mpi'" in err and "invalid int value: 'two'" in err


@pytest.mark.parametrize("size", ["0", "-2"])
def test_world_size_below_one_is_refused(tmp_path, capsys, size):
    assert main(["train", "ppo", "CartPole-v1", "--world-size", size,
                 "--log-dir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert err == f"rlfast: error: --world-size must be >= 1; got {size}\n"
    assert _listing(tmp_path) == []


def test_async_runner_with_several_ranks_is_refused(tmp_path, capsys, monkeypatch):
    assert main(["train", "dqn", "CartPole-v1", "--runner", "async", "--world-size", "2",
                 "--log-dir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rlfast: error: a run of 2 ranks needs --runner sync"), err
    # the same under a launcher's two ranks
    _torchrun_rank(monkeypatch, 0)
    assert main(["train", "dqn", "CartPole-v1", "--runner", "async",
                 "--log-dir", str(tmp_path / "run")]) == 2
    assert "a run of 2 ranks needs --runner sync" in capsys.readouterr().err
    assert _listing(tmp_path) == []


def test_world_size_two_builds_a_sync_run_and_writes_nothing(tmp_path):
    environ_before = dict(os.environ)
    run = configure_train(_args(tmp_path, "--world-size", "2"))
    assert isinstance(run.runner, SyncRlEval)
    assert run.runner.requested_world_size == 2 and run.runner.backend is None
    assert run.dist_env is None and run.is_logging_rank
    assert run.log_params["world_size"] == 2 and run.log_params["launcher"] is None
    assert run.exp_dir == str(tmp_path / "run")
    # nothing started, nothing written, the environment untouched
    assert _listing(tmp_path) == []
    assert live_children() == [] and not dist.is_initialized()
    assert dict(os.environ) == environ_before


def test_world_size_one_is_a_plain_run(tmp_path):
    run = configure_train(_args(tmp_path, "--world-size", "1"))
    assert type(run.runner) is MinibatchRlEval
    assert run.log_params["world_size"] == 1
    run = configure_train(_args(tmp_path, "--backend", "gloo"))
    assert type(run.runner) is MinibatchRlEval


# ---- under a launcher ----------------------------------------------------------------------
def test_launcher_rank_one_builds_a_silent_rank(tmp_path, monkeypatch, capsys):
    _torchrun_rank(monkeypatch, 1)
    run = configure_train(_args(tmp_path))
    assert isinstance(run.runner, SyncRlEval)
    assert not run.is_logging_rank
    assert (run.dist_env.rank, run.dist_env.world_size, run.dist_env.launcher) == (
        1, 2, "torchrun")
    assert run.log_params["world_size"] == 2 and run.log_params["launcher"] == "torchrun"
    assert _listing(tmp_path) == []  # no log directory: rank 0 writes the logs
    # run_train hands back the rank's own result and neither logs nor prints
    sentinel = {"final_return": 1.0, "cum_steps": 4096, "eval_returns": []}
    run.runner.train = lambda: sentinel
    assert run_train(run) is sentinel
    assert capsys.readouterr().out == ""
    assert _listing(tmp_path) == []
    assert live_children() == []


def test_launcher_rank_one_skips_the_log_dir_check_rank_zero_does_not(tmp_path, monkeypatch,
                                                                      capsys):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "progress.csv").write_text("Diagnostics/Iteration\n0\n")
    _torchrun_rank(monkeypatch, 1)
    assert not configure_train(_args(tmp_path)).is_logging_rank  # rank 0 decides
    _torchrun_rank(monkeypatch, 0)
    assert main(["train", "ppo", "CartPole-v1", "--sampler", "serial",
                 "--log-dir", str(tmp_path / "run")]) == 2
    assert "already holds a run" in capsys.readouterr().err


def test_launcher_rank_zero_logs(tmp_path, monkeypatch):
    _torchrun_rank(monkeypatch, 0)
    run = configure_train(_args(tmp_path))
    assert isinstance(run.runner, SyncRlEval) and run.is_logging_rank
    assert run.dist_env.rank == 0


def test_slurm_rank_one_builds_a_silent_rank(tmp_path, monkeypatch):
    for name, value in dict(SLURM_PROCID="1", SLURM_LOCALID="0", SLURM_NTASKS="2",
                            SLURM_STEP_ID="0", SLURM_JOB_NODELIST="node[01-02]",
                            SLURM_JOB_ID="4242").items():
        monkeypatch.setenv(name, value)
    run = configure_train(_args(tmp_path))
    assert isinstance(run.runner, SyncRlEval) and not run.is_logging_rank
    assert (run.dist_env.launcher, run.dist_env.master_addr) == ("slurm", "node01")
    assert run.log_params["launcher"] == "slurm"
    assert _listing(tmp_path) == []
    # the batch script itself (no step variable) is a plain single process
    monkeypatch.delenv("SLURM_STEP_ID")
    monkeypatch.setenv("SLURM_PROCID", "0")
    run = configure_train(_args(tmp_path))
    assert type(run.runner) is MinibatchRlEval and run.dist_env is None


def test_launcher_world_of_one_is_a_plain_run(tmp_path, monkeypatch):
    _torchrun_rank(monkeypatch, 0, world=1)
    run = configure_train(_args(tmp_path))
    assert type(run.runner) is MinibatchRlEval and run.dist_env is None


def test_world_size_disagreeing_with_the_launcher_is_refused(tmp_path, monkeypatch, capsys):
    _torchrun_rank(monkeypatch, 1)
    assert main(["train", "ppo", "CartPole-v1", "--world-size", "3",
                 "--log-dir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rlfast: error: --world-size 3 disagrees with the launcher's "
                          "WORLD_SIZE 2 (torchrun)"), err
    # agreeing is fine
    run = configure_train(_args(tmp_path, "--world-size", "2"))
    assert isinstance(run.runner, SyncRlEval) and run.dist_env.world_size == 2


def test_broken_launcher_environment_is_a_short_error(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert main(["train", "ppo", "CartPole-v1", "--log-dir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rlfast: error: RANK and WORLD_SIZE are set but MASTER_ADDR and "
                          "MASTER_PORT are not"), err
    assert _listing(tmp_path) == []


# ---- a rank group that torchrun restarted ----------------------------------------------------
def _restarted(monkeypatch, rank, restarts, run_id="rdzv-a"):
    _torchrun_rank(monkeypatch, rank)
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", str(restarts))
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", run_id)


def _first_start_params(tmp_path, monkeypatch, *extra, run_id="rdzv-a"):
    """Write the params.json that rank 0's first start of ``_args(*extra)`` under torchrun
    rendezvous ``run_id`` logs (as logger_context does); returns the run directory."""
    _restarted(monkeypatch, 0, 0, run_id)
    run = configure_train(_args(tmp_path, *extra))
    assert run.log_params["launcher_run_id"] == run_id
    os.makedirs(run.exp_dir, exist_ok=True)
    logger.log_parameters_lite(os.path.join(run.exp_dir, "params.json"), run.log_params)
    return tmp_path / "run"


def test_elastic_restart_reads_torchruns_variables(monkeypatch):
    assert elastic_restart({}) == (0, None)
    assert elastic_restart({"TORCHELASTIC_RESTART_COUNT": "2",
                            "TORCHELASTIC_RUN_ID": "x"}) == (2, "x")
    for bad in ("-1", "two"):
        with pytest.raises(ValueError, match=f"TORCHELASTIC_RESTART_COUNT='{bad}' is not a "
                                             f"restart count"):
            elastic_restart({"TORCHELASTIC_RESTART_COUNT": bad})


def test_only_a_restart_under_the_agents_store_gets_a_key_prefix(monkeypatch):
    _restarted(monkeypatch, 1, 0)
    monkeypatch.setenv("TORCHELASTIC_USE_AGENT_STORE", "True")
    assert _restart_key_prefix(launch_env()) is None  # the first start joins as always
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "2")
    assert _restart_key_prefix(launch_env()) == "rlfast/restart_2"
    monkeypatch.setenv("TORCHELASTIC_USE_AGENT_STORE", "False")  # rank 0 hosts a new store
    assert _restart_key_prefix(launch_env()) is None


def test_ranks_that_resumed_different_snapshots_stop(monkeypatch):
    """Every rank sees every rank's snapshot iteration (faked collectives: rank 0 gathers,
    then broadcasts the list) and raises, naming them, when they differ."""
    group = RankGroup(None, 2, "gloo", 60.0, "SyncRl")
    group.world_size = 2
    found = {}
    monkeypatch.setattr(rank_group.distributed, "is_distributed", lambda: True)
    monkeypatch.setattr(rank_group.distributed, "broadcast_object", lambda obj: obj)
    monkeypatch.setattr(rank_group.distributed, "gather_objects",
                        lambda obj: [found["rank 0"], obj])
    found["rank 0"] = 3
    group._check_same_start(3)  # both from iteration 3's snapshot
    with pytest.raises(RuntimeError, match=r"the ranks resumed different snapshots \(rank 0: "
                                           r"iteration 3, rank 1: a fresh start\): each rank "
                                           r"resumes the snapshot it finds in the log "
                                           r"directory"):
        group._check_same_start(-1)


def test_only_the_torchrun_run_id_is_recorded(tmp_path, monkeypatch):
    assert "launcher_run_id" not in configure_train(_args(tmp_path)).log_params
    run_dir = _first_start_params(tmp_path, monkeypatch)
    assert json.loads((run_dir / "params.json").read_text())["launcher_run_id"] == "rdzv-a"


def test_a_restart_resumes_only_its_own_run(tmp_path, monkeypatch):
    run_dir = _first_start_params(tmp_path, monkeypatch, "--set", "algo.learning_rate=0.002")
    args = _args(tmp_path, "--set", "algo.learning_rate=0.002")
    for rank in (0, 1):
        _restarted(monkeypatch, rank, 0)
        assert restarted_run(args) is None  # a first start is never a restart
        _restarted(monkeypatch, rank, 1)
        assert restarted_run(args) == (str(run_dir), None)  # no snapshot yet
        (run_dir / "itr_3.pkl").touch()
        (run_dir / "itr_12.pkl").touch()
        assert restarted_run(args) == (str(run_dir), str(run_dir / "itr_12.pkl"))
        for name in ("itr_3.pkl", "itr_12.pkl"):
            (run_dir / name).unlink()
    (run_dir / "params.pkl").touch()
    found = (str(run_dir), str(run_dir / "params.pkl"))
    assert restarted_run(args) == found
    # another torchrun invocation, another command line or no --log-dir: not this run
    _restarted(monkeypatch, 0, 1, run_id="rdzv-b")
    assert restarted_run(args) is None
    _restarted(monkeypatch, 0, 1)
    for other in (_args(tmp_path), _args(tmp_path, "--set", "algo.learning_rate=0.002",
                                         "--seed", "1"),
                  _args(tmp_path, "--set", "algo.learning_rate=0.002", "--sampler", "cpu")):
        assert restarted_run(other) is None
    no_dir = _parser().parse_args(["train", "ppo", "CartPole-v1", "--sampler", "serial",
                                   "--set", "algo.learning_rate=0.002"])
    assert restarted_run(no_dir) is None
    assert restarted_run(args) == found
    for name in LAUNCHER_VARS:  # not under torchrun
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "1")
    assert restarted_run(args) is None


def test_a_restart_before_the_first_snapshot_starts_over(tmp_path, monkeypatch):
    run_dir = _first_start_params(tmp_path, monkeypatch)
    (run_dir / "progress.csv").write_text("Diagnostics/Iteration\n0\n")
    _restarted(monkeypatch, 0, 1)
    run = configure_train_or_restart(_args(tmp_path))
    assert run.resume is None and run.args.overwrite  # logger_context replaces its own files
    assert f"note: torchrun restart 1: {run_dir} holds no snapshot of this run yet; training " \
           f"starts over" in run.notes


def test_a_restart_refuses_a_directory_of_another_run(tmp_path, monkeypatch, capsys):
    _first_start_params(tmp_path, monkeypatch, run_id="rdzv-b")
    _restarted(monkeypatch, 0, 1)
    assert restartable_train_main(_args(tmp_path)) == 2
    assert "already holds a run" in capsys.readouterr().err


def test_a_restart_without_log_dir_says_it_starts_over(tmp_path, monkeypatch):
    _restarted(monkeypatch, 0, 1)
    args = _parser().parse_args(["train", "ppo", "CartPole-v1", "--sampler", "serial"])
    run = configure_train_or_restart(args)
    assert run.resume is None
    assert any(n.startswith("warning: torchrun restart 1: without --log-dir every start "
                            "writes a new directory") for n in run.notes), run.notes
    assert not os.path.exists(tmp_path / "data")  # nothing written


# ---- nccl on a machine without CUDA --------------------------------------------------------
def _clean_env():
    return {k: v for k, v in os.environ.items() if not _is_launcher_var(k)}


def _run_cli(tmp_path, argv, name):
    """Run ``python -m rlfast`` in its own session in tmp_path; returns (return code, stdout,
    stderr, pids seen while it ran). Every process of the session is gone afterwards."""
    out_path, err_path = tmp_path / f"{name}.out", tmp_path / f"{name}.err"
    with open(out_path, "w") as out, open(err_path, "w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "rlfast", *argv], cwd=tmp_path,
                                env=_clean_env(), stdout=out, stderr=err,
                                start_new_session=True)
    pids = {proc.pid}
    try:
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while proc.poll() is None:
            assert time.monotonic() < deadline, f"{argv} still running after {RUN_TIMEOUT_S} s"
            pids.update(session_pids(proc.pid))
            time.sleep(0.05)
        deadline = time.monotonic() + 10
        while session_pids(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        left = session_pids(proc.pid)
    finally:
        if proc.poll() is None or session_pids(proc.pid):
            try:
                os.killpg(proc.pid, 9)
            except ProcessLookupError:
                pass
            proc.wait(timeout=30)
    assert left == [], f"processes of the run still alive: {left}"
    assert live_children() == []
    return proc.returncode, out_path.read_text(), err_path.read_text(), pids


@pytest.mark.skipif(torch.cuda.is_available(), reason="NCCL may work on this machine")
def test_nccl_without_cuda_fails_naming_the_problem(tmp_path):
    code, out, err, _ = _run_cli(tmp_path, ["train", "ppo", "CartPole-v1", "--world-size", "2",
                                            "--backend", "nccl", "--sampler", "serial",
                                            "--steps", "4000", "--no-progress",
                                            "--log-dir", str(tmp_path / "run")], "nccl")
    assert code == 2  # a configuration error, before any file or process
    assert "the nccl backend needs the agent on CUDA" in err and "use gloo on CPU" in err
    assert not (tmp_path / "run").exists()
    assert "Final evaluation return" not in out


@pytest.mark.skipif(torch.cuda.is_available(), reason="NCCL may work on this machine")
def test_nccl_without_cuda_is_a_configuration_error(tmp_path):
    with pytest.raises(ValueError, match="nccl"):
        configure_train(_args(tmp_path, "--world-size", "2", "--backend", "nccl"))
    assert _listing(tmp_path) == []


# ---- a real two-rank run -------------------------------------------------------------------
def test_two_ranks_end_to_end(tmp_path):
    shm_before = shm_entries()
    log_dir = tmp_path / "run"
    code, out, err, pids = _run_cli(tmp_path, [
        "train", "ppo", "CartPole-v1", "--world-size", "2", "--sampler", "serial",
        "--steps", "4000", "--log-dir", str(log_dir), "--no-progress",
        "--set", "runner.log_interval_steps=2048"], "e2e")
    assert code == 0, err[-3000:]
    assert "Traceback" not in err
    assert len(pids) >= 2, "rank 1's process was never seen"
    assert out.count("Final evaluation return") == 1, out[-3000:]
    assert out.count(f"Logs: {log_dir}") == 1
    # only the run's directory and this test's captured outputs in the working directory
    assert sorted(os.listdir(tmp_path)) == ["e2e.err", "e2e.out", "run"]
    params = json.loads((log_dir / "params.json").read_text())
    assert params["world_size"] == 2 and params["launcher"] is None
    batch = 2 * params["config"]["sampler"]["batch_T"] * params["config"]["sampler"]["batch_B"]
    with open(log_dir / "progress.csv", newline="") as f:
        rows = list(csv.reader(f))
    header, body = rows[0], rows[1:]
    assert header not in body  # one writer: the header once
    assert all(len(r) == len(header) for r in body)
    steps = [int(r[header.index("Diagnostics/CumSteps")]) for r in body]
    assert len(steps) >= 2 and steps[0] == 0
    assert steps == sorted(set(steps))  # no row written twice
    assert all(s % batch == 0 for s in steps), (steps, batch)
    assert 4000 <= steps[-1] < 4000 + batch
    log = (log_dir / "debug.log").read_text()
    assert log.count("SyncRlEval: rank 0 of 2 (spawn, backend gloo)") == 1
    assert log.count("Training complete.") == 1
    kinds = ("pymp-", "psm_", "sem.mp-", "torch_", "rlfast")
    assert new_shm_entries(shm_before, prefixes=kinds,
                           also=lambda n: any(str(p) in n for p in pids)) == []
