"""Rank processes for tests/utils/test_distributed.py: each joins a real gloo process group on
127.0.0.1, runs a scenario and reports what it saw to the parent through a queue.

Spawned children import their target by module name; the parent puts this file's directory
on sys.path, which multiprocessing hands to the child. Only the children initialize
torch.distributed (which also writes the torchrun variables into their os.environ).
"""
import gc
import os
import traceback

import numpy as np
import torch


def _collectives(rank, world, data):
    from rlfast.utils import distributed as d

    x = torch.as_tensor(data["x"][rank])
    mask = torch.as_tensor(data["mask"][rank])
    out = {"is_distributed": d.is_distributed(), "world_size": d.world_size(),
           "rank": d.rank()}
    mean, std = d.global_mean_std(x, mask)
    out["masked"] = (float(mean), float(std), mean.dtype, std.dtype)
    mean, std = d.global_mean_std(x)
    out["unmasked"] = (float(mean), float(std))
    # Rank 1 contributes nothing: the result is rank 0's statistics, on every rank.
    no_mask = mask if rank == 0 else torch.zeros_like(mask)
    mean, std = d.global_mean_std(x, no_mask)
    out["rank0_only"] = (float(mean), float(std))

    summand = torch.tensor([rank + 1.0, 10.0 * (rank + 1), -float(rank)])
    before = summand.clone()
    total = d.all_reduce_sum(summand)
    out["sum"] = total.tolist()
    out["sum_input_unchanged"] = bool(torch.equal(summand, before))
    out["sum_is_new_tensor"] = total is not summand

    out["gather0"] = d.gather_objects({"rank": rank, "items": list(range(rank + 2))})
    out["gather1"] = d.gather_objects(f"from rank {rank}", dst=1)
    out["bcast0"] = d.broadcast_object({"sender": rank, "payload": [rank] * 3})
    out["bcast1"] = d.broadcast_object(("tuple", rank), src=1)

    try:  # a second group in the same process is refused
        d.init_process_group(d.DistEnv(rank, rank, world, world, "127.0.0.1", 1, "spawn"),
                             "gloo", timeout_s=5)
        out["second_init"] = "accepted"
    except RuntimeError as e:
        out["second_init"] = str(e)
    out["env_exported"] = {k: os.environ.get(k) for k in
                           ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR")}
    return out


def _running_mean_std(rank, world, data):
    from rlfast.models.running_mean_std import RunningMeanStdModel

    model = RunningMeanStdModel(data["shape"])
    for batch in data["batches"][rank]:
        model.update(torch.as_tensor(batch))
    return {"mean": model.mean.numpy().astype(np.float64),
            "var": model.var.numpy().astype(np.float64), "count": float(model.count)}


def _wrap_ddp(rank, world, data):
    """rlfast's DDP wrapping with rank-dependent parameters and buffer; with
    ``data["legacy"]`` the constructor is the pre-2.13 one (no ``forward_sync_buffers``)."""
    if data["legacy"]:
        import _legacy_ddp

        _legacy_ddp.install()
    from rlfast.utils.torch_compat import wrap_ddp

    torch.manual_seed(rank)  # different initial parameters on each rank
    module = torch.nn.Linear(3, 2)
    module.register_buffer("stat", torch.full((2,), float(rank + 1)))
    wrapped = wrap_ddp(module, torch.device("cpu"))
    out = {"type": type(wrapped).__name__,
           "params": [p.detach().clone().numpy() for p in module.parameters()],
           "stat_after_wrap": module.stat.clone().numpy()}
    with torch.no_grad():
        module.stat += 10.0 * rank  # a rank-local change: not broadcast at the next forward
    wrapped(torch.full((4, 3), float(rank + 1))).sum().backward()
    out["stat_after_forward"] = module.stat.clone().numpy()
    out["weight_grad"] = module.weight.grad.clone().numpy()
    # Free the wrapper's reducer while the group is alive (as param_sharing.unwrap_data_parallel
    # does): freed during interpreter teardown, after the group, it can abort the process.
    del wrapped
    gc.collect()
    return out


SCENARIOS = {"collectives": _collectives, "running_mean_std": _running_mean_std,
             "wrap_ddp": _wrap_ddp}


def run_rank(rank, world, port, scenario, data, queue):
    """Join the group as ``rank`` of ``world``, run ``scenario`` and put
    ``(rank, "ok", result)`` or ``(rank, "error", traceback)`` on ``queue``."""
    torch.set_num_threads(1)
    from rlfast.utils.distributed import DistEnv, destroy_process_group, init_process_group

    try:
        env = DistEnv(rank=rank, local_rank=rank, world_size=world, local_world_size=world,
                      master_addr="127.0.0.1", master_port=port, launcher="spawn")
        init_process_group(env, "gloo", timeout_s=60)
        result = SCENARIOS[scenario](rank, world, data)
        queue.put((rank, "ok", result))
    except BaseException:  # report, so the parent sees the failure reason
        queue.put((rank, "error", traceback.format_exc()))
    finally:
        destroy_process_group()
        destroy_process_group()  # safe twice
