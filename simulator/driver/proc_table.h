/* The driver's functions by the names cuGetProcAddress is asked for (generated from
   simulator/exports/cuda.exports into proc_table.c). */
#ifndef SIMGPU_PROC_TABLE_H
#define SIMGPU_PROC_TABLE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  const char* name; /* "cuMemAlloc" */
  int since;        /* the CUDA version of its newest form (3020), 0 when cudaTypedefs.h has none */
  void* legacy;     /* cuMemAlloc_v2 */
  void* per_thread; /* the per-thread default stream form, or legacy */
} SimgpuProc;

extern const SimgpuProc simgpu_procs[];
extern const size_t simgpu_proc_count;

#ifdef __cplusplus
}
#endif

#endif
