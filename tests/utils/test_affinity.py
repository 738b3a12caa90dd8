"""Affinity codes: encoding, decoding into per-slot CPU/GPU layouts, and bad input."""
from __future__ import annotations

import errno
import os
import threading

import psutil
import pytest
import torch

from rlfast.utils.affinity import (affinity_from_code, encode_affinity, get_n_run_slots,
                                   make_affinity, prepend_run_slot, validate_affinity)
from rlfast.utils.affinity_codes import HardwareSpec, format_code, parse_code
from rlfast.utils.collections import AttrDict


def proc(master, workers, cuda_idx=None, mtt=None, wtt=1, alternating=False, all_cpus=None,
         set_affinity=True):
    """Expected affinity of one sampling process, written out by the test."""
    if all_cpus is None:
        all_cpus = sorted(master)
    return dict(all_cpus=all_cpus, master_cpus=master, workers_cpus=workers,
                master_torch_threads=mtt, worker_torch_threads=wtt, cuda_idx=cuda_idx,
                alternating=alternating, set_affinity=set_affinity)


def slots_of(code: str) -> list:
    return [affinity_from_code(prepend_run_slot(k, code)) for k in range(get_n_run_slots(code))]


# ---- CPU-only -------------------------------------------------------------------------------
def test_cpu_only_one_core_per_run():
    code = encode_affinity(n_cpu_core=2, cpu_per_run=1, hyperthread_offset=0)
    assert code == "2cpu_0gpu_0hto"
    assert get_n_run_slots(code) == 2
    got = slots_of(code)
    assert got == [proc([0], [[0]], mtt=1), proc([1], [[1]], mtt=1)]
    assert all(isinstance(a, AttrDict) for a in got)
    assert got[1].cuda_idx is None and got[1].workers_cpus == [[1]]


def test_cpu_only_two_cores_per_run():
    code = encode_affinity(n_cpu_core=8, cpu_per_run=2, hyperthread_offset=0)
    assert code == "8cpu_0gpu_2cpr_0hto"
    assert slots_of(code) == [
        proc([0, 1], [[0], [1]], mtt=2),
        proc([2, 3], [[2], [3]], mtt=2),
        proc([4, 5], [[4], [5]], mtt=2),
        proc([6, 7], [[6], [7]], mtt=2),
    ]


def test_cpu_only_hyperthreads_and_multicore_workers():
    code = encode_affinity(n_cpu_core=8, cpu_per_run=4, cpu_per_worker=2, hyperthread_offset=8)
    assert code == "8cpu_0gpu_4cpr_2cpw_8hto"
    assert slots_of(code) == [
        proc([0, 1, 2, 3, 8, 9, 10, 11], [[0, 1, 8, 9], [2, 3, 10, 11]], mtt=4, wtt=2),
        proc([4, 5, 6, 7, 12, 13, 14, 15], [[4, 5, 12, 13], [6, 7, 14, 15]], mtt=4, wtt=2),
    ]


def test_cpu_only_alternating_lists_each_core_twice():
    code = encode_affinity(n_cpu_core=2, cpu_per_run=2, alternating=True, hyperthread_offset=0)
    assert slots_of(code) == [proc([0, 1], [[0], [1], [0], [1]], mtt=2, alternating=True)]


# ---- one GPU per run ------------------------------------------------------------------------
def test_one_gpu_hyperthreads_off_and_on():
    off = make_affinity(n_cpu_core=4, n_gpu=1, hyperthread_offset=0)
    assert off == proc([0, 1, 2, 3], [[0], [1], [2], [3]], cuda_idx=0, mtt=4)
    on = make_affinity(n_cpu_core=4, n_gpu=1, hyperthread_offset=4)
    assert on == proc([0, 1, 2, 3, 4, 5, 6, 7], [[0, 4], [1, 5], [2, 6], [3, 7]],
                      cuda_idx=0, mtt=4)


def test_two_gpus_one_run_each():
    code = encode_affinity(n_cpu_core=8, n_gpu=2, hyperthread_offset=0)
    assert code == "8cpu_2gpu_0hto"
    assert slots_of(code) == [
        proc([0, 1, 2, 3], [[0], [1], [2], [3]], cuda_idx=0, mtt=4),
        proc([4, 5, 6, 7], [[4], [5], [6], [7]], cuda_idx=1, mtt=4),
    ]


