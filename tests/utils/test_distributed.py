"""rlfast.utils.distributed: who a rank is (torchrun / Slurm variables, read from fake
environments: no real launcher is needed), Slurm node lists, backend choice, and the
collectives on a real two-rank gloo group of spawned processes."""
from __future__ import annotations

import dataclasses
import multiprocessing as mp
import os
import queue as queue_module
import socket
import sys

import numpy as np
import pytest
import torch
import torch.distributed as dist

from rlfast.utils import distributed as d
from rlfast.utils.distributed import (DistEnv, choose_backend, expand_nodelist,
                                      first_slurm_host, free_port, launch_env, slurm_env)
from tests.integration._guards import live_children

_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
import _dist_workers  # noqa: E402

RANK_TIMEOUT_S = 90  # spawn start (imports), rendezvous and the scenario, on 2 busy cores


# ---- Slurm ---------------------------------------------------------------------------------
def _srun(**overrides):
    """The variables srun gives task 1 of a 4-task step over 2 nodes (2 tasks each)."""
    environ = dict(SLURM_PROCID="1", SLURM_LOCALID="1", SLURM_NTASKS="4",
                   SLURM_STEP_ID="0", SLURM_STEP_NUM_TASKS="4",
                   SLURM_JOB_NODELIST="gpu[07-09,12],cpu1", SLURM_JOB_ID="123456",
                   SLURM_TASKS_PER_NODE="2(x2)")
    environ.update(overrides)
    return {k: v for k, v in environ.items() if v is not None}


def test_slurm_variables_map_to_rank_world_and_master():
    env = slurm_env(_srun())
    assert env == DistEnv(rank=1, local_rank=1, world_size=4, local_world_size=2,
                          master_addr="gpu07", master_port=15000 + 123456 % 20000,
                          launcher="slurm")
    assert env.master_port == 18456
    assert launch_env(_srun()) == env  # launch_env falls back on Slurm


def test_slurm_step_num_tasks_wins_over_ntasks():
    # A step of 2 tasks inside an allocation of 8.
    env = slurm_env(_srun(SLURM_NTASKS="8", SLURM_STEP_NUM_TASKS="2", SLURM_STEP_ID=None))
    assert env.world_size == 2
    env = slurm_env(_srun(SLURM_NTASKS="8", SLURM_STEP_NUM_TASKS=None))  # SLURM_STEP_ID marks it
    assert env.world_size == 8
    env = slurm_env(_srun(SLURM_NTASKS="3", SLURM_STEP_NUM_TASKS=None, SLURM_STEP_ID=None,
                          SLURM_STEPID="5"))  # the older name marks a step too
    assert env.world_size == 3


def test_slurm_local_world_size_sources():
    base = dict(SLURM_TASKS_PER_NODE=None, SLURM_PROCID="0", SLURM_LOCALID="0",
                SLURM_NTASKS="11", SLURM_STEP_NUM_TASKS="11")
    # the step's own count first, then --ntasks-per-node, then the allocation's
    assert slurm_env(_srun(**{**base, "SLURM_STEP_TASKS_PER_NODE": "4(x2),3",
                              "SLURM_NTASKS_PER_NODE": "2", "SLURM_TASKS_PER_NODE": "2(x6)"})
                     ).local_world_size == 4
    assert slurm_env(_srun(**{**base, "SLURM_NTASKS_PER_NODE": "5",
                              "SLURM_TASKS_PER_NODE": "3(x3),2"})).local_world_size == 5
    assert slurm_env(_srun(**{**base, "SLURM_TASKS_PER_NODE": "3(x3),2"})).local_world_size == 3
    assert slurm_env(_srun(**{**base, "SLURM_TASKS_PER_NODE": "6"})).local_world_size == 6
    # nothing said: one task per node; never fewer than this task's local rank implies
    assert slurm_env(_srun(**base)).local_world_size == 1
    assert slurm_env(_srun(**{**base, "SLURM_LOCALID": "2"})).local_world_size == 3
    # no SLURM_LOCALID: local rank 0
    env = slurm_env(_srun(**{**base, "SLURM_LOCALID": None}))
    assert env.local_rank == 0
    with pytest.raises(ValueError, match="SLURM_TASKS_PER_NODE"):
        slurm_env(_srun(**{**base, "SLURM_TASKS_PER_NODE": "(x2)"}))


