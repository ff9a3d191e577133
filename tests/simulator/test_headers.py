"""The simulated libraries declare NVIDIA's types themselves (their headers are not where the
simulator is built); here they are checked against the real headers the CUDA build of torch's
wheels bring (nvidia/cu13/include): the layouts and status values the simulator relies on."""
import subprocess
from pathlib import Path

import pytest
import torch

INCLUDE = Path(torch.__file__).parents[1] / "nvidia" / "cu13" / "include"

CHECKS = r'''
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cufft.h>
#include <cusolverDn.h>
#include <cusparse.h>
#include <nvrtc.h>
// simulator/libraries/cublaslt.cpp: HeuristicResult.
static_assert(sizeof(cublasLtMatmulHeuristicResult_t) == 96, "heuristic result");
static_assert(offsetof(cublasLtMatmulHeuristicResult_t, workspaceSize) == 64, "workspace");
static_assert(offsetof(cublasLtMatmulHeuristicResult_t, state) == 72, "state");
static_assert(offsetof(cublasLtMatmulHeuristicResult_t, wavesCount) == 76, "waves");
// The statuses the libraries' files return (and exports/*.exports' refused-status).
static_assert(CUBLAS_STATUS_SUCCESS == 0 && CUBLAS_STATUS_NOT_INITIALIZED == 1 &&
              CUBLAS_STATUS_INVALID_VALUE == 7 && CUBLAS_STATUS_NOT_SUPPORTED == 15, "cuBLAS");
static_assert(CUSOLVER_STATUS_NOT_SUPPORTED == 9, "cuSOLVER");
static_assert(CUSPARSE_STATUS_NOT_SUPPORTED == 10, "cuSPARSE");
static_assert(CUFFT_NOT_SUPPORTED == 16 && CUFFT_INVALID_VALUE == 4, "cuFFT");
static_assert(NVRTC_ERROR_INTERNAL_ERROR == 11 && NVRTC_ERROR_INVALID_INPUT == 3 &&
              NVRTC_ERROR_INVALID_PROGRAM == 4, "NVRTC");
// The versions the simulated libraries report: the wheels' own.
static_assert(CUBLAS_VERSION == 130101, "simulator/libraries/cublas.cpp kVersion");
static_assert(CUFFT_VERSION == 12000, "simulator/libraries/handles.cpp cufftGetVersion");
static_assert(CUSPARSE_VERSION == 12 * 1000 + 6 * 100 + 3, "cusparseGetVersion");
int main() { return 0; }
'''


def test_declarations_match_nvidia_headers(tmp_path):
    if not (INCLUDE / "cublasLt.h").exists():
        pytest.fail(f"{INCLUDE} has no cublasLt.h: the CUDA build of torch's wheels moved it")
    source = tmp_path / "checks.cpp"
    source.write_text(CHECKS)
    result = subprocess.run(["g++", "-std=c++17", "-fsyntax-only", f"-I{INCLUDE}",
                             "-I/usr/local/cuda/include", str(source)],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
