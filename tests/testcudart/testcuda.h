// Test-only controls of the test CUDA runtime (libcuda.so.1 + libcudart.so.13 built from
// this folder): host memory behind CUDA's allocation entry points, for tests and benchmarks
// on machines without a GPU. Never installed, never loaded outside tests.
//
// Environment:
//   MEMTRACE_TEST_DEVICES         number of devices (2)
//   MEMTRACE_TEST_DEVICE_MEMORY   bytes per device before allocations fail with
//                                 out-of-memory (64 GiB; large blocks are reserved, not
//                                 touched, so this costs no host memory)
#pragma once

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TESTCUDA_EXPORT __attribute__((visibility("default")))

// Bytes live on `device` (-1: all) according to the test runtime itself.
TESTCUDA_EXPORT uint64_t testcuda_live_bytes(int device);
// The release threshold last set on the device's default pool (0 if never set).
TESTCUDA_EXPORT uint64_t testcuda_release_threshold(int device);
// The calling thread's stream capture mode during its last stream-ordered allocation.
TESTCUDA_EXPORT int testcuda_capture_mode_at_last_alloc(void);
// How many times cudaMemPoolTrimTo ran.
TESTCUDA_EXPORT int testcuda_trim_count(void);
// The current device of the calling thread (shared by runtime and driver, as a context is).
TESTCUDA_EXPORT int testcuda_current_device(void);
TESTCUDA_EXPORT void testcuda_set_current_device(int device);
TESTCUDA_EXPORT int testcuda_device_count(void);
// The thread's capture mode (runtime state, kept here with the rest).
TESTCUDA_EXPORT int* testcuda_capture_mode_slot(void);
TESTCUDA_EXPORT void testcuda_note_capture_mode(void);
TESTCUDA_EXPORT void testcuda_set_release_threshold(int device, uint64_t value);
TESTCUDA_EXPORT void testcuda_note_trim(void);
// cudaMalloc through the global scope; NULL on failure (libcudart.so.13).
TESTCUDA_EXPORT void* testcuda_malloc(size_t size);
// The same on a new thread that never ran Python, joined before it returns.
TESTCUDA_EXPORT void* testcuda_malloc_on_new_thread(size_t size);

#ifdef __cplusplus
}
#endif
