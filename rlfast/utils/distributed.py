"""torch.distributed for the multi-process runners: where a rank learns who it is, and the
few collectives the runners and algorithms need beyond DistributedDataParallel.

One code path for every launcher. :func:`launch_env` reads the variables that
``torchrun`` (``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``,
``MASTER_ADDR``/``MASTER_PORT``) or Slurm's ``srun`` (``SLURM_PROCID``, ``SLURM_LOCALID``,
``SLURM_NTASKS``, the first host of ``SLURM_JOB_NODELIST``) set; a run that spawns its own
ranks on one machine sets the torchrun names itself. :func:`init_process_group` then
initializes with ``env://`` and a timeout on every collective, so a hung rank becomes an
error instead of a silent hang.

The collectives here are no-ops in a single process (no process group initialized), so
algorithms call them unconditionally.
"""
from __future__ import annotations

import dataclasses
import datetime
import os
import re
import socket
from collections.abc import Mapping
from typing import Any

import torch
import torch.distributed as dist

from rlfast.utils.tensor import valid_mean

__all__ = ["DistEnv", "launch_env", "slurm_env", "first_slurm_host", "expand_nodelist",
           "free_port", "choose_backend", "check_dist_settings", "init_process_group",
           "destroy_process_group",
           "is_distributed", "world_size", "rank", "all_reduce_sum", "global_mean_std",
           "rank_loss_count", "pooled_valid_mean",
           "gather_objects", "broadcast_object", "broadcast_int", "broadcast_",
           "DEFAULT_DIST_TIMEOUT_S",
           "MAX_DIST_TIMEOUT_S", "BACKENDS"]

BACKENDS = ("gloo", "nccl")
# Long enough for rank 0's evaluation while the other ranks wait at the next collective
# (Atari evaluations take minutes); short enough that a hung rank ends the job the same hour.
DEFAULT_DIST_TIMEOUT_S = 1800.0
MAX_DIST_TIMEOUT_S = 1e7  # ~4 months: torch keeps timeouts in integer milliseconds
SLURM_DEFAULT_PORT_BASE = 15_000  # MASTER_PORT under Slurm: base + job id % 20000


@dataclasses.dataclass(frozen=True)
class DistEnv:
    """Who this process is in a distributed run, as its launcher described it."""

    rank: int
    local_rank: int
    world_size: int
    local_world_size: int
    master_addr: str
    master_port: int
    launcher: str  # "torchrun" (or anything setting its variables), "slurm" or "spawn"

    def export(self, environ: dict | None = None) -> dict:
        """Write the torchrun variables (what ``env://`` reads) into ``environ`` (default
        ``os.environ``); returns it."""
        environ = os.environ if environ is None else environ
        environ.update(RANK=str(self.rank), LOCAL_RANK=str(self.local_rank),
                       WORLD_SIZE=str(self.world_size),
                       LOCAL_WORLD_SIZE=str(self.local_world_size),
                       MASTER_ADDR=self.master_addr, MASTER_PORT=str(self.master_port))
        return environ


def _int_var(environ: Mapping[str, str], name: str) -> int:
    value = environ[name]
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"environment variable {name}={value!r} must be an integer") from None


def launch_env(environ: Mapping[str, str] | None = None) -> DistEnv | None:
    """The distributed identity the launcher gave this process, or None when there is none
    (a plain single process).

    torchrun's variables win (``RANK`` and ``WORLD_SIZE`` set, with ``MASTER_ADDR`` /
    ``MASTER_PORT``); otherwise a Slurm step with ``SLURM_PROCID`` (see :func:`slurm_env`).
    A world of size 1 is still returned (the caller may run plainly).
    """
    environ = os.environ if environ is None else environ
    if "RANK" in environ and "WORLD_SIZE" in environ:
        missing = [k for k in ("MASTER_ADDR", "MASTER_PORT") if k not in environ]
        if missing:
            raise ValueError(f"RANK and WORLD_SIZE are set but {' and '.join(missing)} "
                             f"{'is' if len(missing) == 1 else 'are'} not: launch with "
                             f"torchrun, or export MASTER_ADDR and MASTER_PORT")
        world = _int_var(environ, "WORLD_SIZE")
        rank = _int_var(environ, "RANK")
        local_rank = _int_var(environ, "LOCAL_RANK") if "LOCAL_RANK" in environ else rank
        local_world = (_int_var(environ, "LOCAL_WORLD_SIZE") if "LOCAL_WORLD_SIZE" in environ
                       else world)
        env = DistEnv(rank=rank, local_rank=local_rank, world_size=world,
                      local_world_size=local_world, master_addr=environ["MASTER_ADDR"],
                      master_port=_int_var(environ, "MASTER_PORT"), launcher="torchrun")
        _check(env)
        return env
    if "SLURM_PROCID" in environ:
        return slurm_env(environ)
    return None


