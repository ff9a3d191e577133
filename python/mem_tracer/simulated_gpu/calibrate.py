"""What a card's libraries choose, measured on the card and written into a device profile.

    python -m mem_tracer.calibrate PROFILE [--out FILE] [--dry-run] -- COMMAND [ARGS...]

runs COMMAND (a workload: `python train.py`) on the simulated card PROFILE names, collects every
size its libraries answered without knowing it (Note [Sizes nobody measured] in
simulator/core/sizes.cpp), asks the card's own libraries the same questions, and writes a copy of
the profile whose tables hold the card's answers (Note [Calibrating a profile]). Run it on a
machine with the card; --dry-run asks the simulated card instead (every step but the card's
answers, to check a workload and the output here). The next simulated run with the written
profile (memtrace run --gpu FILE) takes the card's figures exactly."""
from __future__ import annotations

import argparse
import ctypes
import datetime
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .. import simulated_gpu
from ..errors import MemTracerError

# Note [Calibrating a profile]
# A simulated library answers some sizes without knowing them; a device profile's tables hold the
# card's answers, which then win (measured_sizes for cuFFT, cuSOLVER and cuDNN's RNN API;
# cudnn_workspaces for cuDNN's plans, Note [Engines and workspaces]). This command fills them:
#  1. the workload runs on the simulated card with MEMTRACE_GPU_SIZES_LOG, which lists each
#     question (library, call, shapes) and the simulated answer;
#  2. a process on the card (a plain CUDA run; --dry-run: the simulated card again) asks each
#     question of the card's own library, the same call with the same shapes through ctypes
#     (cufftXtMakePlanMany, cusolverDn*_bufferSize, cudnnGetRNNTempSpaceSizes,
#     cudnnDropoutGetStatesSize, batch normalization's cudnnGetBatchNormalization*Size), or, for a
#     cuDNN convolution plan, runs the convolution alone
#     through PyTorch and takes the workspace from its counters (requested_bytes' peak over the
#     call, less what was requested before and the output: PyTorch allocates the workspace after
#     the output and frees it at the call's end);
#  3. the profile is copied with one entry a question the card answered: measured_sizes'
#     {"library", "call", "match": the question's shapes, "bytes", "measured": the card, torch,
#     and the date}, cudnn_workspaces' {"match": the plan's description, "workspace_bytes",
#     "measured"}; an entry with the same match is replaced. Questions the card was not asked
#     (cuDNN's attention and fused plans, cuSPARSE, cuFFT's planning calls other than PyTorch's
#     cufftXtMakePlanMany) are listed, not written. The card's answers are its library's for the
#     shapes the simulated run logged: where an answer depends on more than the log says (a
#     packed RNN batch's sequence lengths, taken as all full; the fill mode of a factorization,
#     taken as lower), the log's shapes are what is measured.


def _questions(log: Path) -> list[dict[str, Any]]:
    """The distinct questions MEMTRACE_GPU_SIZES_LOG wrote, with the simulated answer."""
    seen: dict[str, dict[str, Any]] = {}
    if not log.exists():
        return []
    for line in log.read_text().splitlines():
        entry = json.loads(line)
        key = json.dumps([entry["library"], entry["call"], entry["shapes"]], sort_keys=True)
        seen.setdefault(key, entry)
    return list(seen.values())


def collect(profile: simulated_gpu.Profile, command: list[str]) -> list[dict[str, Any]]:
    """Runs `command` on the simulated card with the sizes log on; its questions."""
    with tempfile.TemporaryDirectory(prefix="memtrace-calibrate-") as folder:
        log = Path(folder) / "sizes.jsonl"
        environment = simulated_gpu.environment(profile)
        environment["MEMTRACE_GPU_SIZES_LOG"] = str(log)
        status = subprocess.call(command, env=environment)
        if status != 0:
            raise MemTracerError(f"the workload failed on the simulated card (exit status "
                                 f"{status}): {' '.join(command)}")
        return _questions(log)


# ---- Asking the card (runs in the measuring process: --measure) --------------------------

# cudaDataType of the element names the simulated libraries log.
_CUDA_TYPES = {"float": 0, "double": 1, "half": 2, "complex64": 4, "complex128": 5}
_ELEMENT_BYTES = {"float": 4, "double": 8, "half": 2, "complex64": 8, "complex128": 16}
_FFT_TYPES = {"R_32F": 0, "R_64F": 1, "R_16F": 2, "C_32F": 4, "C_64F": 5, "C_16F": 6,
              "R_16BF": 14, "C_16BF": 15}