def test_slurm_local_world_size_of_a_later_uneven_node():
    """Each task reads its own node's count (SLURM_NODEID), not the first node's."""
    sizes = {slurm_env(_srun(SLURM_PROCID=str(2 + i), SLURM_LOCALID=str(i), SLURM_NODEID="1",
                             SLURM_NTASKS="6", SLURM_STEP_NUM_TASKS="6",
                             SLURM_TASKS_PER_NODE="2,4")).local_world_size for i in range(4)}
    assert sizes == {4}


@pytest.mark.parametrize("nodelist,master", [
    ("gpu[07-09,12],cpu1", "gpu07"),
    ("node[001-004]", "node001"),
    ("a[1-2]b[3-4]", "a1b3"),
    ("host17", "host17"),
    ("cn-[0010-0011]-ib,login", "cn-0010-ib"),
])
def test_master_addr_is_the_first_host_of_the_node_list(nodelist, master):
    assert first_slurm_host(nodelist) == master
    env = slurm_env(_srun(SLURM_JOB_NODELIST=nodelist))
    assert env.master_addr == master
    # SLURM_NODELIST (the older name) is read when SLURM_JOB_NODELIST is absent
    env = slurm_env(_srun(SLURM_JOB_NODELIST=None, SLURM_NODELIST=nodelist))
    assert env.master_addr == master


def test_exported_master_addr_and_port_win_under_slurm():
    env = slurm_env(_srun(MASTER_ADDR="10.0.0.5", MASTER_PORT="29511"))
    assert (env.master_addr, env.master_port) == ("10.0.0.5", 29511)
    # with both exported, neither the node list nor the job id is needed
    env = slurm_env(_srun(MASTER_ADDR="head", MASTER_PORT="29512", SLURM_JOB_NODELIST=None,
                          SLURM_JOB_ID=None))
    assert (env.master_addr, env.master_port) == ("head", 29512)


def test_slurm_port_from_job_id_is_the_same_for_every_rank():
    envs = [slurm_env(_srun(SLURM_PROCID=str(r), SLURM_LOCALID=str(r % 2), SLURM_JOB_ID="987654"))
            for r in range(4)]
    assert [e.rank for e in envs] == [0, 1, 2, 3]
    assert {(e.master_addr, e.master_port) for e in envs} == {("gpu07", 15000 + 987654 % 20000)}
    assert envs[0].master_port == 22654
    # different jobs get different ports; every one is a valid unprivileged port
    ports = {slurm_env(_srun(SLURM_JOB_ID=str(j))).master_port for j in range(0, 200_000, 7919)}
    assert len(ports) > 20 and all(15000 <= p < 35000 for p in ports)


def test_batch_script_without_a_step_is_not_a_rank():
    batch = _srun(SLURM_PROCID="0", SLURM_LOCALID="0", SLURM_STEP_ID=None,
                  SLURM_STEP_NUM_TASKS=None)
    assert slurm_env(batch) is None
    assert launch_env(batch) is None
    assert slurm_env({}) is None and slurm_env({"SLURM_JOB_ID": "5"}) is None


