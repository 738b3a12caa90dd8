"""``rlfast export RUN_DIR --format onnx|torchscript``: a trained policy as one graph file.

The run's agent is rebuilt and loaded as ``rlfast eval`` does (:func:`load_trained_agent`),
on the CPU, and its evaluation-mode policy (:class:`rlfast.agents.export_policy.PolicyGraph`)
is written as one self-contained graph: observations in (uint8 frames or float vectors, as
the environment gives them; the model's observation normalization is inside), actions out.
A recurrent policy takes ``prev_action``, ``prev_reward`` and its state (``state_<field>``,
``[N, B, H]``, zeros at an episode start) and returns ``next_state_<field>``.

ONNX files go through ``torch.onnx.export`` (the ``onnx`` package: ``pip install
'rlfast[export]'``) with a dynamic batch dimension and are then checked with onnxruntime,
when it is installed, against the PyTorch policy on a batch of the environment's own
observations. TorchScript files come from ``torch.jit.trace`` and are checked the same way
after loading them back; ``torch::jit::load`` runs them from C++.

An export prints only its result line: the exporter's log lines about optional operator
libraries (torchvision's detection operators, which a policy never uses) and torch's
deprecation notices about its own internals are dropped around the export call, while its
other warnings and every error still show. The output file's directory is checked before
any work, and a failed export leaves no partial file behind.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import os
import sys
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from rlfast.envs.policy_file import POLICY_INFO_FILE

__all__ = ["FORMATS", "export_policy", "record_observations", "add_export_parser",
           "export_main"]

FORMATS = ("onnx", "torchscript")
_SUFFIX = {"onnx": ".onnx", "torchscript": ".pt"}
_CHECK_ATOL = 1e-5


class ExportFailed(RuntimeError):
    """The written file does not reproduce the PyTorch policy."""


def record_observations(agent: Any, make_env: Any, n: int, seed: int = 0) -> torch.Tensor:
    """``n`` observations ``[n, ...]`` of the run's environment, visited by the agent itself
    in evaluation mode (a feed-forward walk; resets on ``done``)."""
    env = make_env(seed=seed)
    try:
        obs = env.reset()
        seen = []
        agent.eval_mode(1)  # itr 0 would be a DQN agent's random pre-training evaluation
        agent.reset()
        space = env.spaces.action
        prev_action = torch.as_tensor(np.asarray(space.null_value()))[None]
        prev_reward = torch.zeros(1)
        for _ in range(n):
            seen.append(torch.as_tensor(np.asarray(obs)))
            step = agent.step(torch.as_tensor(np.asarray(obs))[None], prev_action, prev_reward)
            action = step.action[0].numpy()
            obs, reward, done, _ = env.step(action)
            prev_action, prev_reward = step.action, torch.tensor([float(reward)])
            if done:
                obs = env.reset()
                agent.reset()
                prev_action = torch.as_tensor(np.asarray(space.null_value()))[None]
                prev_reward = torch.zeros(1)
        return torch.stack(seen)
    finally:
        env.close()


# Log lines torch.onnx's exporter writes at every export and that say nothing about this
# export: (logger, message start). It registers torchvision's detection operators (nms,
# roi_align, roi_pool, deform_conv2d) and warns once per operator when torchvision is absent.
_HARMLESS_EXPORT_LOGS = (
    ("torch.onnx._internal.exporter._registration", "torchvision is not installed"),
)
# Warnings (UserWarning; regular expressions matched at the message's start) every export of
# a recurrent policy draws, about what the exporter does by design: torch.export sees an RNN
# module (re)assign its flattened weight list while tracing, and the inputs that share the
# one "batch" dimension (observation, previous action and reward, state) leave its name
# unused on all but one axis. The written file is checked against the policy either way.
_HARMLESS_EXPORT_WARNINGS = (
    r"The tensor attributes (?:[\w.]+\._flat_weights\[\d+\](?:, )?)+ were assigned during "
    r"export",
    r"# The axis name: batch will not be used, since it shares the same shape constraints "
    r"with another axis: batch",
)


class _DropMessages(logging.Filter):
    """Drops a logger's records whose message starts with ``prefix``; passes the others."""

    def __init__(self, prefix: str):
        super().__init__()
        self.prefix = prefix

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(self.prefix)


@contextlib.contextmanager
def _quiet_onnx_exporter() -> Iterator[io.StringIO]:
    """Around ``torch.onnx.export`` only: drop :data:`_HARMLESS_EXPORT_LOGS`,
    :data:`_HARMLESS_EXPORT_WARNINGS`, torch's ``FutureWarning`` and ``DeprecationWarning``
    notices (about torch's internal use of its own APIs, which no caller can act on) and
    the exporter's progress lines on stdout
    (yielded; re-printed on stderr when the export raises, as the error's context). Other
    warnings, log lines and the error itself pass."""
    filters = [(logging.getLogger(name), _DropMessages(prefix))
               for name, prefix in _HARMLESS_EXPORT_LOGS]
    for log, drop in filters:
        log.addFilter(drop)
    captured = io.StringIO()
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(captured):
            warnings.simplefilter("ignore", FutureWarning)
            warnings.simplefilter("ignore", DeprecationWarning)
            for message in _HARMLESS_EXPORT_WARNINGS:
                warnings.filterwarnings("ignore", message=message, category=UserWarning)
            yield captured
    except BaseException:
        if captured.getvalue():
            sys.stderr.write(captured.getvalue())
        raise
    finally:
        for log, drop in filters:
            log.removeFilter(drop)


