"""Hardware affinity: divide a machine's CPU cores and GPUs evenly among concurrent runs.

A launcher encodes the machine once (``encode_affinity``), asks how many runs fit
(``get_n_run_slots``) and starts each run with its slot prepended (``prepend_run_slot``);
the run's script turns its code into CPU / GPU assignments (``affinity_from_code``) for the
runner and sampler. Code format (see :mod:`rlfast.utils.affinity_codes`): ``_``-joined
``<integer><abbreviation>`` tokens -- ``slt`` run slot, ``cpu`` physical cores, ``gpu`` GPUs,
``cxg`` runs (contexts) per GPU, ``gpr`` GPUs per run, ``cpr`` cores per run (CPU-only),
``cpw`` cores per sampler worker, ``hto`` hyperthread offset (sibling of core ``c`` is
``c + hto``; 0 = none), ``skt`` sockets, ``res`` cores reserved per GPU, ``ass`` async
sampling, ``sgr`` sampler GPUs per run (async, 0 or 1), ``oss`` optimizer and sampler share a
GPU (async), ``alt`` alternating sampler, ``saf`` set affinity. Examples:

* ``0slt_2cpu_0gpu_0hto`` -- CPU-only, 1 core per run: slot 0 of 2.
* ``1slt_8cpu_2gpu_0hto_1alt`` -- 4 cores per GPU, alternating; slot 1 runs on ``cuda:1``.
* ``0slt_8cpu_4gpu_2gpr_0hto`` -- two 2-GPU runs; the slot decodes to one dict per GPU.

Returned shapes. Synchronous runs with at most one GPU give one ``AttrDict`` with
``all_cpus`` (every cpu id the run may use, hyperthreads included; for ``taskset -c``),
``master_cpus``, ``workers_cpus`` (one list per sampler worker), ``master_torch_threads``
(the number of physical cores in ``master_cpus``: the master works while workers wait),
``worker_torch_threads`` (= ``cpu_per_worker``), ``cuda_idx`` (int or None), ``alternating``
and ``set_affinity``. Multi-GPU synchronous runs (``gpr`` > 1) give a list of such dicts, one
per GPU process. Async runs (``1ass``) give ``AttrDict(all_cpus, set_affinity,
optimizer=[AttrDict(cuda_idx, master_cpus, master_torch_threads, set_affinity), ...],
sampler=AttrDict(<the keys above>))``, one optimizer entry per optimizer GPU (one with
``cuda_idx=None`` in CPU-only async runs); ``all_cpus`` is the union over all processes.

Layout. CPU-only slot ``k`` owns cores ``[k*cpr, (k+1)*cpr)``. With GPUs, GPU ``g`` owns the
``n_cpu_core // n_gpu`` cores from ``g * that``; with contiguous per-socket core numbering this
keeps each GPU's cores on its socket (GPUs and cores are split evenly over ``skt`` sockets).
The first ``res`` cores of a GPU are withheld from sampler workers and added to the master's
cpus (shared by the GPU's contexts); the rest are split evenly over its ``cxg`` contexts. Slot
``k`` uses context ``k % cxg`` of GPU group ``k // cxg`` (``gpr`` GPUs per group). Workers take
``cpw`` cores each plus their hyperthread siblings. Alternating runs get twice the workers, and
worker ``i`` and worker ``i + n/2`` (one in each half, the two groups of the alternating
sampler) share cores: the second half uses the hyperthread siblings when present, else the same
cores again. In async runs each optimizer GPU's first ``res`` cores serve that optimizer
process and every other core of the run's GPUs goes to sampler workers; CPU-only async runs
give the first ``res`` cores of the run to the optimizer. A code that does not divide the
machine raises ValueError.

A code describes the machine it was written for, not the one it runs on: ``validate_affinity``
checks a decoded affinity against this machine's cores and GPUs, and runners call it before
pinning anything, so that ``4cpu`` on a 2-core machine fails at startup instead of running
unpinned.
"""
from __future__ import annotations

import numbers
import os
import threading
from collections.abc import Iterable, Mapping
from typing import Any

import psutil

from rlfast.utils.affinity_codes import (ABBREVIATIONS, DEFAULTS, HardwareSpec, check_value,
                                         format_code, parse_code)
