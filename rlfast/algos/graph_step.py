"""A replay learner's gradient step as one fixed-shape program: ``algo.compile=True``.

LeanRL's recipe, written here from its description: compile the loss with ``torch.compile`` and
capture the whole update (forward, loss, backward, gradient clipping, the fused optimizer's
step, the diagnostics and the new priorities) in one CUDA graph, with a capturable fused Adam
whose learning rates are device tensors, so that an update of DQN at batch 32 or of SAC at
batch 256 costs one graph launch instead of hundreds of kernel launches, and the host never
waits. The replay's batch (from a device replay, or a prefetcher) is copied into the program's
static buffers (device to device) before each replay of the graph.

The non-finite guard lives in the graph: a static ``failed`` flag, sticky over an
``optimize_agent`` call, feeds the optimizer's ``found_inf``, which refuses the step inside its
kernel; :class:`~rlfast.algos.guarded_steps.GuardedSteps` reads the rows once per call and
raises for the first bad step.

:func:`capture_cuda_graph` makes the graph on CUDA. Anything that goes wrong while capturing
(an operation that cannot be captured, an optimizer without a capturable step) makes
:class:`GraphStep` fall back to running the same body eagerly, and say why once. On the CPU the
body runs eagerly: the CPU tests check the data flow through the static buffers against the
plain learner, and the fallback. PPO and A2C use it too: their step's input is a minibatch's
indices into the iteration's batch, copied into static buffers once per call.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import torch

from rlfast.algos.guarded_steps import as_row, stack_scalars, step_unless_failed

__all__ = ["GraphStep", "capture_cuda_graph", "eager_program", "static_copy", "copy_into",
           "CapturableRates", "capture_for", "check_compile", "WARMUP_STEPS"]

log = logging.getLogger(__name__)

WARMUP_STEPS = 3  # eager runs on a side stream before capture, as torch's graph docs require


def check_compile(compile: Any, owner: str) -> bool:
    """``compile`` must be True or False (a string from a config file is refused by name)."""
    if not isinstance(compile, bool):
        raise TypeError(f"{owner}: compile must be True or False; got {compile!r}")
    return compile


def eager_program(body: Callable[[], None]) -> Callable[[], None]:
    """The body itself: each replay runs it (the CPU, and the fallback)."""
    return body


def capture_cuda_graph(body: Callable[[], None]) -> Callable[[], None]:
    """Warm ``body`` up on a side stream, capture one run of it in a ``torch.cuda.CUDAGraph``
    and return the graph's ``replay``. ``body`` must only touch static tensors."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(WARMUP_STEPS):
            body()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        body()
    return graph.replay


def capture_for(device: torch.device, override: Callable | None = None) -> Callable:
    """How to turn a body into a program on ``device``: ``override`` when given (tests), a
    CUDA graph on CUDA, else the eager body."""
    if override is not None:
        return override
    return capture_cuda_graph if torch.device(device).type == "cuda" else eager_program


def static_copy(batch: Any) -> Any:
    """Fresh tensors holding ``batch`` (a nested namedarraytuple of tensors, or None)."""
    if batch is None:
        return None
    if isinstance(batch, torch.Tensor):
        return batch.clone()
    return type(batch)(*(static_copy(field) for field in batch))


def copy_into(dest: Any, src: Any, owner: str = "program") -> None:
    """Copy ``src`` into the static tensors ``dest`` of the same structure and shapes."""
    if dest is None:
        return
    if isinstance(dest, torch.Tensor):
        if dest.shape != src.shape:
            raise ValueError(f"{owner}: the batch changed shape ({tuple(dest.shape)} -> "
                             f"{tuple(src.shape)}); build a new program")
        dest.copy_(src, non_blocking=True)
        return
    for d, s in zip(dest, src):
        copy_into(d, s, owner)


class CapturableRates:
    """A fused optimizer made ``capturable``, its learning rates device tensors (a graph reads
    them at replay time), and back. :meth:`sync` writes back a rate a schedule assigned as a
    float."""

    def __init__(self, optimizer: torch.optim.Optimizer, device: torch.device):
        self.optimizer = optimizer
        self.saved = [(group.get("capturable", False), group["lr"])
                      for group in optimizer.param_groups]
        self.rates = []
        for group in optimizer.param_groups:
            group["capturable"] = True
            rate = torch.tensor(float(group["lr"]), dtype=torch.float32, device=device)
            group["lr"] = rate
            self.rates.append(rate)

    def sync(self) -> None:
        """Rates assigned as floats since (a scheduler) go into the device tensors."""
        for group, rate in zip(self.optimizer.param_groups, self.rates):
            if group["lr"] is not rate:
                rate.fill_(float(group["lr"]))
                group["lr"] = rate

    def restore(self) -> None:
        """The optimizer as it was (plain float rates, not capturable)."""
        for group, (capturable, lr) in zip(self.optimizer.param_groups, self.saved):
            group["capturable"] = capturable
            group["lr"] = float(lr) if isinstance(lr, torch.Tensor) else lr


