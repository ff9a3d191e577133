"""The simulated cuDNN (simulator/libraries/cudnn*.cpp) under PyTorch's CUDA build, each program
a child process on a simulated H200 (mem_tracer.simulated_gpu.environment): convolutions and
attention run through cuDNN's backend API as on the card, plans are built and executed, what
PyTorch allocates around a call is PyTorch's own arithmetic plus the workspace the simulated
cuDNN answers (0 unless the device profile measured one: Note [Engines and workspaces]), the
H200's inference rows that go through cuDNN come out as the card's, and what the simulator
cannot answer is refused in one line. The enumerations the library declares itself are checked
against NVIDIA's cudnn_graph.h from the wheels.

    ctest --test-dir build -R simulator.cudnn     # under the CUDA build of torch's Python
    build/venv-torch-cuda/bin/python -m pytest -q tests/simulator/test_cudnn.py

It runs under the Python ctest gives it (memtrace_add_cuda_torch_pytest: the venv with
PyTorch's CUDA build, or MEMTRACE_CUDA_TORCH_PYTHON), and its children under the same one
(sys.executable); a Python whose torch is not a CUDA build fails here, it does not skip.

Every child ends with os._exit(0) after flushing its answer: on the simulated device an
autograd thread can still be releasing its last graph task while CPython finalizes, which
aborts the process ("terminate called without an active exception", PyTorch's
Engine::thread_main taking the GIL after Py_Finalize); the answer is complete by then."""
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from memtrace_testing import BUILD, ROOT

sys.path.insert(0, str(ROOT / "python"))
from mem_tracer.simulated_gpu import environment

SIMULATOR = BUILD / "simulator"
CUDNN = SIMULATOR / "lib" / "libcudnn.so.9"
TRUTH = json.loads((ROOT / "tests" / "estimator" / "truth-h200.json").read_text())
MiB = 1 << 20
# torch 2.11 (the H200's) allocated a 1 MiB cuBLASLt workspace that torch 2.12 and later (this
# venv's 2.14) do not (tests/estimator: every row exactly 1 MiB low): the card's allocated and
# requested peaks are that much higher, its reserved peak equal or one 2 MiB segment higher.
CUBLASLT_WORKSPACE = MiB
SMALL_SEGMENT = 2 * MiB


@pytest.fixture(scope="module", autouse=True)
def cuda_build_of_torch():
    """The simulated cuDNN is what PyTorch's CUDA build calls: under any other torch nothing
    here tests it, so the module fails, naming the Python it ran under."""
    import torch
    assert torch.backends.cuda.is_built(), (
        f"{sys.executable}: its torch ({torch.__version__}) is not a CUDA build; run this file "
        "under the venv `make cuda-torch-venv` makes (ctest's simulator.cudnn does)")