from rlfast.utils.collections import AttrDict
from rlfast.utils.misc import available_cpus

__all__ = ["encode_affinity", "make_affinity", "affinity_from_code", "get_n_run_slots",
           "prepend_run_slot", "detect_hyperthread_offset", "validate_affinity"]


def detect_hyperthread_offset() -> int:
    """Offset of hyperthread ids from their physical cores: the physical core count when the
    machine shows more logical than physical cpus, else 0."""
    logical = psutil.cpu_count(logical=True) or 0
    physical = psutil.cpu_count(logical=False) or 0
    return physical if 0 < physical < logical else 0


def _require_default(spec: HardwareSpec, names: tuple[tuple[str, str], ...],
                     why: str) -> None:
    for abbr, name in names:
        if getattr(spec, name) != DEFAULTS[abbr]:
            raise ValueError(f"{name} ('{abbr}') = {getattr(spec, name)} is not used {why}; "
                             f"leave it at {DEFAULTS[abbr]!r}")


def _n_run_slots(s: HardwareSpec) -> int:
    """Validate the layout of ``s`` and return how many runs it holds."""
    if 0 < s.hyperthread_offset < s.n_cpu_core:
        raise ValueError(f"hyperthread offset {s.hyperthread_offset} ('hto') is below "
                         f"n_cpu_core={s.n_cpu_core}: hyperthread ids would overlap physical "
                         f"cores (n_cpu_core counts physical cores; use 0hto to disable)")
    if s.n_cpu_core % s.n_socket:
        raise ValueError(f"{s.n_cpu_core} cpu cores ('cpu') do not divide evenly over "
                         f"{s.n_socket} sockets ('skt')")
    if not s.async_sample:
        _require_default(s, (("sgr", "sample_gpu_per_run"), ("oss", "optim_sample_share_gpu")),
                         "without async sampling (1ass)")
    if s.n_gpu == 0:
        _require_default(s, (("cxg", "contexts_per_gpu"), ("gpr", "gpu_per_run"),
                             ("sgr", "sample_gpu_per_run"), ("oss", "optim_sample_share_gpu")),
                         "without GPUs")
        if s.n_cpu_core % s.cpu_per_run:
            raise ValueError(f"cpu_per_run={s.cpu_per_run} ('cpr') does not divide "
                             f"n_cpu_core={s.n_cpu_core} ('cpu')")
        per_socket = s.n_cpu_core // s.n_socket
        if per_socket % s.cpu_per_run and s.cpu_per_run % per_socket:
            raise ValueError(f"runs of {s.cpu_per_run} cores ('cpr') would straddle sockets of "
                             f"{per_socket} cores ({s.n_cpu_core}cpu over {s.n_socket}skt)")
        if not s.async_sample and s.cpu_reserved:
            raise ValueError(f"cpu_reserved={s.cpu_reserved} ('res') reserves cores per GPU or "
                             f"for an async optimizer; a CPU-only synchronous run has "
                             f"neither: use 0res")
        _check_sampler_cores(s, s.cpu_per_run, s.cpu_reserved if s.async_sample else 0,
                             f"a run's {s.cpu_per_run} cores ('cpr')")
        return s.n_cpu_core // s.cpu_per_run
    _require_default(s, (("cpr", "cpu_per_run"),), "with GPUs (cores per run follow the GPUs)")
    if s.n_cpu_core % s.n_gpu:
        raise ValueError(f"{s.n_cpu_core} cpu cores ('cpu') do not divide evenly over "
                         f"{s.n_gpu} GPUs ('gpu')")
    if s.n_gpu % s.n_socket:
        raise ValueError(f"{s.n_gpu} GPUs ('gpu') do not divide evenly over {s.n_socket} "
                         f"sockets ('skt')")
    cores_per_gpu = s.n_cpu_core // s.n_gpu
    if s.cpu_reserved >= cores_per_gpu:
        raise ValueError(f"cpu_reserved={s.cpu_reserved} ('res') leaves no sampler core out of "
                         f"the {cores_per_gpu} cores per GPU ({s.n_cpu_core}cpu / {s.n_gpu}gpu)")
    if s.async_sample:
        return s.n_gpu // _check_async_gpus(s, cores_per_gpu)
    if s.n_gpu % s.gpu_per_run:
        raise ValueError(f"gpu_per_run={s.gpu_per_run} ('gpr') does not divide "
                         f"n_gpu={s.n_gpu} ('gpu')")
    free = cores_per_gpu - s.cpu_reserved
    if free % s.contexts_per_gpu:
        raise ValueError(f"the {free} unreserved cores per GPU ({cores_per_gpu} minus "
                         f"{s.cpu_reserved}res) do not divide over {s.contexts_per_gpu} "
                         f"contexts per GPU ('cxg')")
    per_context = free // s.contexts_per_gpu
    _check_sampler_cores(s, per_context, 0, f"the {per_context} cores per context")
    return s.n_gpu // s.gpu_per_run * s.contexts_per_gpu


