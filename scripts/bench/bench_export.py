#!/usr/bin/env python
"""Inference speed of an exported ONNX Atari policy against the PyTorch agent, side by side.

The policy: ``rlfast train ppo atari:pong`` (the preset's Nature-CNN actor-critic on 4x104x80
uint8 frames), from ``--run-dir`` or from a short run this script trains first (the weights do
not change the speed). It is exported with ``rlfast export --format onnx``; then, at batch 1
and batch 32, in interleaved rounds, each contender acts on the same uint8 frames:

- ``rlfast agent``: the agent's own ``step`` in evaluation mode with greedy actions (what
  ``rlfast eval`` calls: CPU tensors in and out);
- ``torch graph``: the exported module (``PolicyGraph``) called in PyTorch under
  ``torch.inference_mode`` (the same computation without the agent's bookkeeping);
- ``onnxruntime``: the ONNX file in an onnxruntime ``InferenceSession`` on the CPU provider.

Each round times ``--calls`` calls of each contender (after warm-up calls); the table gives
the median time per call over ``--rounds`` rounds and the ratio to the agent. Threads: torch's
default (every core) and onnxruntime's default (every core).

    python scripts/bench/bench_export.py                 # trains a 512-step Pong run first
    python scripts/bench/bench_export.py --run-dir RUN --rounds 9 --calls 200
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import (REPO_ROOT, interleave, machine, markdown_table, median,  # noqa: E402
                     run_process)

sys.path.insert(0, REPO_ROOT)


def train_short_run(out: str) -> str:
    """A 512-step PPO Pong run (serial sampler) in ``out``; returns its directory."""
    run_dir = os.path.join(out, "ppo_pong")
    cmd = [sys.executable, "-m", "rlfast", "train", "ppo", "atari:pong", "--steps", "512",
           "--sampler", "serial", "--device", "cpu", "--log-dir", run_dir, "--overwrite",
           "--no-progress", "--set", "sampler.batch_T=64", "--set",
           "runner.log_interval_steps=512", "--set", "sampler.eval_n_envs=1", "--set",
           "sampler.eval_max_steps=100", "--set", "sampler.eval_max_trajectories=1"]
    returncode, stdout, stderr = run_process(cmd, cwd=REPO_ROOT)
    if returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {returncode}:\n{(stdout + stderr)[-3000:]}")
    return run_dir


def time_calls(fn, calls: int) -> float:
    """Seconds per call of ``fn`` over ``calls`` calls."""
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run-dir", default=None, help="a ppo atari run (default: train one)")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=100, help="calls per contender per round")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 32])
    args = parser.parse_args()

    import numpy as np
    import onnxruntime
    import torch

    from rlfast.agents.export_policy import PolicyGraph
    from rlfast.experiments.export import export_policy, record_observations
    from rlfast.experiments.playback import load_trained_agent

    with tempfile.TemporaryDirectory() as tmp:
        run_dir = args.run_dir or train_short_run(tmp)
        path, checked = export_policy(run_dir, "onnx", os.path.join(tmp, "policy.onnx"))
        _, agent, make_env = load_trained_agent(run_dir)
        agent.greedy_eval = True
        agent.eval_mode(1)
        frames = record_observations(agent, make_env, max(args.batches), seed=0)
        graph = PolicyGraph(agent)
        session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
        null = torch.zeros(max(args.batches), dtype=torch.long)
        zero_reward = torch.zeros(max(args.batches))
        print(f"ONNX file {os.path.getsize(path) / 1e6:.1f} MB (checked against PyTorch: "
              f"{checked}); machine: {machine()}; torch {torch.__version__} "
              f"({torch.get_num_threads()} threads), onnxruntime {onnxruntime.__version__}",
              flush=True)
        rows = []
        for batch in args.batches:
            obs = frames[:batch].contiguous()
            feed = {"observation": obs.numpy()}
            contenders = {
                "rlfast agent": lambda: agent.step(obs, null[:batch], zero_reward[:batch]),
                "torch graph": lambda: graph(obs),
                "onnxruntime": lambda: session.run(None, feed),
            }
            with torch.inference_mode():
                want = graph(obs)[0].numpy()
                assert np.array_equal(session.run(None, feed)[0], want)
                times = {name: [] for name in contenders}
                for fn in contenders.values():
                    time_calls(fn, max(3, args.calls // 10))  # warm-up
                for _, order in interleave(contenders, args.rounds):
                    for name in order:
                        times[name].append(time_calls(contenders[name], args.calls))
            base = median(times["rlfast agent"])
            for name, values in times.items():
                med = median(values)
                rows.append([batch, name, f"{med * 1e3:.3f}", f"{batch / med:,.0f}",
                             f"{base / med:.2f}x"])
    print()
    print(markdown_table(["batch", "contender", f"ms per call (median of {args.rounds})",
                          "frames/s", "speed vs rlfast agent"], rows, "rlrrr"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
