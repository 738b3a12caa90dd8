"""The learner's device: ``--device auto|cpu|cuda|cuda:N``.

One place decides which device a run's learner computes on, for ``rlfast train``,
``resume``, ``eval``, ``watch`` and ``tune`` alike:

* ``--device`` (:func:`parse_device`, :func:`resolve_device`): ``auto`` (the default) puts
  the learner on GPU 0 when ``torch.cuda.is_available()``, else on the CPU; ``cpu`` forces
  the CPU; ``cuda`` is ``cuda:0`` and ``cuda:N`` GPU N. Asking for a GPU that this process
  cannot use is a ``ValueError`` that names why (torch built without CUDA, no device
  visible, or only K devices), raised while the run is configured.
* An affinity code wins (:func:`learner_device`): with one, the learner's device is the
  code's (its ``cuda_idx``); ``auto`` follows it silently, and an explicit ``--device``
  that contradicts it is a ``ValueError`` naming both. A bare ``cuda`` agrees with any code
  that puts the learner on a GPU. In a multi-rank run every rank takes its own GPU (local
  rank r on ``cuda:r``), so an explicit index is refused there.
* The console's first line (:func:`device_summary`) names the device, the GPU's model, the
  sampler and where a GPU sampler's actions are served.

The sampler a device gets when the user names none, and the cores of each process, are
:mod:`rlfast.experiments.placement`'s. Nothing here initializes CUDA: the runs fork their
workers (and ranks) after this, and a process that touched CUDA before forking cannot give
CUDA to its children.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Mapping, Sequence

import torch

__all__ = ["DEVICE_CHOICES", "DEVICE_HELP", "parse_device", "resolve_device", "device_label",
           "affinity_cuda_indices", "learner_device", "check_no_device", "gpu_name",
           "device_summary"]

DEVICE_CHOICES = "auto, cpu, cuda or cuda:N"
DEVICE_HELP = ("where the learner computes: auto (default: GPU 0 when CUDA is available, "
               "else the CPU), cpu, cuda (= cuda:0) or cuda:N; an --affinity code decides "
               "instead when given")
_DEVICE_PATTERN = re.compile(r"(auto|cpu|cuda)(?::(\d+))?")


def parse_device(device: str | torch.device | None, option: str = "--device"
                 ) -> tuple[str, int | None]:
    """``(kind, index)`` of a ``--device`` value: ``("auto", None)``, ``("cpu", None)``,
    ``("cuda", None)`` for a bare ``cuda`` or ``("cuda", N)`` for ``cuda:N``; None means
    ``auto``. Anything else (``gpu``, ``cpu:1``, ``cuda:-1``) is a ``ValueError`` that names
    the value and the valid choices. Checks the spelling only, not the machine."""
    if device is None:
        return "auto", None
    text = str(device).strip()
    match = _DEVICE_PATTERN.fullmatch(text)
    if match is None or (match.group(2) is not None and match.group(1) != "cuda"):
        raise ValueError(f"{option} {text}: not a device; choose {DEVICE_CHOICES} (N: the "
                         f"index of a GPU, e.g. cuda:1)")
    kind, index = match.group(1), match.group(2)
    return kind, None if index is None else int(index)


def _cuda_unavailable_reason() -> str:
    """Why ``torch.cuda.is_available()`` is False on this machine, in a few words."""
    if torch.version.cuda is None:
        return f"torch {torch.__version__} was built without CUDA"
    return ("no CUDA device is visible (torch.cuda.is_available() is False: no GPU, no "
            "driver, or CUDA_VISIBLE_DEVICES hides them)")


def resolve_device(device: str | torch.device | None = "auto", option: str = "--device"
                   ) -> int | None:
    """The CUDA index that ``device`` puts the learner on, or None for the CPU.

    ``auto`` (or None) is GPU 0 when ``torch.cuda.is_available()``, else the CPU; ``cpu`` is
    the CPU; ``cuda`` is GPU 0 and ``cuda:N`` GPU N. A GPU this process cannot use raises
    ``ValueError("--device cuda: <why>")``: torch built without CUDA, no visible device, or
    an index past ``torch.cuda.device_count()``. CUDA is queried, never initialized.
    """
    kind, index = parse_device(device, option)
    if kind == "cpu":
        return None
    if kind == "auto":
        return 0 if torch.cuda.is_available() else None
    text = str(device).strip()
    if not torch.cuda.is_available():
        raise ValueError(f"{option} {text}: {_cuda_unavailable_reason()}; use --device cpu "
                         f"(or auto)")
    index = 0 if index is None else index
    count = torch.cuda.device_count()
    if index >= count:
        raise ValueError(f"{option} {text}: this machine has only {count} CUDA "
                         f"device{'' if count == 1 else 's'} (cuda:0..cuda:{count - 1})")
    return index


def device_label(cuda_idx: int | None) -> str:
    """``"cpu"`` for None, else ``"cuda:<cuda_idx>"``."""
    return "cpu" if cuda_idx is None else f"cuda:{cuda_idx}"


def affinity_cuda_indices(affinity: Mapping | Sequence | None) -> list[int | None]:
    """The learner ``cuda_idx`` of every process an affinity describes: one for a single
    process dict, one per rank for a list (a ``gpr`` > 1 code), one per optimizer rank for
    an async dict (``optimizer`` and ``sampler``); ``[None]`` for None."""
    if affinity is None:
        return [None]
    if isinstance(affinity, (list, tuple)):
        return [entry.get("cuda_idx") for entry in affinity]
    if "optimizer" in affinity:
        optimizer = affinity["optimizer"]
        optimizer = optimizer if isinstance(optimizer, (list, tuple)) else [optimizer]
        return [entry.get("cuda_idx") for entry in optimizer]
    return [affinity.get("cuda_idx")]


def _where(indices: list[int | None]) -> str:
    if all(i is None for i in indices):
        return "on the CPU"
    labels = [device_label(i) for i in indices]
    if len(labels) == 1:
        return f"on {labels[0]}"
    return f"on {', '.join(labels)} ({len(labels)} ranks)"


def learner_device(device: str | None = "auto", affinity: Mapping | Sequence | None = None,
                   code: str | None = None, multi_rank: bool = False,
                   option: str = "--device") -> int | None:
    """The learner's CUDA index (None: the CPU) from ``--device`` and an affinity, with the
    precedence every command uses.

    With an ``affinity`` (decoded from ``code``, or a hand-made dict) the affinity wins: its
    (first) learner ``cuda_idx`` is returned; ``auto`` follows it silently, while ``cpu``
    against a GPU affinity, ``cuda`` against a CPU-only one, or ``cuda:N`` against one that
    does not put the learner on GPU N alone is a ``ValueError`` naming both. Without one,
    :func:`resolve_device` decides. ``multi_rank``: the run has several ranks, each on its
    own GPU (local rank r on ``cuda:r``), so ``cuda:N`` is refused (``cuda`` and ``auto``
    are the ways to ask for GPUs there).
    """
    kind, index = parse_device(device, option)
    if affinity is not None:
        indices = affinity_cuda_indices(affinity)
        on_gpu = [i is not None for i in indices]
        agrees = (kind == "auto" or (kind == "cpu" and not any(on_gpu))
                  or (kind == "cuda" and index is None and all(on_gpu))
                  or (kind == "cuda" and index is not None and indices == [index]))
        if not agrees:
            source = f"--affinity {code}" if code else "the affinity"
            raise ValueError(f"{option} {str(device).strip()} contradicts {source}, which puts "
                             f"the learner {_where(indices)}; leave --device out (auto "
                             f"follows the affinity code) or change the code")
        return indices[0]
    if multi_rank and kind == "cuda" and index is not None:
        raise ValueError(f"{option} {str(device).strip()}: in a multi-rank run each rank "
                         f"takes its own GPU (local rank r on cuda:r); use --device cuda, "
                         f"or an affinity code to place the ranks")
    return resolve_device(device, option)


def check_no_device(device: str | None, what: str, option: str = "--device") -> None:
    """Refuse a GPU ``--device`` for a run that has no learner on a device (``what`` names
    it, e.g. "an evolution-strategies run"); ``auto`` and ``cpu`` pass."""
    kind, _ = parse_device(device, option)
    if kind == "cuda":
        raise ValueError(f"{option} {str(device).strip()}: {what} has no learner on a "
                         f"device (its candidates play on CPU workers); use --device cpu "
                         f"or auto")


# ---- what the console's first line says --------------------------------------------------------

def gpu_name(cuda_idx: int) -> str | None:
    """The model name of GPU ``cuda_idx`` (``"NVIDIA H200"``), or None when it cannot be told
    without initializing CUDA in this process (which would keep forked workers and ranks
    from using CUDA): torch's name once CUDA is initialized, else nvidia-smi's when every GPU
    has the same model or ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` makes its order CUDA's."""
    if torch.cuda.is_initialized():
        try:
            return torch.cuda.get_device_name(cuda_idx)
        except (RuntimeError, AssertionError):
            return None
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        out = subprocess.run([smi, "--query-gpu=name", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    names = [line.strip() for line in out.stdout.splitlines() if line.strip()]
    if out.returncode != 0 or not names:
        return None
    if len(set(names)) == 1:
        return names[0]
    if os.environ.get("CUDA_DEVICE_ORDER") != "PCI_BUS_ID":
        return None
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    physical = cuda_idx
    if visible is not None:
        entries = [v.strip() for v in visible.split(",") if v.strip()]
        if cuda_idx >= len(entries) or not entries[cuda_idx].isdigit():
            return None
        physical = int(entries[cuda_idx])
    return names[physical] if physical < len(names) else None


def device_summary(affinity: Mapping | Sequence | None, sampler: str,
                   multi_rank: bool = False) -> str:
    """Where a run computes, for its first console line: the learner's device(s), then in
    parentheses the GPU model (one GPU), the sampler and, for the ``gpu`` and
    ``alternating`` samplers, where the actions are served. E.g. ``"cuda:0 (NVIDIA H200;
    sampler gpu, actions served on cuda:0)"``, ``"cpu (sampler cpu)"``. ``affinity`` is the
    run's: one dict, a list of per-rank dicts, or an async dict (``optimizer``, ``sampler``,
    whose sampler process serves the actions); ``multi_rank``: one dict shared by several
    ranks, each of which takes its own GPU."""
    indices = affinity_cuda_indices(affinity)
    details = []
    if all(i is None for i in indices):
        where = "cpu"
    elif multi_rank and len(indices) == 1:
        where = "cuda (one GPU per rank)"
    else:
        where = ", ".join(device_label(i) for i in indices)
        if len(indices) == 1:
            name = gpu_name(indices[0])
            if name:
                details.append(name)
    from rlfast.experiments.catalog import sampler as sampler_spec
    if sampler_spec(sampler).action_server:
        server = indices[0]
        if isinstance(affinity, Mapping) and "optimizer" in affinity:
            server = (affinity.get("sampler") or {}).get("cuda_idx")
        served = ("cuda (one GPU per rank)" if multi_rank and server is not None
                  and len(indices) == 1 else device_label(server))
        details.append(f"sampler {sampler}, actions served on {served}")
    else:
        details.append(f"sampler {sampler}")
    return f"{where} ({'; '.join(details)})"
