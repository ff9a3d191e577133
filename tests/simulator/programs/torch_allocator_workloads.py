"""Workloads for tests/simulator/test_torch_allocator.py, each the program as a user writes it,
printing PyTorch's own counters at its end as one JSON line:

    python torch_allocator_workloads.py (mlp | cudnn_benchmark | expandable | mempool |
                                         empty_cache | fragmentation | graphs | unsplit |
                                         record_stream | two_devices | fork_after_attach |
                                         swap_allocator | two_devices_at_once)

The program never knows whether memtrace traces it: it reads PYTORCH_CUDA_ALLOC_CONF back, so
the test can see that nothing changed its allocator."""
import ctypes
import json
import os
import sys
import threading
import time

import torch

torch.manual_seed(0)
GiB = 1 << 30


def mlp_steps(steps=3, width=4001, batch=333):
    model = torch.nn.Sequential(torch.nn.Linear(1000, width), torch.nn.ReLU(),
                                torch.nn.Linear(width, 1000)).cuda()
    optimizer = torch.optim.AdamW(model.parameters())
    x = torch.randn(batch, 1000, device="cuda")
    for _ in range(steps):
        loss = model(x).square().mean()  # the step's line
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)


def cudnn_benchmark():
    # pytorch/examples' DCGAN generator and discriminator, small, as training scripts set it.
    torch.backends.cudnn.benchmark = True
    nz, ngf, ndf = 32, 16, 16
    generator = torch.nn.Sequential(
        torch.nn.ConvTranspose2d(nz, ngf * 4, 4, 1, 0, bias=False), torch.nn.BatchNorm2d(ngf * 4),
        torch.nn.ReLU(True),
        torch.nn.ConvTranspose2d(ngf * 4, ngf * 2, 4, 2, 1, bias=False),
        torch.nn.BatchNorm2d(ngf * 2), torch.nn.ReLU(True),
        torch.nn.ConvTranspose2d(ngf * 2, 3, 4, 2, 1, bias=False), torch.nn.Tanh()).cuda()
    discriminator = torch.nn.Sequential(
        torch.nn.Conv2d(3, ndf, 4, 2, 1, bias=False), torch.nn.LeakyReLU(0.2, inplace=True),
        torch.nn.Conv2d(ndf, 1, 4, 2, 1, bias=False), torch.nn.Flatten(),
        torch.nn.Linear(16, 1)).cuda()
    optimizer = torch.optim.Adam(list(generator.parameters()) + list(discriminator.parameters()))
    for _ in range(2):
        noise = torch.randn(64, nz, 1, 1, device="cuda")
        loss = discriminator(generator(noise)).mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()


def mempool():
    pool = torch.cuda.MemPool()
    with torch.cuda.use_mem_pool(pool):
        inside = [torch.empty(3 << 20, dtype=torch.uint8, device="cuda") for _ in range(3)]
    outside = torch.empty(5 << 20, dtype=torch.uint8, device="cuda")
    del inside, outside


def empty_cache():
    mlp_steps(steps=1)
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    mlp_steps(steps=1, width=2001)


def fragmentation():
    # 2 MiB tensors share 20 MiB segments; freeing every other one leaves half the reserved
    # memory free, in 2 MiB holes inside segments that still hold tensors, so that neither the
    # holes nor the cache PyTorch frees before its retry can take one 60 MiB tensor.
    blocks = [torch.empty(2 << 20, dtype=torch.uint8, device="cuda") for _ in range(390)]
    del blocks[::2]
    try:
        torch.empty(60 << 20, dtype=torch.uint8, device="cuda")  # the request that fails
    except torch.OutOfMemoryError:
        print("out of memory", file=sys.stderr)


def graphs():
    model = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.ReLU(),
                                torch.nn.Linear(2048, 512)).cuda()
    static_input = torch.randn(64, 512, device="cuda")
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):
            model(static_input)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_output = model(static_input)  # the captured forward
    for _ in range(3):
        graph.replay()
    del static_output


def unsplit():
    # A freed 18 MiB block taken again by a 17.5 MiB tensor: the 0.5 MiB left is not split off
    # (a large block is split only when more than 1 MiB would remain), so PyTorch's allocated
    # bytes count 18 MiB for it: 3.5 MiB over the requests at the peak, more than rounding.
    kept = []
    for _ in range(8):
        freed = torch.empty(18 << 20, dtype=torch.uint8, device="cuda")
        del freed
        kept.append(torch.empty((17 << 20) + (1 << 19), dtype=torch.uint8, device="cuda"))
    # And small requests of odd sizes, rounded to 512 bytes.
    kept.extend(torch.empty(size, dtype=torch.uint8, device="cuda") for size in (1, 513, 4001))


def record_stream():
    # A tensor used on a side stream is freed when that stream's work is done
    # (Tensor.record_stream): PyTorch's FREE_REQUESTED comes at the del, FREE_COMPLETED later.
    side = torch.cuda.Stream()
    for _ in range(3):
        made = torch.empty(6 << 20, dtype=torch.uint8, device="cuda")
        with torch.cuda.stream(side):
            copied = made.to(torch.float16)
        made.record_stream(side)
        del made, copied
    torch.cuda.synchronize()
    torch.empty(1 << 20, dtype=torch.uint8, device="cuda")