_CUDNN_TYPES = {"float": 0, "double": 1, "half": 2, "bfloat16": 9}
_CELLS = {"rnn_relu": 0, "rnn_tanh": 1, "lstm": 2, "gru": 3}


class _NotAsked(Exception):
    """A question this calibration does not put to the card, and why."""


def _check(status: int, what: str) -> None:
    if status != 0:
        raise _NotAsked(f"{what} returned {status}")


def _device_bytes(count: int) -> int:
    """The address of a device buffer of `count` bytes (at least 1), kept for the process."""
    import torch

    buffer = torch.empty(max(count, 1), dtype=torch.uint8, device="cuda")
    _KEPT.append(buffer)
    return int(buffer.data_ptr())


_KEPT: list[Any] = []


def _ask_cufft(question: dict[str, Any]) -> int:
    if question["call"] != "cufftXtMakePlanMany":
        raise _NotAsked("only cufftXtMakePlanMany (PyTorch's) is asked")
    shapes = question["shapes"]
    rank = len(shapes["n"])
    layout = shapes.get("layout", True)

    def embed(key: str) -> Any:
        return None if layout is True else (ctypes.c_longlong * rank)(*layout[key])

    def step(key: str) -> ctypes.c_longlong:
        return ctypes.c_longlong(1 if layout is True else int(layout[key]))

    library = ctypes.CDLL("libcufft.so.12")
    plan = ctypes.c_int()
    _check(library.cufftCreate(ctypes.byref(plan)), "cufftCreate")
    try:
        _check(library.cufftSetAutoAllocation(plan, 0), "cufftSetAutoAllocation")
        sizes = (ctypes.c_longlong * rank)(*shapes["n"])
        work = ctypes.c_size_t()
        _check(library.cufftXtMakePlanMany(
            plan, rank, sizes, embed("inembed"), step("istride"), step("idist"),
            _FFT_TYPES[shapes["input"]], embed("onembed"), step("ostride"), step("odist"),
            _FFT_TYPES[shapes["output"]], ctypes.c_longlong(shapes["batch"]),
            ctypes.byref(work), _FFT_TYPES[shapes["execution"]]), "cufftXtMakePlanMany")
        return int(work.value)
    finally:
        library.cufftDestroy(plan)


