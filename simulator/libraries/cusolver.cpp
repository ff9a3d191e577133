// The simulated cuSOLVER's dense API (libcusolver.so.12): its option objects (cusolverDnParams,
// gesvdjInfo, syevjInfo) and the buffer sizes of the routines PyTorch's linear algebra calls
// (aten/src/ATen/native/cuda/linalg/CUDASolver.cpp, BatchLinearAlgebraLib.cpp): Cholesky, LU,
// QR, symmetric eigensolvers, SVD. The routines themselves only compute: the generated stubs do
// nothing and succeed (a factorization's info reads back as zero: success).
#include <stdint.h>

#include <algorithm>
#include <string>

#include "simulator/core/sizes.h"
#include "simulator/libraries/library.h"

using namespace simgpu;

// Note [cuSOLVER's buffers]
// Each routine of cuSOLVER asks for a device buffer whose size its implementation chooses on the
// card (blocking, panel widths, the Jacobi method's scratch): <routine>_bufferSize answers it in
// elements of the routine's type, the 64-bit API (cusolverDnX*) in bytes, and PyTorch allocates
// exactly that through its caching allocator for the length of the call. None of it is
// documented as a formula, so the simulated cuSOLVER answers an estimate (Note [Sizes nobody
// measured] in simulator/core/sizes.cpp): the work array LAPACK documents for the reference
// routine of the same name, with its block size nb = 64 (ILAENV's for these routines is 32 or
// 64), which is what a blocked implementation holds beside the matrix:
//   potrf, getrf, potrs, sytrs    none (they work in place)
//   geqrf, orgqr/ungqr, sytrf     n nb (ormqr/unmqr: nb times C's side: n for left, m for right)
//   syevd/heevd                   real: 1 + 6 n + 2 n^2 with vectors, 2 n + 1 without;
//                                 complex: 2 n + n^2 with vectors, n + 1 without (LAPACK's
//                                 ?syevd/?heevd LWORK; the complex ones' real RWORK on top:
//                                 1 + 5 n + 2 n^2 real elements, counted here too)
//   gesvd                         real: max(3 min(m,n) + max(m,n), 5 min(m,n)); complex:
//                                 2 min(m,n) + max(m,n) (LAPACK's minimum LWORK), plus the
//                                 complex routine's real RWORK, 5 min(m,n)
//   gesvdj, syevj (Jacobi)        no LAPACK routine: a copy of the matrix and of the right
//                                 singular vectors or eigenvectors (m n + n^2), per matrix of a
//                                 batch; gesvdaStridedBatched the same
//   geev                          real: 4 n (LAPACK's ?geev with vectors); complex: 2 n, plus
//                                 the real RWORK 2 n
// The upper figure is at least one more copy of the matrix (m n, times the batch) and four
// times the estimate: the bound of an estimate, an estimate too. The host buffers of the 64-bit
// API are host memory, never the device's: answered 0, and not recorded.