def test_two_contexts_per_gpu():
    code = encode_affinity(n_cpu_core=8, n_gpu=2, contexts_per_gpu=2, hyperthread_offset=0)
    assert code == "8cpu_2gpu_2cxg_0hto"
    assert get_n_run_slots(code) == 4
    assert slots_of(code) == [
        proc([0, 1], [[0], [1]], cuda_idx=0, mtt=2),
        proc([2, 3], [[2], [3]], cuda_idx=0, mtt=2),
        proc([4, 5], [[4], [5]], cuda_idx=1, mtt=2),
        proc([6, 7], [[6], [7]], cuda_idx=1, mtt=2),
    ]


def test_reserved_cores_go_to_master_not_workers():
    code = encode_affinity(n_cpu_core=10, n_gpu=2, contexts_per_gpu=2, cpu_reserved=1,
                           hyperthread_offset=0)
    assert code == "10cpu_2gpu_2cxg_0hto_1res"
    assert slots_of(code) == [
        proc([0, 1, 2], [[1], [2]], cuda_idx=0, mtt=3),
        proc([0, 3, 4], [[3], [4]], cuda_idx=0, mtt=3, all_cpus=[0, 3, 4]),
        proc([5, 6, 7], [[6], [7]], cuda_idx=1, mtt=3),
        proc([5, 8, 9], [[8], [9]], cuda_idx=1, mtt=3, all_cpus=[5, 8, 9]),
    ]


# ---- alternating ----------------------------------------------------------------------------
def test_alternating_without_hyperthreads_lists_cores_twice():
    code = encode_affinity(n_cpu_core=8, n_gpu=2, alternating=True, hyperthread_offset=0)
    assert code == "8cpu_2gpu_0hto_1alt"
    assert slots_of(code) == [
        proc([0, 1, 2, 3], [[0], [1], [2], [3], [0], [1], [2], [3]], cuda_idx=0, mtt=4,
             alternating=True),
        proc([4, 5, 6, 7], [[4], [5], [6], [7], [4], [5], [6], [7]], cuda_idx=1, mtt=4,
             alternating=True),
    ]


def test_alternating_with_hyperthreads_second_group_on_siblings():
    code = encode_affinity(n_cpu_core=8, n_gpu=2, alternating=True, hyperthread_offset=8)
    assert slots_of(code) == [
        proc([0, 1, 2, 3, 8, 9, 10, 11], [[0], [1], [2], [3], [8], [9], [10], [11]],
             cuda_idx=0, mtt=4, alternating=True),
        proc([4, 5, 6, 7, 12, 13, 14, 15], [[4], [5], [6], [7], [12], [13], [14], [15]],
             cuda_idx=1, mtt=4, alternating=True),
    ]
    wide = make_affinity(n_cpu_core=4, n_gpu=1, cpu_per_worker=2, alternating=True,
                         hyperthread_offset=4)
    assert wide.workers_cpus == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert wide.worker_torch_threads == 2


@pytest.mark.parametrize("hto", [0, 16])
def test_alternating_halves_pair_up_on_the_same_physical_core(hto):
    # AlternatingSampler splits workers_cpus into halves [0, n/2) and [n/2, n).
    aff = make_affinity(n_cpu_core=16, n_gpu=2, cpu_per_worker=2, alternating=True,
                        hyperthread_offset=hto)
    workers = aff.workers_cpus
    assert len(workers) % 2 == 0 and len(workers) == 8
    half = len(workers) // 2
    for a, b in zip(workers[:half], workers[half:]):
        assert [c % 16 for c in a] == [c % 16 for c in b]
    assert sorted(c for w in workers[:half] for c in w) == list(range(8))


def test_legacy_rlpyt_code_without_hto_means_no_hyperthreads():
    aff = affinity_from_code("0slt_8cpu_2gpu_1alt")
    assert aff == proc([0, 1, 2, 3], [[0], [1], [2], [3], [0], [1], [2], [3]], cuda_idx=0,
                       mtt=4, alternating=True)
    assert affinity_from_code("1slt_8cpu_2gpu_1alt").cuda_idx == 1
    assert get_n_run_slots("8cpu_2gpu_1alt") == 2


