"""A ``DistributedDataParallel`` whose constructor is the one torch 2.4-2.12 declare: no
``forward_sync_buffers`` keyword (a ``TypeError`` if given), ``broadcast_buffers`` instead.

:func:`install` puts it in place of ``torch.nn.parallel.DistributedDataParallel`` in this
process and in the processes it forks. Each construction prints one line naming the
``broadcast_buffers`` it got, so a test can see which keyword rlfast chose. On a torch that
still has ``broadcast_buffers`` alone (before 2.13) the class passes it through unchanged;
on 2.13+ the deprecated keyword keeps its old meaning (no buffer sync at construction)."""
import sys
import warnings

import torch

_REAL = torch.nn.parallel.DistributedDataParallel
MARK = "legacy DistributedDataParallel: broadcast_buffers="


class LegacyDistributedDataParallel(_REAL):
    def __init__(self, module, device_ids=None, output_device=None, dim=0,
                 broadcast_buffers=True, process_group=None, bucket_cap_mb=None,
                 find_unused_parameters=False, check_reduction=False,
                 gradient_as_bucket_view=False, static_graph=False):
        print(f"{MARK}{broadcast_buffers}", file=sys.stderr, flush=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # 2.13 deprecates the keyword
            super().__init__(module, device_ids=device_ids, output_device=output_device,
                             dim=dim, broadcast_buffers=broadcast_buffers,
                             process_group=process_group, bucket_cap_mb=bucket_cap_mb,
                             find_unused_parameters=find_unused_parameters,
                             check_reduction=check_reduction,
                             gradient_as_bucket_view=gradient_as_bucket_view,
                             static_graph=static_graph)


def install() -> None:
    torch.nn.parallel.DistributedDataParallel = LegacyDistributedDataParallel


def uninstall() -> None:
    torch.nn.parallel.DistributedDataParallel = _REAL
