"""Where a replay learner keeps its replay (``replay_device``), and what each choice builds.

The CUDA branch of ``auto`` is decided from ``torch.cuda.mem_get_info``, replaced here by a
stand-in so the rule is checked on the CPU: device replay when it takes at most half the free
memory, else the prefetching host replay; a replay shared between processes prefetches.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from rlfast.algos import replay_choice as rc
from rlfast.replays import PrefetchingReplay, UniformReplayFrameBuffer
from rlfast.utils.collections import namedarraytuple

Sample = namedarraytuple("Sample", ["observation", "action", "reward", "done"])
FRAMES = Sample(observation=np.zeros((4, 84, 84), np.uint8), action=np.int64(0),
                reward=np.float32(0), done=np.bool_(False))


@pytest.fixture
def free_gib(monkeypatch):
    """Pretend a GPU with the given free memory: ``free_gib(x)``."""
    def set_free(gib: float):
        monkeypatch.setattr(torch.cuda, "mem_get_info",
                            lambda device=None: (int(gib * 2 ** 30), int(80 * 2 ** 30)))
    return set_free


def test_auto_is_host_on_the_cpu_whatever_the_size():
    assert rc.resolve_replay_device("auto", "cpu", 10 ** 12) == "host"
    assert rc.resolve_replay_device("auto", None) == "host"


@pytest.mark.parametrize("free, expected", [(20.0, "device"), (14.0, "device"),
                                            (13.9, "prefetch"), (2.0, "prefetch")])
def test_auto_on_cuda_puts_replay_on_the_device_when_it_takes_at_most_half(free_gib, free,
                                                                            expected):
    free_gib(free)
    assert rc.resolve_replay_device("auto", torch.device("cuda:0"), 7 * 2 ** 30) == expected


def test_a_shared_replay_prefetches_and_refuses_the_device(free_gib):
    free_gib(100.0)
    assert rc.resolve_replay_device("auto", "cuda:0", 1, shared=True) == "prefetch"
    assert rc.resolve_replay_device("host", "cuda:0", 1, shared=True) == "host"
    with pytest.raises(ValueError, match="replay_device='device' keeps the replay in one "
                                         "process"):
        rc.resolve_replay_device("device", "cuda:0", 1, shared=True, owner="DQN")


@pytest.mark.parametrize("setting", ["host", "device", "prefetch"])
def test_explicit_settings_are_kept(setting):
    assert rc.resolve_replay_device(setting, "cpu", 10 ** 15) == setting


def test_a_bad_setting_names_the_choices():
    with pytest.raises(ValueError, match=r"replay_device must be one of \['auto', 'host', "
                                         r"'device', 'prefetch'\]; got 'gpu'"):
        rc.resolve_replay_device("gpu", "cpu")


@pytest.mark.parametrize("frames, n_step", [(False, 1), (True, 1), (True, 3)])
def test_the_estimate_is_close_to_what_the_buffer_allocates(frames, n_step):
    size = 4096
    estimate = rc.estimate_replay_bytes(FRAMES, size, frames, n_step)
    cls = UniformReplayFrameBuffer if frames else rc.make_replay_buffer(
        example=FRAMES, size=8, B=2).__class__
    buffer = cls(example=FRAMES, size=size, B=4, n_step_return=n_step, discount=0.99)
    assert abs(estimate - buffer.nbytes) / buffer.nbytes < 0.01, (estimate, buffer.nbytes)


@pytest.mark.parametrize("choice, kind", [("host", "UniformReplayBuffer"),
                                          ("device", "DeviceUniformReplayBuffer"),
                                          ("prefetch", "PrefetchingReplay")])
def test_each_choice_builds_its_buffer(choice, kind):
    buffer, resolved = rc.make_learner_replay(choice, "cpu", 8, example=FRAMES, size=64, B=2)
    try:
        assert resolved == choice and type(buffer).__name__ == kind
        assert rc.takes_device_priorities(buffer) == (choice != "host")
        assert rc.replay_to_save(buffer) is (buffer.buffer if choice == "prefetch" else buffer)
    finally:
        if isinstance(buffer, PrefetchingReplay):
            buffer.close()


def test_an_async_run_builds_the_shared_buffer_and_decides_in_the_optimizer():
    """make_learner_replay(async_=True) refuses 'device' at once (before any fork);
    finish_shared_replay wraps the shared buffer in a prefetcher where asked."""
    with pytest.raises(ValueError, match="keeps the replay in one process"):
        rc.make_learner_replay("device", None, 8, async_=True, example=FRAMES, size=64, B=2)
    host = rc.make_replay_buffer(example=FRAMES, size=64, B=2)
    same, choice = rc.finish_shared_replay(host, "auto", "cpu", 8)
    assert same is host and choice == "host"
    wrapped, choice = rc.finish_shared_replay(host, "prefetch", "cpu", 8)
    try:
        assert choice == "prefetch" and wrapped.buffer is host
    finally:
        wrapped.close()