def _check(env: DistEnv) -> None:
    if env.world_size < 1:
        raise ValueError(f"world size must be >= 1; got {env.world_size}")
    if not 0 <= env.rank < env.world_size:
        raise ValueError(f"rank {env.rank} is outside the world of size {env.world_size}")
    if not 0 <= env.local_rank < max(env.local_world_size, 1):
        raise ValueError(f"local rank {env.local_rank} is outside the {env.local_world_size} "
                         f"local processes")
    if not 0 < env.master_port < 65536:
        raise ValueError(f"MASTER_PORT {env.master_port} is not a TCP port")


def _tasks_on_node(value: str, node: int, name: str) -> int:
    """The task count of node ``node`` in a per-node list such as ``"4(x2),3"`` (nodes 0
    and 1 run 4 tasks, node 2 runs 3); the last entry for a node past the list's end."""
    counts: list[int] = []
    for item in value.split(","):
        match = re.fullmatch(r"\s*(\d+)\s*(?:\(x(\d+)\))?\s*", item)
        if not match:
            raise ValueError(f"cannot read {name}={value!r}")
        counts.extend([int(match.group(1))] * int(match.group(2) or 1))
    if not counts:
        raise ValueError(f"cannot read {name}={value!r}")
    return counts[min(node, len(counts) - 1)]


SLURM_STEP_MARKERS = ("SLURM_STEP_ID", "SLURM_STEPID", "SLURM_STEP_NUM_TASKS")


def slurm_env(environ: Mapping[str, str]) -> DistEnv | None:
    """The identity of one task of an ``srun`` step: ``SLURM_PROCID`` -> rank,
    ``SLURM_LOCALID`` -> local rank, ``SLURM_NTASKS`` -> world size (the step's own
    ``SLURM_STEP_NUM_TASKS`` when set), the tasks per node (``SLURM_STEP_TASKS_PER_NODE``
    or the job's, at this task's ``SLURM_NODEID``) -> local world size, the first host of
    the step's ``SLURM_STEP_NODELIST`` (else ``SLURM_JOB_NODELIST``) -> master address,
    and ``MASTER_PORT`` when exported, else ``15000 + SLURM_JOB_ID % 20000`` (the same in
    every task of the job). ``MASTER_ADDR``,
    when exported, wins over the node list.

    Returns None without ``SLURM_PROCID``, and in the batch script itself (no step
    variable: ``SLURM_STEP_ID``, ``SLURM_STEPID`` or ``SLURM_STEP_NUM_TASKS``), where
    ``SLURM_PROCID=0`` and ``SLURM_NTASKS`` describe the allocation, not ranks started:
    waiting there for the other ranks would hang. Start the ranks with ``srun``.
    """
    if "SLURM_PROCID" not in environ:
        return None
    if not any(k in environ for k in SLURM_STEP_MARKERS):
        return None
    if "SLURM_STEP_NUM_TASKS" in environ:
        world = _int_var(environ, "SLURM_STEP_NUM_TASKS")
    elif "SLURM_NTASKS" in environ:
        world = _int_var(environ, "SLURM_NTASKS")
    else:
        raise ValueError("SLURM_PROCID is set but SLURM_NTASKS is not: start the ranks with "
                         "srun inside an allocation (sbatch / salloc)")
    rank = _int_var(environ, "SLURM_PROCID")
    local_rank = _int_var(environ, "SLURM_LOCALID") if "SLURM_LOCALID" in environ else 0
    node = _int_var(environ, "SLURM_NODEID") if "SLURM_NODEID" in environ else 0
    for name in ("SLURM_STEP_TASKS_PER_NODE", "SLURM_NTASKS_PER_NODE", "SLURM_TASKS_PER_NODE"):
        if name in environ:
            local_world = _tasks_on_node(environ[name], node, name)
            break
    else:
        local_world = 1 if world > 1 else world
    local_world = max(local_world, local_rank + 1)
    if "MASTER_ADDR" in environ:
        addr = environ["MASTER_ADDR"]
    else:
        nodelist = next((environ[k] for k in ("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST",
                                              "SLURM_NODELIST") if environ.get(k)), None)
        if not nodelist:
            raise ValueError("under Slurm, SLURM_JOB_NODELIST (or MASTER_ADDR) is needed to "
                             "find the master host")
        addr = first_slurm_host(nodelist)
    if "MASTER_PORT" in environ:
        port = _int_var(environ, "MASTER_PORT")
    elif "SLURM_JOB_ID" in environ:
        port = SLURM_DEFAULT_PORT_BASE + _int_var(environ, "SLURM_JOB_ID") % 20_000
    else:
        raise ValueError("under Slurm, SLURM_JOB_ID (or MASTER_PORT) is needed to agree on "
                         "a master port")
    env = DistEnv(rank=rank, local_rank=local_rank, world_size=world,
                  local_world_size=local_world, master_addr=addr, master_port=port,
                  launcher="slurm")
    _check(env)
    return env


