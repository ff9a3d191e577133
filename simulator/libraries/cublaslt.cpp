// cuBLASLt (libcublasLt.so.13): descriptors that remember their attributes, a heuristic that
// offers one algorithm needing no workspace, and matmuls that do nothing. PyTorch allocates
// the cuBLASLt workspace itself, before it asks for an algorithm, so what the heuristic
// answers changes nothing PyTorch allocates: the algorithm's workspace must only fit in it.
#include <string.h>

#include <map>
#include <vector>

#include "simulator/libraries/library.h"

using namespace simgpu;

namespace {

enum : int { kSuccess = 0, kNotInitialized = 1, kInvalidValue = 7 };

// A descriptor: its attributes as the program set them, by number.
struct Descriptor {
  std::map<int, std::vector<unsigned char>> attributes;
};

int create(void** out) {
  if (!out) return kInvalidValue;
  *out = new Descriptor;
  return kSuccess;
}
int destroy(void* descriptor) {
  delete static_cast<Descriptor*>(descriptor);
  return kSuccess;
}
int set(void* descriptor, int attribute, const void* value, size_t bytes) {
  if (!descriptor || (!value && bytes)) return kInvalidValue;
  auto* d = static_cast<Descriptor*>(descriptor);
  const auto* begin = static_cast<const unsigned char*>(value);
  d->attributes[attribute].assign(begin, begin + bytes);
  return kSuccess;
}
int get(void* descriptor, int attribute, void* value, size_t bytes, size_t* written) {
  if (!descriptor) return kInvalidValue;
  auto* d = static_cast<Descriptor*>(descriptor);
  auto it = d->attributes.find(attribute);
  if (it == d->attributes.end()) {
    // Never set: its default, which is zero for every attribute PyTorch reads back.
    if (written) *written = bytes;
    if (value) memset(value, 0, bytes);
    return kSuccess;
  }
  if (written) *written = it->second.size();
  if (!value) return bytes == 0 ? kSuccess : kInvalidValue;
  if (bytes < it->second.size()) return kInvalidValue;
  memcpy(value, it->second.data(), it->second.size());
  return kSuccess;
}

// cublasLtMatmulHeuristicResult_t (cublasLt.h).
struct HeuristicResult {
  uint64_t algo[8];
  size_t workspace_bytes;
  int state;
  float waves;
  int reserved[4];
};
static_assert(sizeof(HeuristicResult) == 96, "cublasLtMatmulHeuristicResult_t");

}  // namespace

SIMGPU_API int cublasLtCreate(void** out) {
  if (!out) return kInvalidValue;
  if (!profile()) return kNotInitialized;
  *out = newHandle();
  return kSuccess;
}
SIMGPU_API int cublasLtDestroy(void* handle) {
  delete static_cast<LibraryHandle*>(handle);
  return kSuccess;
}
// CUBLASLT_VERSION of cuBLAS 13.1.1.
SIMGPU_API size_t cublasLtGetVersion(void) {
  return 130101;
}
SIMGPU_API size_t cublasLtGetCudartVersion(void) {
  return 13000;
}
SIMGPU_API int cublasLtGetProperty(int type, int* value) {
  if (!value) return kInvalidValue;
  *value = type == 0 ? 13 : 1;
  return kSuccess;
}
SIMGPU_API const char* cublasLtGetStatusName(int status) {
  return status == 0 ? "CUBLAS_STATUS_SUCCESS" : "CUBLAS_STATUS_NOT_SUPPORTED";
}
SIMGPU_API const char* cublasLtGetStatusString(int status) {
  return status == 0 ? "success" : "the functionality requested is not supported";
}
SIMGPU_API int cublasLtLoggerSetLevel(int) {
  return kSuccess;
}