def _write_onnx(graph: Any, inputs: tuple, path: str) -> None:
    try:
        import onnx  # noqa: F401  (the exporter needs it)
    except ImportError as e:
        raise ImportError(f"--format onnx needs the onnx package ({e}): pip install "
                          f"'rlfast[export]'") from None
    batch = torch.export.Dim("batch")
    dims = [{1: batch} if name.startswith("state_") else {0: batch} for name in graph.input_names]
    dynamic = (dims[0], tuple(dims[1:])) if len(dims) > 1 else (dims[0],)  # (observation, *rest)
    graph.eval()  # the agent's model is in eval mode already; this is the wrapper's flag
    with _quiet_onnx_exporter():
        program = torch.onnx.export(graph, inputs, None, input_names=graph.input_names,
                                    output_names=graph.output_names, dynamo=True,
                                    dynamic_shapes=dynamic, verbose=False)
        program.save(path)


def _write_torchscript(graph: Any, inputs: tuple, path: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = torch.jit.trace(graph, inputs, check_trace=False, strict=False)
    info = getattr(graph, "rlfast_info", None)  # what a fixed opponent checks (envs.opponents)
    extra = {} if info is None else {POLICY_INFO_FILE: json.dumps(info)}
    traced.save(path, _extra_files=extra)


def policy_info(params: dict, graph: Any) -> dict:
    """The record a TorchScript policy file carries (``rlfast.json``): the run's env id, the
    players it learned as (``learners``: None when it trained every player, ``[]`` for a
    ``pz:`` game's first player) and whether the graph is recurrent."""
    env = params.get("config", {}).get("env", {}) or {}
    learners = None
    if env.get("opponent") is not None:
        chosen = env.get("learners")
        learners = [] if chosen is None else [chosen] if isinstance(chosen, str) else chosen
    return dict(env=params.get("env"), algo=params.get("algo"), learners=learners,
                recurrent=bool(graph.recurrent))


def _run_file(fmt: str, path: str, inputs: tuple, input_names: list) -> list | None:
    """The file's outputs on ``inputs`` (numpy arrays), None when onnxruntime is missing."""
    if fmt == "torchscript":
        loaded = torch.jit.load(path)
        with torch.no_grad():
            out = loaded(*inputs)
        return [o.numpy() for o in (out if isinstance(out, tuple) else (out,))]
    try:
        import onnxruntime
    except ImportError:
        return None
    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    feed = {name: x.numpy() for name, x in zip(input_names, inputs)}
    return session.run(None, feed)


def check_exported(graph: Any, fmt: str, path: str, observations: torch.Tensor,
                   name: str | None = None) -> bool:
    """Compare the file with the PyTorch policy on ``observations``: integer outputs equal,
    float outputs within 1e-5 (absolute and relative). Returns False when there was nothing
    to check with (onnxruntime missing); raises :class:`ExportFailed` on a mismatch, naming
    the file ``name`` (default ``path``: a file written under a temporary name is named as
    the user knows it)."""
    inputs = graph.example_inputs(observations)
    shown = path if name is None else name
    got = _run_file(fmt, path, inputs, graph.input_names)
    if got is None:
        return False
    with torch.no_grad():
        want = [w.numpy() for w in graph(*inputs)]
    for name, w, g in zip(graph.output_names, want, got):
        if w.shape != g.shape:
            raise ExportFailed(f"{shown}: output {name} has shape {g.shape}, the policy's "
                               f"{w.shape}")
        if np.issubdtype(w.dtype, np.integer):
            if not np.array_equal(w, g):
                raise ExportFailed(f"{shown}: {int((w != g).sum())} of {w.size} actions differ "
                                   f"from the PyTorch policy's")
        elif not np.allclose(w, g, atol=_CHECK_ATOL, rtol=_CHECK_ATOL):
            raise ExportFailed(f"{shown}: output {name} differs from the policy's by up to "
                               f"{float(np.abs(w - g).max()):.3g}")
    return True


def export_policy(run_dir: str | os.PathLike, fmt: str = "onnx", output: str | None = None,
                  snapshot: str | None = None, stochastic: bool = False,
                  check_observations: int = 256) -> tuple[str, bool]:
    """Write the run's policy as ``fmt`` to ``output`` (default ``RUN_DIR/policy.onnx`` or
    ``policy.pt``); returns ``(path, checked)``: checked is True when the written file was
    run (onnxruntime, or torch.jit.load) and matched the PyTorch policy on
    ``check_observations`` recorded observations."""
    from rlfast.agents.export_policy import PolicyGraph
    from rlfast.experiments.playback import load_trained_agent

    if fmt not in FORMATS:
        raise ValueError(f"--format must be one of {', '.join(FORMATS)}; got {fmt!r}")
    if output is not None:  # before the seconds of loading, recording and exporting
        _check_output_path(output)
    params, agent, make_env = load_trained_agent(run_dir, _snapshot_path(run_dir, snapshot),
                                                 device="cpu")
    if params.get("es"):
        raise ValueError("evolution-strategies runs have no agent graph to export")
    path = output or os.path.join(os.fspath(run_dir), "policy" + _SUFFIX[fmt])
    _check_output_path(path)
    graph = PolicyGraph(agent, stochastic=stochastic)
    graph.rlfast_info = policy_info(params, graph)
    observations = record_observations(agent, make_env, max(2, check_observations))
    agent.eval_mode(1)
    tmp = path + ".tmp"
    inputs = graph.example_inputs(observations[:2])
    try:
        (_write_onnx if fmt == "onnx" else _write_torchscript)(graph, inputs, tmp)
        checked = check_exported(graph, fmt, tmp, observations, name=path)
        os.replace(tmp, path)
    except BaseException as e:
        with contextlib.suppress(OSError):
            os.remove(tmp)  # no partial or mismatching file left beside the output
        if isinstance(e, OSError):  # e.g. a full disk: named as the user gave the path
            reason = e.strerror or str(e).replace(tmp, path)
            raise OSError(f"cannot write {path}: {reason}") from e
        raise
    return path, checked


def _check_output_path(path: str | os.PathLike) -> None:
    """Refuse, before any work, an output file that cannot be written: its directory is
    missing or not a directory, ``path`` is itself a directory, or the directory is not
    writable. Raises ``FileNotFoundError`` or ``ValueError`` naming ``path`` as given."""
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.exists(folder):
        raise FileNotFoundError(f"cannot write {path}: the directory {folder} does not exist")
    if not os.path.isdir(folder):
        raise ValueError(f"cannot write {path}: {folder} is not a directory")
    if os.path.isdir(path):
        raise ValueError(f"cannot write {path}: it is a directory (-o names the file to "
                         f"write)")
    if not os.access(folder, os.W_OK):
        raise ValueError(f"cannot write {path}: the directory {folder} is not writable")


def _snapshot_path(run_dir: Any, snapshot: str | None) -> str | None:
    """``--snapshot``: an iteration number (``itr_<N>.pkl`` in the run) or a file path."""
    if snapshot is None:
        return None
    if str(snapshot).isdigit():
        path = os.path.join(os.fspath(run_dir), f"itr_{int(snapshot)}.pkl")
        if not os.path.exists(path):
            raise FileNotFoundError(f"no snapshot of iteration {snapshot} in {os.fspath(run_dir)} "
                                    f"(itr_{int(snapshot)}.pkl; runs keep them with "
                                    f"--snapshot-mode all or gap)")
        return path
    return snapshot


def add_export_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``export RUN_DIR --format onnx|torchscript [-o FILE] [--snapshot N]
    [--stochastic]`` to ``subparsers``; returns its parser."""
    parser = subparsers.add_parser(
        "export", help="write a trained policy as an ONNX or TorchScript graph",
        description="Write the evaluation-mode policy of a run as one self-contained graph "
                    "(observation in, action out; recurrent policies carry their state as "
                    "inputs and outputs) and check it against the PyTorch policy.")
    parser.add_argument("run_dir", help="a run directory written by rlfast train")
    parser.add_argument("--format", choices=FORMATS, default="onnx",
                        help="onnx (needs pip install 'rlfast[export]') or torchscript")
    parser.add_argument("-o", "--output", default=None, metavar="FILE",
                        help="where to write (default: RUN_DIR/policy.onnx or policy.pt)")
    parser.add_argument("--snapshot", default=None, metavar="N|PATH",
                        help="an iteration number (itr_<N>.pkl) or a snapshot file (default: "
                             "the run's newest)")
    parser.add_argument("--stochastic", action="store_true",
                        help="also output the distribution: probabilities, or mean and log-std")
    return parser


def export_main(args: argparse.Namespace) -> int:
    """``rlfast export``: 0 when written (and checked where the runtime is installed); a
    policy or file that cannot be exported is one line on stderr and status 2."""
    from rlfast.agents.export_policy import ExportError
    from rlfast.experiments.run_dir import RunDirError

    try:
        path, checked = export_policy(args.run_dir, args.format, args.output, args.snapshot,
                                      args.stochastic)
    except (ExportError, ExportFailed, RunDirError, OSError, ImportError, ValueError) as e:
        print(f"rlfast export: error: {e}", file=sys.stderr)
        return 2
    how = ("checked against the PyTorch policy" if checked
           else "not checked: onnxruntime is not installed")
    print(f"Wrote {path} ({args.format}; {how})")
    return 0
