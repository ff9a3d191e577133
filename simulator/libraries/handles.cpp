// cuSOLVER and cuSPARSE (libcusolver.so.12, libcusparse.so.12): their handles and versions.
// What they would compute is a launch that does nothing (the generated stubs); the sizes they
// answer the host are in cusolver.cpp and cusparse.cpp (Note [Sizes nobody measured] in
// simulator/core/sizes.cpp), cuFFT's in cufft.cpp.
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
