// NVRTC (libnvrtc.so.13): programs are kept and "compiled" into an image nobody reads, since
// the simulated device launches nothing (PyTorch's jiterator and fused kernels compile through
// NVRTC, then load the result with cuModuleLoadData).
#include <string.h>

#include <string>
#include <vector>

#include "simulator/libraries/library.h"

namespace {

enum : int { kSuccess = 0, kInvalidInput = 3, kInvalidProgram = 4 };

struct Program {
  std::string source;
  std::string name;
  std::vector<std::string> expressions;
};

// What a compilation yields, as PTX and as a cubin: text that says what it is.
constexpr char kImage[] = "// memtrace simulated GPU: nothing was compiled\n";

Program* program(void* p) {
  return static_cast<Program*>(p);
}

}  // namespace

SIMGPU_API int nvrtcVersion(int* major, int* minor) {
  if (!major || !minor) return kInvalidInput;
  *major = 13;
  *minor = 0;
  return kSuccess;
}
SIMGPU_API const char* nvrtcGetErrorString(int result) {
  switch (result) {
    case 0:
      return "NVRTC_SUCCESS";
    case 3:
      return "NVRTC_ERROR_INVALID_INPUT";
    case 4:
      return "NVRTC_ERROR_INVALID_PROGRAM";
    case 11:
      return "NVRTC_ERROR_INTERNAL_ERROR";
    default:
      return "NVRTC_ERROR unknown";
  }
}
SIMGPU_API int nvrtcGetNumSupportedArchs(int* count) {
  if (!count) return kInvalidInput;
  *count = 6;
  return kSuccess;
}
SIMGPU_API int nvrtcGetSupportedArchs(int* archs) {
  if (!archs) return kInvalidInput;
  const int supported[] = {75, 80, 86, 89, 90, 100};
  memcpy(archs, supported, sizeof(supported));
  return kSuccess;
}
SIMGPU_API int nvrtcCreateProgram(void** out, const char* source, const char* name, int,
                                  const char* const*, const char* const*) {
  if (!out || !source) return kInvalidInput;
  *out = new Program{source, name ? name : "", {}};
  return kSuccess;
}
SIMGPU_API int nvrtcDestroyProgram(void** p) {
  if (!p) return kInvalidProgram;
  delete program(*p);
  *p = nullptr;
  return kSuccess;
}
SIMGPU_API int nvrtcCompileProgram(void* p, int, const char* const*) {
  return p ? kSuccess : kInvalidProgram;
}
SIMGPU_API int nvrtcAddNameExpression(void* p, const char* expression) {
  if (!p || !expression) return kInvalidInput;
  program(p)->expressions.emplace_back(expression);
  return kSuccess;
}
// The "lowered" (mangled) name is the expression itself: nothing looks it up but the
// simulated driver, which accepts any name.
SIMGPU_API int nvrtcGetLoweredName(void* p, const char* expression, const char** lowered) {
  if (!p || !expression || !lowered) return kInvalidInput;
  for (const std::string& known : program(p)->expressions)
    if (known == expression) {
      *lowered = known.c_str();
      return kSuccess;
    }
  return kInvalidInput;
}
namespace {
int imageSize(void* p, size_t* size) {
  if (!p || !size) return kInvalidInput;
  *size = sizeof(kImage);
  return kSuccess;
}
int image(void* p, char* out) {
  if (!p || !out) return kInvalidInput;
  memcpy(out, kImage, sizeof(kImage));
  return kSuccess;
}
}  // namespace
SIMGPU_API int nvrtcGetPTXSize(void* p, size_t* size) {
  return imageSize(p, size);
}
SIMGPU_API int nvrtcGetPTX(void* p, char* out) {
  return image(p, out);
}
SIMGPU_API int nvrtcGetCUBINSize(void* p, size_t* size) {
  return imageSize(p, size);
}
SIMGPU_API int nvrtcGetCUBIN(void* p, char* out) {
  return image(p, out);
}
SIMGPU_API int nvrtcGetLTOIRSize(void* p, size_t* size) {
  return imageSize(p, size);
}
SIMGPU_API int nvrtcGetLTOIR(void* p, char* out) {
  return image(p, out);
}
SIMGPU_API int nvrtcGetProgramLogSize(void* p, size_t* size) {
  if (!p || !size) return kInvalidInput;
  *size = 1;
  return kSuccess;
}
SIMGPU_API int nvrtcGetProgramLog(void* p, char* log) {
  if (!p || !log) return kInvalidInput;
  *log = '\0';
  return kSuccess;
}
