"""PPO's minibatch gradient step as one fixed-shape program: ``algo.compile=True``.

LeanRL's recipe for PPO on a GPU, written here from its description: compile the loss with
``torch.compile`` and capture the whole update (minibatch gather, forward, loss, backward,
gradient clipping, the optimizer step and the diagnostics) in one CUDA graph, with a
capturable fused Adam whose learning rate is a device tensor, so that a gradient step costs
one graph launch instead of hundreds of kernel launches and the host never waits.

A CUDA graph replays fixed device addresses, so the program owns *static* buffers: the
iteration's flattened batch is copied into them once (device to device), each minibatch's
indices are written into a static index tensor, and each step's diagnostics come out in a
static row that the caller copies away. The non-finite guard lives in the graph too: a
static ``failed`` flag (sticky over the call) feeds the fused optimizer's ``found_inf``, which
refuses the step inside its kernel.

:func:`capture_cuda_graph` makes the graph on CUDA; anything that goes wrong while capturing
(an operation that cannot be captured, an optimizer without a capturable step) makes
:class:`StepProgram` fall back to running the same body eagerly, and say why once. On the CPU
the body runs eagerly (compiled where asked): the CPU tests check the data flow through the
static buffers against the plain learner, and the fallback.
"""
from __future__ import annotations

import logging
from typing import Any, Callable

import torch

from rlfast.algos.graph_step import WARMUP_STEPS, capture_cuda_graph, eager_program
from rlfast.algos.graph_step import copy_into as _copy_into
from rlfast.algos.graph_step import static_copy as _static_copy
from rlfast.algos.guarded_steps import step_unless_failed
from rlfast.algos.pg.base import diagnostic_row

__all__ = ["StepProgram", "capture_cuda_graph", "eager_program", "WARMUP_STEPS"]

log = logging.getLogger(__name__)

class StepProgram:
    """One feedforward PPO gradient step over static buffers, replayed per minibatch.

    ``batch``: the iteration's flattened ``LossInputs`` on the device (the shapes every later
    batch will have); ``mb_size``: the fixed minibatch size; ``capture``: turns the body into
    a replay callable (:func:`capture_cuda_graph` on CUDA, :func:`eager_program` otherwise).
    ``path`` says what runs: ``"cuda-graph"``, ``"eager"``, or ``"eager (fallback: why)"``.
    """

    def __init__(self, algo: Any, batch: Any, mb_size: int,
                 capture: Callable[[Callable[[], None]], Callable[[], None]]):
        self.algo = algo
        self.optimizer = algo.optimizer
        device = batch.return_.device
        self.shape = (tuple(batch.return_.shape), mb_size)  # what it was built for
        self.batch = _static_copy(batch)
        self.idx = torch.zeros(mb_size, dtype=torch.long, device=device)
        self.failed = torch.zeros((), dtype=torch.bool, device=device)
        self.found_inf = torch.zeros((), dtype=torch.float32, device=device)
        self.row = torch.zeros(7, dtype=torch.float64, device=device)
        self.loss_fn = algo.compiled_loss
        self.lr = None
        self.path = "eager"
        self.replay = self._build(capture, device)

    # ---- construction ------------------------------------------------------------------------
    def _make_capturable(self, device: torch.device) -> None:
        """Fused optimizers step from device tensors when ``capturable``; the learning rate
        becomes a device tensor the schedule fills (see :meth:`sync_learning_rate`)."""
        self.lr = []
        for group in self.optimizer.param_groups:
            group["capturable"] = True
            lr = torch.tensor(float(group["lr"]), dtype=torch.float32, device=device)
            group["lr"] = lr
            self.lr.append(lr)

    def _build(self, capture: Callable, device: torch.device) -> Callable[[], None]:
        if capture is eager_program:
            return eager_program(self.body)
        saved = [(group.get("capturable", False), group["lr"])
                 for group in self.optimizer.param_groups]
        self._make_capturable(device)
        self.failed.fill_(True)  # warm-up and capture run the body: refuse their steps
        try:
            replay = capture(self.body)
        except Exception as error:  # noqa: BLE001 - any failure to capture means eager
            self._restore_eager(saved)
            self.path = f"eager (fallback: {type(error).__name__}: {error})"
            log.warning("PPO compile: the gradient step could not be captured in a CUDA "
                        "graph (%s: %s); it runs eagerly", type(error).__name__, error)
            return eager_program(self.body)
        self.path = "cuda-graph"
        return replay

    def _restore_eager(self, saved: list) -> None:
        for group, (capturable, lr) in zip(self.optimizer.param_groups, saved):
            group["capturable"] = capturable
            group["lr"] = lr
        self.lr = None

    # ---- running -----------------------------------------------------------------------------
    def body(self) -> None:
        """The step: gather, loss, backward, clip, guarded step, diagnostics row (static
        tensors only; no host read)."""
        algo = self.algo
        loss, info = self.loss_fn(*self.batch[self.idx])
        self.optimizer.zero_grad(set_to_none=False)  # gradients keep their addresses
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(algo.agent.parameters(), algo.clip_grad_norm)
        finite = torch.isfinite(loss.detach()) & torch.isfinite(grad_norm)
        step_unless_failed(self.optimizer, self.failed, finite, self.found_inf)
        self.row.copy_(diagnostic_row(loss, grad_norm, info.entropy, info.perplexity,
                                      info.approxKl, info.clipFrac, finite))

    def load(self, batch: Any) -> None:
        """Start an ``optimize_agent`` call: this iteration's batch into the static buffers,
        no step failed yet, and the schedule's learning rate into the device tensors."""
        _copy_into(self.batch, batch, "StepProgram")
        self.failed.fill_(False)
        self.sync_learning_rate()

    def sync_learning_rate(self) -> None:
        """A scheduler that assigned a float (rather than filling the tensor, as torch >=
        2.5 does) is written back into the device tensor the graph reads."""
        if self.lr is None:
            return
        for group, lr in zip(self.optimizer.param_groups, self.lr):
            if group["lr"] is not lr:
                lr.fill_(float(group["lr"]))
                group["lr"] = lr

    def step(self, idxs: torch.Tensor) -> torch.Tensor:
        """One gradient step on the minibatch ``idxs`` (of the static size); returns its
        diagnostics row (a new device tensor: loss, gradNorm, entropy, perplexity,
        approxKl, clipFrac, finite)."""
        self.idx.copy_(idxs)
        self.replay()
        return self.row.clone()