def round512(size):
    """What PyTorch's caching allocator counts for a request (multiples of 512 bytes)."""
    return max(512, (size + 511) // 512 * 512)


def run_on_h200(code, tmp_path, profile="h200", timeout=300):
    """Runs `code` (a Python program printing one JSON line last) on the simulated card with
    the simulated cuDNN's log on: (its answer, the log's events, its stderr)."""
    if not CUDNN.exists():
        pytest.fail(f"the simulated GPU is not built ({CUDNN} missing): build the simulator "
                    "targets (ninja simgpu_cudnn ...) first")
    script = tmp_path / "program.py"
    script.write_text(textwrap.dedent(code))
    log = tmp_path / "cudnn.jsonl"
    env = environment(profile, base={k: v for k, v in os.environ.items()
                                     if not k.startswith("MEMTRACE_")})
    env.update({"MEMTRACE_GPU_CUDNN_LOG": str(log), "MEMTRACE_SIMULATOR_DIR": str(SIMULATOR),
                "PYTHONPATH": os.pathsep.join([str(ROOT / "tests" / "estimator"),
                                               str(ROOT / "python")])})
    result = subprocess.run([sys.executable, str(script)], env=env, capture_output=True,
                            text=True, timeout=timeout, check=False)
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    assert lines, f"no answer\n{result.stdout}\n{result.stderr}"
    events = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return json.loads(lines[-1]), events, result.stderr


def plans(events, operation=None):
    return [e for e in events if e["event"] == "plan"
            and (operation is None or e["graph"]["operation"] == operation)]


def executions(events, operation=None):
    return [e for e in events if e["event"] == "execute"
            and (operation is None or e["operation"] == operation)]


def refusals(stderr):
    return [line for line in stderr.splitlines() if "is not simulated" in line]


# ---- The declarations against NVIDIA's header ----------------------------------------------

CHECKS = r'''
#include <cudnn_graph.h>
#include "simulator/libraries/cudnn_enums.h"
#define DESCRIPTOR(name, value) static_assert(CUDNN_BACKEND_##name##_DESCRIPTOR == value, #name);
SIMGPU_CUDNN_DESCRIPTOR_TYPES(DESCRIPTOR)
#define TYPE(name, value, bytes) static_assert(CUDNN_TYPE_##name == value, #name);
SIMGPU_CUDNN_ATTRIBUTE_TYPES(TYPE)
#define DATA(name, value) static_assert(CUDNN_DATA_##name == value, #name);
SIMGPU_CUDNN_DATA_TYPES(DATA)
#define NUMERICAL(name, value) static_assert(CUDNN_NUMERICAL_NOTE_##name == value, #name);
SIMGPU_CUDNN_NUMERICAL_NOTES(NUMERICAL)
#define BEHAVIOR(name, value) static_assert(CUDNN_BEHAVIOR_NOTE_##name == value, #name);
SIMGPU_CUDNN_BEHAVIOR_NOTES(BEHAVIOR)
#define HEURISTIC(name, value) static_assert(CUDNN_HEUR_MODE_##name == value, #name);
SIMGPU_CUDNN_HEURISTIC_MODES(HEURISTIC)
#define STATUS(name, value) static_assert(CUDNN_STATUS_##name == value, #name);
SIMGPU_CUDNN_STATUSES(STATUS)
#define ATTRIBUTE(name, value) static_assert(CUDNN_ATTR_##name == value, #name);
SIMGPU_CUDNN_ATTRIBUTES(ATTRIBUTE)
// The bytes of one element the library reads for each attribute type.
static_assert(sizeof(cudnnBackendDescriptor_t) == 8 && sizeof(cudnnHandle_t) == 8, "pointers");
static_assert(sizeof(cudnnFraction_t) == 16 && sizeof(bool) == 1, "fraction, boolean");
static_assert(sizeof(cudnnDataType_t) == 4 && sizeof(cudnnBackendKnobType_t) == 4, "enums");
int main() { return 0; }
'''


def test_enumerations_equal_nvidia_cudnn_graph_h(tmp_path):
    # The nvidia-cudnn wheel PyTorch's CUDA build depends on, where this Python finds it.
    import nvidia.cudnn
    headers = [Path(folder) / "include" / "cudnn_graph.h" for folder in nvidia.cudnn.__path__]
    headers = [header for header in headers if header.exists()]
    assert headers, (f"no include/cudnn_graph.h in {list(nvidia.cudnn.__path__)} (the nvidia-cudnn "
                     f"wheel of {sys.executable} moved it): nothing to check the enumerations against")
    include = headers[0].parent
    cuda = include.parent.parent / "cu13" / "include"
    source = tmp_path / "checks.cpp"
    source.write_text(CHECKS)
    result = subprocess.run(["g++", "-std=c++17", "-fsyntax-only", f"-I{include}", f"-I{cuda}",
                             "-I/usr/local/cuda/include", f"-I{ROOT}", str(source)],
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    # Every attribute name of the header is in the list (a refusal names it, not a number).
    text = (include / "cudnn_graph.h").read_text()
    names = set(re.findall(r"\b(CUDNN_ATTR_\w+)\s*(?:CUDNN_DEPRECATED_ENUM\s*)?=", text))
    listed = (ROOT / "simulator" / "libraries" / "cudnn_enums.h").read_text()
    missing = sorted(n for n in names if f"X({n[len('CUDNN_ATTR_'):]}," not in listed)
    assert not missing, f"cudnn_enums.h lacks {missing}"


# ---- The backend API, called as cudnn_frontend calls it --------------------------------------

BACKEND_PROGRAM = r'''
import ctypes as c, json, os, sys
lib = c.CDLL("libcudnn.so.9")  # the simulated one, preloaded under its soname
lib.cudnnBackendSetAttribute.argtypes = [c.c_void_p, c.c_int, c.c_int, c.c_int64, c.c_void_p]
lib.cudnnBackendGetAttribute.argtypes = [c.c_void_p, c.c_int, c.c_int, c.c_int64,
                                         c.POINTER(c.c_int64), c.c_void_p]
lib.cudnnBackendExecute.argtypes = [c.c_void_p, c.c_void_p, c.c_void_p]
# cudnn_graph.h's numbers (checked against the header by the test above, through cudnn_enums.h)
TENSOR, CONVOLUTION, CONV_FWD, GRAPH, HEUR, CFG, ENGINE, PLAN, PACK = 17, 1, 10, 15, 4, 3, 2, 5, 16
T_HANDLE, T_DATA, T_INT64, T_FLOAT, T_PTR, T_MODE, T_HEUR, T_NOTE, T_DESC, T_INT32, T_CHAR = (
    0, 1, 3, 4, 6, 7, 8, 11, 15, 23, 24)
HALF = 2

def create(kind):
    d = c.c_void_p()
    assert lib.cudnnBackendCreateDescriptor(kind, c.byref(d)) == 0
    return d

def put(d, attr, typ, values, ctype=c.c_int64):
    array = (ctype * len(values))(*values)
    return lib.cudnnBackendSetAttribute(d, attr, typ, len(values), array)

def put_descriptors(d, attr, descriptors):
    array = (c.c_void_p * len(descriptors))(*[x.value for x in descriptors])
    return lib.cudnnBackendSetAttribute(d, attr, T_DESC, len(descriptors), array)

def get(d, attr, typ, n, ctype=c.c_int64, array=None):
    array = array if array is not None else (ctype * max(n, 1))()
    count = c.c_int64(-1)
    status = lib.cudnnBackendGetAttribute(d, attr, typ, n, c.byref(count), array if n else None)
    return status, count.value, list(array)[:max(count.value, 0)] if n else []

def tensor(uid, dims):
    t = create(TENSOR)
    strides = [1] * len(dims)
    for i in range(len(dims) - 2, -1, -1):
        strides[i] = strides[i + 1] * dims[i + 1]
    put(t, 901, T_DATA, [HALF], c.c_int32)
    put(t, 902, T_INT64, dims)
    put(t, 903, T_INT64, strides)
    put(t, 906, T_INT64, [uid])
    put(t, 900, T_INT64, [16])
    assert lib.cudnnBackendFinalize(t) == 0
    return t

out = {}
handle = c.c_void_p()
assert lib.cudnnCreate(c.byref(handle)) == 0
x = tensor(ord("x"), [8, 64, 56, 56])
w = tensor(ord("w"), [64, 64, 3, 3])
y = tensor(ord("y"), [8, 64, 56, 56])
conv = create(CONVOLUTION)
put(conv, 100, T_DATA, [0], c.c_int32)
put(conv, 101, T_MODE, [1], c.c_int32)
put(conv, 106, T_INT64, [2])
for attr, values in ((102, [1, 1]), (103, [1, 1]), (104, [1, 1]), (105, [1, 1])):
    put(conv, attr, T_INT64, values)
assert lib.cudnnBackendFinalize(conv) == 0
op = create(CONV_FWD)
for attr, d in ((704, x), (703, w), (705, y), (702, conv)):
    assert put_descriptors(op, attr, [d]) == 0
put(op, 700, T_FLOAT, [1.0], c.c_float)
put(op, 701, T_FLOAT, [0.0], c.c_float)
assert lib.cudnnBackendFinalize(op) == 0
graph = create(GRAPH)
put_descriptors(graph, 801, [op])
put(graph, 800, T_HANDLE, [handle.value], c.c_void_p)
assert lib.cudnnBackendFinalize(graph) == 0
out["global_count"] = get(graph, 802, T_INT64, 1)[2][0]
heur = create(HEUR)
put_descriptors(heur, 201, [graph])
put(heur, 200, T_HEUR, [0], c.c_int32)
assert lib.cudnnBackendFinalize(heur) == 0
out["results_count"] = get(heur, 202, T_DESC, 0)[1]
configs = [create(CFG) for _ in range(3)]
array = (c.c_void_p * 3)(*[d.value for d in configs])
status, written, _ = get(heur, 202, T_DESC, 3, array=array)
out["results_written"] = [status, written]
status, written, _ = get(heur, 202, T_DESC, 1, array=(c.c_void_p * 1)(configs[2].value))
out["one_result_written"] = [status, written]
engine = create(ENGINE)
out["cfg_engine"] = get(configs[0], 300, T_DESC, 1, array=(c.c_void_p * 1)(engine.value))[:2]
out["engine_index"] = get(engine, 1301, T_INT64, 1)[2]
out["engine_notes"] = get(engine, 1303, T_NOTE, 10, c.c_int32)[2]
out["engine1_notes"] = (lambda e: (get(configs[1], 300, T_DESC, 1, array=(c.c_void_p * 1)(e.value)),
                                   get(e, 1303, T_NOTE, 10, c.c_int32)[2])[1])(create(ENGINE))
out["cfg_workspace"] = get(configs[0], 303, T_INT64, 1)[2]
# A refused attribute: one line, however often it is asked for.
out["intermediate_info"] = [get(configs[0], 301, T_DESC, 1)[0], get(configs[0], 301, T_DESC, 1)[0]]
out["dims_as_int32"] = get(x, 902, T_INT32, 4, c.c_int32)[0]
out["dims"] = get(x, 902, T_INT64, 4)[2]
# An engine the graph has not: not supported, as the real library says of one.
bad = create(ENGINE)
put_descriptors(bad, 1300, [graph])
put(bad, 1301, T_INT64, [7])
out["engine_7"] = lib.cudnnBackendFinalize(bad)
plan = create(PLAN)
put_descriptors(plan, 401, [configs[0]])
assert lib.cudnnBackendFinalize(plan) == 0
out["plan_workspace"] = get(plan, 402, T_INT64, 1)[2][0]
size = get(plan, 405, T_CHAR, 0)[1]
status, _, chars = get(plan, 405, T_CHAR, size, c.c_char)
text = b"".join(chars).decode()
again = create(PLAN)
put(again, 405, T_CHAR, list(text.encode()), c.c_char)
out["json_plan"] = [lib.cudnnBackendFinalize(again), get(again, 402, T_INT64, 1)[2][0],
                    json.loads(text)["graph"]["operation"]]
def pack(uids, workspace):
    p = create(PACK)
    put(p, 1000, T_INT64, uids)
    put(p, 1001, T_PTR, [0x1000 * (i + 1) for i in range(len(uids))], c.c_void_p)
    put(p, 1003, T_PTR, [workspace], c.c_void_p)
    assert lib.cudnnBackendFinalize(p) == 0
    return p
out["execute"] = lib.cudnnBackendExecute(handle, plan, pack([ord("x"), ord("w"), ord("y")], 0))
out["execute_without_y"] = lib.cudnnBackendExecute(handle, plan, pack([ord("x"), ord("w")], 0))
out["execute_json_plan"] = lib.cudnnBackendExecute(handle, again,
                                                   pack([ord("x"), ord("w"), ord("y")], 0x5000))
out["execute_unfinalized"] = lib.cudnnBackendExecute(handle, create(PLAN), pack([1], 0))
print(json.dumps(out)); sys.stdout.flush()
'''


def test_backend_api_answers_as_cudnn_frontend_expects(tmp_path):
    out, events, stderr = run_on_h200(BACKEND_PROGRAM, tmp_path)
    assert out["global_count"] == 2
    assert out["results_count"] == 2
    # With an array, the count is what was written: cudnn_frontend sizes its list by it.
    assert out["results_written"] == [0, 2]
    assert out["one_result_written"] == [0, 1]
    assert out["cfg_engine"] == [0, 1]
    assert out["engine_index"] == [0]
    assert out["engine_notes"] == [0]  # CUDNN_NUMERICAL_NOTE_TENSOR_CORE: a half convolution
    assert out["engine1_notes"] == []
    assert out["cfg_workspace"] == [0]  # none measured in the h200 profile
    assert out["intermediate_info"] == [3000, 3000]
    lines = refusals(stderr)
    refused = [line for line in lines if "CUDNN_ATTR_ENGINECFG_INTERMEDIATE_INFO" in line]
    assert len(refused) == 1, stderr
    assert "cudnnBackendGetAttribute" in refused[0] and refused[0].endswith("it returns 3000")
    assert out["dims_as_int32"] == 2010  # CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE, said in one line
    assert any("CUDNN_ATTR_TENSOR_DIMENSIONS" in line and "CUDNN_TYPE_INT32" in line
               for line in lines), stderr
    assert out["dims"] == [8, 64, 56, 56]
    assert out["engine_7"] == 3000
    assert out["plan_workspace"] == 0
    assert out["json_plan"] == [0, 0, "convolution_forward"]
    assert out["execute"] == 0
    assert out["execute_without_y"] == 2000  # a tensor of the graph without its pointer
    assert out["execute_json_plan"] == 0
    assert out["execute_unfinalized"] == 2004
    assert [e["plan"] for e in executions(events)] == [1, 2]
    assert plans(events)[0]["graph"]["tensors"]["x"]["dims"] == [8, 64, 56, 56]


# ---- PyTorch's convolutions --------------------------------------------------------------------

CONVOLUTIONS = r'''
import json, os, sys, torch, torch.nn.functional as F
shapes = []
for dtype in (torch.float32, torch.float16, torch.bfloat16):
    for dims, channels_last in ((1, False), (2, False), (3, False), (2, True)):
        x = torch.randn(2, 4, *([12] * dims), device="cuda", dtype=dtype)
        w = torch.randn(8, 4, *([3] * dims), device="cuda", dtype=dtype)
        if channels_last:
            x, w = x.to(memory_format=torch.channels_last), w.to(memory_format=torch.channels_last)
        x.requires_grad_(); w.requires_grad_()
        y = (F.conv1d, F.conv2d, F.conv3d)[dims - 1](x, w, stride=2, padding=1)
        y.sum().backward()
        shapes.append([str(dtype), dims, channels_last, list(y.shape), list(x.grad.shape),
                       list(w.grad.shape), y.is_contiguous(memory_format=torch.channels_last)])
x = torch.randn(2, 4, 8, 8, device="cuda", requires_grad=True)
w = torch.randn(4, 6, 3, 3, device="cuda", requires_grad=True)
y = F.conv_transpose2d(x, w, stride=2, padding=1)
y.sum().backward()
print(json.dumps({"shapes": shapes, "transpose": [list(y.shape), list(w.grad.shape)]}))
sys.stdout.flush(); os._exit(0)
'''


def test_convolutions_forward_and_backward_run_through_backend_plans(tmp_path):
    out, events, stderr = run_on_h200(CONVOLUTIONS, tmp_path)
    expected = {1: [2, 8, 6], 2: [2, 8, 6, 6], 3: [2, 8, 6, 6, 6]}
    assert len(out["shapes"]) == 12
    for dtype, dims, channels_last, y, dx, dw, y_channels_last in out["shapes"]:
        assert y == expected[dims], (dtype, dims)
        assert dx == [2, 4] + [12] * dims and dw == [8, 4] + [3] * dims
        assert y_channels_last == channels_last or dims != 2
    assert out["transpose"] == [[2, 6, 15, 15], [4, 6, 3, 3]]
    for operation in ("convolution_forward", "convolution_backward_data",
                      "convolution_backward_filter"):
        assert plans(events, operation), operation
        assert executions(events, operation), operation
    assert {p["graph"]["data_type"] for p in plans(events)} == {"float", "half", "bfloat16"}
    # channels_last reaches cuDNN as NHWC strides (the channel's stride is 1).
    assert any(p["graph"]["tensors"]["x"]["strides"][1] == 1 for p in plans(events)
               if "x" in p["graph"]["tensors"] and len(p["graph"]["tensors"]["x"]["dims"]) == 4)
    assert all(e["workspace_bytes"] == 0 for e in executions(events))
    assert not refusals(stderr), stderr


ONE_CONVOLUTION = r'''
import json, os, sys, torch, torch.nn.functional as F
x = torch.randn(8, 64, 56, 56, device="cuda", dtype=torch.float16)
w = torch.randn(64, 64, 3, 3, device="cuda", dtype=torch.float16)
torch.cuda.synchronize()
before = torch.cuda.memory_stats()
torch.cuda.reset_peak_memory_stats()
y = F.conv2d(x, w, padding=1)
torch.cuda.synchronize()
after = torch.cuda.memory_stats()
print(json.dumps({
    "allocated": after["allocated_bytes.all.peak"] - before["allocated_bytes.all.current"],
    "requested": after["requested_bytes.all.peak"] - before["requested_bytes.all.current"],
    "output": y.numel() * y.element_size()}))
sys.stdout.flush(); os._exit(0)
'''


def test_a_convolution_allocates_its_output_and_no_workspace_unmeasured(tmp_path):
    out, events, _ = run_on_h200(ONE_CONVOLUTION, tmp_path)
    assert out["output"] == 8 * 64 * 56 * 56 * 2
    assert out["allocated"] == round512(out["output"])
    assert out["requested"] == out["output"]
    assert [e["workspace_bytes"] for e in executions(events)] == [0]


def test_a_measured_workspace_in_the_profile_is_allocated_for_the_call(tmp_path):
    profile = json.loads((SIMULATOR / "profiles" / "h200.json").read_text())
    workspace = 3_000_000
    profile["cudnn_workspaces"]["entries"] = [
        {"match": {"operation": "convolution_backward_data"}, "workspace_bytes": 1},
        {"match": {"operation": "convolution_forward", "data_type": "half",
                   "tensors": {"x": {"dims": [8, 64, 56, 56]}, "w": {"dims": [64, 64, 3, 3]}},
                   "conv": {"pre_paddings": [1, 1]}},
         "workspace_bytes": workspace, "measured": "a test's own number"}]
    path = tmp_path / "h200-measured.json"
    path.write_text(json.dumps(profile))
    out, events, stderr = run_on_h200(ONE_CONVOLUTION, tmp_path, profile=str(path))
    # PyTorch allocates the plan's workspace after the output, for the length of the call.
    assert out["allocated"] == round512(out["output"]) + round512(workspace)
    assert out["requested"] == out["output"] + workspace
    assert [(e["workspace_bytes"], e["workspace_given"]) for e in executions(events)] == [
        (workspace, True)]
    assert plans(events)[0]["workspace_source"] == "measured: a test's own number"
    assert "plans of convolution_forward" not in stderr  # measured: nothing approximated


# ---- PyTorch's attention ------------------------------------------------------------------------

ATTENTION = r'''
import json, os, sys, torch, torch.nn.functional as F
B, H, L, D = 2, 4, 128, 64
out = {}
for dtype in (torch.float16, torch.bfloat16):
    q, k, v = (torch.randn(B, H, L, D, device="cuda", dtype=dtype, requires_grad=True)
               for _ in range(3))
    torch.cuda.synchronize()
    before = torch.cuda.memory_stats()
    torch.cuda.reset_peak_memory_stats()
    o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.cuda.synchronize()
    after = torch.cuda.memory_stats()
    o.sum().backward()
    out[str(dtype)] = {
        "backward": o.grad_fn.name(), "shape": list(o.shape), "grad": list(q.grad.shape),
        "allocated": after["allocated_bytes.all.peak"] - before["allocated_bytes.all.current"],
        "requested": after["requested_bytes.all.peak"] - before["requested_bytes.all.current"]}
with torch.no_grad():
    torch.cuda.synchronize()
    before = torch.cuda.memory_stats()
    torch.cuda.reset_peak_memory_stats()
    F.scaled_dot_product_attention(q.detach(), k.detach(), v.detach())
    torch.cuda.synchronize()
    out["inference_requested"] = (torch.cuda.memory_stats()["requested_bytes.all.peak"]
                                  - before["requested_bytes.all.current"])
print(json.dumps(out)); sys.stdout.flush(); os._exit(0)
'''


def test_attention_takes_cudnn_and_allocates_output_and_float_stats(tmp_path):
    out, events, stderr = run_on_h200(ATTENTION, tmp_path)
    B, H, L, D = 2, 4, 128, 64
    output, stats = B * H * L * D * 2, B * H * L * 1 * 4
    # cuDNN attention's forward in training allocates the output, the float32 softmax stats of
    # (B, H, L, 1), and the int64 philox seed and offset it returns even without dropout.
    seed_and_offset = 2 * 8
    for dtype in ("torch.float16", "torch.bfloat16"):
        row = out[dtype]
        assert row["backward"] == "ScaledDotProductCudnnAttentionBackward0"
        assert row["shape"] == [B, H, L, D] and row["grad"] == [B, H, L, D]
        assert row["requested"] == output + stats + seed_and_offset
        assert row["allocated"] == round512(output) + round512(stats) + 2 * round512(8)
    assert out["inference_requested"] == output + seed_and_offset  # no stats without grad
    forward = plans(events, "sdpa_fwd")
    assert {p["graph"]["data_type"] for p in forward} == {"half", "bfloat16"}
    assert any("stats" in p["graph"].get("softmax", {}).get("tensors", {}) for p in forward)
    # The backward is cudnn_frontend's composite graph; its own workspace (dQ accumulated in
    # float) is given to the plan, the plan itself asks for none.
    backward = [e for e in executions(events) if e["operation"] != "sdpa_fwd"]
    assert backward and all(e["workspace_given"] for e in backward)
    assert not refusals(stderr), stderr


# ---- A CNN's training step, with and without cudnn.benchmark -------------------------------------

TRAINING = r'''
import json, os, sys, torch
import models  # tests/estimator/models.py
torch.manual_seed(0)
torch.backends.cudnn.benchmark = sys.argv[1] == "benchmark" if len(sys.argv) > 1 else False
model = models.ResNetLike(layers=(1, 1, 1, 1), width=16, classes=10).cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(4, 3, 64, 64, device="cuda")
with torch.no_grad():
    inference = list(model.eval()(x).shape)
model.train()
peaks = []
for benchmark in (False, True):
    torch.backends.cudnn.benchmark = benchmark
    batch = x if not benchmark else torch.randn(2, 3, 48, 48, device="cuda")  # new shapes
    torch.cuda.reset_peak_memory_stats()
    loss = model(batch).float().sum()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    peaks.append(torch.cuda.max_memory_allocated())
print(json.dumps({"inference": inference, "peaks": peaks,
                  "grads_freed": all(p.grad is None for p in model.parameters())}))
sys.stdout.flush(); os._exit(0)
'''


def test_cnn_forward_and_training_step_with_and_without_benchmark(tmp_path):
    out, events, stderr = run_on_h200(TRAINING, tmp_path)
    assert out["inference"] == [4, 10]
    assert all(peak > 0 for peak in out["peaks"]) and out["grads_freed"]
    # The legacy batch normalization's scratch sizes are answered (said once), not refused.
    assert "cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize: 0 bytes" in stderr
    assert "cudnnGetBatchNormalizationBackwardExWorkspaceSize: 0 bytes" in stderr
    assert not refusals(stderr), stderr
    # Without benchmark PyTorch builds the heuristics' first plan; with it, a plan of every
    # engine offered (both engines of one graph), and times each with CUDA events.
    built = {}
    for plan in plans(events):
        built.setdefault(json.dumps(plan["graph"], sort_keys=True), []).append(plan["engine"])
    assert any(set(engines) == {0, 1} for engines in built.values())
    assert any(engines == [0] for engines in built.values())
    runs = {}
    for execution in executions(events):
        runs[execution["plan"]] = runs.get(execution["plan"], 0) + 1
    assert max(runs.values()) > 1  # benchmark runs its plans more than once
    for operation in ("convolution_forward", "convolution_backward_data",
                      "convolution_backward_filter"):
        assert executions(events, operation), operation
