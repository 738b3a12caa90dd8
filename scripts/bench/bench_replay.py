#!/usr/bin/env python
"""Replay-buffer throughput and memory at Atari scale: 1M transitions of 4x104x80 uint8
observations from B=8 environments, frame-wise storage, uniform and prioritized.

Measures, for UniformReplayFrameBuffer and PrioritizedReplayFrameBuffer (n_step_return=3):
append throughput (transitions/s, appending [T=64, B=8] chunks: during the first fill, which
pays for the OS faulting in fresh pages, and once the ring has wrapped),
sampling throughput at batch 32 (uniform: sample_batch; prioritized: sample_batch +
update_batch_priorities, transitions/s), and bytes of all storage per transition against one
104x80 frame. Torch runs on one thread, so the figures are for one core. Targets:
<= 1.1x frame bytes per transition, > 20k prioritized sample+update transitions/s.

Usage: python scripts/bench/bench_replay.py [--size 1000000] [--seconds 5]
"""
from __future__ import annotations

import argparse
import gc
import os
import sys
import time
from collections import namedtuple

import numpy as np
import torch

from rlfast.replays import PrioritizedReplayFrameBuffer, UniformReplayFrameBuffer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import machine, markdown_table, rate  # noqa: E402

SamplesToBuffer = namedtuple("SamplesToBuffer", ["observation", "action", "reward", "done"])
C, H, W, B, T_CHUNK, BATCH = 4, 104, 80, 8, 64, 32
FRAME_BYTES = H * W


def make_chunks(n_chunks: int, seed: int = 0) -> list:
    """A few [64, 8] chunks of random frames, stacked oldest to newest like an env would."""
    rng = np.random.RandomState(seed)
    chunks = []
    for _ in range(n_chunks):
        frames = rng.randint(0, 256, size=(T_CHUNK + C - 1, B, H, W), dtype=np.uint8)
        obs = np.stack([frames[k:k + T_CHUNK] for k in range(C)], axis=2)  # [T, B, C, H, W]
        chunks.append(SamplesToBuffer(
            observation=obs,
            action=rng.randint(0, 6, size=(T_CHUNK, B)).astype(np.int64),
            reward=rng.randn(T_CHUNK, B).astype(np.float32),
            done=rng.rand(T_CHUNK, B) < 0.001))
    return chunks


def bench(cls, size: int, seconds: float, chunks: list) -> dict:
    example = SamplesToBuffer(np.zeros((C, H, W), np.uint8), np.int64(0), np.float32(0), False)
    buffer = cls(example, size=size, B=B, discount=0.99, n_step_return=3)
    # First fill until the ring has wrapped: includes the OS faulting in every fresh page.
    n_appends = buffer.T // T_CHUNK + 2
    start = time.perf_counter()
    for i in range(n_appends):
        buffer.append_samples(chunks[i % len(chunks)])
    first_fill = n_appends * T_CHUNK * B / (time.perf_counter() - start)
    counter = iter(range(10**9))
    steady = rate(lambda: buffer.append_samples(chunks[next(counter) % len(chunks)]),
                  T_CHUNK * B, seconds)
    prioritized = cls is PrioritizedReplayFrameBuffer
    np.random.seed(0)
    if prioritized:
        def step():
            buffer.sample_batch(BATCH)
            buffer.update_batch_priorities(torch.rand(BATCH) + 0.01)
    else:
        def step():
            buffer.sample_batch(BATCH)
    sample_rate = rate(step, BATCH, seconds)
    result = dict(name=cls.__name__, first_fill=first_fill, append=steady, sample=sample_rate,
                  bytes_per=buffer.nbytes / buffer.size, T=buffer.T)
    buffer = None  # frees the storage (the closures above hold the same cell)
    gc.collect()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, default=1_000_000)
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    chunks = make_chunks(4)
    results = [bench(cls, args.size, args.seconds, chunks)
               for cls in (UniformReplayFrameBuffer, PrioritizedReplayFrameBuffer)]
    print(f"Machine: {machine()}")
    print(f"replay: {args.size:,} transitions, obs {C}x{H}x{W} uint8, B={B}, "
          f"n_step_return=3, appends of [{T_CHUNK}, {B}], batch {BATCH}, torch threads 1")
    print()
    print(markdown_table(
        ["buffer", "append, first fill /s", "append, wrapped /s", "sample transitions/s",
         "bytes/transition", "x one frame (target <= 1.1)"],
        [[r["name"], f"{r['first_fill']:,.0f}", f"{r['append']:,.0f}",
          f"{r['sample']:,.0f} ("
          + ("sample+update" if "Prioritized" in r["name"] else "sample") + ")",
          f"{r['bytes_per']:,.1f}", f"{r['bytes_per'] / FRAME_BYTES:.4f}"] for r in results],
        "lrrrrr"))
    print()
    print("append rates are transitions/s in [64, 8] chunks; 'first fill' includes the OS "
          "faulting in fresh memory pages, 'wrapped' is steady state once every page exists.")
    pri = results[1]["sample"]
    print()
    print(f"prioritized sample+update: {pri:,.0f} transitions/s (target > 20,000): "
          f"{'met' if pri > 20_000 else 'NOT met'}")
    worst = max(r["bytes_per"] for r in results) / FRAME_BYTES
    print(f"memory: {worst:.4f}x one {H}x{W} frame per transition (target <= 1.1): "
          f"{'met' if worst <= 1.1 else 'NOT met'}")


if __name__ == "__main__":
    main()
