"""HostSyncCounter counts the calls that read a tensor's value on the host, and nothing else."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from rlfast.utils.host_sync import HostSyncCounter

READS = {
    "item": lambda x: x.sum().item(),
    "float": lambda x: float(x.sum()),
    "int": lambda x: int(x.sum()),
    "bool": lambda x: bool(x.sum() > 0),
    "if": lambda x: 1 if x.sum() > 0 else 0,
    "tolist": lambda x: x.tolist(),
    "cpu": lambda x: x.cpu(),
    "numpy": lambda x: x.numpy(),
    "np.asarray": lambda x: np.asarray(x),
    "nonzero": lambda x: x.nonzero(),
    "torch.nonzero": lambda x: torch.nonzero(x),
    "where-1-arg": lambda x: torch.where(x > 0),
    "bool-mask index": lambda x: x[x > 0],
    "masked_select": lambda x: x.masked_select(x > 0),
    "unique": lambda x: x.unique(),
    "equal": lambda x: torch.equal(x, x),
    "allclose": lambda x: torch.allclose(x, x),
    "range index": lambda x: list(range(10))[x[0].long()],
}

NOT_READS = {
    "arithmetic": lambda x: (x * 2 + 1).sum(),
    "to cpu": lambda x: x.to("cpu"),
    "to device": lambda x: x.to(torch.device("cpu"), non_blocking=True),
    "where-3-args": lambda x: torch.where(x > 0, x, -x),
    "index tensor": lambda x: x[torch.tensor([0, 2])],
    "slice": lambda x: x[1:3],
    "randperm": lambda x: torch.randperm(5).split(2),
    "clip_grad_norm_": lambda x: torch.nn.utils.clip_grad_norm_([_with_grad()], 1.0),
}


def _with_grad() -> torch.Tensor:
    p = torch.nn.Parameter(torch.ones(3))
    p.grad = torch.full((3,), 2.0)
    return p


CASES = [(name, fn, 1) for name, fn in sorted(READS.items())] + \
        [(name, fn, 0) for name, fn in sorted(NOT_READS.items())]


@pytest.mark.parametrize("name, call, expected", CASES, ids=[c[0] for c in CASES])
def test_each_host_read_counts_once_and_device_work_not_at_all(name, call, expected):
    x = torch.arange(6, dtype=torch.float32) - 2
    with HostSyncCounter() as syncs:
        call(x)
    assert syncs.count == expected, syncs.report()


def test_sites_name_the_calling_line():
    x = torch.ones(3)
    with HostSyncCounter() as syncs:
        for _ in range(3):
            x.sum().item()
    assert syncs.count == 3
    (site, n), = syncs.sites.items()
    assert n == 3 and site.startswith(__file__) and "test_sites_name_the_calling_line" in site
    assert syncs.report().split() == ["3", *site.split()]