# ---- multi-GPU runs -------------------------------------------------------------------------
def test_multi_gpu_runs_give_one_dict_per_gpu():
    code = encode_affinity(n_cpu_core=8, n_gpu=4, gpu_per_run=2, hyperthread_offset=0)
    assert code == "8cpu_4gpu_2gpr_0hto"
    assert get_n_run_slots(code) == 2
    assert slots_of(code) == [
        [proc([0, 1], [[0], [1]], cuda_idx=0, mtt=2), proc([2, 3], [[2], [3]], cuda_idx=1, mtt=2)],
        [proc([4, 5], [[4], [5]], cuda_idx=2, mtt=2), proc([6, 7], [[6], [7]], cuda_idx=3, mtt=2)],
    ]


def test_multi_gpu_with_hyperthreads():
    aff = make_affinity(run_slot=1, n_cpu_core=8, n_gpu=4, gpu_per_run=2, hyperthread_offset=8)
    assert aff == [proc([4, 5, 12, 13], [[4, 12], [5, 13]], cuda_idx=2, mtt=2),
                   proc([6, 7, 14, 15], [[6, 14], [7, 15]], cuda_idx=3, mtt=2)]


# ---- sockets --------------------------------------------------------------------------------
def test_two_sockets_keep_gpu_cores_on_their_socket():
    code = encode_affinity(n_cpu_core=16, n_gpu=4, n_socket=2, hyperthread_offset=16)
    assert code == "16cpu_4gpu_16hto_2skt"
    got = slots_of(code)
    assert got == [
        proc([0, 1, 2, 3, 16, 17, 18, 19], [[0, 16], [1, 17], [2, 18], [3, 19]], 0, mtt=4),
        proc([4, 5, 6, 7, 20, 21, 22, 23], [[4, 20], [5, 21], [6, 22], [7, 23]], 1, mtt=4),
        proc([8, 9, 10, 11, 24, 25, 26, 27], [[8, 24], [9, 25], [10, 26], [11, 27]], 2, mtt=4),
        proc([12, 13, 14, 15, 28, 29, 30, 31], [[12, 28], [13, 29], [14, 30], [15, 31]], 3,
             mtt=4),
    ]
    # Socket s holds physical cores [8s, 8s+8) and GPUs [2s, 2s+2).
    for aff in got:
        socket = aff.cuda_idx // 2
        assert all(socket * 8 <= c % 16 < socket * 8 + 8 for c in aff.all_cpus)


def test_two_sockets_cpu_only():
    code = encode_affinity(n_cpu_core=12, cpu_per_run=6, n_socket=2, hyperthread_offset=0)
    assert slots_of(code) == [proc([0, 1, 2, 3, 4, 5], [[0], [1], [2], [3], [4], [5]], mtt=6),
                              proc([6, 7, 8, 9, 10, 11], [[6], [7], [8], [9], [10], [11]],
                                   mtt=6)]
    with pytest.raises(ValueError, match="straddle sockets"):
        encode_affinity(n_cpu_core=12, cpu_per_run=4, n_socket=2, hyperthread_offset=0)


# ---- async ----------------------------------------------------------------------------------
def opt(cuda_idx, master, mtt):
    return dict(cuda_idx=cuda_idx, master_cpus=master, master_torch_threads=mtt,
                set_affinity=True)


def test_async_cpu_only():
    code = encode_affinity(n_cpu_core=8, cpu_per_run=4, cpu_reserved=1, async_sample=True,
                           hyperthread_offset=0)
    assert code == "8cpu_0gpu_4cpr_0hto_1res_1ass"
    got = slots_of(code)
    assert got == [
        dict(all_cpus=[0, 1, 2, 3], set_affinity=True, optimizer=[opt(None, [0], 1)],
             sampler=proc([1, 2, 3], [[1], [2], [3]], mtt=3)),
        dict(all_cpus=[4, 5, 6, 7], set_affinity=True, optimizer=[opt(None, [4], 1)],
             sampler=proc([5, 6, 7], [[5], [6], [7]], mtt=3)),
    ]
    assert got[0].sampler.cuda_idx is None and got[1].optimizer[0].master_cpus == [4]


def test_async_separate_sampler_gpu():
    code = encode_affinity(n_cpu_core=8, n_gpu=4, cpu_reserved=1, async_sample=True,
                           sample_gpu_per_run=1, hyperthread_offset=0)
    assert code == "8cpu_4gpu_0hto_1res_1ass_1sgr"
    assert slots_of(code) == [
        dict(all_cpus=[0, 1, 2, 3], set_affinity=True, optimizer=[opt(0, [0], 1)],
             sampler=proc([1, 2, 3], [[1], [2], [3]], cuda_idx=1, mtt=3)),
        dict(all_cpus=[4, 5, 6, 7], set_affinity=True, optimizer=[opt(2, [4], 1)],
             sampler=proc([5, 6, 7], [[5], [6], [7]], cuda_idx=3, mtt=3)),
    ]