def _ask_cusolver(question: dict[str, Any]) -> int:
    library = ctypes.CDLL("libcusolver.so.12")
    shapes, call = question["shapes"], question["call"]
    routine, element = shapes["routine"], shapes["type"]
    m, n, batch = int(shapes["m"]), int(shapes["n"]), int(shapes["batch"])
    handle = ctypes.c_void_p()
    _check(library.cusolverDnCreate(ctypes.byref(handle)), "cusolverDnCreate")
    size = _ELEMENT_BYTES[element]
    a = ctypes.c_void_p(_device_bytes(max(m, n) * max(m, n) * max(batch, 1) * size))
    b = ctypes.c_void_p(_device_bytes(max(m, n) * max(m, n) * max(batch, 1) * size))
    c = ctypes.c_void_p(_device_bytes(max(m, n) * max(m, n) * max(batch, 1) * size))
    vectors = 1 if shapes.get("vectors") else 0
    lwork = ctypes.c_int()
    device, host = ctypes.c_size_t(), ctypes.c_size_t()
    function = getattr(library, call)
    lower = 0  # CUBLAS_FILL_MODE_LOWER
    try:
        if call.startswith("cusolverDnX"):
            params = ctypes.c_void_p()
            _check(library.cusolverDnCreateParams(ctypes.byref(params)), "cusolverDnCreateParams")
            kind = _CUDA_TYPES[element]
            real = {4: 0, 5: 1}.get(kind, kind)  # eigenvalues are real
            if routine == "potrf":
                status = function(handle, params, lower, ctypes.c_int64(n), kind, a,
                                  ctypes.c_int64(n), kind, ctypes.byref(device),
                                  ctypes.byref(host))
            elif routine == "geqrf":
                status = function(handle, params, ctypes.c_int64(m), ctypes.c_int64(n), kind, a,
                                  ctypes.c_int64(m), kind, b, kind, ctypes.byref(device),
                                  ctypes.byref(host))
            elif routine in ("syevd", "heevd"):
                status = function(handle, params, vectors, lower, ctypes.c_int64(n), kind, a,
                                  ctypes.c_int64(n), real, b, kind, ctypes.byref(device),
                                  ctypes.byref(host))
            elif routine == "syevBatched":
                status = function(handle, params, vectors, lower, ctypes.c_int64(n), kind, a,
                                  ctypes.c_int64(n), real, b, kind, ctypes.byref(device),
                                  ctypes.byref(host), ctypes.c_int64(batch))
            elif routine == "geev":
                left = 1 if shapes.get("left") else 0
                right = 1 if shapes.get("right") else 0
                complex_kind = {0: 4, 1: 5}.get(kind, kind)
                status = function(handle, params, left, right, ctypes.c_int64(n), kind, a,
                                  ctypes.c_int64(n), complex_kind, b, kind, c, ctypes.c_int64(n),
                                  kind, c, ctypes.c_int64(n), kind, ctypes.byref(device),
                                  ctypes.byref(host))
            elif routine == "sytrs":
                status = function(handle, lower, ctypes.c_int64(n),
                                  ctypes.c_int64(shapes.get("nrhs", 1)), kind, a,
                                  ctypes.c_int64(n), b, kind, c, ctypes.c_int64(n),
                                  ctypes.byref(device), ctypes.byref(host))
            else:
                raise _NotAsked(f"the 64-bit API's {routine} is not asked")
            library.cusolverDnDestroyParams(params)
            _check(status, call)
            return int(device.value)
        info = ctypes.c_void_p()
        if routine == "potrf":
            status = function(handle, lower, n, a, n, ctypes.byref(lwork))
        elif routine in ("getrf", "geqrf"):
            status = function(handle, m, n, a, m, ctypes.byref(lwork))
        elif routine in ("orgqr", "ungqr"):
            status = function(handle, m, n, shapes["k"], a, m, b, ctypes.byref(lwork))
        elif routine in ("ormqr", "unmqr"):
            side, trans = shapes["side"], shapes["trans"]
            status = function(handle, side, trans, m, n, shapes["k"], a, m if side == 0 else n,
                              b, c, m, ctypes.byref(lwork))
        elif routine == "sytrf":
            status = function(handle, n, a, n, ctypes.byref(lwork))
        elif routine in ("syevd", "heevd"):
            status = function(handle, vectors, lower, n, a, n, b, ctypes.byref(lwork))
        elif routine in ("syevjBatched", "heevjBatched"):
            _check(library.cusolverDnCreateSyevjInfo(ctypes.byref(info)), "CreateSyevjInfo")
            status = function(handle, vectors, lower, n, a, n, b, ctypes.byref(lwork), info,
                              batch)
        elif routine == "gesvd":
            status = function(handle, m, n, ctypes.byref(lwork))
        elif routine == "gesvdj":
            _check(library.cusolverDnCreateGesvdjInfo(ctypes.byref(info)), "CreateGesvdjInfo")
            status = function(handle, vectors, 1 if shapes.get("economy") else 0, m, n, a, m, b,
                              c, m, c, n, ctypes.byref(lwork), info)
        elif routine == "gesvdjBatched":
            _check(library.cusolverDnCreateGesvdjInfo(ctypes.byref(info)), "CreateGesvdjInfo")
            status = function(handle, vectors, m, n, a, m, b, c, m, c, n, ctypes.byref(lwork),
                              info, batch)
        elif routine == "gesvdaStridedBatched":
            rank = int(shapes.get("rank", min(m, n)))
            status = function(handle, vectors, rank, m, n, a, m, ctypes.c_longlong(m * n), b,
                              ctypes.c_longlong(rank), c, m, ctypes.c_longlong(m * rank), c, n,
                              ctypes.c_longlong(n * rank), ctypes.byref(lwork), batch)
        else:
            raise _NotAsked(f"{routine} is not asked")
        _check(status, call)
        return int(lwork.value) * size
    finally:
        library.cusolverDnDestroy(handle)


