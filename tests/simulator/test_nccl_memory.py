"""NCCL's registered memory in a torchrun job (issue 48): tensors in a torch.cuda.MemPool on
ProcessGroupNCCL's mem_allocator, two ranks on simulated H100s joined for multicast
(MEMTRACE_GPU_MULTICAST=1: PyTorch offers NCCL's allocator only there). ncclMemAlloc maps its
memory by CUDA's virtual memory calls from libnccl, as on a card (Note [NCCL's memory through
the driver] in simulator/libraries/nccl.cpp), beneath PyTorch's caching allocator, whose bridge
records the same memory as the pool's segments and tensors: the hooks leave those calls to it
(Note [NCCL's memory beneath PyTorch's allocator] in allocator/torch_allocator.cpp), so each
byte is counted once, and the program's counters are the untraced job's."""
import json
import sys
from pathlib import Path

import pytest

from memtrace_testing import ROOT, parse_records, report_json, run

HERE = Path(__file__).resolve().parent
SCRIPT = HERE / "scripts" / "nccl_mem_pool.py"
TORCHRUN = Path(sys.executable).parent / "torchrun"
MULTICAST = {"PYTHONPATH": str(ROOT / "python"), "MEMTRACE_GPU_MULTICAST": "1"}
# The inactive_split counters follow the order threads free in (test_unchanged.py's TIMING).
TIMING = ("inactive_split.",)
MIB = 1 << 20


def said(prefix, ranks=2):
    return [json.loads(Path(f"{prefix}-rank{rank}.json").read_text()) for rank in range(ranks)]


def compared(counters):
    return {name: value for name, value in counters.items() if not name.startswith(TIMING)}


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    """The job untraced on two simulated H100s, and under `memtrace run --gpu h100`."""
    work = tmp_path_factory.mktemp("nccl")
    run([sys.executable, "-m", "mem_tracer.simulated_gpu", "h100", "--devices", "2", "--",
         TORCHRUN, "--standalone", "--nproc-per-node", "2", SCRIPT, work / "untraced"],
        MULTICAST, timeout=600, own_card=True)
    folder = work / "job"
    traced = run([sys.executable, "-m", "mem_tracer", "run", "--gpu", "h100", "-q", "-o", folder,
                  TORCHRUN, "--standalone", "--nproc-per-node", "2", SCRIPT, work / "traced"],
                 MULTICAST, timeout=600, own_card=True)
    return said(work / "untraced"), said(work / "traced"), sorted(folder.glob("*.bin")), traced


def test_the_pool_is_in_nccls_memory_and_every_counter_is_the_untraced_jobs(jobs):
    untraced, traced, _, _ = jobs
    for rank in untraced:
        # 6 MiB, 3 MiB + 512 B and 1,000 B in the pool: its segments are NCCL's memory, made
        # at PyTorch's sizes (a 2 MiB one for the small tensor, a 20 MiB one the two large
        # ones share), beside the default pool's 20 MiB.
        assert rank["pool_segments"] == [2 * MIB, 20 * MIB], rank["pool_segments"]
        assert rank["in_use"]["reserved_bytes_by_private_pools.0_1.all.peak"] == 22 * MIB
        assert rank["in_use"]["reserved_bytes.all.peak"] == 42 * MIB
    for before, after in zip(untraced, traced):
        assert after["pool_segments"] == before["pool_segments"]
        assert compared(after["in_use"]) == compared(before["in_use"])
        assert compared(after["end"]) == compared(before["end"])


def test_each_byte_of_nccls_memory_is_counted_once(jobs):
    _, traced, traces, _ = jobs
    assert len(traces) == 2, traces
    for counters, trace in zip(traced, traces):
        records = parse_records(trace)
        # NCCL's cuMemCreate, cuMemMap and kin were made beneath PyTorch's allocator: its
        # bridge recorded the pool's segments, the hooks none of those calls.
        # (Before, the hooks recorded NCCL's calls as segments of their own: cuMemCreate's
        # context, two reserve, map, unmap and address-free records.)
        apis = {record.get("api") for record in records if record["record"] == "context"}
        assert apis == {"torch"}, apis
        assert not [record for record in records
                    if record["record"] in ("map", "unmap", "reserve", "address-free")]
        # The pool's segments are the bridge's, in their MemPool, made and given back to NCCL.
        for action in ("alloc", "free"):
            pooled = sorted(int(record["size"]) for record in records
                            if record["record"] == "segment" and record["action"] == action
                            and record["user_pool"] != "0")
            assert pooled == counters["pool_segments"], (action, pooled)
        summary = report_json(trace)["summary"]
        stats = counters["in_use"]
        assert summary["peak_bytes"] == stats["requested_bytes.all.peak"]
        assert summary["torch_reserved_peak_bytes"] == stats["reserved_bytes.all.peak"]
