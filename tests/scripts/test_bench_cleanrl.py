"""scripts/bench/_cleanrl.py, the CleanRL and LeanRL-style PPO peers of the Atari benchmarks,
on the CPU: the AtariVectorEnv they run on, GAE against a plain reference, a few iterations
of each loop, and the CUDA-graph wrapper's logic (warm-up, one capture, replays, the eager
fallback) with torch.cuda's graph API replaced by recording fakes."""
from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("ale_py")
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts" / "bench"))
import _cleanrl as peers  # noqa: E402

HP = dict(discount=0.99, learning_rate=2.5e-4, value_loss_coeff=0.5, entropy_loss_coeff=0.01,
          clip_grad_norm=0.5, gae_lambda=0.95, minibatches=4, epochs=2, ratio_clip=0.1)


def test_ale_vector_env_gives_stacked_84x84_gray_pong():
    envs = peers.make_ale_vector_env(2, num_threads=1)
    try:
        assert peers.vector_env_spaces(envs) == ((4, 84, 84), 6)
        obs, _ = envs.reset(seed=3)
        assert obs.shape == (2, 4, 84, 84) and obs.dtype == np.uint8
        for _ in range(5):
            obs, reward, terminated, truncated, _ = envs.step(np.array([0, 1]))
        assert obs.shape == (2, 4, 84, 84) and reward.shape == (2,)
        assert terminated.dtype == bool and truncated.shape == (2,)
    finally:
        envs.close()


def test_gae_matches_a_plain_loop():
    T, B, gamma, lam = 6, 3, 0.9, 0.8
    g = torch.Generator().manual_seed(0)
    rewards, values = torch.randn(T, B, generator=g), torch.randn(T, B, generator=g)
    dones = (torch.rand(T, B, generator=g) < 0.3).float()
    next_value, next_done = torch.randn(B, generator=g), torch.tensor([0.0, 1.0, 0.0])
    advantages, returns = torch.zeros(T, B), torch.zeros(T, B)
    peers._gae_(advantages, returns, rewards, dones, values, next_value, next_done, gamma, lam)
    for b in range(B):
        running = 0.0
        for t in reversed(range(T)):
            following = next_value[b] if t == T - 1 else values[t + 1, b]
            alive = 1.0 - (next_done[b] if t == T - 1 else dones[t + 1, b])
            delta = rewards[t, b] + gamma * following * alive - values[t, b]
            running = delta + gamma * lam * alive * running
            assert advantages[t, b].item() == pytest.approx(float(running), abs=1e-5)
    assert torch.allclose(returns, advantages + values)


@pytest.mark.parametrize("loop", ["cleanrl", "leanrl"])
def test_loops_run_iterations_and_count_steps_and_updates(loop):
    envs = peers.make_ale_vector_env(2, num_threads=1)
    calls = []

    def observe(steps, updates):
        calls.append((steps, updates))
        return len(calls) == 2

    try:
        if loop == "cleanrl":
            ran = peers.cleanrl_ppo(envs, 2, 8, HP, torch.device("cpu"), observe, seed=1)
        else:
            ran = peers.leanrl_ppo(envs, 2, 8, HP, torch.device("cpu"), observe, seed=1,
                                   compile_mode="off")
    finally:
        envs.close()
    # two iterations of 8 steps x 2 envs, each with 2 epochs x 4 minibatches
    assert calls == [(16, 8), (32, 16)]
    assert ran["steps"] == 32 and ran["updates"] == 16
    if loop == "leanrl":
        assert ran["compiled"] is False and ran["graph_fallbacks"] == {}
        assert ran["cuda_graphs"] == dict(act=None, gae=None, update=None)
        assert all(math.isfinite(v) for v in ran["diagnostics"].values())
        assert 0 < ran["diagnostics"]["entropy"] <= math.log(6) + 1e-4


class FakeGraph:
    """Stands in for torch.cuda.CUDAGraph: capturing records the function's effect only
    through ``replay`` (as on a GPU, where capture runs nothing)."""

    def __init__(self):
        self.replays = 0

    def replay(self):
        self.replays += 1


class FakeCuda:
    def __init__(self, monkeypatch, fail_capture=False):
        self.captures, self.fail_capture, self.side_streams = 0, fail_capture, 0
        fake = self

        class Stream:
            def __init__(self):
                fake.side_streams += 1

            def wait_stream(self, other):
                pass

        class Capture:
            def __init__(self, graph):
                self.graph = graph

            def __enter__(self):
                fake.captures += 1
                fake.capturing = True
                return self

            def __exit__(self, *exc):
                fake.capturing = False
                if fake.fail_capture:
                    raise RuntimeError("operation not permitted when stream is capturing")
                return False

        class StreamContext:
            def __init__(self, stream):
                pass

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                return False

        self.capturing = False
        monkeypatch.setattr(torch.cuda, "Stream", Stream)
        monkeypatch.setattr(torch.cuda, "stream", StreamContext)
        monkeypatch.setattr(torch.cuda, "current_stream", lambda: Stream())
        monkeypatch.setattr(torch.cuda, "CUDAGraph", FakeGraph)
        monkeypatch.setattr(torch.cuda, "graph", Capture)
        monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)


def test_graphed_call_warms_up_captures_once_then_replays(monkeypatch):
    cuda = FakeCuda(monkeypatch)
    eager = []
    call = peers.GraphedCall(lambda: eager.append(cuda.capturing) or "out", enabled=True,
                             warmup=2)
    assert [call() for _ in range(5)] == ["out"] * 5
    # two eager warm-up calls on side streams, one call under capture, then replays only
    assert eager == [False, False, True] and cuda.captures == 1
    assert call.graph.replays == 3  # the captured call itself, then two more
    assert call.fallback_reason is None


def test_graphed_call_runs_eagerly_when_capture_fails_or_without_cuda(monkeypatch):
    cuda = FakeCuda(monkeypatch, fail_capture=True)
    eager = []
    call = peers.GraphedCall(lambda: eager.append(cuda.capturing) or "out", enabled=True,
                             warmup=1)
    assert [call() for _ in range(4)] == ["out"] * 4
    assert cuda.captures == 1 and call.graph is None and not call.enabled
    assert "operation not permitted" in call.fallback_reason
    assert eager == [False, True, False, False, False]  # warm-up, capture try, then eager
    plain = peers.GraphedCall(lambda: "x", enabled=False)
    assert plain() == "x" and cuda.captures == 1