@pytest.mark.parametrize("overrides,message", [
    (dict(SLURM_NTASKS=None, SLURM_STEP_NUM_TASKS=None), "SLURM_NTASKS is not"),
    (dict(SLURM_JOB_NODELIST=None), "SLURM_JOB_NODELIST"),
    (dict(SLURM_JOB_NODELIST=""), "SLURM_JOB_NODELIST"),
    (dict(SLURM_JOB_ID=None), "SLURM_JOB_ID"),
    (dict(SLURM_PROCID="one"), "SLURM_PROCID='one' must be an integer"),
    (dict(SLURM_STEP_NUM_TASKS="4.0"), "SLURM_STEP_NUM_TASKS='4.0' must be an integer"),
    (dict(SLURM_LOCALID=""), "SLURM_LOCALID='' must be an integer"),
    (dict(SLURM_JOB_ID="job7"), "SLURM_JOB_ID='job7' must be an integer"),
    (dict(MASTER_PORT="http"), "MASTER_PORT='http' must be an integer"),
    (dict(MASTER_PORT="70000"), "MASTER_PORT 70000 is not a TCP port"),
    (dict(SLURM_PROCID="4"), "rank 4 is outside the world of size 4"),
    (dict(SLURM_PROCID="-1"), "rank -1 is outside the world of size 4"),
    (dict(SLURM_STEP_NUM_TASKS="0", SLURM_PROCID="0"), "world size must be >= 1"),
    (dict(SLURM_JOB_NODELIST="gpu[07-09"), "unbalanced '\\['"),
    (dict(SLURM_JOB_NODELIST="gpu07-09]"), "unbalanced '\\]'"),
    (dict(SLURM_JOB_NODELIST="gpu[09-07]"), "range '09-07' runs backwards"),
])
def test_slurm_errors_name_the_problem(overrides, message):
    with pytest.raises(ValueError, match=message):
        slurm_env(_srun(**overrides))


# ---- node lists ----------------------------------------------------------------------------
@pytest.mark.parametrize("nodelist,expected", [
    ("host17", ["host17"]),
    ("a,b,c", ["a", "b", "c"]),
    ("gpu[07-09,12],cpu1", ["gpu07", "gpu08", "gpu09", "gpu12", "cpu1"]),
    ("node[001-004]", ["node001", "node002", "node003", "node004"]),
    ("node[8-11]", ["node8", "node9", "node10", "node11"]),
    ("node[098-101]", ["node098", "node099", "node100", "node101"]),
    ("a[1-2]b[3-4]", ["a1b3", "a1b4", "a2b3", "a2b4"]),
    ("gpu[01-03,07],cpu-a[1-2]-ib", ["gpu01", "gpu02", "gpu03", "gpu07", "cpu-a1-ib",
                                     "cpu-a2-ib"]),
    ("r[1,3]n[0-1],x[5]", ["r1n0", "r1n1", "r3n0", "r3n1", "x5"]),
    (" n[1-2] , m ", ["n1", "n2", "m"]),
    ("n[5-5]", ["n5"]),
])
def test_expand_nodelist(nodelist, expected):
    assert expand_nodelist(nodelist) == expected
    assert first_slurm_host(nodelist) == expected[0]


@pytest.mark.parametrize("nodelist,message", [
    ("", "empty Slurm node list"),
    ("   ", "empty Slurm node list"),
    ("n[1-2", "unbalanced '\\['"),
    ("n1-2],m", "unbalanced '\\]'"),
    ("n[3-1]", "runs backwards"),
    ("n[a-b]", "cannot read the range 'a-b'"),
    ("n[]", "cannot read the range ''"),
    ("n[1-2-3]", "cannot read the range '1-2-3'"),
])
def test_expand_nodelist_errors(nodelist, message):
    with pytest.raises(ValueError, match=message):
        expand_nodelist(nodelist)


# ---- torchrun ------------------------------------------------------------------------------
def _torchrun(**overrides):
    environ = dict(RANK="3", LOCAL_RANK="1", WORLD_SIZE="4", LOCAL_WORLD_SIZE="2",
                   MASTER_ADDR="10.1.2.3", MASTER_PORT="29500")
    environ.update(overrides)
    return {k: v for k, v in environ.items() if v is not None}


def test_torchrun_variables():
    assert launch_env(_torchrun()) == DistEnv(rank=3, local_rank=1, world_size=4,
                                              local_world_size=2, master_addr="10.1.2.3",
                                              master_port=29500, launcher="torchrun")


