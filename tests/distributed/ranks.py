"""One rank of a torchrun job (gloo, on the CPU) allocating through the simulated GPU's runtime, as
PyTorch's ops do: each call made with the GIL released (ctypes.CDLL), from the rank's own
thread. Every rank allocates the same blocks; the heavy rank holds one more, at its own line,
at its peak.

argv: libcudart path, heavy rank, extra bytes of the heavy rank, then options:
  fail-first-attempt=R   rank R exits with status 3 on the job's first attempt (an elastic
                         restart follows when torchrun allows one)
  churn=N                after its peak, every rank makes N allocation and free pairs of 4 KiB
                         (a long run's events, for the flight recorder to drop)"""
import ctypes
import os
import sys

ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)
cuda = ctypes.CDLL(None)  # releases the GIL around every call, as PyTorch's ops do
heavy_rank, extra = int(sys.argv[2]), int(sys.argv[3])
options = dict(option.split("=", 1) for option in sys.argv[4:])

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
# A store of its own per attempt: gloo's connection keys from a failed attempt, left in
# torchrun's store, would otherwise send a restarted rank to a dead peer's address.
store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world, False)
dist.init_process_group("gloo", store=dist.PrefixStore(f"ranks.py-{attempt}", store), rank=rank,
                        world_size=world)
# Each allocation is made on its own line (the innermost frame the report names).
weights, activations, held = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
assert cuda.cudaMalloc(ctypes.byref(weights), ctypes.c_size_t(8 << 20)) == 0  # ALLOC:weights
assert cuda.cudaMalloc(ctypes.byref(activations), ctypes.c_size_t(2 << 20)) == 0  # ALLOC:activations
if "fail-first-attempt" in options and attempt == 0 and rank == int(options["fail-first-attempt"]):
    sys.exit(3)
if rank == heavy_rank:
    assert cuda.cudaMalloc(ctypes.byref(held), ctypes.c_size_t(extra)) == 0  # ALLOC:heavy
    cuda.cudaFree(held)
cuda.cudaFree(activations)
small = ctypes.c_void_p()
for _ in range(int(options.get("churn", 0))):
    cuda.cudaMalloc(ctypes.byref(small), ctypes.c_size_t(4096))  # ALLOC:churn
    cuda.cudaFree(small)
total = torch.tensor([float(rank)])
dist.all_reduce(total)
assert total.item() == sum(range(world))
dist.destroy_process_group()
cuda.cudaFree(weights)