namespace {

enum : int { kSuccess = 0, kNotInitialized = 1, kInvalidValue = 3, kNotSupported = 9 };

constexpr uint64_t kBlock = 64;  // nb

struct Options {
  double tolerance = 0;
  int max_sweeps = 0;
  int sort = 1;
};

// The element type of a routine: its letter (S, D, C, Z), or a cudaDataType of the 64-bit API.
struct Element {
  const char* name;
  uint64_t bytes;
  bool complex;
};
constexpr Element kS{"float", 4, false}, kD{"double", 8, false}, kC{"complex64", 8, true},
    kZ{"complex128", 16, true};

Element fromDataType(int type) {
  switch (type) {
    case 1:  // CUDA_R_64F
      return kD;
    case 4:  // CUDA_C_32F
      return kC;
    case 5:  // CUDA_C_64F
      return kZ;
    case 2:  // CUDA_R_16F
      return Element{"half", 2, false};
    default:  // CUDA_R_32F
      return kS;
  }
}

// The real element of a complex routine's RWORK.
uint64_t realBytes(const Element& element) {
  return element.complex ? element.bytes / 2 : element.bytes;
}

struct Work {
  uint64_t elements = 0;       // in the routine's type
  uint64_t real_elements = 0;  // a complex routine's real work on top (RWORK)
};

// Answers the buffer of `routine` (Note [cuSOLVER's buffers]) in bytes; false under
// MEMTRACE_GPU_UNKNOWN_SIZES=refuse.
bool answer(const char* call, const char* routine, const Element& element, int64_t m, int64_t n,
            int64_t batch, const std::string& more, const Work& work, uint64_t* bytes) {
  SizeAnswer reply;
  reply.bytes = work.elements * element.bytes + work.real_elements * realBytes(element);
  uint64_t matrix = static_cast<uint64_t>(std::max<int64_t>(m, 0)) *
                    static_cast<uint64_t>(std::max<int64_t>(n, 0)) *
                    static_cast<uint64_t>(std::max<int64_t>(batch, 1)) * element.bytes;
  reply.at_most = std::max(4 * reply.bytes, reply.bytes + matrix);
  reply.how = std::string("LAPACK's work array for ") + routine +
              " (Note [cuSOLVER's buffers] in simulator/libraries/cusolver.cpp)";
  std::string shapes = "{\"routine\":\"" + std::string(routine) + "\",\"type\":\"" + element.name +
                       "\",\"m\":" + std::to_string(m) + ",\"n\":" + std::to_string(n) +
                       ",\"batch\":" + std::to_string(batch) + more + "}";
  if (!answerSize(SizeQuestion{"cuSOLVER", call, shapes}, &reply)) return false;
  *bytes = reply.bytes;
  return true;
}

// The legacy API answers elements: the bytes rounded up to whole elements.
int inElements(const char* call, const char* routine, const Element& element, int64_t m, int64_t n,
               int64_t batch, const std::string& more, const Work& work, int* lwork) {
  if (!lwork) return kInvalidValue;
  uint64_t bytes = 0;
  if (!answer(call, routine, element, m, n, batch, more, work, &bytes))
    return refuse("cuSOLVER", call, kNotSupported, kUnknownSizeRefused);
  uint64_t elements = (bytes + element.bytes - 1) / element.bytes;
  *lwork = static_cast<int>(std::min<uint64_t>(elements, INT32_MAX));
  return kSuccess;
}

int inBytes(const char* call, const char* routine, const Element& element, int64_t m, int64_t n,
            int64_t batch, const std::string& more, const Work& work, size_t* device,
            size_t* host) {
  if (!device) return kInvalidValue;
  uint64_t bytes = 0;
  if (!answer(call, routine, element, m, n, batch, more, work, &bytes))
    return refuse("cuSOLVER", call, kNotSupported, kUnknownSizeRefused);
  *device = bytes;
  if (host) *host = 0;
  return kSuccess;
}

uint64_t u(int64_t value) {
  return static_cast<uint64_t>(std::max<int64_t>(value, 0));
}

Work eigenWork(const Element& element, bool vectors, int64_t n) {
  uint64_t k = u(n);
  if (!element.complex) return Work{vectors ? 1 + 6 * k + 2 * k * k : 2 * k + 1, 0};
  return Work{vectors ? 2 * k + k * k : k + 1, vectors ? 1 + 5 * k + 2 * k * k : k};
}

Work svdWork(const Element& element, int64_t m, int64_t n) {
  uint64_t small = u(std::min(m, n)), large = u(std::max(m, n));
  if (!element.complex) return Work{std::max(3 * small + large, 5 * small), 0};
  return Work{2 * small + large, 5 * small};
}

Work jacobiWork(int64_t m, int64_t n, int64_t batch) {
  return Work{(u(m) * u(n) + u(n) * u(n)) * u(std::max<int64_t>(batch, 1)), 0};
}

// cusolverEigMode_t: CUSOLVER_EIG_MODE_NOVECTOR 0, CUSOLVER_EIG_MODE_VECTOR 1.
std::string jobz(int mode) {
  return std::string(",\"vectors\":") + (mode == 1 ? "true" : "false");
}

}  // namespace

// ---- Options -----------------------------------------------------------------------------

SIMGPU_API int cusolverDnCreateParams(void** params) {
  if (!params) return kInvalidValue;
  *params = new Options;
  return kSuccess;
}
SIMGPU_API int cusolverDnDestroyParams(void* params) {
  delete static_cast<Options*>(params);
  return kSuccess;
}
SIMGPU_API int cusolverDnCreateGesvdjInfo(void** info) {
  if (!info) return kInvalidValue;
  *info = new Options;
  return kSuccess;
}
SIMGPU_API int cusolverDnDestroyGesvdjInfo(void* info) {
  delete static_cast<Options*>(info);
  return kSuccess;
}
SIMGPU_API int cusolverDnCreateSyevjInfo(void** info) {
  if (!info) return kInvalidValue;
  *info = new Options;
  return kSuccess;
}
SIMGPU_API int cusolverDnDestroySyevjInfo(void* info) {
  delete static_cast<Options*>(info);
  return kSuccess;
}
// What a Jacobi routine reports after it ran: nothing ran, so no sweep and no residual.
SIMGPU_API int cusolverDnXgesvdjGetSweeps(void*, void* info, int* sweeps) {
  if (!info || !sweeps) return kInvalidValue;
  *sweeps = 0;
  return kSuccess;
}
SIMGPU_API int cusolverDnXgesvdjGetResidual(void*, void* info, double* residual) {
  if (!info || !residual) return kInvalidValue;
  *residual = 0;
  return kSuccess;
}
SIMGPU_API int cusolverDnXsyevjGetSweeps(void*, void* info, int* sweeps) {
  return cusolverDnXgesvdjGetSweeps(nullptr, info, sweeps);
}
SIMGPU_API int cusolverDnXsyevjGetResidual(void*, void* info, double* residual) {
  return cusolverDnXgesvdjGetResidual(nullptr, info, residual);
}