def _split_top_level(text: str) -> list[str]:
    """Split on commas outside brackets: ``"a[1-2],b"`` -> ``["a[1-2]", "b"]``."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise ValueError(f"unbalanced ']' in Slurm node list {text!r}")
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if depth != 0:
        raise ValueError(f"unbalanced '[' in Slurm node list {text!r}")
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


def _expand_ranges(body: str, nodelist: str) -> list[str]:
    out = []
    for item in body.split(","):
        item = item.strip()
        if re.fullmatch(r"\d+", item):
            out.append(item)
            continue
        match = re.fullmatch(r"(\d+)-(\d+)", item)
        if not match:
            raise ValueError(f"cannot read the range {item!r} in Slurm node list {nodelist!r}")
        lo, hi = match.groups()
        if int(hi) < int(lo):
            raise ValueError(f"range {item!r} runs backwards in Slurm node list {nodelist!r}")
        width = len(lo)  # zero padding, as in node[001-004]
        out.extend(str(n).zfill(width) for n in range(int(lo), int(hi) + 1))
    return out


def expand_nodelist(nodelist: str) -> list[str]:
    """Every host of a Slurm host list, in order (what ``scontrol show hostnames`` prints):
    ``"gpu[01-03,07],cpu-a[1-2]-ib"`` -> ``gpu01 gpu02 gpu03 gpu07 cpu-a1-ib cpu-a2-ib``.
    Several bracket groups in one name multiply out."""
    if not nodelist or not nodelist.strip():
        raise ValueError("empty Slurm node list")
    hosts: list[str] = []
    for part in _split_top_level(nodelist.strip()):
        names = [""]
        for match in re.finditer(r"([^\[\]]+)|\[([^\[\]]*)\]", part):
            literal, ranges = match.groups()
            if literal is not None:
                names = [n + literal for n in names]
            else:
                names = [n + r for n in names for r in _expand_ranges(ranges, nodelist)]
        hosts.extend(names)
    return hosts


def first_slurm_host(nodelist: str) -> str:
    """The first host of a Slurm node list (the master of a multi-node job)."""
    return expand_nodelist(nodelist)[0]


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on ``host`` right now (the OS picks it). Another process may still
    take it before it is bound again; good enough for ranks spawned a moment later."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def choose_backend(backend: str | None, uses_cuda: bool) -> str:
    """``backend`` when given (checked), else NCCL for ranks on CUDA and gloo on CPU."""
    if backend is None:
        return "nccl" if uses_cuda else "gloo"
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)}; got {backend!r}")
    if backend == "nccl" and not uses_cuda:
        raise ValueError("the nccl backend needs the agent on CUDA (an affinity with a GPU, "
                         "on a machine that has one); use gloo on CPU")
    if backend == "nccl" and not dist.is_nccl_available():
        raise ValueError("this PyTorch build has no NCCL; use gloo")
    return backend


def check_dist_settings(backend: str | None, dist_timeout: float, owner: str,
                        on_cuda: bool | None = None) -> tuple[str | None, float]:
    """``(backend, dist_timeout)`` checked at a runner's construction, before any file or
    process: a known backend or None (automatic), NCCL only where the agents will be on CUDA
    (``on_cuda``, when known), and a finite timeout in seconds."""
    if backend is not None and backend not in BACKENDS:
        raise ValueError(f"{owner}: backend must be one of {', '.join(BACKENDS)} or None "
                         f"(automatic); got {backend!r}")
    if backend == "nccl" and on_cuda is not None:
        choose_backend("nccl", on_cuda and torch.cuda.is_available())
    try:
        seconds = float(dist_timeout)
    except (TypeError, ValueError):
        seconds = float("nan")
    if not 0 < seconds < MAX_DIST_TIMEOUT_S:
        raise ValueError(f"{owner}: dist_timeout must be a finite number of seconds > 0 "
                         f"(below {MAX_DIST_TIMEOUT_S:g}); got {dist_timeout!r}")
    return backend, seconds


LAUNCH_VARIABLES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                    "MASTER_PORT")


def init_process_group(env: DistEnv, backend: str,
                       timeout_s: float = DEFAULT_DIST_TIMEOUT_S,
                       keep_environ: bool = True, key_prefix: str | None = None) -> None:
    """Join the run's process group through ``env://`` (the variables of ``env``), with
    ``timeout_s`` on rendezvous and on every collective.

    ``keep_environ=False``: the variables are restored once the group is joined, for a
    process that goes on after the run (a notebook, a test, an async master), where a
    leftover ``RANK`` would make the next run think a launcher started it. A rank process of
    its own keeps them (its environments may read ``RANK``).

    ``key_prefix``: join through the store that the launcher's agent hosts at
    ``MASTER_ADDR:MASTER_PORT``, with every key of the group under this prefix: the agent's
    store outlives a torchrun restart, and without a prefix of its own a restarted rank can
    read the addresses of the ranks that died (pytorch/pytorch#135712).
    """
    if dist.is_initialized():
        raise RuntimeError("torch.distributed is already initialized in this process; one "
                           "distributed run per process")
    previous = {k: os.environ.get(k) for k in LAUNCH_VARIABLES}
    env.export()
    timeout = datetime.timedelta(seconds=float(timeout_s))
    try:
        if key_prefix is None:
            dist.init_process_group(backend=backend, init_method="env://", rank=env.rank,
                                    world_size=env.world_size, timeout=timeout)
        else:
            store = dist.TCPStore(env.master_addr, env.master_port, env.world_size,
                                  is_master=False, timeout=timeout)
            dist.init_process_group(backend=backend, store=dist.PrefixStore(key_prefix, store),
                                    rank=env.rank, world_size=env.world_size, timeout=timeout)
    finally:
        if not keep_environ:
            for key, value in previous.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value


def destroy_process_group() -> None:
    """Leave the process group (if any); safe to call twice."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def is_distributed() -> bool:
    """A process group of more than one rank is initialized."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def world_size() -> int:
    return dist.get_world_size() if is_distributed() else 1


def rank() -> int:
    return dist.get_rank() if is_distributed() else 0


def _reduce_device(tensor: torch.Tensor) -> torch.Tensor:
    # NCCL reduces CUDA tensors only; gloo takes CPU tensors.
    if dist.get_backend() == "nccl" and tensor.device.type != "cuda":
        return tensor.cuda()
    return tensor


def all_reduce_sum(tensor: torch.Tensor) -> torch.Tensor:
    """The element-wise sum of ``tensor`` over every rank (a new tensor; ``tensor`` itself
    in a single process)."""
    if not is_distributed():
        return tensor
    out = _reduce_device(tensor.detach().clone())
    dist.all_reduce(out, op=dist.ReduceOp.SUM)
    return out.to(tensor.device)


def global_mean_std(x: torch.Tensor, mask: torch.Tensor | None = None
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and (population) standard deviation of ``x`` over the entries where ``mask`` is
    nonzero, pooled over every rank: what one process holding the whole batch would compute.

    Two all-reduces in float64: (count, sum), then the sum of squared deviations from the
    global mean (numerically safer than pooling sums of squares). In a single process, the
    same two-pass formula in ``x``'s own dtype, as the algorithms always computed it.
    """
    if not is_distributed():
        valid = torch.ones_like(x) if mask is None else mask.to(x.dtype)
        n = valid.sum().clamp(min=1)
        mean = (x * valid).sum() / n
        return mean, (((x - mean) ** 2 * valid).sum() / n).sqrt()
    x64 = x.detach().to(torch.float64)
    m64 = torch.ones_like(x64) if mask is None else mask.detach().to(torch.float64)
    count_sum = all_reduce_sum(torch.stack([m64.sum(), (x64 * m64).sum()]))
    n = count_sum[0].clamp(min=1.0)
    mean = count_sum[1] / n
    sq = all_reduce_sum((((x64 - mean) ** 2) * m64).sum())
    std = (sq / n).sqrt()
    return mean.to(x.dtype), std.to(x.dtype)


def rank_loss_count(valid: torch.Tensor | None) -> torch.Tensor | None:
    """The count that turns this rank's sum of a loss term into its share of the global
    mean: valid steps over every rank / world size (None in a single process, or without a
    mask). DistributedDataParallel averages the ranks' gradients, so
    ``sum_r grad(S_r / (N / W)) / W = grad(sum_r S_r) / N``: the gradient of the mean over
    the global batch even when the ranks hold different numbers of valid steps."""
    if valid is None or not is_distributed():
        return None
    total = all_reduce_sum(valid.detach().to(torch.float64).sum())
    return (total / dist.get_world_size()).to(valid.device)


def pooled_valid_mean(x: torch.Tensor, valid: torch.Tensor | None,
                      count: torch.Tensor | None) -> torch.Tensor:
    """``valid_mean(x, valid)`` with ``count`` (from :func:`rank_loss_count`) as the
    denominator: this rank's share of the mean over the global batch. ``count`` None: the
    plain local mean."""
    if count is None:
        return valid_mean(x, valid)
    mask = valid.to(x.dtype)
    if mask.dim() < x.dim():
        mask = mask.reshape(tuple(mask.shape) + (1,) * (x.dim() - mask.dim()))
    return (x * mask).sum() / count.to(x.dtype).clamp(min=1.0)


def gather_objects(obj: Any, dst: int = 0) -> list | None:
    """Every rank's ``obj`` (picklable), in rank order, on rank ``dst``; None elsewhere.
    In a single process: ``[obj]``."""
    if not is_distributed():
        return [obj]
    out = [None] * dist.get_world_size() if dist.get_rank() == dst else None
    dist.gather_object(obj, out, dst=dst)
    return out


def broadcast_(tensor: torch.Tensor, src: int = 0) -> torch.Tensor:
    """Overwrite ``tensor`` in place with rank ``src``'s (through the backend's device: a CPU
    tensor travels through CUDA under NCCL). No-op in a single process."""
    if not is_distributed():
        return tensor
    moved = _reduce_device(tensor)
    dist.broadcast(moved, src=src)
    if moved is not tensor:
        tensor.copy_(moved)
    return tensor


def broadcast_int(value: int, src: int = 0) -> int:
    """Rank ``src``'s integer on every rank (one small tensor broadcast; ``value`` itself in
    a single process)."""
    if not is_distributed():
        return int(value)
    box = _reduce_device(torch.tensor([int(value)], dtype=torch.int64))
    dist.broadcast(box, src=src)
    return int(box.item())


def broadcast_object(obj: Any, src: int = 0) -> Any:
    """Rank ``src``'s ``obj`` on every rank (``obj`` itself in a single process)."""
    if not is_distributed():
        return obj
    box = [obj if dist.get_rank() == src else None]
    dist.broadcast_object_list(box, src=src)
    return box[0]
