/* What the simulated GPU (libmemtrace-simgpu.so) offers the programs that run on it, memtrace's
   recorder above all, which finds these by dlsym and never links the library: whether the
   process runs on a simulated card, which, and the reads of device values
   (Note [Reads of device values] in simulator/core/device.cpp). C, for any caller. */
#ifndef SIMGPU_API_H
#define SIMGPU_API_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Called on the reading thread for each copy from device memory to the host. */
typedef void (*SimgpuReadObserver)(const void* device_source, size_t bytes);

/* The profile's name ("h100-80gb"), or NULL when no profile could be read. */
const char* simgpu_profile_name(void);
/* The file the profile was read from. */
const char* simgpu_profile_file(void);
/* Each device's memory (the profile's, or MEMTRACE_GPU_MEMORY's). */
uint64_t simgpu_memory_bytes(void);
/* 1 when MEMTRACE_GPU_MEMORY set each device's memory instead of the profile, else 0. */
int simgpu_memory_overridden(void);
/* How many devices there are (MEMTRACE_GPU_COUNT; 1 by default); 0 without a profile. */
int simgpu_device_count(void);
/* Bytes counted against `device` now. */
uint64_t simgpu_used_bytes(int device);
/* How many copies from device memory to the host the program made. */
uint64_t simgpu_reads_back(void);
void simgpu_set_read_observer(SimgpuReadObserver observer);
/* Called for each size a simulated library answered without knowing it (Note [Sizes nobody
   measured] in simulator/core/sizes.cpp), on the asking thread: `description` is a JSON object
   {"library", "call", "shapes"}; `bytes` the answer, `at_most` its upper figure (UINT64_MAX:
   none), `certainty` 0 exact, 1 bounded, 2 estimated; `address` the buffer the program handed
   the library, sized by the answer (NULL when told at the question: the program allocates it
   next, on this thread, if it allocates anything). */
typedef void (*SimgpuSizeObserver)(const char* description, uint64_t bytes, uint64_t at_most,
                                   int certainty, const void* address);
void simgpu_set_size_observer(SimgpuSizeObserver observer);
/* Whether the reads this thread makes from now on are of values the program knows on the host
   (1) or not (0): known reads are carried out as any other, but neither counted (simgpu_reads_back,
   MEMTRACE_GPU_MAX_READS) nor handed to the observer, since they read what the card would
   (Note [Known values on the simulated card] in python/mem_tracer/simulated_gpu/values.py).
   Returns the previous setting. */
int simgpu_set_reads_known(int known);
/* Sets `bytes` of device memory at `device`, inside one allocation and at most 64 KiB (what a
   copy keeps: Note [Values on the simulated device]), to the host's bytes at `host`, or to zeros
   when `host` is NULL: the values memtrace knows for a device tensor, or zeros where it knows
   none (Note [Known values on the simulated card]). Not a copy the program made: not counted.
   Returns 0, or -1 when the range is not such device memory. */
int simgpu_set_values(void* device, const void* host, size_t bytes);
/* Reads `bytes` of device memory at `device` into host memory, inside one allocation and at most
   64 KiB, for memtrace itself: what a copy the program made put there (a tensor made from host
   data by a path the dispatcher does not show). Not a read of the program's: not counted, not
   observed. Returns 0, or -1 as simgpu_set_values. */
int simgpu_read_values(void* host, const void* device, size_t bytes);
/* For the generated stubs: one line the first time `function` is called, then `status`. */
int simgpu_refuse(const char* library, const char* function, int status);

#ifdef __cplusplus
}
#endif

#endif