// ---- The legacy API, one set a type (S, D, C, Z) -----------------------------------------

#define SIMGPU_CUSOLVER_TYPED(T, element, orgqr, ormqr, syevd, syevj)                              \
  SIMGPU_API int cusolverDn##T##potrf_bufferSize(void*, int, int n, void*, int, int* lwork) {      \
    return inElements(__func__, "potrf", element, n, n, 1, "", Work{}, lwork);                     \
  }                                                                                                \
  SIMGPU_API int cusolverDn##T##getrf_bufferSize(void*, int m, int n, void*, int, int* lwork) {    \
    return inElements(__func__, "getrf", element, m, n, 1, "", Work{}, lwork);                     \
  }                                                                                                \
  SIMGPU_API int cusolverDn##T##geqrf_bufferSize(void*, int m, int n, void*, int, int* lwork) {    \
    return inElements(__func__, "geqrf", element, m, n, 1, "", Work{u(n) * kBlock, 0}, lwork);     \
  }                                                                                                \
  SIMGPU_API int cusolverDn##T##orgqr##_bufferSize(void*, int m, int n, int k, const void*, int,   \
                                                   const void*, int* lwork) {                      \
    return inElements(__func__, #orgqr, element, m, n, 1, ",\"k\":" + std::to_string(k),           \
                      Work{u(n) * kBlock, 0}, lwork);                                              \
  }                                                                                                \
  SIMGPU_API int cusolverDn##T##ormqr##_bufferSize(void*, int side, int trans, int m, int n,       \
                                                   int k, const void*, int, const void*,           \
                                                   const void*, int, int* lwork) {                 \
    /* cublasSideMode_t: CUBLAS_SIDE_LEFT 0 */                                                     \
    return inElements(__func__, #ormqr, element, m, n, 1,                                          \
                      ",\"k\":" + std::to_string(k) + ",\"side\":" + std::to_string(side) +        \
                          ",\"trans\":" + std::to_string(trans),                                   \
                      Work{(side == 0 ? u(n) : u(m)) * kBlock, 0}, lwork);                         \
  }                                                                                                \
  SIMGPU_API int cusolverDn##T##sytrf_bufferSize(void*, int n, void*, int, int* lwork) {           \
    return inElements(__func__, "sytrf", element, n, n, 1, "", Work{u(n) * kBlock, 0}, lwork);     \
  }                                                                                                \
  SIMGPU_API int cusolverDn##T##syevd##_bufferSize(void*, int mode, int, int n, const void*, int,  \
                                                   const void*, int* lwork) {                      \
    return inElements(__func__, #syevd, element, n, n, 1, jobz(mode),                              \
                      eigenWork(element, mode == 1, n), lwork);                                    \
  }                                                                                                \
  SIMGPU_API int cusolverDn##T##syevj##Batched_bufferSize(                                         \
      void*, int mode, int, int n, const void*, int, const void*, int* lwork, void*, int batch) {  \
    return inElements(__func__, #syevj "Batched", element, n, n, batch, jobz(mode),                \
                      jacobiWork(n, n, batch), lwork);                                             \
  }                                                                                                \
  SIMGPU_API int cusolverDn##T##gesvd_bufferSize(void*, int m, int n, int* lwork) {                \
    return inElements(__func__, "gesvd", element, m, n, 1, "", svdWork(element, m, n), lwork);     \
  }                                                                                                \
  SIMGPU_API int cusolverDn##T##gesvdj_bufferSize(void*, int mode, int econ, int m, int n,         \
                                                  const void*, int, const void*, const void*, int, \
                                                  const void*, int, int* lwork, void*) {           \
    return inElements(__func__, "gesvdj", element, m, n, 1,                                        \
                      jobz(mode) + ",\"economy\":" + (econ ? "true" : "false"),                    \
                      jacobiWork(m, n, 1), lwork);                                                 \
  }                                                                                                \
  SIMGPU_API int cusolverDn##T##gesvdjBatched_bufferSize(                                          \
      void*, int mode, int m, int n, const void*, int, const void*, const void*, int, const void*, \
      int, int* lwork, void*, int batch) {                                                         \
    return inElements(__func__, "gesvdjBatched", element, m, n, batch, jobz(mode),                 \
                      jacobiWork(m, n, batch), lwork);                                             \
  }                                                                                                \
  SIMGPU_API int cusolverDn##T##gesvdaStridedBatched_bufferSize(                                   \
      void*, int mode, int rank, int m, int n, const void*, int, long long, const void*,           \
      long long, const void*, int, long long, const void*, int, long long, int* lwork,             \
      int batch) {                                                                                 \
    return inElements(__func__, "gesvdaStridedBatched", element, m, n, batch,                      \
                      jobz(mode) + ",\"rank\":" + std::to_string(rank), jacobiWork(m, n, batch),   \
                      lwork);                                                                      \
  }