class GraphStep:
    """One replay gradient step over static buffers, replayed for every update.

    ``terms(batch)`` runs forward, loss and backward and clips the gradients (with
    ``zero_grad(set_to_none=False)`` first, so the gradients keep their addresses); it
    returns ``(scalars, extra, priorities)``: named 0-d diagnostics (losses, gradient norms),
    a 1-d tensor of further diagnostics, and the per-sample priorities (or None). ``checked``
    names the scalars that must be finite for the step to be taken. ``batch``: a first batch
    (the shapes every later one will have): a replayed batch, or a policy-gradient
    minibatch's indices into a batch the caller keeps in static buffers itself (None when
    the step takes that whole batch; ``device`` then says where the program runs).
    ``capture``: :func:`capture_for`'s choice. ``path`` says what runs: ``"cuda-graph"``,
    ``"eager"`` or ``"eager (fallback: why)"``.
    """

    def __init__(self, optimizer: torch.optim.Optimizer, terms: Callable, checked: Sequence[str],
                 batch: Any, capture: Callable, owner: str = "compile",
                 device: torch.device | None = None):
        self.optimizer, self.terms, self.owner = optimizer, terms, owner
        self.checked = tuple(checked)
        device = _first_tensor(batch).device if device is None else torch.device(device)
        self.batch = static_copy(batch)
        self.failed = torch.zeros((), dtype=torch.bool, device=device)
        self.found_inf = torch.zeros((), dtype=torch.float32, device=device)
        self.names: tuple = ()
        self.row: torch.Tensor | None = None
        self.priorities: torch.Tensor | None = None
        self.n_extra = 0
        self.rates: CapturableRates | None = None
        self.path = "eager"
        self.replay = self._build(capture, device)

    def _build(self, capture: Callable, device: torch.device) -> Callable[[], None]:
        if capture is eager_program:
            return eager_program(self.body)
        self.rates = CapturableRates(self.optimizer, device)
        self.failed.fill_(True)  # warm-up and capture run the body: refuse their steps
        try:
            replay = capture(self.body)
        except Exception as error:  # noqa: BLE001 - any failure to capture means eager
            self.rates.restore()
            self.rates = None
            self.path = f"eager (fallback: {type(error).__name__}: {error})"
            log.warning("%s: the gradient step could not be captured in a CUDA graph (%s: %s); "
                        "it runs eagerly", self.owner, type(error).__name__, error)
            return eager_program(self.body)
        self.path = "cuda-graph"
        return replay

    def body(self) -> None:
        """The step (static tensors only, no host read): terms, guarded step, outputs."""
        scalars, extra, priorities = self.terms(self.batch)
        names = tuple(scalars)
        head = stack_scalars(scalars.values())
        finite = torch.isfinite(torch.stack([head[names.index(n)] for n in self.checked]).sum())
        step_unless_failed(self.optimizer, self.failed, finite, self.found_inf)
        parts = [head, finite.to(torch.float64).reshape(1)]
        if extra is not None:
            parts.append(as_row(extra))
        row = torch.cat(parts)
        if self.row is None:  # the first (eager or warm-up) run sizes the outputs
            self.names, self.n_extra = names, row.numel() - len(names) - 1
            self.row = torch.zeros_like(row)
            if priorities is not None:
                self.priorities = torch.zeros_like(priorities.detach())
        self.row.copy_(row)
        if priorities is not None:
            self.priorities.copy_(priorities.detach())

    def begin(self) -> None:
        """Start an ``optimize_agent`` call: no step failed yet; scheduled rates in place."""
        self.failed.fill_(False)
        if self.rates is not None:
            self.rates.sync()

    def step(self, batch: Any) -> tuple[tuple, torch.Tensor, torch.Tensor | None]:
        """One gradient step on ``batch``: ``(names, row, priorities)``, the row (scalars,
        finite flag, extra diagnostics) and priorities as new device tensors."""
        copy_into(self.batch, batch, self.owner)
        self.replay()
        priorities = None if self.priorities is None else self.priorities.clone()
        return self.names, self.row.clone(), priorities


def _first_tensor(batch: Any) -> torch.Tensor:
    if isinstance(batch, torch.Tensor):
        return batch
    for field in batch:
        if field is not None:
            found = _first_tensor(field)
            if found is not None:
                return found
    raise ValueError("the batch holds no tensor")