def test_torchrun_defaults_local_rank_and_local_world_size():
    env = launch_env(_torchrun(LOCAL_RANK=None, LOCAL_WORLD_SIZE=None))
    assert (env.rank, env.local_rank, env.world_size, env.local_world_size) == (3, 3, 4, 4)
    env = launch_env(_torchrun(RANK="1", LOCAL_RANK=None))
    assert (env.local_rank, env.local_world_size) == (1, 2)
    with pytest.raises(ValueError, match="local rank 3 is outside the 2 local processes"):
        launch_env(_torchrun(LOCAL_RANK=None))  # local rank = rank 3, but 2 local ranks


@pytest.mark.parametrize("missing,message", [
    (["MASTER_ADDR"], "MASTER_ADDR is not"),
    (["MASTER_PORT"], "MASTER_PORT is not"),
    (["MASTER_ADDR", "MASTER_PORT"], "MASTER_ADDR and MASTER_PORT are not"),
])
def test_torchrun_without_master_is_an_error(missing, message):
    with pytest.raises(ValueError, match=message):
        launch_env(_torchrun(**{k: None for k in missing}))


@pytest.mark.parametrize("overrides,message", [
    (dict(RANK="4"), "rank 4 is outside the world of size 4"),
    (dict(WORLD_SIZE="four"), "WORLD_SIZE='four' must be an integer"),
    (dict(LOCAL_RANK="2"), "local rank 2 is outside the 2 local processes"),
    (dict(MASTER_PORT="0"), "MASTER_PORT 0 is not a TCP port"),
])
def test_torchrun_errors(overrides, message):
    with pytest.raises(ValueError, match=message):
        launch_env(_torchrun(**overrides))


def test_torchrun_wins_over_slurm():
    both = {**_srun(), **_torchrun()}
    env = launch_env(both)
    assert env.launcher == "torchrun" and (env.rank, env.world_size) == (3, 4)
    assert env.master_addr == "10.1.2.3"
    # a broken Slurm description does not matter when torchrun's variables are there
    assert launch_env({**_srun(SLURM_JOB_NODELIST="gpu[1-"), **_torchrun()}) == env


def test_no_launcher_is_none():
    assert launch_env({}) is None
    assert launch_env({"PATH": "/bin", "SLURM_JOB_ID": "4"}) is None
    assert launch_env({"RANK": "0"}) is None  # WORLD_SIZE missing: not a torchrun rank


def test_single_rank_world_is_returned():
    env = launch_env(_torchrun(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", LOCAL_WORLD_SIZE="1"))
    assert env.world_size == 1 and env.rank == 0


@pytest.mark.parametrize("source", ["torchrun", "slurm"])
def test_export_round_trip(source):
    env = launch_env(_torchrun()) if source == "torchrun" else slurm_env(_srun())
    target = {"UNRELATED": "kept", "RANK": "99"}
    assert env.export(target) is target
    assert target["UNRELATED"] == "kept"
    assert all(isinstance(v, str) for v in target.values())
    again = launch_env(target)
    assert dataclasses.replace(again, launcher=env.launcher) == env
    assert again.launcher == "torchrun"


# ---- backend and port ----------------------------------------------------------------------
def test_choose_backend():
    assert choose_backend(None, uses_cuda=False) == "gloo"
    assert choose_backend(None, uses_cuda=True) == "nccl"
    assert choose_backend("gloo", uses_cuda=False) == "gloo"
    assert choose_backend("gloo", uses_cuda=True) == "gloo"
    with pytest.raises(ValueError, match="nccl backend needs the agent on CUDA.*use gloo"):
        choose_backend("nccl", uses_cuda=False)
    with pytest.raises(ValueError, match="backend must be one of gloo, nccl; got 'mpi'"):
        choose_backend("mpi", uses_cuda=False)
    with pytest.raises(ValueError, match="got 'GLOO'"):
        choose_backend("GLOO", uses_cuda=False)


@pytest.mark.skipif(dist.is_nccl_available(), reason="this PyTorch build has NCCL")
def test_nccl_refused_without_nccl_in_the_build():
    with pytest.raises(ValueError, match="no NCCL; use gloo"):
        choose_backend("nccl", uses_cuda=True)


def test_free_port_is_bindable():
    port = free_port()
    assert 0 < port < 65536
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))
        s.listen(1)