SIMGPU_CUSOLVER_TYPED(S, kS, orgqr, ormqr, syevd, syevj)
SIMGPU_CUSOLVER_TYPED(D, kD, orgqr, ormqr, syevd, syevj)
SIMGPU_CUSOLVER_TYPED(C, kC, ungqr, unmqr, heevd, heevj)
SIMGPU_CUSOLVER_TYPED(Z, kZ, ungqr, unmqr, heevd, heevj)
#undef SIMGPU_CUSOLVER_TYPED

// ---- The 64-bit API (cusolverDnX*): bytes on the device and on the host ------------------

SIMGPU_API int cusolverDnXpotrf_bufferSize(void*, void*, int, int64_t n, int type, const void*,
                                           int64_t, int, size_t* device, size_t* host) {
  return inBytes(__func__, "potrf", fromDataType(type), n, n, 1, "", Work{}, device, host);
}
SIMGPU_API int cusolverDnXgeqrf_bufferSize(void*, void*, int64_t m, int64_t n, int type,
                                           const void*, int64_t, int, const void*, int,
                                           size_t* device, size_t* host) {
  return inBytes(__func__, "geqrf", fromDataType(type), m, n, 1, "", Work{u(n) * kBlock, 0}, device,
                 host);
}
SIMGPU_API int cusolverDnXsyevd_bufferSize(void*, void*, int mode, int, int64_t n, int type,
                                           const void*, int64_t, int, const void*, int,
                                           size_t* device, size_t* host) {
  Element element = fromDataType(type);
  return inBytes(__func__, element.complex ? "heevd" : "syevd", element, n, n, 1, jobz(mode),
                 eigenWork(element, mode == 1, n), device, host);
}
SIMGPU_API int cusolverDnXsyevBatched_bufferSize(void*, void*, int mode, int, int64_t n, int type,
                                                 const void*, int64_t, int, const void*, int,
                                                 size_t* device, size_t* host, int64_t batch) {
  Element element = fromDataType(type);
  Work one = eigenWork(element, mode == 1, n);
  uint64_t count = u(std::max<int64_t>(batch, 1));
  return inBytes(__func__, "syevBatched", element, n, n, batch, jobz(mode),
                 Work{one.elements * count, one.real_elements * count}, device, host);
}
SIMGPU_API int cusolverDnXgeev_bufferSize(void*, void*, int left, int right, int64_t n, int type,
                                          const void*, int64_t, int, const void*, int, const void*,
                                          int64_t, int, const void*, int64_t, int, size_t* device,
                                          size_t* host) {
  Element element = fromDataType(type);
  Work work = element.complex ? Work{2 * u(n), 2 * u(n)} : Work{4 * u(n), 0};
  return inBytes(__func__, "geev", element, n, n, 1,
                 std::string(",\"left\":") + (left == 1 ? "true" : "false") +
                     ",\"right\":" + (right == 1 ? "true" : "false"),
                 work, device, host);
}
SIMGPU_API int cusolverDnXsytrs_bufferSize(void*, int, int64_t n, int64_t nrhs, int type,
                                           const void*, int64_t, const int64_t*, int, void*,
                                           int64_t, size_t* device, size_t* host) {
  return inBytes(__func__, "sytrs", fromDataType(type), n, n, 1,
                 ",\"nrhs\":" + std::to_string(nrhs), Work{}, device, host);
}