SIMGPU_API int cublasLtMatmulDescCreate(void** out, int, int) {
  return create(out);
}
SIMGPU_API int cublasLtMatmulDescDestroy(void* d) {
  return destroy(d);
}
SIMGPU_API int cublasLtMatmulDescSetAttribute(void* d, int attribute, const void* value,
                                              size_t bytes) {
  return set(d, attribute, value, bytes);
}
SIMGPU_API int cublasLtMatmulDescGetAttribute(void* d, int attribute, void* value, size_t bytes,
                                              size_t* written) {
  return get(d, attribute, value, bytes, written);
}
SIMGPU_API int cublasLtMatrixLayoutCreate(void** out, int, uint64_t, uint64_t, int64_t) {
  return create(out);
}
SIMGPU_API int cublasLtMatrixLayoutDestroy(void* d) {
  return destroy(d);
}
SIMGPU_API int cublasLtMatrixLayoutSetAttribute(void* d, int attribute, const void* value,
                                                size_t bytes) {
  return set(d, attribute, value, bytes);
}
SIMGPU_API int cublasLtMatrixLayoutGetAttribute(void* d, int attribute, void* value, size_t bytes,
                                                size_t* written) {
  return get(d, attribute, value, bytes, written);
}
SIMGPU_API int cublasLtMatmulPreferenceCreate(void** out) {
  return create(out);
}
SIMGPU_API int cublasLtMatmulPreferenceDestroy(void* d) {
  return destroy(d);
}
SIMGPU_API int cublasLtMatmulPreferenceSetAttribute(void* d, int attribute, const void* value,
                                                    size_t bytes) {
  return set(d, attribute, value, bytes);
}
SIMGPU_API int cublasLtMatmulPreferenceGetAttribute(void* d, int attribute, void* value,
                                                    size_t bytes, size_t* written) {
  return get(d, attribute, value, bytes, written);
}
SIMGPU_API int cublasLtMatrixTransformDescCreate(void** out, int) {
  return create(out);
}
SIMGPU_API int cublasLtMatrixTransformDescDestroy(void* d) {
  return destroy(d);
}
SIMGPU_API int cublasLtMatrixTransformDescSetAttribute(void* d, int attribute, const void* value,
                                                       size_t bytes) {
  return set(d, attribute, value, bytes);
}

// One algorithm, needing no workspace, for any problem.
SIMGPU_API int cublasLtMatmulAlgoGetHeuristic(void* handle, void*, void*, void*, void*, void*,
                                              void*, int requested, void* results, int* returned) {
  if (!handle || requested <= 0 || !results || !returned) return kInvalidValue;
  auto* result = static_cast<HeuristicResult*>(results);
  memset(result, 0, sizeof(*result));
  result->state = kSuccess;
  result->waves = 1.0f;
  *returned = 1;
  return kSuccess;
}
SIMGPU_API int cublasLtMatmulAlgoInit(void*, int, int, int, int, int, int, void* algo) {
  if (!algo) return kInvalidValue;
  memset(algo, 0, 64);
  return kSuccess;
}
SIMGPU_API int cublasLtMatmulAlgoCheck(void*, void*, void*, void*, void*, void*, const void*,
                                       void* result) {
  if (!result) return kInvalidValue;
  memset(result, 0, sizeof(HeuristicResult));
  static_cast<HeuristicResult*>(result)->waves = 1.0f;
  return kSuccess;
}
SIMGPU_API int cublasLtMatmulAlgoConfigSetAttribute(void*, int, const void*, size_t) {
  return kSuccess;
}
SIMGPU_API int cublasLtMatmulAlgoConfigGetAttribute(void*, int, void* value, size_t bytes,
                                                    size_t* written) {
  if (value) memset(value, 0, bytes);
  if (written) *written = bytes;
  return kSuccess;
}
SIMGPU_API int cublasLtMatmul(void* handle, void*, const void*, const void*, void*, const void*,
                              void*, const void*, const void*, void*, void*, void*, const void*,
                              void*, size_t, void* stream) {
  if (!handle) return kNotInitialized;
  launched(stream, 0 /* kernel */);
  return kSuccess;
}
