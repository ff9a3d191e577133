/* What memtrace's own tests read of the simulated GPU besides what CUDA answers (Note [Test
   hooks of the simulated GPU] in simulator/core/testing.cpp): counters of calls CUDA does not
   count, so that a test can tell what the program under memtrace did to the card. Exported by
   libmemtrace-simgpu.so beside simgpu_api.h; nothing outside tests/ and bench/ calls them, and
   none changes what the card does. C, for the test programs of tests/preload. */
#ifndef SIMGPU_TESTING_H
#define SIMGPU_TESTING_H

#ifdef __cplusplus
extern "C" {
#endif

/* The calling thread's stream capture mode (cudaStreamCaptureMode's numbering: 0 global, 1
   thread-local, 2 relaxed) during its last stream-ordered allocation (cudaMallocAsync,
   cuMemAllocAsync and their pool forms), or -1 before its first. */
int simgpu_testing_capture_mode_at_last_alloc(void);
/* The same during the thread's last cuMemGetInfo or cudaMemGetInfo. */
int simgpu_testing_capture_mode_at_last_memory_info(void);
/* How many times cudaMemPoolTrimTo or cuMemPoolTrimTo ran, on any pool. */
int simgpu_testing_pool_trims(void);
/* MEMTRACE_GPU_TEST_MEET's meeting (Note [Test hooks of the simulated GPU]): 1 when all its
   devices' first stream-capture queries met, 0 when they waited 10 s in vain, -1 before. */
int simgpu_testing_meeting(void);

#ifdef __cplusplus
}
#endif

#endif
