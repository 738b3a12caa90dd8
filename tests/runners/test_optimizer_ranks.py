"""The optimizer side of an async run without starting one: its affinity, and how rank 0
names the optimizer rank whose failure broke its collective (the runs with two ranks are in
test_async_ranks.py)."""
from __future__ import annotations

import pytest

from rlfast.runners.async_rl import async_affinity as exported
from rlfast.runners.optimizer_ranks import OptimizerRanks, async_affinity, blame_failed_rank


class _Ranks:
    def __init__(self, error):
        self.error, self.waited = error, []

    def failure(self, timeout):
        self.waited.append(timeout)
        return self.error


def test_async_affinity_defaults_and_lists():
    assert exported is async_affinity  # still importable where it was
    default = async_affinity(None)
    assert default.optimizer == [dict(cuda_idx=None)] and dict(default.sampler) == {}
    one = async_affinity(dict(optimizer=dict(cuda_idx=None), sampler=dict(workers_cpus=[[0]])))
    assert one.optimizer == [dict(cuda_idx=None)]  # one dict: one rank
    with pytest.raises(ValueError, match="'optimizer' and 'sampler'"):
        async_affinity(dict(master_cpus=[0]))


def test_a_failed_rank_replaces_the_collective_error_it_caused():
    cause = RuntimeError("Optimizer rank 1 died")
    ranks = _Ranks(cause)
    with pytest.raises(RuntimeError, match="rank 1 died") as caught:
        with blame_failed_rank(ranks):
            raise ConnectionError("collective failed")
    assert isinstance(caught.value.__cause__, ConnectionError)
    assert ranks.waited == [5.0]


def test_other_errors_pass_unchanged():
    for ranks in (None, _Ranks(None)):
        with pytest.raises(ConnectionError, match="collective failed"):
            with blame_failed_rank(ranks):
                raise ConnectionError("collective failed")
    with blame_failed_rank(_Ranks(RuntimeError("unused"))):
        pass  # no error: nothing asked


def test_commands_go_nowhere_before_any_rank_is_launched():
    ranks = OptimizerRanks([dict(cuda_idx=None)] * 2, None, 60.0, RuntimeError)
    ranks.command(3)  # no process group, no supervisor: nothing to broadcast
    assert ranks.failure(0.0) is None