# ---- single process: the collectives are identities ---------------------------------------
def test_collectives_without_a_process_group():
    assert not dist.is_initialized()
    assert not d.is_distributed() and d.world_size() == 1 and d.rank() == 0
    t = torch.tensor([1.0, 2.0])
    assert d.all_reduce_sum(t) is t
    obj = {"a": [1, 2]}
    assert d.gather_objects(obj) == [obj] and d.gather_objects(obj)[0] is obj
    assert d.broadcast_object(obj) is obj
    x = torch.tensor([1.0, 4.0, -2.0, 10.0, 3.0])
    mask = torch.tensor([1.0, 1.0, 1.0, 0.0, 1.0])
    mean, std = d.global_mean_std(x, mask)
    valid = np.array([1.0, 4.0, -2.0, 3.0])
    assert mean.dtype == torch.float32 and std.dtype == torch.float32
    assert float(mean) == pytest.approx(valid.mean()) and float(std) == pytest.approx(valid.std())
    mean, std = d.global_mean_std(x)
    assert float(mean) == pytest.approx(np.mean(x.numpy())) and float(std) == pytest.approx(
        np.std(x.numpy()))
    mean, std = d.global_mean_std(x, torch.zeros(5))  # nothing valid: 0, 0 rather than NaN
    assert float(mean) == 0.0 and float(std) == 0.0
    d.destroy_process_group()  # nothing to leave
    assert not dist.is_initialized()


# ---- two real ranks ------------------------------------------------------------------------
def _run_ranks(scenario, data, world=2):
    """Run ``scenario`` in ``world`` spawned ranks of a gloo group; their results by rank.
    Every child is joined (or killed) before this returns."""
    assert not dist.is_initialized()
    environ_before = {k: os.environ.get(k) for k in _TORCHRUN_VARS}
    ctx = mp.get_context("spawn")
    results_q = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_dist_workers.run_rank,
                         args=(r, world, port, scenario, data, results_q), daemon=True)
             for r in range(world)]
    results, errors = {}, []
    try:
        for p in procs:
            p.start()
        for _ in range(world):
            try:
                rank, status, payload = results_q.get(timeout=RANK_TIMEOUT_S)
            except queue_module.Empty:
                errors.append(f"no result within {RANK_TIMEOUT_S} s; exit codes "
                              f"{[p.exitcode for p in procs]}")
                break
            (results.__setitem__(rank, payload) if status == "ok"
             else errors.append(f"rank {rank}:\n{payload}"))
        for p in procs:
            p.join(timeout=30)
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join(timeout=10)
        results_q.close()
        results_q.join_thread()
    assert not errors, "\n".join(errors)
    assert [p.exitcode for p in procs] == [0] * world
    assert live_children() == []
    assert {k: os.environ.get(k) for k in _TORCHRUN_VARS} == environ_before  # children only
    return results


_TORCHRUN_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                  "MASTER_PORT")


@pytest.fixture(scope="module")
def collective_run():
    rng = np.random.default_rng(1234)
    # Different sizes (and a 2-D one on rank 1) per rank, float32 as the algorithms use.
    x = [rng.normal(3.0, 2.0, size=7).astype(np.float32),
         rng.normal(-1.0, 5.0, size=(3, 4)).astype(np.float32)]
    mask = [np.array([1, 0, 1, 1, 1, 0, 1], np.float32),
            (rng.random((3, 4)) < 0.6).astype(np.float32)]
    mask[1][0, 0] = 1.0  # at least one valid entry on rank 1
    data = {"x": x, "mask": mask}
    return data, _run_ranks("collectives", data)