def _ask_cudnn_rnn(question: dict[str, Any]) -> int:
    library = ctypes.CDLL("libcudnn.so.9")
    handle = ctypes.c_void_p()
    _check(library.cudnnCreate(ctypes.byref(handle)), "cudnnCreate")
    if question["call"] == "cudnnDropoutGetStatesSize":
        states = ctypes.c_size_t()
        _check(library.cudnnDropoutGetStatesSize(handle, ctypes.byref(states)),
               "cudnnDropoutGetStatesSize")
        return int(states.value)
    shapes = question["shapes"]
    dropout = ctypes.c_void_p()
    _check(library.cudnnCreateDropoutDescriptor(ctypes.byref(dropout)), "CreateDropout")
    if shapes["dropout"]:
        states = ctypes.c_size_t()
        _check(library.cudnnDropoutGetStatesSize(handle, ctypes.byref(states)), "StatesSize")
        _check(library.cudnnSetDropoutDescriptor(
            dropout, handle, ctypes.c_float(0.5), ctypes.c_void_p(_device_bytes(states.value)),
            states, ctypes.c_ulonglong(0)), "cudnnSetDropoutDescriptor")
    else:
        _check(library.cudnnSetDropoutDescriptor(dropout, handle, ctypes.c_float(0), None,
                                                 ctypes.c_size_t(0), ctypes.c_ulonglong(0)),
               "cudnnSetDropoutDescriptor")
    rnn, data = ctypes.c_void_p(), ctypes.c_void_p()
    _check(library.cudnnCreateRNNDescriptor(ctypes.byref(rnn)), "cudnnCreateRNNDescriptor")
    _check(library.cudnnCreateRNNDataDescriptor(ctypes.byref(data)), "CreateRNNData")
    kind = _CUDNN_TYPES[shapes["data_type"]]
    packed = bool(shapes["packed"])
    _check(library.cudnnSetRNNDescriptor_v8(
        rnn, shapes["algo"], _CELLS[shapes["cell"]], shapes.get("bias", 2),
        1 if shapes["bidirectional"] else 0, 0, kind, _CUDNN_TYPES[shapes["math_precision"]],
        shapes.get("math_type", 0), shapes["input_size"], shapes["hidden_size"],
        shapes["proj_size"], shapes["layers"], dropout, 0 if packed else 1),
        "cudnnSetRNNDescriptor_v8")
    batch, steps = int(shapes["batch"]), int(shapes["max_sequence"])
    lengths = (ctypes.c_int * batch)(*([steps] * batch))
    _check(library.cudnnSetRNNDataDescriptor(data, kind, 1 if packed else 0, steps, batch,
                                             shapes["input_size"], lengths, None),
           "cudnnSetRNNDataDescriptor")
    work, reserve = ctypes.c_size_t(), ctypes.c_size_t()
    training = shapes["mode"] == "training"
    _check(library.cudnnGetRNNTempSpaceSizes(handle, rnn, 1 if training else 0, data,
                                             ctypes.byref(work),
                                             ctypes.byref(reserve) if training else None),
           "cudnnGetRNNTempSpaceSizes")
    return int(reserve.value if "reserve" in question["call"] else work.value)


def _ask_cudnn_batch_norm(question: dict[str, Any]) -> int:
    library = ctypes.CDLL("libcudnn.so.9")
    shapes = question["shapes"]
    if "x" not in shapes or not shapes["x"]["dims"]:
        raise _NotAsked("the input's descriptor is not in the log")
    handle = ctypes.c_void_p()
    _check(library.cudnnCreate(ctypes.byref(handle)), "cudnnCreate")

    def descriptor() -> ctypes.c_void_p:
        made = ctypes.c_void_p()
        _check(library.cudnnCreateTensorDescriptor(ctypes.byref(made)), "CreateTensor")
        return made

    x, derived = descriptor(), descriptor()
    dims, strides = shapes["x"]["dims"], shapes["x"]["strides"]
    _check(library.cudnnSetTensorNdDescriptor(
        x, _CUDNN_TYPES[shapes["x"]["data_type"]], len(dims), (ctypes.c_int * len(dims))(*dims),
        (ctypes.c_int * len(strides))(*strides)), "cudnnSetTensorNdDescriptor")
    mode, ops = shapes["mode"], shapes["ops"]
    _check(library.cudnnDeriveBNTensorDescriptor(derived, x, mode), "DeriveBNTensor")
    size = ctypes.c_size_t()
    call = question["call"]
    if call == "cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize":
        status = library.cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(
            handle, mode, ops, x, None, x, derived, None, ctypes.byref(size))
    elif call == "cudnnGetBatchNormalizationBackwardExWorkspaceSize":
        status = library.cudnnGetBatchNormalizationBackwardExWorkspaceSize(
            handle, mode, ops, x, x, x, None, x, derived, None, ctypes.byref(size))
    else:
        status = library.cudnnGetBatchNormalizationTrainingExReserveSpaceSize(
            handle, mode, ops, None, x, ctypes.byref(size))
    _check(status, call)
    return int(size.value)


