"""Every way a program finds CUDA's allocation functions (allocator/lookup_hooks.cpp), CUDA's
virtual memory management (allocator/virtual_memory_hooks.cpp) and the device memory no
allocation call made (cuMemGetInfo), each a real program under LD_PRELOAD against the simulated
GPU's runtime and driver (simulator/), compared with the program's own account of what it did.

What the stand-in assumes of the real platform: libcuda.so.1 answers cuGetProcAddress by base
name, version and stream flags as the driver documents it (the simulated driver's table is
generated from cudaTypedefs.h' names), the runtime reaches the driver through it (CUDA 11.4 and
later: MEMTRACE_GPU_RUNTIME_DRIVER, Note [The runtime over the driver]), and a
physical allocation is freed when its last reference and its last mapping are gone
(cuMemRelease's documentation). The real runtime's and driver's behavior is checked on a GPU by
tools/gpu/frameworks_check.sh."""
import json

import pytest
from memtrace_testing import (
    live_and_peak,
    parse_records,
    preloaded,
    program_account,
    recorded_events,
    report_json,
    run,
)

HOOK = "libmemtrace.so"


def traced(build, tmp_path, program, *args, **env):
    """Runs a program under LD_PRELOAD; its account, its stderr and the trace's path."""
    trace = tmp_path / f"{program}.bin"
    result = run([build.program(program), *args], preloaded(trace, **env))
    account, other = program_account(result.stdout)
    return account, other, result.stderr, trace


def lookups(other):
    """{looked-up name: (object, symbol)} from the program's `lookup` lines."""
    return {words[0]: (words[1], words[2]) for words in other.get("lookup", [])}


def assert_trace_is_the_account(trace, account):
    """The trace's events are exactly the program's, one each, in order; and the report's peak
    and end are the account's."""
    assert [r[:4] for r in recorded_events(trace)] == account
    live, peak = live_and_peak(account)
    summary = report_json(trace)["summary"]
    assert (summary["peak_bytes"], summary["end_bytes"]) == (peak, live)
    assert summary["unmatched_frees"] == 0


@pytest.mark.parametrize("driver_way", ["proc-address", "link"])
def test_runtime_found_with_dlopen_and_dlsym(build, tmp_path, driver_way):
    account, other, _, trace = traced(build, tmp_path, "lookup_runtime_dlsym", build.runtime,
                                      MEMTRACE_GPU_RUNTIME_DRIVER=driver_way)
    found = lookups(other)
    for name in ("cudaMalloc", "cudaFree", "cudaMallocAsync", "cudaFreeAsync",
                 "cudaMalloc@libcudart.so.13"):
        assert found[name][0] == HOOK, (name, found[name])
    assert found["cudaMalloc@libcudart.so.13"][1] == "cudaMalloc"
    assert found["cudaGetDevice"][0] == "libcudart.so.13"  # not hooked: untouched
    # Each runtime call is one event, the runtime's, though it calls the driver's hooked
    # cuMemAlloc_v2 / cuMemAllocAsync inside.
    assert_trace_is_the_account(trace, account)
    assert {r[1] for r in recorded_events(trace)} == {"cudaMalloc", "cudaMallocAsync"}


def test_lookups_without_memtrace_are_the_libraries_own(build, tmp_path):
    result = run([build.program("lookup_runtime_dlsym"), build.runtime])
    assert {obj for obj, _ in lookups(program_account(result.stdout)[1]).values()} == \
        {"libcudart.so.13"}


def test_driver_found_with_dlopen_and_dlsym(build, tmp_path):
    libcuda = build.driver
    account, other, _, trace = traced(build, tmp_path, "lookup_driver_dlsym", libcuda)
    found = lookups(other)
    assert found["cuMemAlloc_v2"] == (HOOK, "cuMemAlloc_v2")
    assert found["cuMemAllocManaged"] == (HOOK, "cuMemAllocManaged")
    assert found["cuMemAllocAsync"] == (HOOK, "cuMemAllocAsync")
    assert found["cuCtxGetDevice"][0] == "libcuda.so.1"
    assert_trace_is_the_account(trace, account)


