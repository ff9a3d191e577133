"""The simulated libraries declare NVIDIA's types themselves (their headers are not where the
simulator is built); here they are checked against the real headers the CUDA build of torch's
wheels bring (nvidia/cu13/include): the layouts and status values the simulator relies on."""
import subprocess
from pathlib import Path

import pytest
import torch

INCLUDE = Path(torch.__file__).parents[1] / "nvidia" / "cu13" / "include"
CUDNN_INCLUDE = Path(torch.__file__).parents[1] / "nvidia" / "cudnn" / "include"

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
static_assert(CUFFT_VERSION == 12000, "simulator/libraries/cufft.cpp cufftGetVersion");
// simulator/libraries/cufft.cpp: the transform types and data types it reads, its statuses.
static_assert(CUFFT_R2C == 0x2a && CUFFT_C2R == 0x2c && CUFFT_C2C == 0x29 && CUFFT_D2Z == 0x6a &&
              CUFFT_Z2D == 0x6c && CUFFT_Z2Z == 0x69, "cufftType");
static_assert(CUFFT_INVALID_PLAN == 1 && CUFFT_ALLOC_FAILED == 2 && CUFFT_INVALID_SIZE == 8,
              "cuFFT statuses");
static_assert(CUDA_R_32F == 0 && CUDA_R_64F == 1 && CUDA_R_16F == 2 && CUDA_C_32F == 4 &&
              CUDA_C_64F == 5 && CUDA_C_16F == 6 && CUDA_R_16BF == 14 && CUDA_C_16BF == 15,
              "cudaDataType");
// simulator/libraries/cusolver.cpp and cusparse.cpp: the modes and formats they read.
static_assert(CUSOLVER_EIG_MODE_VECTOR == 1 && CUBLAS_SIDE_LEFT == 0 &&
              CUSOLVER_STATUS_INVALID_VALUE == 3, "cuSOLVER");
static_assert(CUSPARSE_FORMAT_CSR == 1 && CUSPARSE_FORMAT_COO == 3 && CUSPARSE_INDEX_16U == 1 &&
              CUSPARSE_INDEX_32I == 2 && CUSPARSE_INDEX_64I == 3 &&
              CUSPARSE_STATUS_INVALID_VALUE == 3, "cuSPARSE");
static_assert(CUSPARSE_VERSION == 12 * 1000 + 6 * 100 + 3, "cusparseGetVersion");
#include <cudnn_adv.h>
// simulator/libraries/cudnn_rnn.cpp: the RNN API's enumerations.
static_assert(CUDNN_RNN_RELU == 0 && CUDNN_RNN_TANH == 1 && CUDNN_LSTM == 2 && CUDNN_GRU == 3,
              "cudnnRNNMode_t");
static_assert(CUDNN_RNN_NO_BIAS == 0 && CUDNN_RNN_SINGLE_INP_BIAS == 1 &&
              CUDNN_RNN_DOUBLE_BIAS == 2 && CUDNN_RNN_SINGLE_REC_BIAS == 3, "cudnnRNNBiasMode_t");
static_assert(CUDNN_BIDIRECTIONAL == 1 && CUDNN_SKIP_INPUT == 1 && CUDNN_FWD_MODE_TRAINING == 1 &&
              CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_PACKED == 1, "cuDNN RNN modes");
static_assert(CUDNN_DATA_FLOAT == 0 && CUDNN_DATA_DOUBLE == 1 && CUDNN_DATA_HALF == 2 &&
              CUDNN_DATA_BFLOAT16 == 9, "cudnnDataType_t");
int main() { return 0; }
'''


def test_declarations_match_nvidia_headers(tmp_path):
    if not (INCLUDE / "cublasLt.h").exists():
        pytest.fail(f"{INCLUDE} has no cublasLt.h: the CUDA build of torch's wheels moved it")
    source = tmp_path / "checks.cpp"
    source.write_text(CHECKS)
    result = subprocess.run(["g++", "-std=c++17", "-fsyntax-only", f"-I{INCLUDE}",
                             f"-I{CUDNN_INCLUDE}", "-I/usr/local/cuda/include", str(source)],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
