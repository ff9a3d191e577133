"""The simulated GPU's libraries against what they stand for: every function PyTorch's CUDA
build imports from NVIDIA's libraries, and every function those libraries export, is exported
by the simulated library of the same file name under the same symbol version (so that a torch
or CUDA release that needs more shows here, not as a crash in a user's run); the functions
whose answer is not a status code (an error's text, a version, a registration handle) are
implemented, never a generated stub."""
import re
import subprocess
from pathlib import Path

import pytest
import torch

from memtrace_testing import BUILD

LIB = BUILD / "simulator" / "lib"
TORCH_LIB = Path(torch.__file__).parent / "lib"
NVIDIA = Path(torch.__file__).parents[1] / "nvidia"
# The simulated library for each of NVIDIA's, by file name, with the folder of NVIDIA's wheel.
LIBRARIES = {
    "libcudart.so.13": "cu13/lib", "libcublas.so.13": "cu13/lib", "libcublasLt.so.13": "cu13/lib",
    "libcudnn.so.9": "cudnn/lib", "libnccl.so.2": "nccl/lib", "libnvrtc.so.13": "cu13/lib",
    "libcufft.so.12": "cu13/lib", "libcusolver.so.12": "cu13/lib", "libcusparse.so.12": "cu13/lib",
}
# Answers that are not a status code: a generated stub (which returns an int status) would be
# a wrong answer, so each must be the simulator's own definition.
ANSWERS = {
    "libcudart.so.13": ["cudaGetErrorString", "cudaGetErrorName", "__cudaRegisterFatBinary",
                        "__cudaRegisterFatBinaryEnd", "__cudaUnregisterFatBinary",
                        "__cudaRegisterFunction", "__cudaRegisterVar", "__cudaInitModule",
                        "__cudaPushCallConfiguration", "__cudaPopCallConfiguration",
                        "cudaCreateChannelDesc"],
    "libcublas.so.13": ["cublasGetStatusString", "cublasGetStatusName", "cublasGetCudartVersion"],
    "libcublasLt.so.13": ["cublasLtGetVersion", "cublasLtGetCudartVersion",
                          "cublasLtGetStatusName", "cublasLtGetStatusString"],
    "libcudnn.so.9": ["cudnnGetVersion", "cudnnGetCudartVersion", "cudnnGetMaxDeviceVersion",
                      "cudnnGetErrorString", "cudnnGetLastErrorString"],
    "libnccl.so.2": ["ncclGetErrorString", "ncclGetLastError"],
    "libnvrtc.so.13": ["nvrtcGetErrorString"],
    "libcusparse.so.12": ["cusparseGetErrorName", "cusparseGetErrorString"],
}


def dynamic_symbols(path, defined):
    """{name: version} of the functions `path` defines (or, not defined, imports)."""
    out = subprocess.run(["readelf", "--dyn-syms", "-W", str(path)], capture_output=True,
                         text=True, check=True).stdout
    symbols = {}
    for line in out.splitlines():
        fields = line.split()
        if len(fields) < 8 or fields[3] not in ("FUNC", "NOTYPE"):
            continue
        if (fields[6] != "UND") != defined:
            continue
        name, _, version = fields[7].partition("@")
        symbols[name] = version.lstrip("@")
    return symbols


def test_what_torch_imports_is_exported():
    ours = {name: dynamic_symbols(LIB / name, True) for name in LIBRARIES}
    by_version = {f"{name}": name for name in LIBRARIES}
    driver = dynamic_symbols(LIB / "libcuda.so.1", True)
    missing = []
    for library in sorted(TORCH_LIB.glob("*.so")):
        for symbol, version in dynamic_symbols(library, False).items():
            if version in by_version:
                if ours[by_version[version]].get(symbol) != version:
                    missing.append(f"{library.name}: {symbol}@{version}")
            elif symbol.startswith("nccl") and symbol not in ours["libnccl.so.2"]:
                missing.append(f"{library.name}: {symbol} (NCCL)")
            elif re.match(r"cu[A-Z]", symbol) and not symbol.startswith(("cuFile", "cupti")) \
                    and symbol not in driver:
                missing.append(f"{library.name}: {symbol} (the driver)")
    assert not missing, missing


@pytest.mark.parametrize("name", sorted(LIBRARIES))
def test_what_nvidia_exports_is_exported(name):
    theirs = NVIDIA / LIBRARIES[name] / name
    if not theirs.exists():
        pytest.fail(f"{theirs} is not there: the CUDA build of torch's wheels moved it")
    ours = dynamic_symbols(LIB / name, True)
    real = dynamic_symbols(theirs, True)
    missing = sorted(s for s in real if not s.startswith("_") or s.startswith("__cuda")
                     if s not in ours)
    assert not missing, f"{name} lacks {len(missing)} of NVIDIA's functions: {missing[:20]}"
    # Same symbol versions as NVIDIA's, so that a versioned reference binds to ours.
    wrong = sorted(s for s, v in real.items() if s in ours and ours[s] != v)
    assert not wrong, wrong[:20]


@pytest.mark.parametrize("name", sorted(ANSWERS))
def test_answers_are_implemented(name):
    out = subprocess.run(["nm", "-D", "--defined-only", str(LIB / name)], capture_output=True,
                         text=True, check=True).stdout
    kinds = {line.split()[2].split("@")[0]: line.split()[1] for line in out.splitlines()}
    weak = [function for function in ANSWERS[name] if kinds.get(function) != "T"]
    assert not weak, f"{name}: not implemented (a stub or absent): {weak}"