def test_driver_found_through_cuGetProcAddress(build, tmp_path):
    libcuda = build.driver
    account, other, stderr, trace = traced(build, tmp_path, "lookup_proc_address", libcuda)
    found = lookups(other)
    assert found["cuGetProcAddress_v2"] == (HOOK, "cuGetProcAddress_v2")
    assert found["cuMemAlloc@13000"] == (HOOK, "cuMemAlloc_v2")
    # The flags pick the stream variant: the per-thread-default-stream hook for per-thread.
    assert found["cuMemAllocAsync@12000/per-thread"] == (HOOK, "cuMemAllocAsync_ptsz")
    assert found["cuMemFreeAsync@12000/legacy"] == (HOOK, "cuMemFreeAsync")
    assert found["cuMemAllocFromPoolAsync@12000"] == (HOOK, "cuMemAllocFromPoolAsync")
    # cuGetProcAddress itself, by version: the two forms, each hooked.
    assert found["cuGetProcAddress@12000"] == (HOOK, "cuGetProcAddress_v2")
    assert found["cuGetProcAddress@11030"] == (HOOK, "cuGetProcAddress")
    assert found["cuMemFree@11030"] == (HOOK, "cuMemFree_v2")
    assert found["cuCtxGetDevice@12000"][0] == "libcuda.so.1"
    # A variant newer than memtrace knows is the driver's own, said once on stderr; what it
    # allocated is in no event.
    assert found["cuMemAlloc@99000"] == ("libcuda.so.1", "simgpu_testing_cuMemAlloc_future")
    warnings = [line for line in stderr.splitlines() if line.startswith("memtrace:")]
    assert len(warnings) == 1 and "not traced" in warnings[0] and "cuMemAlloc" in warnings[0]
    untraced = {int(words[0], 16) for words in other["untraced"]}
    assert not untraced & {r[2] for r in recorded_events(trace)}
    assert_trace_is_the_account(trace, account)


def test_driver_found_through_cudaGetDriverEntryPoint_expandable_segments(build, tmp_path):
    account, other, stderr, trace = traced(build, tmp_path, "lookup_entry_point")
    # The runtime answers through its cuGetProcAddress, already memtrace's (its dlsym made it
    # so): those answers are hooks already, which is no reason to warn.
    assert "memtrace:" not in stderr
    found = lookups(other)
    assert found["cuMemAlloc/cudaGetDriverEntryPoint"] == (HOOK, "cuMemAlloc_v2")
    assert found["cuMemAllocAsync/cudaGetDriverEntryPoint_ptsz"] == (HOOK, "cuMemAllocAsync_ptsz")
    for name in ("cuMemCreate", "cuMemMap", "cuMemUnmap", "cuMemRelease", "cuMemAddressReserve",
                 "cuMemAddressFree"):
        assert found[name] == (HOOK, name)
    assert found["cuMemSetAccess"][0] == "libcuda.so.1"
    assert_trace_is_the_account(trace, account)
    # The physical pages are segments, beside the tensor-level cudaMalloc.
    report = report_json(trace)
    assert report["summary"]["level"] == "mixed"
    levels = {(r["api"], r["level"]) for r in parse_records(trace) if r["record"] == "context"}
    assert ("cuMemCreate", "segment") in levels and ("cudaMalloc", "tensor") in levels
    # At most 3 pages mapped at once, into 16 pages of reserved address space.
    assert report["summary"]["mapped_peak_bytes"] == 3 * (2 << 20)
    assert report["summary"]["reserved_peak_bytes"] == 16 * (2 << 20)
    # The report agrees with the simulated card's own count of what is live at the end.
    assert report["summary"]["end_bytes"] == int(other["driver-live"][0][0])


def test_virtual_memory_is_freed_when_the_driver_frees_it(build, tmp_path):
    account, other, _, trace = traced(build, tmp_path, "virtual_memory",
                                      MEMTRACE_GPU_MEMORY=1 << 30)
    recorded = recorded_events(trace)
    assert [r[:4] for r in recorded] == account
    # The failed creation names its API; NCCL's buffer was on device 1.
    assert recorded[-2][:2] == ("failed-alloc", "cuMemCreate")
    assert recorded[0][4] == 1 and recorded[1][4] == 1
    report = report_json(trace)["summary"]
    assert report["end_bytes"] == int(other["driver-live"][0][0]) == 2 << 20
    assert report["peak_bytes"] == live_and_peak(account)[1]
    assert report["level"] == "segment"
    # Host memory is no event at all.
    host = int(other["untraced"][0][0], 16)
    assert host not in {r[2] for r in recorded}
    # Every map, unmap, reservation and its end is a record of its own.
    kinds = [r["record"] for r in parse_records(trace)]
    assert kinds.count("map") == 7 and kinds.count("unmap") == 5
    assert kinds.count("reserve") == 3 and kinds.count("address-free") == 2