def test_async_shared_gpu_with_hyperthreads_and_alternating():
    code = encode_affinity(n_cpu_core=8, n_gpu=2, cpu_reserved=1, async_sample=True,
                           sample_gpu_per_run=1, optim_sample_share_gpu=True, alternating=True,
                           hyperthread_offset=8)
    assert slots_of(code) == [
        dict(all_cpus=[0, 1, 2, 3, 8, 9, 10, 11], set_affinity=True,
             optimizer=[opt(0, [0, 8], 1)],
             sampler=proc([1, 2, 3, 9, 10, 11], [[1], [2], [3], [9], [10], [11]], cuda_idx=0,
                          mtt=3, alternating=True)),
        dict(all_cpus=[4, 5, 6, 7, 12, 13, 14, 15], set_affinity=True,
             optimizer=[opt(1, [4, 12], 1)],
             sampler=proc([5, 6, 7, 13, 14, 15], [[5], [6], [7], [13], [14], [15]], cuda_idx=1,
                          mtt=3, alternating=True)),
    ]


def test_async_two_optimizer_gpus_cpu_sampler():
    aff = make_affinity(n_cpu_core=8, n_gpu=2, gpu_per_run=2, cpu_reserved=1,
                        async_sample=True, set_affinity=False, hyperthread_offset=0)
    no = dict(set_affinity=False)
    assert aff == dict(
        all_cpus=list(range(8)), set_affinity=False,
        optimizer=[dict(opt(0, [0], 1), **no), dict(opt(1, [4], 1), **no)],
        sampler=proc([1, 2, 3, 5, 6, 7], [[1], [2], [3], [5], [6], [7]], mtt=6,
                     set_affinity=False))


# ---- codes: round trips, slots --------------------------------------------------------------
def test_make_affinity_equals_decoding_the_encoded_code():
    kwargs = dict(n_cpu_core=8, n_gpu=2, contexts_per_gpu=2, hyperthread_offset=8)
    for slot in range(4):
        assert make_affinity(run_slot=slot, **kwargs) == affinity_from_code(
            encode_affinity(run_slot=slot, **kwargs))


def test_every_token_round_trips():
    spec = HardwareSpec(n_cpu_core=12, n_gpu=4, contexts_per_gpu=2, gpu_per_run=2,
                        cpu_per_run=3, cpu_per_worker=2, hyperthread_offset=12, n_socket=2,
                        cpu_reserved=1, async_sample=True, sample_gpu_per_run=1,
                        optim_sample_share_gpu=True, alternating=True, set_affinity=False,
                        run_slot=5)
    code = format_code(spec)
    assert code == ("5slt_12cpu_4gpu_2cxg_2gpr_3cpr_2cpw_12hto_2skt_1res_1ass_1sgr_1oss_1alt"
                    "_0saf")
    assert parse_code(code) == spec
    shuffled = "_".join(reversed(code.split("_")))
    assert parse_code(shuffled) == spec


def test_encode_with_run_slot_and_flags():
    code = encode_affinity(n_cpu_core=4, n_gpu=2, run_slot=1, set_affinity=False,
                           hyperthread_offset=0)
    assert code == "1slt_4cpu_2gpu_0hto_0saf"
    aff = affinity_from_code(code)
    assert aff.cuda_idx == 1 and aff.set_affinity is False and aff.master_cpus == [2, 3]


def test_get_n_run_slots_with_and_without_slot():
    assert get_n_run_slots("8cpu_0gpu_2cpr_0hto") == 4
    assert get_n_run_slots("3slt_8cpu_0gpu_2cpr_0hto") == 4
    assert get_n_run_slots("8cpu_4gpu_2gpr") == 2
    assert get_n_run_slots("8cpu_4gpu_1sgr_1res_1ass") == 2


