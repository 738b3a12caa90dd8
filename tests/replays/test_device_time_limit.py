"""Device time-limit replay buffers (device="cpu" here) against their numpy twins: the same
appends give the same stored arrays and window facts (timeout_n, steps_n), the same batches
(bootstrap discounts, final observations substituted with torch.where) at every valid index,
the same draws, no host read while sampling; a snapshot round trip. See
test_device_replay.py for the shared comparisons."""
import numpy as np
import pytest
import torch

from rlfast.replays import (DeviceTlPrioritizedReplayBuffer, DeviceTlUniformReplayBuffer,
                            SamplesFromReplayTL, SamplesFromReplayTLPri, TlPrioritizedReplayBuffer,
                            TlUniformReplayBuffer)
from tests.replays._stream import TlStream
from tests.replays.test_device_replay import (TOTAL, assert_no_host_reads, assert_same,
                                              check_snapshot_round_trip, run_twins)


def _assert_windows_equal(reference, device):
    assert_same(reference.windows.timeout_n, device.windows.timeout_n, "timeout_n")
    assert_same(reference.windows.steps_n, device.windows.steps_n, "steps_n")
    assert reference.nbytes == device.nbytes


@pytest.mark.parametrize("pair", [(TlUniformReplayBuffer, DeviceTlUniformReplayBuffer),
                                  (TlPrioritizedReplayBuffer, DeviceTlPrioritizedReplayBuffer)],
                         ids=["uniform", "prioritized"])
@pytest.mark.parametrize("n_step", [1, 3])
@pytest.mark.parametrize("final", [True, False], ids=["final_obs", "no_final_obs"])
def test_time_limit_twins_store_extract_and_draw_alike(pair, n_step, final):
    cls, device_cls = pair
    stream = TlStream(TOTAL, 3, seed=n_step + 10 * final, p_done=0.25)
    kwargs = dict(size=60, B=3, discount=0.9, n_step_return=n_step)
    reference = cls(stream.example(final), **kwargs)
    device = device_cls(stream.example(final), device="cpu", **kwargs)
    assert device.has_final_observation is final
    np.random.seed(3)
    run_twins(reference, device, lambda a, b: stream.chunk(a, b, final), TOTAL,
              off_backward=n_step, check=_assert_windows_equal)
    batch = assert_no_host_reads(device, 16)
    assert type(batch) is (SamplesFromReplayTLPri if reference.priority_tree is not None
                           else SamplesFromReplayTL)
    assert batch.bootstrap_discount.dtype == torch.float32
    # Both kinds of episode end were replayed, so the substitution was exercised.
    assert device.windows.timeout_n.any() and (device.samples.done & ~device.samples.timeout).any()


def test_snapshot_round_trip_of_a_device_time_limit_buffer(tmp_path):
    check_snapshot_round_trip(DeviceTlUniformReplayBuffer, TlStream(TOTAL, 3, seed=7, p_done=0.25),
                              tmp_path)
