// Python stacks without linking libpython: the C API is found with dlsym(RTLD_DEFAULT), and
// stacks are walked only on a thread that holds the GIL. Autograd's device threads and
// other threads without the GIL get no Python stack; they must never wait for it.
#pragma once

#include <cstddef>
#include <cstdint>

namespace memtrace::python {

// A frame as captured: enough to tell frames apart without touching their metadata.
struct RawFrame {
  const void* code;  // the PyCodeObject*
  int32_t position;  // instruction offset in bytes; the line number where Python < 3.11
  bool operator==(const RawFrame&) const = default;
};

// What a frame means. Resolved once per distinct RawFrame and kept for the life of the
// process (Note [Python frame cache]); the strings live in the recorder's arena.
struct FrameInfo {
  const char* file;
  const char* function;
  uint32_t file_size;
  uint32_t function_size;
  int32_t line;
  // The frame's id in the open trace file; valid while `generation` is the file's.
  uint32_t file_frame_id;
  uint32_t generation;
};

// Looks the C API up (again). Cheap to call more than once; returns whether Python runs
// in this process.
bool loadApi();

// Whether the calling thread can be walked now: Python is running and this thread holds
// the GIL. Everything below requires that this returned true on the same thread, in the
// same hook call.
bool threadHoldsGil();

// Note [No Python code runs in a hook]
// Walking frames can materialize frame objects (Python >= 3.11 creates them lazily), and
// allocating a GC-tracked object can start a collection right there (3.11 collects inline),
// whose finalizers can free tensors: a CUDA free inside our own hook. A GcPause disables
// the collector for the duration of the hook; the next allocation after it collects as
// usual. Everything else we call on Python objects reads them or allocates plain strings.
class GcPause {
 public:
  explicit GcPause(bool active);
  ~GcPause();
  GcPause(const GcPause&) = delete;
  GcPause& operator=(const GcPause&) = delete;

 private:
  bool reenable_ = false;
};

// Writes the calling thread's Python frames, innermost first, into `frames` (at most
// `max`, keeping the innermost). Returns the count.
size_t captureStack(RawFrame* frames, size_t max);

// Walks only through the public API from now on (MEMTRACE_PYTHON_WALKER=api).
void usePublicApiOnly();

// How stacks are being walked: "direct" (Note [Walking CPython's frames directly]),
// "checking" (both ways, until they have agreed enough) or "public-api".
const char* walkerName();

// The metadata of a captured frame, or nullptr if it cannot be had (out of memory).
// Holds a reference to the code object, so that its address can never be reused by
// another code object and mislabel a frame. Called under the recorder's lock.
FrameInfo* resolveFrame(const RawFrame& frame);

}  // namespace memtrace::python
