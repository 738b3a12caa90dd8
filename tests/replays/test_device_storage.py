"""The host-to-device path of DeviceReplayStorage: the staging that CUDA appends go through
(page-locked host tensors, one copy per field, a wait on the last copy's event before a
refill), run on the CPU with ``staging=True`` and a recording stand-in for the event."""
import numpy as np
import pytest
import torch

from rlfast.replays.device_storage import DeviceReplayStorage, _Staging
from rlfast.replays.storage import ReplayStorage
from rlfast.utils.buffer import torchify_buffer
from tests.replays.test_device_replay import TOTAL, _stream, assert_storages_equal


def test_staged_appends_match_direct_ones_and_reuse_the_staging():
    """The CUDA path (page-locked staging, then one copy per field) run on the CPU."""
    stream = _stream(True, seed=4)
    example = stream.example(with_rnn=True)
    kwargs = dict(size=60, B=3, discount=0.9, n_step_return=3, frame_based=True,
                  rnn_state_interval=4)
    reference = ReplayStorage(example, **kwargs)
    staged = DeviceReplayStorage(example, staging=True, **kwargs)
    hosts = {}
    for start in range(0, TOTAL, 7):
        samples = stream.chunk(start, min(TOTAL, start + 7), with_rnn=True)
        reference.append(samples)
        staged.append(samples if start % 14 else torchify_buffer(samples))
        assert_storages_equal(reference, staged)
        if start == 7:
            hosts = {name: id(s.host) for name, s in staged._staging.items()}
            scratch = id(staged._scratch["observation"])
    assert {"samples.action", "samples.reward", "observation", "prev_rnn_state"} <= set(hosts)
    # Allocated once, reused.
    assert hosts == {name: id(s.host) for name, s in staged._staging.items()}
    assert scratch == id(staged._scratch["observation"])


class _RecordingEvent:
    def __init__(self, calls):
        self.calls = calls

    def record(self, stream=None):
        self.calls.append("record")

    def synchronize(self):
        self.calls.append("synchronize")


def test_staging_waits_for_the_last_copy_before_refilling():
    """The CUDA event logic of the staging, with a recording stand-in for the event."""
    calls = []
    staging = _Staging(torch.float32, (2,), torch.device("cpu"))
    staging.event = _RecordingEvent(calls)
    first = staging.fill(np.ones((3, 2)), "x")
    assert calls == [] and torch.equal(first, torch.ones(3, 2))
    staging.copied()
    assert calls == ["record"]
    host = staging.host
    second = staging.fill(np.full((2, 2), 5.0), "x")
    assert calls == ["record", "synchronize"] and staging.host is host  # reused, after waiting
    assert torch.equal(second, torch.full((2, 2), 5.0))
    staging.fill(np.zeros((2, 2)), "x")
    assert calls == ["record", "synchronize"]  # nothing in flight: no wait
    with pytest.raises(ValueError, match="'x' of shape \\(2, 3\\)"):
        staging.fill(np.zeros((2, 3)), "x")
