// cuFFT, cuSOLVER and cuSPARSE (libcufft.so.12, libcusolver.so.12, libcusparse.so.12): their
// handles and versions. What they would compute is a launch that does nothing; what they
// would answer the host (a plan's work area, a factorization's workspace size) is not known
// to the simulated device, so those calls are refused in one line (the generated stubs),
// never answered with a made-up size.
#include "simulator/libraries/library.h"

using namespace simgpu;

namespace {
enum : int { kSuccess = 0, kInvalid = 3 };

int create(void** out) {
  if (!out) return kInvalid;
  if (!profile()) return 1;  // not initialized
  *out = newHandle();
  return kSuccess;
}
int destroy(void* h) {
  delete static_cast<LibraryHandle*>(h);
  return kSuccess;
}
int setStream(void* h, void* stream) {
  if (!h) return 1;
  static_cast<LibraryHandle*>(h)->stream = stream;
  return kSuccess;
}
int getStream(void* h, void** stream) {
  if (!h || !stream) return kInvalid;
  *stream = static_cast<LibraryHandle*>(h)->stream;
  return kSuccess;
}
// libraryPropertyType: MAJOR_VERSION 0, MINOR_VERSION 1, PATCH_LEVEL 2.
int property(int type, int* value, int major, int minor, int patch) {
  if (!value) return kInvalid;
  *value = type == 0 ? major : type == 1 ? minor : patch;
  return kSuccess;
}
}  // namespace

// cuSOLVER 12.0.4
SIMGPU_API int cusolverDnCreate(void** out) {
  return create(out);
}
SIMGPU_API int cusolverDnDestroy(void* h) {
  return destroy(h);
}
SIMGPU_API int cusolverDnSetStream(void* h, void* s) {
  return setStream(h, s);
}
SIMGPU_API int cusolverDnGetStream(void* h, void** s) {
  return getStream(h, s);
}
SIMGPU_API int cusolverGetProperty(int type, int* value) {
  return property(type, value, 12, 0, 4);
}
SIMGPU_API int cusolverGetVersion(int* version) {
  if (!version) return kInvalid;
  *version = 12 * 1000 + 0 * 100 + 4;
  return kSuccess;
}
SIMGPU_API int cusolverSpCreate(void** out) {
  return create(out);
}
SIMGPU_API int cusolverSpDestroy(void* h) {
  return destroy(h);
}
SIMGPU_API int cusolverSpSetStream(void* h, void* s) {
  return setStream(h, s);
}

// cuSPARSE 12.6.3
SIMGPU_API int cusparseCreate(void** out) {
  return create(out);
}
SIMGPU_API int cusparseDestroy(void* h) {
  return destroy(h);
}
SIMGPU_API int cusparseSetStream(void* h, void* s) {
  return setStream(h, s);
}
SIMGPU_API int cusparseGetStream(void* h, void** s) {
  return getStream(h, s);
}
SIMGPU_API int cusparseGetProperty(int type, int* value) {
  return property(type, value, 12, 6, 3);
}
SIMGPU_API int cusparseGetVersion(void*, int* version) {
  if (!version) return kInvalid;
  *version = 12 * 1000 + 6 * 100 + 3;
  return kSuccess;
}
SIMGPU_API const char* cusparseGetErrorName(int status) {
  return status == 0 ? "CUSPARSE_STATUS_SUCCESS" : "CUSPARSE_STATUS_NOT_SUPPORTED";
}
SIMGPU_API const char* cusparseGetErrorString(int status) {
  return status == 0 ? "success" : "operation not supported";
}

// cuFFT 12.0.0: a plan is a handle; making one needs its work area's size, which is refused.
SIMGPU_API int cufftCreate(int* plan) {
  static int next = 1;
  if (!plan) return 4;  // CUFFT_INVALID_VALUE
  *plan = next++;
  return kSuccess;
}
SIMGPU_API int cufftDestroy(int) {
  return kSuccess;
}
SIMGPU_API int cufftSetStream(int, void*) {
  return kSuccess;
}
SIMGPU_API int cufftSetAutoAllocation(int, int) {
  return kSuccess;
}
SIMGPU_API int cufftSetWorkArea(int, void*) {
  return kSuccess;
}
SIMGPU_API int cufftGetVersion(int* version) {
  if (!version) return 4;
  *version = 12000;
  return kSuccess;
}
SIMGPU_API int cufftGetProperty(int type, int* value) {
  return property(type, value, 12, 0, 0);
}