def test_global_mean_std_pools_the_valid_entries_of_every_rank(collective_run):
    data, results = collective_run
    valid = np.concatenate([xi.ravel()[mi.ravel() > 0].astype(np.float64)
                            for xi, mi in zip(data["x"], data["mask"])])
    everything = np.concatenate([xi.ravel().astype(np.float64) for xi in data["x"]])
    rank0 = data["x"][0][data["mask"][0] > 0].astype(np.float64)
    for rank in (0, 1):
        mean, std, mean_dtype, std_dtype = results[rank]["masked"]
        assert mean_dtype == torch.float32 and std_dtype == torch.float32
        assert mean == pytest.approx(valid.mean(), rel=1e-5)
        assert std == pytest.approx(valid.std(), rel=1e-5)
        mean, std = results[rank]["unmasked"]
        assert mean == pytest.approx(everything.mean(), rel=1e-5)
        assert std == pytest.approx(everything.std(), rel=1e-5)
        mean, std = results[rank]["rank0_only"]
        assert mean == pytest.approx(rank0.mean(), rel=1e-5)
        assert std == pytest.approx(rank0.std(), rel=1e-5)
    # both ranks hold the very same numbers
    assert results[0]["masked"] == results[1]["masked"]
    assert results[0]["unmasked"] == results[1]["unmasked"]


def test_all_reduce_sum_on_two_ranks(collective_run):
    _, results = collective_run
    for rank in (0, 1):
        assert results[rank]["sum"] == [3.0, 30.0, -1.0]
        assert results[rank]["sum_input_unchanged"] and results[rank]["sum_is_new_tensor"]
        assert results[rank]["is_distributed"]
        assert (results[rank]["world_size"], results[rank]["rank"]) == (2, rank)


def test_gather_objects_on_two_ranks(collective_run):
    _, results = collective_run
    assert results[0]["gather0"] == [{"rank": 0, "items": [0, 1]},
                                     {"rank": 1, "items": [0, 1, 2]}]
    assert results[1]["gather0"] is None
    assert results[0]["gather1"] is None
    assert results[1]["gather1"] == ["from rank 0", "from rank 1"]


def test_broadcast_object_on_two_ranks(collective_run):
    _, results = collective_run
    for rank in (0, 1):
        assert results[rank]["bcast0"] == {"sender": 0, "payload": [0, 0, 0]}
        assert results[rank]["bcast1"] == ("tuple", 1)


def test_init_process_group_exports_and_refuses_a_second_group(collective_run):
    _, results = collective_run
    for rank in (0, 1):
        assert "already initialized" in results[rank]["second_init"]
        assert results[rank]["env_exported"] == {"RANK": str(rank), "WORLD_SIZE": "2",
                                                 "LOCAL_RANK": str(rank),
                                                 "MASTER_ADDR": "127.0.0.1"}


def test_running_mean_std_pools_every_rank():
    rng = np.random.default_rng(99)
    shape = (3,)
    batches = [
        [rng.normal([1.0, -2.0, 5.0], [1.0, 3.0, 0.5], size=(5, 3)).astype(np.float32),
         rng.normal(0.0, 2.0, size=(2, 4, 3)).astype(np.float32),
         rng.normal(4.0, 1.0, size=(3, 3)).astype(np.float32)],
        [rng.normal([-3.0, 0.0, 2.0], [2.0, 1.0, 4.0], size=(11, 3)).astype(np.float32),
         rng.normal(1.0, 0.1, size=(1, 3)).astype(np.float32),
         np.zeros((0, 3), np.float32)],  # an empty batch on one rank: still pooled
    ]
    results = _run_ranks("running_mean_std", {"shape": shape, "batches": batches})
    union = np.concatenate([b.reshape(-1, 3).astype(np.float64)
                            for rank_batches in batches for b in rank_batches])
    assert results[0]["count"] == results[1]["count"] == len(union) == 5 + 8 + 3 + 11 + 1
    np.testing.assert_array_equal(results[0]["mean"], results[1]["mean"])
    np.testing.assert_array_equal(results[0]["var"], results[1]["var"])
    np.testing.assert_allclose(results[0]["mean"], union.mean(axis=0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(results[0]["var"], union.var(axis=0), rtol=1e-5, atol=1e-6)
