"""Two gloo processes on the CPU run every task model under DDP and under FSDP2 (``fully_shard`` on each of its
``_no_split_modules`` blocks, then the root), each on half of a batch, and save what the single-process run
must equal: losses, full gradients, and a sharded ``torch.distributed.checkpoint`` of the FSDP2 model with its
outputs. Started by tests/test_distributed.py as ``python distributed_workers.py OUT PORT``."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.multiprocessing as mp
from torch.distributed.checkpoint.state_dict import get_model_state_dict
from torch.distributed.fsdp import fully_shard
from torch.nn.parallel import DistributedDataParallel

WORLD = 2
BATCH = 4  # two rows per process


def build(model_type: str, head: type) -> torch.nn.Module:
    """The model both runs start from (eval mode: no dropout, so both runs compute the same function)."""
    from model_testing import tiny_config

    torch.manual_seed(0)
    return head(tiny_config(model_type)).eval()


def batch(model) -> dict[str, torch.Tensor]:
    """A batch without padding: each half holds as many label items, so the mean of the halves' mean losses is
    the whole batch's."""
    from model_testing import make_inputs

    return make_inputs(model, batch=BATCH, padded=False)


def half(inputs: dict[str, torch.Tensor], rank: int) -> dict[str, torch.Tensor]:
    """This rank's rows of every batched input (tensors, lists); a setting of the whole call (IPT's task name) as it
    is."""
    rows = slice(rank * BATCH // WORLD, (rank + 1) * BATCH // WORLD)
    return {key: value if isinstance(value, str) else value[rows] for key, value in inputs.items()}


def shard(model: torch.nn.Module) -> torch.nn.Module:
    blocks = set(model._no_split_modules)
    for module in model.modules():
        if type(module).__name__ in blocks:
            fully_shard(module)
    return fully_shard(model)


def run_ddp(model_type: str, head: type, rank: int) -> dict:
    model = build(model_type, head)
    inputs = batch(model)
    ddp = DistributedDataParallel(model)
    loss = ddp(**half(inputs, rank)).loss
    loss.backward()  # DDP averages the gradients over the processes
    losses = [torch.zeros(()) for _ in range(WORLD)]
    dist.all_gather(losses, loss.detach())
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}  # frozen stages: none
    return {"loss": torch.stack(losses).mean(), "grads": grads}


def run_fsdp(model_type: str, head: type, rank: int, out: Path) -> dict:
    model = shard(build(model_type, head))
    inputs = batch(model)
    loss = model(**half(inputs, rank)).loss
    loss.backward()
    losses = [torch.zeros(()) for _ in range(WORLD)]
    dist.all_gather(losses, loss.detach())
    grads = {n: p.grad.full_tensor() for n, p in model.named_parameters() if p.requires_grad}
    for param in model.parameters():  # a step, so that the checkpoint holds trained, sharded weights
        if param.requires_grad:
            param.data.sub_(0.1 * param.grad)
    folder = out / f"dcp-{head.__name__}"
    dcp.save({"model": get_model_state_dict(model)}, checkpoint_id=str(folder))
    with torch.no_grad():
        output = model(**{k: v for k, v in inputs.items() if k != "labels"})[0]
    return {"loss": torch.stack(losses).mean(), "grads": grads, "output": output}


def worker(rank: int, out: Path, port: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    from model_testing import HEADS

    results = {}
    for model_type, _, head in HEADS:
        results[head.__name__] = {
            "ddp": run_ddp(model_type, head, rank),
            "fsdp": run_fsdp(model_type, head, rank, out),
        }
    if rank == 0:
        torch.save(results, out / "results.pt")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    mp.spawn(worker, args=(Path(sys.argv[1]), int(sys.argv[2])), nprocs=WORLD)
