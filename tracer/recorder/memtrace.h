/* The C API of libmemtrace.so: what the Python package (ctypes) and C/C++ programs call.
 *
 * Every function is safe to call from any thread at any time, before or after tracing
 * starts; none of them throws, aborts or blocks on the GPU. Functions returning int return
 * 0 on success and a negative value on failure (memtrace_last_error() says why).
 *
 * Device arguments: a CUDA device index, or -1 for all devices together.
 */
#ifndef MEMTRACE_MEMTRACE_H_
#define MEMTRACE_MEMTRACE_H_

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define MEMTRACE_EXPORT __attribute__((visibility("default")))

#ifdef __cplusplus
extern "C" {
#endif

/* Starts tracing: stacks are captured for every allocation from now on. `path` names the
 * trace file (`%p` becomes the pid); NULL keeps the open file or, if none is open, uses
 * $MEMTRACE_OUTPUT or "memtrace-%p.bin". Opening a file writes the allocations that are
 * live at that moment as untraced, so the trace's live bytes are right from its start.
 * A different path than the open file's closes that one first. */
MEMTRACE_EXPORT int memtrace_start(const char* path);

/* Stops capturing stacks. Allocations and frees go on being written and counted, without
 * stacks, and the report shows them as `untraced`. Flushes the file. */
MEMTRACE_EXPORT int memtrace_stop(void);

/* Writes a named mark (a point in time) into the trace. */
MEMTRACE_EXPORT int memtrace_annotate(const char* name);

/* Marks the beginning and the end of a named phase (phases nest). */
MEMTRACE_EXPORT int memtrace_phase_begin(const char* name);
MEMTRACE_EXPORT int memtrace_phase_end(void);

/* The nn.Module that is running on the calling thread (its path, "model.layers.3.attn"):
 * the thread's allocations carry it until the matching memtrace_module_exit. Calls nest
 * (a module calls its children); each thread has its own stack, at most 64 deep (deeper
 * calls are counted but not recorded). Cheap: no lock, nothing written until an event. */
MEMTRACE_EXPORT int memtrace_module_enter(const char* path);
MEMTRACE_EXPORT int memtrace_module_exit(void);

/* Training (docs/trace-format.md, "Training"): what the Python package learns from
 * PyTorch's hooks. memtrace_set_category says what the live allocation starting at
 * `address` holds, for its whole life, at any time while it is live: 0 unknown, 1 parameter,
 * 2 gradient, 3 optimizer state, 4 activation (saved for backward), 5 input, 6 temporary.
 * memtrace_training_phase says which phase the process is in from now on: 0 none,
 * 1 forward, 2 backward, 3 optimizer. memtrace_step_end says that training step `step`
 * (from 1) ended. Each writes one small record; none allocates. */
MEMTRACE_EXPORT int memtrace_set_category(uint64_t address, int category);
MEMTRACE_EXPORT int memtrace_training_phase(int phase);
MEMTRACE_EXPORT int memtrace_step_end(uint64_t step);

/* Note [Weights and their modules] (tracer/format/records.h): the live allocation starting at
 * `address` holds a parameter or buffer of the nn.Module `module` (its path, "model.layers.3.attn",
 * not empty), for its whole life, whenever it was allocated: the report puts it under that
 * module. One small record; an address that starts no live allocation is ignored by readers. */
MEMTRACE_EXPORT int memtrace_set_owner_module(uint64_t address, const char* module);

/* Note [Generated code] (tracer/format/records.h): lines first_line to first_line + line_count - 1
 * of the generated Python file `file` (torch.compile's code, as its frames name it) stand for
 * the user's source stack of `depth` frames: files[i], functions[i], lines[i], outermost first.
 * Kept for the process: written into the open trace file now, and into every file opened
 * later; allowed before tracing starts. Strings are copied. */
MEMTRACE_EXPORT int memtrace_generated_code(const char* file, int first_line, int line_count,
                                            const char* const* files, const char* const* functions,
                                            const int* lines, int depth);

/* Note [Stacks lent to threads without Python] (lent_stacks.cpp): called by the thread that is
 * about to wait for others to allocate on its behalf (autograd's engine running backward on
 * a GPU's own thread), its Python stack less the `skip` innermost frames names the
 * allocations made for that backward, until the calling thread's matching
 * memtrace_end_lent_python_stack(). Lends nest (a backward inside a backward) and interleave
 * (threads). Returns the lend's id (> 0), or 0 if no stack could be walked.
 * memtrace_bind_lent_python_stack(id), called from inside that backward (a pre-hook of its root
 * node), tells the lend which of autograd's graph tasks it is for; under LD_PRELOAD the engine
 * says so itself. */
/* Note [Values where they decide the path] (python/mem_tracer/simulated_gpu/values.py): records,
 * with the calling thread's stacks, that the simulated run took a value no kernel computed on
 * `device` to be `assumed` (a short text: "0 (False): read as zero ..."). Returns 0, or -1 with
 * memtrace_last_error() set when nothing is recorded (no device, no text, not recording). */
MEMTRACE_EXPORT int memtrace_assumed_value(int device, const char* assumed);

/* Note [Frames memtrace hides] (python_stack.cpp): the frames of the Python code object `code`
 * (which the caller keeps alive) are left out of every stack captured from now on. Returns 0,
 * or -1 when memtrace hides as many code objects as it can already. */
MEMTRACE_EXPORT int memtrace_hide_python_code(const void* code);

MEMTRACE_EXPORT int memtrace_lend_python_stack(int skip);
MEMTRACE_EXPORT void memtrace_end_lent_python_stack(void);
MEMTRACE_EXPORT void memtrace_bind_lent_python_stack(int lend);

/* Writes what is buffered to the file now. */
MEMTRACE_EXPORT int memtrace_flush(void);

/* Closes the trace file (a final mark, then flush). Tracing is stopped; a later
 * memtrace_start opens a file again. */
MEMTRACE_EXPORT int memtrace_close(void);

/* Whether stacks are being captured now (1) or not (0). */
MEMTRACE_EXPORT int memtrace_is_tracing(void);

/* The path of the open trace file, or "" when none is open. Valid until the next call
 * of memtrace_start / memtrace_close. */
MEMTRACE_EXPORT const char* memtrace_output_path(void);

/* Bytes live now, and the most bytes that were live at once since the library was loaded
 * or since memtrace_reset_peak, counting every allocation it has seen, traced or not. */
MEMTRACE_EXPORT uint64_t memtrace_current_bytes(int device);
MEMTRACE_EXPORT uint64_t memtrace_peak_bytes(int device);
MEMTRACE_EXPORT void memtrace_reset_peak(int device);

/* PyTorch's reserved memory as its caching allocator's segments say (Note [PyTorch's own
 * allocator] in tracer/format/records.h): now, and the most since the library was loaded or
 * memtrace_reset_peak. 0 where no bridge attached to PyTorch's allocator. */
MEMTRACE_EXPORT uint64_t memtrace_reserved_bytes(int device);
MEMTRACE_EXPORT uint64_t memtrace_peak_reserved_bytes(int device);

/* Note [PyTorch's own allocator] (tracer/format/records.h): records PyTorch's caching allocator
 * of this process from inside (its trace tracker, through the bridge built for the torch
 * release that runs), where libmemtrace.so was not preloaded: the Python package's
 * start_tracing(). PyTorch's CUDA must be initialized. 0 when attached (now or before), -1
 * otherwise (memtrace_last_error() says why; nothing is written to stderr). Once attached, what
 * the allocator holds that the recorder does not know yet (from its snapshot: each segment, and
 * each live tensor of its requested bytes) is recorded, without stacks, as allocations made
 * before tracing (untraced), under Note [Tensors made while the tracker attaches]'s checks in
 * allocator/torch_allocator.cpp (its one line on stderr if the allocator kept changing). */
MEMTRACE_EXPORT int memtrace_torch_attach(void);

/* How this process records, for troubleshooting: "python-walker=<direct|checking|public-api>
 * unwinder=<libunwind|glibc-backtrace|none>" (the unwinder once native stacks were asked for). */
MEMTRACE_EXPORT const char* memtrace_diagnostics(void);

/* The last error of this library as one line ("" when none). */
MEMTRACE_EXPORT const char* memtrace_last_error(void);

/* PyTorch's pluggable allocator entry points
 * (torch.cuda.memory.CUDAPluggableAllocator(path, "memtrace_alloc", "memtrace_free")).
 * Backed by cudaMallocAsync / cudaFreeAsync on the given stream, from the device's default
 * pool with its release threshold raised; safe under CUDA graph capture. */
MEMTRACE_EXPORT void* memtrace_alloc(ssize_t size, int device, void* stream);
MEMTRACE_EXPORT void memtrace_free(void* ptr, ssize_t size, int device, void* stream);

/* Gives the pool's cached memory of a device back to the driver (torch.cuda.empty_cache). */
MEMTRACE_EXPORT void memtrace_empty_cache(int device);

#ifdef __cplusplus
}
#endif

#endif /* MEMTRACE_MEMTRACE_H_ */
