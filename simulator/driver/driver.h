// What the simulated driver (libcuda.so.1) offers the simulated runtime beside CUDA's own
// functions: cuGetProcAddress's answer under a name memtrace never hooks, so that the
// runtime's cudaGetDriverEntryPoint reaches the driver as CUDA's runtime does, through its
// own pointer rather than through the process's global scope.
#pragma once

#ifdef __cplusplus
extern "C" {
#endif

/* *found: a cudaDriverEntryPointQueryResult (0 found, 1 symbol not found, 2 version not
   sufficient). Returns a CUresult. */
__attribute__((visibility("default"))) int simgpu_driver_proc_address(const char* symbol,
                                                                      void** function, int version,
                                                                      unsigned long long flags,
                                                                      int* found);

#ifdef __cplusplus
}
#endif
