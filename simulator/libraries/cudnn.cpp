// cuDNN (libcudnn.so.9): the handle, versions and errors, and the legacy API's descriptors
// (cudnn_legacy.h: a tensor descriptor keeps its dims; the others only have to exist, the
// program sets them and cuDNN reads them inside calls that do nothing here). The backend API
// PyTorch's convolutions and attention go through is in cudnn_backend.cpp, the RNN API in
// cudnn_rnn.cpp.
#include <stdio.h>
#include <string.h>

#include <string>

#include "simulator/core/sizes.h"
#include "simulator/libraries/cudnn_backend.h"
#include "simulator/libraries/cudnn_legacy.h"
#include "simulator/libraries/library.h"

using namespace simgpu;
using simgpu::cudnn::LegacyDescriptor;

namespace {
enum : int { kSuccess = 0, kNotInitialized = 1001, kBadParam = 2000 };
}  // namespace

// cuDNN 9.24.0 (CUDNN_VERSION = major * 10000 + minor * 100 + patch), the release the wheels
// of torch 2.14 bring.
SIMGPU_API size_t cudnnGetVersion(void) {
  return 92400;
}
SIMGPU_API size_t cudnnGetMaxDeviceVersion(void) {
  return 1200;
}
SIMGPU_API size_t cudnnGetCudartVersion(void) {
  return 13000;
}
SIMGPU_API int cudnnGetProperty(int type, int* value) {
  if (!value) return kBadParam;
  *value = type == 0 ? 9 : type == 1 ? 24 : 0;
  return kSuccess;
}
SIMGPU_API const char* cudnnGetErrorString(int status) {
  switch (status) {
    case 0:
      return "CUDNN_STATUS_SUCCESS";
    case 1001:
      return "CUDNN_STATUS_NOT_INITIALIZED";
    case 2000:
      return "CUDNN_STATUS_BAD_PARAM";
    case 3000:
      return "CUDNN_STATUS_NOT_SUPPORTED";
    default:
      return "CUDNN_STATUS_UNKNOWN";
  }
}
SIMGPU_API void cudnnGetLastErrorString(char* message, size_t size) {
  if (message && size) message[0] = '\0';
}
SIMGPU_API int cudnnCreate(void** out) {
  if (!out) return kBadParam;
  if (!profile()) return kNotInitialized;
  *out = newHandle();
  return kSuccess;
}
SIMGPU_API int cudnnDestroy(void* h) {
  delete static_cast<LibraryHandle*>(h);
  return kSuccess;
}
SIMGPU_API int cudnnSetStream(void* h, void* stream) {
  if (!h) return kBadParam;
  static_cast<LibraryHandle*>(h)->stream = stream;
  return kSuccess;
}
SIMGPU_API int cudnnGetStream(void* h, void** stream) {
  if (!h || !stream) return kBadParam;
  *stream = static_cast<LibraryHandle*>(h)->stream;
  return kSuccess;
}
SIMGPU_API int cudnnGraphVersionCheck(void) {
  return kSuccess;
}

#define SIMGPU_LEGACY_DESCRIPTOR(Name)                              \
  SIMGPU_API int cudnnCreate##Name##Descriptor(void** out) {        \
    if (!out) return kBadParam;                                     \
    *out = new LegacyDescriptor;                                    \
    return kSuccess;                                                \
  }                                                                 \
  SIMGPU_API int cudnnDestroy##Name##Descriptor(void* descriptor) { \
    delete static_cast<LegacyDescriptor*>(descriptor);              \
    return kSuccess;                                                \
  }

SIMGPU_LEGACY_DESCRIPTOR(Tensor)
SIMGPU_LEGACY_DESCRIPTOR(Filter)
SIMGPU_LEGACY_DESCRIPTOR(Convolution)
SIMGPU_LEGACY_DESCRIPTOR(Activation)
SIMGPU_LEGACY_DESCRIPTOR(Pooling)
SIMGPU_LEGACY_DESCRIPTOR(CTCLoss)
SIMGPU_LEGACY_DESCRIPTOR(SpatialTransformer)
SIMGPU_LEGACY_DESCRIPTOR(OpTensor)
SIMGPU_LEGACY_DESCRIPTOR(ReduceTensor)
SIMGPU_LEGACY_DESCRIPTOR(LRN)
SIMGPU_LEGACY_DESCRIPTOR(TensorTransform)

