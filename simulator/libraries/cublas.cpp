// cuBLAS (libcublas.so.13): handles and their settings; every routine that computes is a
// launch that does nothing (Note [Work that does nothing]); copies to and from the host
// (cublasSetVector, cublasGetMatrix, ...) are copies as the runtime makes them. The workspace
// PyTorch allocates and hands over with cublasSetWorkspace is PyTorch's own allocation.
#include <string.h>

#include "simulator/libraries/library.h"

using namespace simgpu;

namespace {

// cublasStatus_t (cublas_api.h).
enum : int {
  kSuccess = 0,
  kNotInitialized = 1,
  kInvalidValue = 7,
};

// The cuBLAS release the wheels of torch 2.14 bring (CUBLAS_VERSION: 13.1.1).
constexpr int kVersion = 13 * 10000 + 1 * 100 + 1;

LibraryHandle* handle(void* h) {
  return static_cast<LibraryHandle*>(h);
}

}  // namespace

SIMGPU_API int cublasCreate_v2(void** out) {
  if (!out) return kInvalidValue;
  if (!profile()) return kNotInitialized;
  *out = newHandle();
  return kSuccess;
}
SIMGPU_API int cublasDestroy_v2(void* h) {
  delete handle(h);
  return kSuccess;
}
SIMGPU_API int cublasGetVersion_v2(void*, int* version) {
  if (!version) return kInvalidValue;
  *version = kVersion;
  return kSuccess;
}
// libraryPropertyType: MAJOR_VERSION 0, MINOR_VERSION 1, PATCH_LEVEL 2 (library_types.h).
SIMGPU_API int cublasGetProperty(int type, int* value) {
  if (!value) return kInvalidValue;
  *value = type == 0 ? 13 : type == 1 ? 1 : 1;
  return kSuccess;
}
SIMGPU_API size_t cublasGetCudartVersion(void) {
  return 13000;
}
SIMGPU_API int cublasSetStream_v2(void* h, void* stream) {
  if (!h) return kNotInitialized;
  handle(h)->stream = stream;
  return kSuccess;
}
SIMGPU_API int cublasGetStream_v2(void* h, void** stream) {
  if (!h || !stream) return kInvalidValue;
  *stream = handle(h)->stream;
  return kSuccess;
}
SIMGPU_API int cublasSetWorkspace_v2(void* h, void* workspace, size_t bytes) {
  if (!h) return kNotInitialized;
  handle(h)->workspace = workspace;
  handle(h)->workspace_bytes = bytes;
  return kSuccess;
}
SIMGPU_API int cublasSetMathMode(void* h, int mode) {
  if (!h) return kNotInitialized;
  handle(h)->math_mode = mode;
  return kSuccess;
}
SIMGPU_API int cublasGetMathMode(void* h, int* mode) {
  if (!h || !mode) return kInvalidValue;
  *mode = handle(h)->math_mode;
  return kSuccess;
}
SIMGPU_API int cublasSetPointerMode_v2(void* h, int mode) {
  if (!h) return kNotInitialized;
  handle(h)->pointer_mode = mode;
  return kSuccess;
}
SIMGPU_API int cublasGetPointerMode_v2(void* h, int* mode) {
  if (!h || !mode) return kInvalidValue;
  *mode = handle(h)->pointer_mode;
  return kSuccess;
}
SIMGPU_API int cublasSetAtomicsMode(void* h, int mode) {
  if (!h) return kNotInitialized;
  handle(h)->atomics_mode = mode;
  return kSuccess;
}
SIMGPU_API int cublasGetAtomicsMode(void* h, int* mode) {
  if (!h || !mode) return kInvalidValue;
  *mode = handle(h)->atomics_mode;
  return kSuccess;
}
SIMGPU_API int cublasSetSmCountTarget(void* h, int count) {
  if (!h) return kNotInitialized;
  handle(h)->sm_count_target = count;
  return kSuccess;
}
SIMGPU_API int cublasGetSmCountTarget(void* h, int* count) {
  if (!h || !count) return kInvalidValue;
  *count = handle(h)->sm_count_target;
  return kSuccess;
}
SIMGPU_API int cublasLoggerConfigure(int, int, int, const char*) {
  return kSuccess;
}