def test_prepend_run_slot_adds_or_replaces():
    assert prepend_run_slot(1, "2cpu_0gpu_0hto") == "1slt_2cpu_0gpu_0hto"
    assert prepend_run_slot(1, "0slt_2cpu_0gpu_0hto") == "1slt_2cpu_0gpu_0hto"
    assert prepend_run_slot(0, "2cpu_1slt_0gpu") == "0slt_2cpu_0gpu"
    with pytest.raises(ValueError, match=r"run slot 2 .* 2 run slot\(s\)"):
        prepend_run_slot(2, "2cpu_0gpu_0hto")
    with pytest.raises(ValueError, match="run_slot"):
        prepend_run_slot(-1, "2cpu_0gpu_0hto")


# ---- hyperthread detection ------------------------------------------------------------------
def fake_cpu_count(logical_n, physical_n):
    def cpu_count(logical=True):
        return logical_n if logical else physical_n
    return cpu_count


@pytest.mark.parametrize("logical_n, physical_n, hto", [(16, 8, 8), (8, 8, 0), (4, None, 0)])
def test_hyperthread_offset_detected_with_psutil(monkeypatch, logical_n, physical_n, hto):
    monkeypatch.setattr(psutil, "cpu_count", fake_cpu_count(logical_n, physical_n))
    assert encode_affinity(n_cpu_core=4, n_gpu=1) == f"4cpu_1gpu_{hto}hto"
    assert encode_affinity(n_cpu_core=4, n_gpu=1, hyperthread_offset=0) == "4cpu_1gpu_0hto"


def test_detected_offset_below_core_count_is_rejected(monkeypatch):
    monkeypatch.setattr(psutil, "cpu_count", fake_cpu_count(16, 8))
    with pytest.raises(ValueError, match=r"hyperthread offset 8 .* n_cpu_core=16"):
        encode_affinity(n_cpu_core=16)


# ---- bad input ------------------------------------------------------------------------------
@pytest.mark.parametrize("code, message", [
    ("0slt_8cpux", r"malformed token '8cpux'"),
    ("0slt_cpu8", r"malformed token 'cpu8'"),
    ("0slt_8c", r"malformed token '8c'"),
    ("0slt_8cpu__2gpu", r"malformed token ''"),
    ("0slt_-1cpu", r"malformed token '-1cpu'"),
    ("0slt_8cpu_8zzz", r"unknown abbreviation 'zzz'.*valid abbreviations: slt \(run_slot\), "
                       r"cpu \(n_cpu_core\)"),
    ("0slt_8cpu_2gpu_4gpu", r"token 'gpu' appears more than once"),
    ("0slt_2gpu", r"lacks the 'cpu' token"),
    ("", r"non-empty string"),
    ("0slt_0cpu", r"n_cpu_core \('cpu'\) must be an integer >= 1; got 0"),
    ("0slt_8cpu_2alt", r"alternating \('alt'\) must be a boolean \(0 or 1\); got 2"),
    ("2slt_2cpu", r"run slot 2 \('slt'\) is out of range.*2 run slot\(s\), 0..1"),
    ("2cpu_0gpu", r"no run slot token.*prepend_run_slot"),
    ("0slt_3cpu_2gpu", r"3 cpu cores \('cpu'\) do not divide evenly over 2 GPUs"),
    ("0slt_8cpu_3cpr", r"cpu_per_run=3 \('cpr'\) does not divide n_cpu_core=8"),
    ("0slt_8cpu_4gpu_3gpr", r"gpu_per_run=3 \('gpr'\) does not divide n_gpu=4"),
    ("0slt_9cpu_2skt", r"9 cpu cores \('cpu'\) do not divide evenly over 2 sockets"),
    ("0slt_8cpu_1gpu_2skt", r"1 GPUs \('gpu'\) do not divide evenly over 2 sockets"),
    ("0slt_8cpu_2gpu_4res", r"cpu_reserved=4 \('res'\) leaves no sampler core out of the 4"),
    ("0slt_8cpu_2gpu_1res_2cxg", r"3 unreserved cores per GPU .* 2 contexts"),
    ("0slt_8cpu_2gpu_2cxg_3cpw", r"2 cores per context .* cpu_per_worker=3 \('cpw'\)"),
    ("0slt_8cpu_4hto", r"hyperthread offset 4 \('hto'\) is below n_cpu_core=8"),
    ("0slt_4cpu_4cpr_1ass", r"async runs need cpu_reserved >= 1"),
    ("0slt_4cpu_4cpr_4res_1ass", r"leave no sampler core"),
    ("0slt_4cpu_2cpr_1res", r"CPU-only synchronous run"),
    ("0slt_8cpu_2cxg", r"contexts_per_gpu \('cxg'\) = 2 is not used without GPUs"),
    ("0slt_8cpu_2gpu_2cpr", r"cpu_per_run \('cpr'\) = 2 is not used with GPUs"),
    ("0slt_8cpu_2gpu_1sgr", r"sample_gpu_per_run \('sgr'\) = 1 is not used without async"),
    ("0slt_4cpu_4cpr_1res_1ass_1sgr", r"sample_gpu_per_run \('sgr'\) = 1 is not used without GPUs"),
    ("0slt_8cpu_4gpu_1res_1ass_2sgr", r"sample_gpu_per_run=2 \('sgr'\)"),
    ("0slt_8cpu_4gpu_1res_1ass_1oss", r"1oss\) needs a sampler GPU"),
    ("0slt_8cpu_3gpu_1res_1ass_1sgr", r"do not divide evenly over 3 GPUs"),
    ("0slt_12cpu_3gpu_1res_1ass_1sgr", r"the 2 GPUs of an async run .* n_gpu=3"),
])
def test_bad_codes_raise_value_error_naming_the_problem(code, message):
    with pytest.raises(ValueError, match=message):
        affinity_from_code(code)


