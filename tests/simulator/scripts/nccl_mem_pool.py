"""One rank of a job whose tensors live in NCCL's registered memory: a torch.cuda.MemPool on
ProcessGroupNCCL's mem_allocator (ncclMemAlloc, which maps memory by CUDA's virtual memory
calls from libnccl: Note [NCCL's memory through the driver] in simulator/libraries/nccl.cpp),
registered with the communicator, an all-reduce on a tensor in it, tensors beside it in the
default pool, the pool's tensors freed and the pool's memory given back to NCCL at the end.
Each rank writes torch.cuda.memory_stats() (every counter) and the pool's segments, as JSON
to OUTPUT-rankR.json.

    torchrun --nproc-per-node 2 nccl_mem_pool.py OUTPUT
"""
import gc
import json
import os
import sys

import torch
import torch.distributed as dist

MIB = 1 << 20


def main():
    output = sys.argv[1]
    local = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    device = torch.device("cuda", local)
    dist.init_process_group("nccl", device_id=device)
    backend = dist.group.WORLD._get_backend(device)
    pool = torch.cuda.MemPool(backend.mem_allocator)
    with torch.cuda.use_mem_pool(pool):
        sent = torch.ones(6 * MIB // 4, device=device)          # 6 MiB in NCCL's memory
        scratch = torch.empty(3 * MIB + 512, dtype=torch.uint8, device=device)
        small = torch.empty(1000, dtype=torch.uint8, device=device)
    backend.register_mem_pool(pool)
    dist.all_reduce(sent)
    beside = torch.empty(5 * MIB, dtype=torch.uint8, device=device)  # the default pool
    torch.cuda.synchronize()
    pool_segments = sorted(segment["total_size"] for segment in pool.snapshot())
    del scratch, small
    stats_in_use = torch.cuda.memory_stats()
    backend.deregister_mem_pool(pool)
    del sent, beside
    gc.collect()
    del pool  # its segments go back to NCCL (ncclMemFree) once nothing in them is live
    torch.cuda.empty_cache()
    said = {"pool_segments": pool_segments, "in_use": dict(stats_in_use),
            "end": dict(torch.cuda.memory_stats())}
    with open(f"{output}-rank{dist.get_rank()}.json", "w") as file:
        json.dump(said, file)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