namespace {

const char* statusName(int status) {
  switch (status) {
    case 0:
      return "CUBLAS_STATUS_SUCCESS";
    case 1:
      return "CUBLAS_STATUS_NOT_INITIALIZED";
    case 3:
      return "CUBLAS_STATUS_ALLOC_FAILED";
    case 7:
      return "CUBLAS_STATUS_INVALID_VALUE";
    case 8:
      return "CUBLAS_STATUS_ARCH_MISMATCH";
    case 11:
      return "CUBLAS_STATUS_MAPPING_ERROR";
    case 13:
      return "CUBLAS_STATUS_EXECUTION_FAILED";
    case 14:
      return "CUBLAS_STATUS_INTERNAL_ERROR";
    case 15:
      return "CUBLAS_STATUS_NOT_SUPPORTED";
    case 16:
      return "CUBLAS_STATUS_LICENSE_ERROR";
    default:
      return "CUBLAS_STATUS_UNKNOWN";
  }
}

}  // namespace

SIMGPU_API const char* cublasGetStatusName(int status) {
  return statusName(status);
}
SIMGPU_API const char* cublasGetStatusString(int status) {
  switch (status) {
    case 0:
      return "success";
    case 1:
      return "the library was not initialized";
    case 7:
      return "an invalid numeric value was used as an argument";
    case 15:
      return "the functionality requested is not supported";
    default:
      return statusName(status);
  }
}

// Host <-> device copies of vectors and matrices, as the runtime copies them.
namespace {

int copyStrided(const void* from, int from_stride, void* to, int to_stride, int count, int element,
                void* stream) {
  if (element <= 0 || from_stride <= 0 || to_stride <= 0 || count < 0) return kInvalidValue;
  if (count == 0) return kSuccess;
  launched(stream, 1 /* memcpy */);
  for (int i = 0; i < count; ++i)
    if (!copy(static_cast<char*>(to) + static_cast<size_t>(i) * to_stride * element,
              static_cast<const char*>(from) + static_cast<size_t>(i) * from_stride * element,
              static_cast<size_t>(element)))
      return 13;  // CUBLAS_STATUS_EXECUTION_FAILED: a read past the limit (device.h)
  return kSuccess;
}

}  // namespace

SIMGPU_API int cublasSetVector(int n, int element, const void* x, int incx, void* y, int incy) {
  return copyStrided(x, incx, y, incy, n, element, nullptr);
}
SIMGPU_API int cublasGetVector(int n, int element, const void* x, int incx, void* y, int incy) {
  return copyStrided(x, incx, y, incy, n, element, nullptr);
}
SIMGPU_API int cublasSetVectorAsync(int n, int element, const void* x, int incx, void* y, int incy,
                                    void* stream) {
  return copyStrided(x, incx, y, incy, n, element, stream);
}
SIMGPU_API int cublasGetVectorAsync(int n, int element, const void* x, int incx, void* y, int incy,
                                    void* stream) {
  return copyStrided(x, incx, y, incy, n, element, stream);
}
SIMGPU_API int cublasSetMatrix(int rows, int cols, int element, const void* a, int lda, void* b,
                               int ldb) {
  for (int c = 0; c < cols; ++c)
    if (int status =
            copyStrided(static_cast<const char*>(a) + static_cast<size_t>(c) * lda * element, 1,
                        static_cast<char*>(b) + static_cast<size_t>(c) * ldb * element, 1, rows,
                        element, nullptr))
      return status;
  return kSuccess;
}
SIMGPU_API int cublasGetMatrix(int rows, int cols, int element, const void* a, int lda, void* b,
                               int ldb) {
  return cublasSetMatrix(rows, cols, element, a, lda, b, ldb);
}
