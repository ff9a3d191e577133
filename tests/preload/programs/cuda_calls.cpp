// What the Python test scripts call besides CUDA's own functions (libcudacalls.so, linked with
// the simulated GPU's libcudart.so.13, which comes with it into the scope it is loaded in):
// one C call that allocates through the process's global scope, where LD_PRELOAD's hooks are.
#include <cuda_runtime_api.h>
#include <pthread.h>

#define EXPORT extern "C" __attribute__((visibility("default")))

// cudaMalloc through the global scope, returning the pointer (NULL on failure): one C call from
// Python with no Python helper frame in between, as a torch.empty(..., device="cuda") is.
EXPORT void* cudacalls_malloc(size_t size) {
  void* pointer = nullptr;
  return cudaMalloc(&pointer, size) == cudaSuccess ? pointer : nullptr;
}

// cudaMalloc on a thread of its own that never ran Python, joined before returning: what
// autograd's engine does on a GPU, where backward runs on the device's own thread while the
// thread that called backward waits (with the GIL released).
EXPORT void* cudacalls_malloc_on_new_thread(size_t size) {
  struct Call {
    size_t size;
    void* pointer;
  } call{size, nullptr};
  pthread_t thread;
  auto body = [](void* argument) -> void* {
    auto* call = static_cast<Call*>(argument);
    call->pointer = cudacalls_malloc(call->size);
    return nullptr;
  };
  if (pthread_create(&thread, nullptr, body, &call) != 0) return nullptr;
  pthread_join(thread, nullptr);
  return call.pointer;
}