SIMGPU_API int cudnnSetTensorNdDescriptor(void* descriptor, int data_type, int dims,
                                          const int* sizes, const int* strides) {
  if (!descriptor || dims <= 0 || dims > 8 || !sizes || !strides) return kBadParam;
  auto* tensor = static_cast<LegacyDescriptor*>(descriptor);
  tensor->data_type = data_type;
  tensor->dims.assign(sizes, sizes + dims);
  tensor->strides.assign(strides, strides + dims);
  return kSuccess;
}
SIMGPU_API int cudnnGetTensorNdDescriptor(const void* descriptor, int requested, int* data_type,
                                          int* dims, int* sizes, int* strides) {
  if (!descriptor || !data_type || !dims || requested < 0) return kBadParam;
  const auto* tensor = static_cast<const LegacyDescriptor*>(descriptor);
  *data_type = tensor->data_type;
  *dims = static_cast<int>(tensor->dims.size());
  for (int i = 0; i < requested && i < *dims; ++i) {
    if (sizes) sizes[i] = tensor->dims[i];
    if (strides) strides[i] = tensor->strides[i];
  }
  return kSuccess;
}

// The legacy batch normalization's scratch sizes (PyTorch's cudnn_batch_norm in training asks
// before cudnnBatchNormalizationForwardTrainingEx and its backward): 0 bytes, estimated, like
// an unmeasured backend plan's workspace (Note [Sizes nobody measured] in
// simulator/core/sizes.cpp; Note [Engines and workspaces] in cudnn_engines.cpp).
namespace {
int batchNormSize(const char* function, void* handle, int mode, int ops, const void* x,
                  size_t* bytes) {
  if (!handle || !bytes) return kBadParam;
  // What the size depends on, as the calibration asks it again (python -m mem_tracer.calibrate):
  // cudnnBatchNormMode_t, cudnnBatchNormOps_t and the input's descriptor.
  std::string shapes = "{\"mode\":" + std::to_string(mode) + ",\"ops\":" + std::to_string(ops);
  if (x) {
    const auto* tensor = static_cast<const LegacyDescriptor*>(x);
    auto list = [](const std::vector<int>& values) {
      std::string out = "[";
      for (size_t i = 0; i < values.size(); ++i) out += (i ? "," : "") + std::to_string(values[i]);
      return out + "]";
    };
    shapes += ",\"x\":{\"dims\":" + list(tensor->dims) + ",\"strides\":" + list(tensor->strides) +
              ",\"data_type\":" + jsonString(cudnn::dataTypeName(tensor->data_type)) + "}";
  }
  shapes += "}";
  SizeAnswer answer;
  answer.bytes = 0;
  answer.at_most = kNoBound;
  answer.how = "no size measured on a card";
  if (!answerSize(SizeQuestion{"cuDNN", function, shapes}, &answer))
    return refuse("cuDNN", function, 3000, kUnknownSizeRefused);
  *bytes = answer.bytes;
  return kSuccess;
}
}  // namespace

SIMGPU_API int cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(void* handle, int mode,
                                                                        int ops, void* x, void*,
                                                                        void*, void*, void*,
                                                                        size_t* bytes) {
  return batchNormSize(__func__, handle, mode, ops, x, bytes);
}
SIMGPU_API int cudnnGetBatchNormalizationBackwardExWorkspaceSize(void* handle, int mode, int ops,
                                                                 void* x, void*, void*, void*,
                                                                 void*, void*, void*,
                                                                 size_t* bytes) {
  return batchNormSize(__func__, handle, mode, ops, x, bytes);
}
SIMGPU_API int cudnnGetBatchNormalizationTrainingExReserveSpaceSize(void* handle, int mode, int ops,
                                                                    void*, void* x, size_t* bytes) {
  return batchNormSize(__func__, handle, mode, ops, x, bytes);
}