def _ask_cudnn_convolution(question: dict[str, Any]) -> int:
    import torch

    shapes = question["shapes"]
    operation, tensors, conv = shapes["operation"], shapes["tensors"], shapes.get("conv", {})
    dtype = {"float": torch.float32, "half": torch.float16, "bfloat16": torch.bfloat16,
             "double": torch.float64}[shapes["data_type"]]

    def made(name: str) -> Any:
        described = tensors[name]
        return torch.empty_strided(described["dims"], described["strides"], dtype=dtype,
                                   device="cuda")

    if conv.get("pre_paddings") != conv.get("post_paddings"):
        raise _NotAsked("asymmetric padding")
    stride, padding = conv["filter_strides"], conv["pre_paddings"]
    dilation = conv["dilations"]
    if operation == "convolution_forward":
        x, w, y = made("x"), made("w"), tensors["y"]
        groups = x.shape[1] // w.shape[1]

        def call() -> Any:
            return torch.ops.aten.convolution(x, w, None, stride, padding, dilation, False,
                                              [0] * len(stride), groups)
        output = y
    elif operation in ("convolution_backward_data", "convolution_backward_filter"):
        data = operation == "convolution_backward_data"
        dy = made("dy")
        x = made("x") if not data else torch.empty_strided(
            tensors["dx"]["dims"], tensors["dx"]["strides"], dtype=dtype, device="cuda")
        w = made("w") if data else torch.empty_strided(
            tensors["dw"]["dims"], tensors["dw"]["strides"], dtype=dtype, device="cuda")
        groups = x.shape[1] // w.shape[1]
        mask = [data, not data, False]

        def call() -> Any:
            return torch.ops.aten.convolution_backward(dy, x, w, None, stride, padding, dilation,
                                                       False, [0] * len(stride), groups, mask)
        output = tensors["dx" if data else "dw"]
    else:
        raise _NotAsked(f"cuDNN's {operation} plans are not asked (only convolutions)")
    call()  # PyTorch's plan cache and cuBLAS's handles first: the measured call makes no plan
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_stats()["requested_bytes.all.current"]
    call()
    torch.cuda.synchronize()
    peak = torch.cuda.memory_stats()["requested_bytes.all.peak"]
    out_bytes = dtype.itemsize
    for dim in output["dims"]:
        out_bytes *= dim
    return max(0, int(peak - before - out_bytes))


_ASK: dict[str, Callable[[dict[str, Any]], int]] = {"cuFFT": _ask_cufft,
                                                    "cuSOLVER": _ask_cusolver}


def ask(question: dict[str, Any]) -> int:
    """The card's answer to `question`, in bytes; _NotAsked when it is not put to the card."""
    library, call = question["library"], question["call"]
    if library == "cuDNN" and call.startswith("cudnnBackendFinalize"):
        return _ask_cudnn_convolution(question)
    if library == "cuDNN" and (call.startswith("cudnnGetRNNTempSpaceSizes") or
                               call == "cudnnDropoutGetStatesSize"):
        return _ask_cudnn_rnn(question)
    if library == "cuDNN" and call.startswith("cudnnGetBatchNormalization"):
        return _ask_cudnn_batch_norm(question)
    if library in _ASK:
        return _ASK[library](question)
    raise _NotAsked(f"{library}'s {call} is not asked by this calibration")


def _measure(questions_file: Path, answers_file: Path) -> int:
    """The measuring process: each question's answer or why it was not asked."""
    import torch

    torch.cuda.init()
    # A context before the libraries' handles, and the libraries loaded: PyTorch loads cuSOLVER
    # with its linear algebra library at the first such call, and ctypes finds each by its soname
    # among the loaded ones.
    one = torch.ones(1, 1, device="cuda")
    torch.linalg.cholesky(one)
    torch.fft.rfft(torch.ones(8, device="cuda"))
    answers: list[dict[str, Any]] = []
    for question in json.loads(questions_file.read_text()):
        try:
            answers.append({"bytes": ask(question)})
        except (_NotAsked, KeyError, AttributeError, OSError, RuntimeError) as error:
            answers.append({"not_asked": str(error) or type(error).__name__})
    device = torch.cuda.get_device_name()
    answers_file.write_text(json.dumps({"device": device, "torch": torch.__version__,
                                        "answers": answers}))
    return 0


