"""One rank of a DDP or FSDP2 job on a CUDA device (torchrun starts one a rank): the 3-Linear
MLP of `model()`, AdamW, three training steps written as training_truth's loop writes them
(`out = model(x); loss = out.sum()`, backward, step, zero_grad(set_to_none=True)); each rank
writes its max_memory_allocated() of the third step (the peak statistics reset as it starts)
and of the whole run, and the third step's requested and reserved peaks, as one JSON line to
OUTPUT-rankR.json.

    torchrun --nproc-per-node N parallel_step.py ddp|fsdp OUTPUT [--backend nccl|gloo]
                                                 [--pause SECONDS] [--bucket-view]

--pause sleeps that long before each step after the first: longer than NCCL's watchdog takes
to let go of the first step's collectives (Note [NCCL holds DDP's first buckets] in
python/mem_tracer/estimator/parallel.py). --bucket-view: DDP with gradient_as_bucket_view=True.

Run on simulated cards: memtrace run --gpu h100 torchrun --nproc-per-node 2 parallel_step.py
fsdp out. What the estimator is given for the same job: `model()` and `example()` (import this
file), AdamW(lr=1e-3), batch BATCH a rank."""
import argparse
import json
import os
import time

import torch
import torch.distributed as dist

BATCH = 64
STEPS = 3  # the first makes AdamW's state, DDP rebuilds its buckets at the second


def model():
    """Three Linear layers; the last one's 10 rows shard unevenly over 4 ranks (3, 3, 3, 1)."""
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(),
                               torch.nn.Linear(4096, 4096), torch.nn.ReLU(),
                               torch.nn.Linear(4096, 10))


def example(batch=BATCH, device="cpu"):
    return torch.zeros(batch, 1024, device=device)


def wrap(network, strategy, device, world_size, bucket_view=False):
    if strategy == "ddp":
        from torch.nn.parallel import DistributedDataParallel
        return DistributedDataParallel(network, device_ids=[device.index],
                                       gradient_as_bucket_view=bucket_view)
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    mesh = init_device_mesh("cuda", (world_size,))
    for layer in network:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, mesh=mesh)
    return fully_shard(network, mesh=mesh)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("strategy", choices=("ddp", "fsdp"))
    parser.add_argument("output")
    parser.add_argument("--backend", default="nccl", choices=("nccl", "gloo"))
    parser.add_argument("--pause", type=float, default=0.0)
    parser.add_argument("--bucket-view", action="store_true")
    arguments = parser.parse_args()
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
    torch.cuda.set_device(device)
    dist.init_process_group(arguments.backend, device_id=device if arguments.backend == "nccl"
                            else None)
    network = wrap(model().to(device).train(), arguments.strategy, device, world_size,
                   arguments.bucket_view)
    optimizer = torch.optim.AdamW(network.parameters(), lr=1e-3)
    x = example(device=device)
    for step in range(STEPS):
        if step and arguments.pause:
            time.sleep(arguments.pause)
        if step == STEPS - 1:
            torch.cuda.synchronize()
            run_peak = torch.cuda.max_memory_allocated()
            torch.cuda.reset_peak_memory_stats()
        out = network(x)
        loss = out.sum()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    step_peak = torch.cuda.max_memory_allocated()
    stats = torch.cuda.memory_stats()
    with open(f"{arguments.output}-rank{rank}.json", "w") as file:
        json.dump({"rank": rank, "world_size": world_size, "backend": arguments.backend,
                   "strategy": arguments.strategy, "step_peak": step_peak,
                   "run_peak": max(run_peak, step_peak),
                   "requested_peak": stats["requested_bytes.all.peak"],
                   "reserved_peak": torch.cuda.max_memory_reserved(),
                   "device": torch.cuda.get_device_name(device)}, file)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