def two_devices():
    # Each device has its own allocator, segments and counters.
    on_first = [torch.empty(5 << 20, dtype=torch.uint8, device="cuda:0") for _ in range(2)]
    on_second = [torch.empty((3 << 20) + 1000, dtype=torch.uint8, device="cuda:1")
                 for _ in range(3)]
    del on_first[0], on_second[1]
    torch.matmul(torch.ones(64, 64, device="cuda:1"), torch.ones(64, 64, device="cuda:1"))


def fork_after_attach():
    # The recorder is attached (the first segment is made); a child forked then runs Python
    # without CUDA (as DataLoader workers do) and exits; the parent goes on.
    kept = torch.empty(4 << 20, dtype=torch.uint8, device="cuda")
    child = os.fork()
    if child == 0:
        sum(range(100000))
        os._exit(0)
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0, status
    more = torch.empty(8 << 20, dtype=torch.uint8, device="cuda")
    del kept, more


def swap_allocator():
    # After the first allocation PyTorch refuses another allocator (the same with or without
    # memtrace); settings it allows mid-run are applied.
    first = torch.empty(2 << 20, dtype=torch.uint8, device="cuda")
    other = torch.cuda.memory.CUDAPluggableAllocator("libc.so.6", "malloc", "free")
    try:
        torch.cuda.memory.change_current_allocator(other)
    except RuntimeError as error:
        print(f"refused: {str(error).splitlines()[0]}", file=sys.stderr)
    torch.cuda.memory._set_allocator_settings("expandable_segments:True")
    after = [torch.empty(7 << 20, dtype=torch.uint8, device="cuda") for _ in range(3)]
    del first, after



def _simulated_card():
    """The simulated card's library, loaded in this process (its test hooks: Note [Test hooks of
    the simulated GPU] in simulator/core/testing.cpp)."""
    with open("/proc/self/maps") as maps:
        for line in maps:
            if line.rstrip().endswith("/libmemtrace-simgpu.so"):
                return ctypes.CDLL(line.split()[-1])
    raise SystemExit("two_devices_at_once runs on the simulated card: libmemtrace-simgpu.so is "
                     "not loaded")


MEETING = {}


def two_devices_at_once():
    # Two threads make their first tensors on two devices at the same moment: the simulated
    # card (MEMTRACE_GPU_TEST_MEET=2) holds each at its device's first segment, inside PyTorch's
    # allocator with that device's lock held, until both are there. Whichever reaches memtrace
    # first attaches to the allocator while the other holds its device's lock (Note [Tensors
    # made while the tracker attaches] in allocator/torch_allocator.cpp).
    torch.cuda.init()
    made = {}

    def first_tensors(device):
        with torch.cuda.device(device):
            made[device] = [torch.empty((3 << 20) + 1000 * (device + 1), dtype=torch.uint8,
                                        device=f"cuda:{device}"),
                            torch.empty(4096 + device, dtype=torch.uint8, device=f"cuda:{device}")]

    threads = [threading.Thread(target=first_tensors, args=(device,)) for device in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    MEETING["meeting"] = _simulated_card().simgpu_testing_meeting()
    # A tensor of each device freed (its free matches its allocation), more made after.
    del made[0][1], made[1][0]
    later = [torch.empty(6 << 20, dtype=torch.uint8, device=f"cuda:{device}") for device in (1, 0)]
    made.clear()
    del later


WORKLOADS = {"mlp": mlp_steps, "cudnn_benchmark": cudnn_benchmark, "expandable": mlp_steps,
             "mempool": mempool, "empty_cache": empty_cache, "fragmentation": fragmentation,
             "graphs": graphs, "unsplit": unsplit, "record_stream": record_stream,
             "two_devices": two_devices, "fork_after_attach": fork_after_attach,
             "swap_allocator": swap_allocator, "two_devices_at_once": two_devices_at_once}

if __name__ == "__main__":
    WORKLOADS[sys.argv[1]]()
    torch.cuda.synchronize()
    stats = torch.cuda.memory_stats()
    print(json.dumps({
        "requested_peak": stats["requested_bytes.all.peak"],
        "requested_current": stats["requested_bytes.all.current"],
        "allocated_peak": stats["allocated_bytes.all.peak"],
        "reserved_peak": stats["reserved_bytes.all.peak"],
        "reserved_current": stats["reserved_bytes.all.current"],
        "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF"),
        "backend": torch.cuda.get_allocator_backend(),
        **MEETING,
        "devices": [{"requested_peak": device_stats["requested_bytes.all.peak"],
                     "allocated_peak": device_stats["allocated_bytes.all.peak"],
                     "reserved_peak": device_stats["reserved_bytes.all.peak"],
                     "requested_current": device_stats["requested_bytes.all.current"],
                     "allocations": device_stats["allocation.all.allocated"]}
                    for device_stats in (torch.cuda.memory_stats(index)
                                         for index in range(torch.cuda.device_count()))],
    }))
    # Autograd's device thread may still need the GIL after backward() returned: a process that
    # ends at once can abort in PyTorch's teardown (Note [Letting autograd's threads finish] in
    # python/mem_tracer/_run.py), which struck the cudnn_benchmark workload once.
    time.sleep(0.05)