def test_encode_validates_the_layout_and_values():
    with pytest.raises(ValueError, match=r"3 cpu cores \('cpu'\) do not divide evenly over 2"):
        encode_affinity(n_cpu_core=3, n_gpu=2, hyperthread_offset=0)
    with pytest.raises(ValueError, match=r"cpu_per_worker=3"):
        encode_affinity(n_cpu_core=4, n_gpu=1, cpu_per_worker=3, hyperthread_offset=0)
    with pytest.raises(ValueError, match=r"n_cpu_core \('cpu'\) must be an integer; got 2.5"):
        encode_affinity(n_cpu_core=2.5, hyperthread_offset=0)
    with pytest.raises(ValueError, match=r"n_gpu \('gpu'\) must be an integer >= 0; got -1"):
        encode_affinity(n_cpu_core=2, n_gpu=-1, hyperthread_offset=0)
    with pytest.raises(ValueError, match=r"run slot 4 \('slt'\) is out of range"):
        encode_affinity(n_cpu_core=4, run_slot=4, hyperthread_offset=0)
    with pytest.raises(ValueError, match="non-empty string"):
        get_n_run_slots(None)


# ---- validate_affinity: a code checked against the machine it runs on --------------------------
class FakeMachine:
    """Stands in for the OS and CUDA: ``mask`` is the process's affinity mask, ``cpus`` the
    cpus the OS would let a thread pin to, ``n_gpu`` what torch sees. Records the threads that
    tried to pin themselves (nothing is really pinned)."""

    def __init__(self, monkeypatch, mask, cpus=None, n_gpu=0):
        self.mask, self.cpus, self.pinning_threads = set(mask), set(cpus or mask), []
        monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(self.mask), raising=False)
        monkeypatch.setattr(os, "sched_setaffinity", self._set_affinity, raising=False)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: n_gpu)

    def _set_affinity(self, pid, cpus):
        self.pinning_threads.append(threading.get_ident())
        if not set(cpus) <= self.cpus:
            raise OSError(errno.EINVAL, "Invalid argument")


def test_validate_affinity_four_cores_on_a_two_core_machine(monkeypatch):
    FakeMachine(monkeypatch, mask={0, 1})
    with pytest.raises(ValueError, match=r"cpus 2, 3 do not exist .* may run on cpus 0, 1\)"):
        validate_affinity(affinity_from_code("0slt_4cpu_0gpu_0hto_4cpr"))


def test_validate_affinity_slot_on_a_missing_core(monkeypatch):
    FakeMachine(monkeypatch, mask={0, 1})
    validate_affinity(affinity_from_code("1slt_4cpu_0gpu_0hto"))  # core 1 exists
    with pytest.raises(ValueError, match=r"cpu 3 does not exist") as caught:
        validate_affinity(affinity_from_code("3slt_4cpu_0gpu_0hto"))
    assert "GPU" not in str(caught.value)
    with pytest.raises(ValueError, match=r"cpu 2 does not exist"):  # core 0's hyperthread
        validate_affinity(affinity_from_code("0slt_2cpu_0gpu_2hto"))
    with pytest.raises(ValueError, match=r"cpu 5 does not exist"):  # hand-written, one worker
        validate_affinity({"workers_cpus": [[0], 5]})