def test_device_memory_outside_any_allocation_call(build, tmp_path):
    context = 300 << 20
    _, other, _, trace = traced(build, tmp_path, "lookup_entry_point",
                                MEMTRACE_GPU_CONTEXT_BYTES=context)
    # memtrace read the device's memory in relaxed capture mode (2), never the thread's own.
    assert other["memory-info-capture-mode"] == [["2"]]
    readings = [r for r in parse_records(trace) if r["record"] == "device-memory"]
    assert len(readings) >= 2  # after the first event, and at exit at least
    report = report_json(trace)
    outside = report["live"]["outside_allocations"]
    # The simulated card's used memory is its live allocations plus the context: all of the
    # context is outside any allocation call, whichever reading is nearest.
    assert outside["bytes"] == context
    (device,) = outside["devices"]
    assert device["device"] == 0 and device["outside_bytes"] == context
    assert device["used_bytes"] == device["live_bytes"] + context
    text = run([build.report, trace]).stdout
    assert "outside any allocation call: context and libraries" in text
    assert "cuMemGetInfo" in text and "approximate" in text


def test_no_device_memory_reading_without_a_context(build, tmp_path):
    # virtual_memory makes no context (the virtual memory calls need none): cuCtxGetDevice says
    # so throughout, as the driver does before one is made, and memtrace reads nothing.
    _, _, _, trace = traced(build, tmp_path, "virtual_memory")
    assert not [r for r in parse_records(trace) if r["record"] == "device-memory"]
    assert "outside_allocations" not in report_json(trace)["live"]
    assert "outside any allocation call" not in run([build.report, trace]).stdout


def test_dlsym_keeps_the_callers_scope(build, tmp_path):
    """RTLD_DEFAULT from a library loaded RTLD_LOCAL finds that library's own dependencies, and
    RTLD_NEXT looks after the caller, not after libmemtrace.so: memtrace's dlsym jumps to the C
    library's with the caller's frame in place (allocator/dlsym_entry.S). The answers are the
    same with and without memtrace."""
    def scopes(env):
        result = run([build.program("dlopen_local"), build.workload, "lookups"], env)
        return {words[0]: words[1] for words in program_account(result.stdout)[1]["scope"]}

    alone = scopes({})
    assert alone == {"default-cudaRuntimeGetVersion": "libcudart.so.13",
                     "next-cudaMalloc": "libcudart.so.13",
                     "next-cudaGetDevice": "libcudart.so.13"}
    assert scopes(preloaded(tmp_path / "scopes.bin")) == alone


def test_gpu_frameworks_check_runs_dry_without_a_gpu(build, tmp_path):
    """tools/gpu/frameworks_check.sh, which the GPU check runs, works here in its dry run: its
    C++ jobs against the simulated GPU's runtime, the framework jobs said not run."""
    run([build.root / "tools" / "gpu" / "frameworks_check.sh", build.dir, tmp_path, "--dry-run"],
        timeout=300)
    figures = json.loads((tmp_path / "frameworks.json").read_text())
    assert figures["lookup-facts"]["ok"] is True
    assert figures["lookup-facts"]["facts"]["cuMemAlloc@13000/0"] == 1
    dynamic = figures["plain-cuda (dynamic runtime)"]
    assert dynamic["ok"] is True and dynamic["apis"] == ["cudaMalloc", "cudaMallocAsync"]
    for job in ("plain-cuda (static runtime)", "torch-expandable", "torch-graphs", "torch-nccl",
                "cupy", "jax"):
        assert figures[job]["ok"] is None, job
    markdown = (tmp_path / "frameworks.md").read_text()
    assert "dry run, no GPU" in markdown and markdown.count("| not run |") == 6