# ---- Writing the profile -----------------------------------------------------------------

def _is_plan(question: dict[str, Any]) -> bool:
    return bool(question["library"] == "cuDNN" and
                question["call"].startswith("cudnnBackendFinalize"))


def write_profile(source: Path, out: Path, questions: list[dict[str, Any]],
                  answers: dict[str, Any], dry_run: bool) -> list[str]:
    """Copies the profile at `source` to `out` with the card's answers in its tables; the
    lines of the summary printed."""
    profile = json.loads(source.read_text())
    when = datetime.date.today().isoformat()
    label = f"{answers['device']}, torch {answers['torch']}, {when}" + \
        (" (dry run on the simulated card: not the card's)" if dry_run else "")
    sizes = profile.setdefault("measured_sizes", {
        "note": "Sizes measured on this card by python -m mem_tracer.calibrate (Note [Calibrating "
                "a profile] in python/mem_tracer/simulated_gpu/calibrate.py); they win over the "
                "simulated libraries' estimates.",
        "entries": []})
    workspaces = profile.setdefault("cudnn_workspaces", {"entries": []})
    lines = []
    for question, answer in zip(questions, answers["answers"], strict=True):
        name = f"{question['library']}'s {question['call']}"
        if "bytes" not in answer:
            lines.append(f"  not asked  {name}: {answer['not_asked']}")
            continue
        measured = int(answer["bytes"])
        lines.append(f"  {measured:>12,} B  {name} (simulated: {question['bytes']:,} B)")
        if _is_plan(question):
            entries = workspaces["entries"]
            entries[:] = [e for e in entries if e.get("match") != question["shapes"]]
            entries.append({"match": question["shapes"], "workspace_bytes": measured,
                            "measured": label})
        else:
            entries = sizes["entries"]
            entries[:] = [e for e in entries
                          if (e.get("library"), e.get("call"), e.get("match")) !=
                          (question["library"], question["call"], question["shapes"])]
            entries.append({"library": question["library"], "call": question["call"],
                            "match": question["shapes"], "bytes": measured, "measured": label})
    out.write_text(json.dumps(profile, indent=2) + "\n")
    return lines


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--measure"]:
        return _measure(Path(argv[1]), Path(argv[2]))
    parser = argparse.ArgumentParser(prog="python -m mem_tracer.calibrate",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("profile", help="the simulated card's profile (a name or a file)")
    parser.add_argument("--out", help="the profile written (default: PROFILE-calibrated.json)")
    parser.add_argument("--dry-run", action="store_true",
                        help="ask the simulated card instead of the card (no GPU needed)")
    split = argv.index("--") if "--" in argv else len(argv)
    arguments = parser.parse_args(argv[:split])
    command = argv[split + 1:]
    if not command:
        parser.error("give a workload to run after --")
    try:
        card = simulated_gpu.profile(arguments.profile)
        out = Path(arguments.out or f"{card.name}-calibrated.json")
        questions = collect(card, command)
        print(f"{len(questions)} questions the simulated libraries could not answer",
              file=sys.stderr)
        with tempfile.TemporaryDirectory(prefix="memtrace-calibrate-") as folder:
            questions_file = Path(folder) / "questions.json"
            answers_file = Path(folder) / "answers.json"
            questions_file.write_text(json.dumps(questions))
            environment = (simulated_gpu.environment(card) if arguments.dry_run else
                           {key: value for key, value in os.environ.items()
                            if not key.startswith("MEMTRACE_GPU_")})
            status = subprocess.call([sys.executable, "-m", "mem_tracer.simulated_gpu.calibrate",
                                      "--measure", str(questions_file), str(answers_file)],
                                     env=environment)
            if status != 0 or not answers_file.exists():
                raise MemTracerError(f"the measuring process failed (exit status {status})")
            answers = json.loads(answers_file.read_text())
        lines = write_profile(card.path, out, questions, answers, arguments.dry_run)
    except MemTracerError as error:
        print(f"{parser.prog}: error: {error}", file=sys.stderr)
        return 2
    whose = "dry run: the simulated card" if arguments.dry_run else "the card"
    print(f"{answers['device']}'s answers ({whose}):")
    print("\n".join(lines))
    print(f"written: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