def test_validate_affinity_missing_gpu_even_without_pinning(monkeypatch):
    FakeMachine(monkeypatch, mask={0, 1}, n_gpu=0)
    for code in ("0slt_2cpu_1gpu_0hto", "0slt_2cpu_1gpu_0hto_0saf"):
        with pytest.raises(ValueError, match=r"GPU cuda:0 \(cuda_idx\) does not exist: torch "
                                             r"sees no CUDA device"):
            validate_affinity(affinity_from_code(code))


def test_validate_affinity_multi_gpu_and_async_shapes(monkeypatch):
    FakeMachine(monkeypatch, mask={0, 1, 2, 3}, n_gpu=1)
    for code in ("0slt_4cpu_2gpu_0hto_2gpr", "0slt_4cpu_2gpu_0hto_1ass_1res_1gpr_1sgr"):
        with pytest.raises(ValueError, match=r"GPU cuda:1 \(cuda_idx\) does not exist: torch "
                                             r"sees 1 CUDA device \(cuda:0..cuda:0\)"):
            validate_affinity(affinity_from_code(code))
    FakeMachine(monkeypatch, mask={0, 1}, n_gpu=2)
    with pytest.raises(ValueError, match=r"cpus 2, 3 do not exist") as caught:
        validate_affinity(affinity_from_code("0slt_4cpu_2gpu_0hto_1ass_1res_1gpr_1sgr"))
    assert "GPU" not in str(caught.value)
    validate_affinity(affinity_from_code("0slt_2cpu_0gpu_0hto_1ass_1res_2cpr"))


def test_validate_affinity_0saf_skips_the_cpu_check(monkeypatch):
    FakeMachine(monkeypatch, mask={0, 1})
    validate_affinity(affinity_from_code("0slt_4cpu_0gpu_0hto_4cpr_0saf"))
    validate_affinity({"master_cpus": [9], "set_affinity": False})


def test_validate_affinity_valid_codes_pass(monkeypatch):
    machine = FakeMachine(monkeypatch, mask={0, 1}, n_gpu=1)
    for code in ("0slt_2cpu_0gpu_0hto", "1slt_2cpu_0gpu_0hto", "0slt_2cpu_0gpu_0hto_2cpr",
                 "0slt_2cpu_1gpu_0hto"):
        validate_affinity(affinity_from_code(code))
    validate_affinity(None)
    validate_affinity({})
    assert machine.pinning_threads == []  # Every cpu was in the mask: nothing to probe.


def test_validate_affinity_accepts_cores_outside_a_narrowed_mask(monkeypatch):
    """A runner pinned this process to core 0 earlier; the next run's core 1 still exists.
    It is probed on another thread, so the process's own mask is not touched."""
    machine = FakeMachine(monkeypatch, mask={0}, cpus={0, 1})
    validate_affinity(affinity_from_code("1slt_2cpu_0gpu_0hto"))
    assert machine.pinning_threads and threading.get_ident() not in machine.pinning_threads
    with pytest.raises(ValueError, match=r"cpu 2 does not exist .* may run on cpus 0, 1\)"):
        validate_affinity({"master_cpus": [1], "workers_cpus": [[2]]})


def test_validate_affinity_rejects_malformed_ids(monkeypatch):
    FakeMachine(monkeypatch, mask={0, 1})
    with pytest.raises(ValueError, match=r"master_cpus must be non-negative integer ids.*-1"):
        validate_affinity({"master_cpus": [0, -1]})
    with pytest.raises(ValueError, match=r"cuda_idx .*'0'"):
        validate_affinity({"cuda_idx": "0"})
    with pytest.raises(TypeError, match="dict or a list of dicts"):
        validate_affinity("0slt_2cpu_0gpu_0hto")


def test_runner_startup_validates_affinity_before_pinning(monkeypatch):
    """MinibatchRl checks its affinity before pinning the master (which used to swallow the
    failure and run unpinned)."""
    from rlfast.runners.master_affinity import MasterAffinity
    FakeMachine(monkeypatch, mask={0, 1})
    pinned = []
    monkeypatch.setattr(psutil.Process, "cpu_affinity", lambda self, cpus=None: pinned.append(cpus))
    master = MasterAffinity(dict(affinity_from_code("0slt_4cpu_0gpu_0hto_4cpr")))
    with pytest.raises(ValueError, match=r"cpus 2, 3 do not exist"):
        master.pin()
    assert pinned == []