def _check_async_gpus(s: HardwareSpec, cores_per_gpu: int) -> int:
    """Validate an async GPU layout; return the GPUs one run holds."""
    _require_default(s, (("cxg", "contexts_per_gpu"),), "in async runs (one run per GPU set)")
    if s.sample_gpu_per_run > 1:
        raise ValueError(f"sample_gpu_per_run={s.sample_gpu_per_run} ('sgr'): an async sampler "
                         f"serves actions from one GPU; use 0sgr (CPU agent) or 1sgr")
    if s.optim_sample_share_gpu and s.sample_gpu_per_run == 0:
        raise ValueError("optim_sample_share_gpu (1oss) needs a sampler GPU: use 1sgr")
    run_gpus = s.gpu_per_run + (0 if s.optim_sample_share_gpu else s.sample_gpu_per_run)
    if s.n_gpu % run_gpus:
        raise ValueError(f"the {run_gpus} GPUs of an async run ({s.gpu_per_run}gpr + "
                         f"{s.sample_gpu_per_run}sgr, {int(s.optim_sample_share_gpu)}oss) do "
                         f"not divide n_gpu={s.n_gpu} ('gpu')")
    _check_sampler_cores(s, run_gpus * cores_per_gpu, s.gpu_per_run * s.cpu_reserved,
                         f"the run's {run_gpus * cores_per_gpu} cores")
    return run_gpus


def _check_sampler_cores(s: HardwareSpec, cores: int, reserved: int, what: str) -> None:
    if s.async_sample and s.cpu_reserved < 1:
        raise ValueError("async runs need cpu_reserved >= 1 ('res'): the optimizer process "
                         f"runs on reserved cores; got {s.cpu_reserved}res")
    if reserved >= cores:
        raise ValueError(f"{what} leave no sampler core after reserving {reserved} for the "
                         f"optimizer ({s.cpu_reserved}res)")
    if (cores - reserved) % s.cpu_per_worker:
        raise ValueError(f"{what} ({cores - reserved} for sampler workers) do not divide into "
                         f"workers of cpu_per_worker={s.cpu_per_worker} ('cpw')")


def _with_siblings(cores: list[int], hto: int) -> list[int]:
    return list(cores) + [c + hto for c in cores] if hto else list(cores)


def _workers_cpus(s: HardwareSpec, cores: list[int]) -> list[list[int]]:
    groups = [cores[i:i + s.cpu_per_worker] for i in range(0, len(cores), s.cpu_per_worker)]
    hto = s.hyperthread_offset
    if not s.alternating:
        return [_with_siblings(g, hto) for g in groups]
    second = [[c + hto for c in g] for g in groups] if hto else [list(g) for g in groups]
    return [list(g) for g in groups] + second


def _process(s: HardwareSpec, master_cores: list[int], worker_cores: list[int],
             cuda_idx: int | None) -> AttrDict:
    """The affinity of one sampling process (master plus its workers)."""
    master = _with_siblings(master_cores, s.hyperthread_offset)
    workers = _workers_cpus(s, worker_cores)
    return AttrDict(all_cpus=sorted(set(master).union(*workers)), master_cpus=master,
                    workers_cpus=workers, master_torch_threads=len(master_cores),
                    worker_torch_threads=s.cpu_per_worker, cuda_idx=cuda_idx,
                    alternating=s.alternating, set_affinity=s.set_affinity)


