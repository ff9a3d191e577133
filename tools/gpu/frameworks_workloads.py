"""The framework workloads of tools/gpu/frameworks_check.py, one per command line: each
allocates a known amount on the GPU, then prints one line `counters {json}` with the
framework's own account of its memory and the device's (nvidia-smi, for this process).

    python3 frameworks_workloads.py torch-expandable|torch-graphs|torch-nccl|cupy|jax"""
import json
import os
import subprocess
import sys
import tempfile

MIB = 1 << 20


def smi_used_bytes():
    """This process's GPU memory as nvidia-smi lists it (None without nvidia-smi)."""
    try:
        output = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory",
                                 "--format=csv,noheader,nounits"], capture_output=True, check=False,
                                text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    for line in output.splitlines():
        pid, _, used = line.partition(",")
        if pid.strip() == str(os.getpid()):
            return int(used.strip()) * MIB
    return None


def report(**counters):
    counters["nvidia_smi_used_bytes"] = smi_used_bytes()
    print("counters " + json.dumps(counters), flush=True)


def torch_counters(torch):
    return {"max_memory_reserved": torch.cuda.max_memory_reserved(),
            "memory_reserved": torch.cuda.memory_reserved(),
            "max_memory_allocated": torch.cuda.max_memory_allocated(),
            "memory_allocated": torch.cuda.memory_allocated(),
            "mem_get_info": list(torch.cuda.mem_get_info())}


def torch_expandable():
    import torch
    blocks = [torch.empty(size, dtype=torch.uint8, device="cuda") for size in (30 * MIB, 50 * MIB, 7 * MIB)]
    del blocks[1]
    blocks.append(torch.empty(100 * MIB, dtype=torch.uint8, device="cuda"))
    torch.cuda.synchronize()
    report(**torch_counters(torch), conf=os.environ.get("PYTORCH_CUDA_ALLOC_CONF"))


def torch_graphs():
    import torch
    model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(),
                                torch.nn.Linear(4096, 1024)).cuda()
    static_input = torch.randn(64, 1024, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            model(static_input)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_output = model(static_input)
    for _ in range(5):
        static_input.copy_(torch.randn(64, 1024, device="cuda"))
        graph.replay()
    torch.cuda.synchronize()
    report(**torch_counters(torch), output_sum=float(static_output.sum()))


def torch_nccl():
    import torch
    import torch.distributed as dist
    store = tempfile.mktemp(prefix="memtrace-nccl-")
    dist.init_process_group("nccl", init_method=f"file://{store}", rank=0, world_size=1)
    tensor = torch.ones(16 * MIB // 4, device="cuda")
    dist.all_reduce(tensor)
    torch.cuda.synchronize()
    counters = torch_counters(torch)
    dist.destroy_process_group()
    report(**counters, nccl_cumem=os.environ.get("NCCL_CUMEM_ENABLE"), sum=float(tensor.sum()))


def cupy_workload():
    import cupy
    pool = cupy.get_default_memory_pool()
    arrays = [cupy.zeros(size // 4, dtype=cupy.float32) for size in (32 * MIB, 8 * MIB)]
    peak_pool = pool.total_bytes()
    del arrays[0]
    cupy.cuda.Device().synchronize()
    report(pool_used_bytes=pool.used_bytes(), pool_total_bytes=pool.total_bytes(),
           pool_total_at_peak=peak_pool)


def jax_workload():
    import jax
    import jax.numpy as jnp
    arrays = [jnp.zeros(size // 4, dtype=jnp.float32) for size in (32 * MIB, 8 * MIB)]
    jax.block_until_ready(arrays)
    stats = jax.devices()[0].memory_stats() or {}
    report(allocator=os.environ.get("XLA_PYTHON_CLIENT_ALLOCATOR"),
           bytes_in_use=stats.get("bytes_in_use"), peak_bytes_in_use=stats.get("peak_bytes_in_use"))


WORKLOADS = {"torch-expandable": torch_expandable, "torch-graphs": torch_graphs,
             "torch-nccl": torch_nccl, "cupy": cupy_workload, "jax": jax_workload}

if __name__ == "__main__":
    WORKLOADS[sys.argv[1]]()