def _gpu_cores(s: HardwareSpec, gpu: int) -> list[int]:
    per_gpu = s.n_cpu_core // s.n_gpu
    return list(range(gpu * per_gpu, (gpu + 1) * per_gpu))


def _sync_layout(s: HardwareSpec, slot: int) -> AttrDict | list[AttrDict]:
    if s.n_gpu == 0:
        cores = list(range(slot * s.cpu_per_run, (slot + 1) * s.cpu_per_run))
        return _process(s, cores, cores, None)
    group, context = divmod(slot, s.contexts_per_gpu)
    per_context = (s.n_cpu_core // s.n_gpu - s.cpu_reserved) // s.contexts_per_gpu
    start = s.cpu_reserved + context * per_context
    procs = []
    for gpu in range(group * s.gpu_per_run, (group + 1) * s.gpu_per_run):
        cores = _gpu_cores(s, gpu)
        workers = cores[start:start + per_context]
        procs.append(_process(s, cores[:s.cpu_reserved] + workers, workers, gpu))
    return procs[0] if s.gpu_per_run == 1 else procs


def _async_layout(s: HardwareSpec, slot: int) -> AttrDict:
    res = s.cpu_reserved
    if s.n_gpu == 0:
        cores = list(range(slot * s.cpu_per_run, (slot + 1) * s.cpu_per_run))
        optim = [(None, cores[:res])]
        sampler_cores, sampler_gpu = cores[res:], None
    else:
        run_gpus = s.gpu_per_run + (0 if s.optim_sample_share_gpu else s.sample_gpu_per_run)
        gpus = list(range(slot * run_gpus, (slot + 1) * run_gpus))
        optim = [(g, _gpu_cores(s, g)[:res]) for g in gpus[:s.gpu_per_run]]
        sampler_cores = [c for g in gpus[:s.gpu_per_run] for c in _gpu_cores(s, g)[res:]]
        sampler_cores += [c for g in gpus[s.gpu_per_run:] for c in _gpu_cores(s, g)]
        sampler_gpu = None
        if s.sample_gpu_per_run:
            sampler_gpu = gpus[0] if s.optim_sample_share_gpu else gpus[s.gpu_per_run]
    optimizer = [AttrDict(cuda_idx=gpu, master_cpus=_with_siblings(cores, s.hyperthread_offset),
                          master_torch_threads=len(cores), set_affinity=s.set_affinity)
                 for gpu, cores in optim]
    sampler = _process(s, sampler_cores, sampler_cores, sampler_gpu)
    all_cpus = sorted(set(sampler.all_cpus).union(*(o.master_cpus for o in optimizer)))
    return AttrDict(all_cpus=all_cpus, set_affinity=s.set_affinity, optimizer=optimizer,
                    sampler=sampler)


def encode_affinity(n_cpu_core: int = 1, n_gpu: int = 0, contexts_per_gpu: int = 1,
                    gpu_per_run: int = 1, cpu_per_run: int = 1, cpu_per_worker: int = 1,
                    cpu_reserved: int = 0, hyperthread_offset: int | None = None,
                    n_socket: int | None = None, run_slot: int | None = None,
                    async_sample: bool = False, sample_gpu_per_run: int = 0,
                    optim_sample_share_gpu: bool = False, alternating: bool = False,
                    set_affinity: bool = True) -> str:
    """Encode the machine (``n_cpu_core`` physical cores, ``n_gpu`` GPUs) and how runs share
    it into a code string, validating that the layout divides the machine evenly.

    ``hyperthread_offset=None`` detects it with psutil (0 disables hyperthreads) and the
    result is always written as ``hto``; ``n_socket=None`` means 1. ``run_slot`` prepends a
    ``slt`` token (leave None for a launcher, which prepends each run's slot itself).
    """
    if hyperthread_offset is None:
        hyperthread_offset = detect_hyperthread_offset()
    kwargs = dict(n_cpu_core=n_cpu_core, n_gpu=n_gpu, contexts_per_gpu=contexts_per_gpu,
                  gpu_per_run=gpu_per_run, cpu_per_run=cpu_per_run,
                  cpu_per_worker=cpu_per_worker, cpu_reserved=cpu_reserved,
                  hyperthread_offset=hyperthread_offset,
                  n_socket=1 if n_socket is None else n_socket, async_sample=async_sample,
                  sample_gpu_per_run=sample_gpu_per_run,
                  optim_sample_share_gpu=optim_sample_share_gpu, alternating=alternating,
                  set_affinity=set_affinity)
    abbr_of = {name: abbr for abbr, name in ABBREVIATIONS.items()}
    spec = HardwareSpec(**{name: check_value(abbr_of[name], value)
                           for name, value in kwargs.items()})
    code = format_code(spec)
    n_slots = _n_run_slots(spec)
    return code if run_slot is None else _with_slot(run_slot, code, n_slots)


def _with_slot(run_slot: int, code: str, n_slots: int) -> str:
    slot = check_value("slt", run_slot)
    if slot >= n_slots:
        raise ValueError(f"run slot {slot} ('slt') is out of range: affinity code {code!r} has "
                         f"{n_slots} run slot(s), 0..{n_slots - 1}")
    rest = [t for t in code.split("_") if not t.endswith("slt")]
    return "_".join([f"{slot}slt"] + rest)


def get_n_run_slots(code: str) -> int:
    """How many concurrent runs the machine described by ``code`` holds (a ``slt`` token, if
    present, is ignored)."""
    return _n_run_slots(parse_code(code))


def prepend_run_slot(run_slot: int, code: str) -> str:
    """Return ``code`` with ``<run_slot>slt`` in front, replacing any slot token it had;
    ValueError if the slot is out of range for the code's layout."""
    return _with_slot(run_slot, code.strip(), _n_run_slots(parse_code(code)))


def affinity_from_code(code: str) -> AttrDict | list[AttrDict]:
    """Decode a slotted code into the affinity of that run (shapes in the module docstring);
    ValueError if the code has no ``slt`` token or the slot is out of range."""
    spec = parse_code(code)
    if spec.run_slot is None:
        raise ValueError(f"affinity code {code!r} has no run slot token ('<k>slt'); add one "
                         f"with prepend_run_slot(k, code)")
    n_slots = _n_run_slots(spec)
    if spec.run_slot >= n_slots:
        raise ValueError(f"run slot {spec.run_slot} ('slt') is out of range: affinity code "
                         f"{code!r} has {n_slots} run slot(s), 0..{n_slots - 1}")
    if spec.async_sample:
        return _async_layout(spec, spec.run_slot)
    return _sync_layout(spec, spec.run_slot)


def make_affinity(run_slot: int = 0, **kwargs: Any) -> AttrDict | list[AttrDict]:
    """The affinity of ``run_slot`` for ``encode_affinity(**kwargs)`` in one call."""
    return affinity_from_code(encode_affinity(run_slot=run_slot, **kwargs))



# ------------------------------------------------------------------------------- validation

_CPU_KEYS = ("all_cpus", "master_cpus")


def _ids(values: Any, what: str) -> list[int]:
    """``values`` as a list of non-negative ints, or ValueError naming the bad entries."""
    values = list(values)
    bad = [v for v in values
           if not isinstance(v, numbers.Integral) or isinstance(v, bool) or v < 0]
    if bad:
        raise ValueError(f"affinity {what} must be non-negative integer ids, got {bad!r}")
    return [int(v) for v in values]


def _used_ids(affinity: Any, pin: bool, cpus: set[int], gpus: set[int]) -> None:
    """Add the cpu ids that ``affinity`` pins (when ``pin`` and its ``set_affinity`` allow)
    and its ``cuda_idx`` values to ``cpus`` and ``gpus``, through every documented shape."""
    if isinstance(affinity, (list, tuple)):
        for entry in affinity:
            _used_ids(entry, pin, cpus, gpus)
        return
    if not isinstance(affinity, Mapping):
        raise TypeError(f"an affinity is a dict or a list of dicts, got "
                        f"{type(affinity).__name__}: {affinity!r}")
    pin = pin and bool(affinity.get("set_affinity", True))
    if pin:
        for key in _CPU_KEYS:
            if affinity.get(key) is not None:
                cpus.update(_ids(affinity[key], key))
        for worker_cpus in affinity.get("workers_cpus") or ():  # A list per worker, or one id.
            if worker_cpus is not None:
                cpus.update(_ids(worker_cpus if isinstance(worker_cpus, (list, tuple))
                                 else [worker_cpus], "workers_cpus"))
    cuda_idx = affinity.get("cuda_idx")
    if cuda_idx is not None:
        gpus.update(_ids([cuda_idx], "cuda_idx"))
    for key in ("optimizer", "sampler"):  # The async shape.
        if affinity.get(key) is not None:
            _used_ids(affinity[key], pin, cpus, gpus)


def _pinnable(cpus: Iterable[int]) -> set[int]:
    """Those of ``cpus`` the OS lets this process run on, found by pinning a short-lived
    thread to each one in turn (Linux affinity is per thread, so the process's own mask is
    untouched). Empty where the OS has no ``sched_setaffinity``."""
    set_affinity = getattr(os, "sched_setaffinity", None)
    if set_affinity is None:
        return set()
    found: set[int] = set()

    def probe() -> None:
        for cpu in cpus:
            try:
                set_affinity(0, {cpu})
            except (OSError, ValueError, OverflowError):
                continue
            found.add(cpu)

    thread = threading.Thread(target=probe, name="rlfast-cpu-probe", daemon=True)
    thread.start()
    thread.join()
    return found


def _format_ids(ids: Iterable[int]) -> str:
    return ", ".join(str(i) for i in sorted(ids))


def _plural(noun: str, items: Any) -> str:
    return noun if len(items) == 1 else noun + "s"


def validate_affinity(affinity: Mapping[str, Any] | list | tuple | None) -> None:
    """Raise ValueError if ``affinity`` uses CPU cores or GPUs that this machine lacks.

    ``affinity`` is any shape ``affinity_from_code`` returns (one dict, a list of dicts for
    multi-GPU runs, or the async dict with ``optimizer`` and ``sampler``), or a hand-written
    dict with some of those keys; None and ``{}`` pass. The cpu ids in ``all_cpus``,
    ``master_cpus`` and ``workers_cpus`` must be cpus this process may run on: those of
    ``os.sched_getaffinity(0)`` (all ``os.cpu_count()`` cpus where the OS has no affinity
    mask), plus any other that the OS accepts when a probe thread is pinned to it, since a
    runner that pinned this process earlier narrowed its mask, not the machine. Cpus are not
    checked where ``set_affinity`` is False (code token ``0saf``): such a run pins nothing.
    Each ``cuda_idx`` must be below ``torch.cuda.device_count()`` whatever ``set_affinity``
    says, because the run puts its model on that GPU either way. The error names every
    missing core and GPU and what the machine has.
    """
    if affinity is None:
        return
    cpus: set[int] = set()
    gpus: set[int] = set()
    _used_ids(affinity, True, cpus, gpus)
    problems = []
    if cpus:
        allowed = set(available_cpus())
        missing = cpus - allowed
        if missing:
            usable = _pinnable(sorted(missing))
            missing -= usable
            allowed |= usable
        if missing:
            problems.append(
                f"{_plural('cpu', missing)} {_format_ids(missing)} "
                f"{'does' if len(missing) == 1 else 'do'} not exist or this process may not "
                f"use {'it' if len(missing) == 1 else 'them'} (it may run on "
                f"{_plural('cpu', allowed)} {_format_ids(allowed)}). Encode the affinity for "
                f"this machine, or add 0saf to the code to run without pinning")
    if gpus:
        import torch

        n_gpu = torch.cuda.device_count()
        missing_gpus = sorted(g for g in gpus if g >= n_gpu)
        if missing_gpus:
            have = (f"{n_gpu} CUDA {'device' if n_gpu == 1 else 'devices'} "
                    f"(cuda:0..cuda:{n_gpu - 1})" if n_gpu
                    else "no CUDA device (torch.cuda.device_count() == 0)")
            problems.append(
                f"{_plural('GPU', missing_gpus)} {', '.join(f'cuda:{g}' for g in missing_gpus)} "
                f"(cuda_idx) {'does' if len(missing_gpus) == 1 else 'do'} not exist: torch "
                f"sees {have}. "
                f"Encode the affinity for this machine's GPUs (0gpu for a CPU-only run)")
    if problems:
        raise ValueError("affinity does not fit this machine: " + "; ".join(problems))
