// Python stacks without linking libpython: the C API is found with dlsym(RTLD_DEFAULT), and a
// thread's frames are read whether or not it holds the GIL (Note [Python frames without the
// GIL], python_stack.cpp): PyTorch releases it around every op. The GIL is never taken.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <mutex>

#include "tracer/common/flat_map.h"
#include "tracer/recorder/arena.h"
#include "tracer/recorder/python_layouts.h"

namespace memtrace::python {

// A frame as captured: enough to tell frames apart without touching their metadata.
struct RawFrame {
  const void* code;  // the PyCodeObject*
  int32_t position;  // instruction offset in bytes; the line number where the public API walked
                     // Python 3.10
  // Read from the code object when walked directly (never 0): tells a code object from another
  // that later has the same address (Note [Python frames without the GIL]). 0 when the public
  // API walked it: the code object is then kept alive, and its address never reused.
  uint32_t identity;
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

// Whether the calling thread's Python frames can be walked now: Python is running, and either
// its frame layout is known (any thread: Note [Python frames without the GIL]) or this thread
// holds the GIL (the public API's walk; *holds_gil says so, and that walk needs a GcPause).
// Everything below requires that this returned true on the same thread, in the same hook call.
bool canWalk(bool* holds_gil);

// Note [No Python code runs in a hook]
// The direct walk (Note [Python frames without the GIL]) calls nothing of the interpreter.
// The public API's, on a thread that holds the GIL, does: walking frames can materialize frame
// objects (Python >= 3.11 creates them lazily), and allocating a GC-tracked object can start a
// collection right there (3.11 collects inline), whose finalizers can free tensors: a CUDA free
// inside our own hook. A GcPause disables the collector for the duration of the hook; the next
// allocation after it collects as usual. Everything else we call on Python objects reads them or
// allocates plain strings.
class GcPause {
 public:
  explicit GcPause(bool active) {
    if (active) pause();
  }
  ~GcPause() {
    if (reenable_) resume();
  }
  GcPause(const GcPause&) = delete;
  GcPause& operator=(const GcPause&) = delete;

 private:
  void pause();
  void resume();
  bool reenable_ = false;
};

// The most frames a walk visits: every recorded frame, one skipped frame beside each (an entry
// frame of the C stack, a frame not started yet) and one at the top (walkDirectly's bound).
inline constexpr size_t kMaxFrames = 256;  // the most a stack keeps (MEMTRACE_PYTHON_DEPTH)
inline constexpr size_t kMaxWalkVisits = 2 * kMaxFrames + 2;

// The cached caller of the outermost frame: no frame's caller (a frame, or nullptr), so that the
// comparison of a chain stops there without counting its frames (Note [The chain compared a
// frame at a time]).
inline const void* const kChainEnd = reinterpret_cast<const void*>(uintptr_t{1});

// A thread's memory of its last direct walk (Note [Python stacks flat in depth]): the chain it
// read, from the outermost frame in, and what it made of it. Kept in the thread's state; only the
// thread itself reads or writes it.
struct WalkCache {
  // Walks made (0: none yet); `frames_serial` is the walk whose output the thread's frame
  // buffer holds exactly, 0 once anything else was put there (a lent stack, a reset).
  uint64_t serial;
  uint64_t frames_serial;
  // The outermost frames of the last walk's output that are those of the walk before it, in
  // the same order: the writer need not compare them with its cached stack.
  size_t same_outer;
  // The chain of the last walk that reached the outermost frame (0 frames: nothing cached),
  // by height (0: the outermost frame): each frame's address, its link (what the comparison
  // reads of it: its caller's address, kChainEnd for the outermost frame, and its instruction, 3.11
  // on a pointer into its code, 3.10 f_lasti; side by side, in the order compareChain reads
  // them) and code object (3.10), and how many frames of the output come from it and the frames
  // outside it.
  struct alignas(16) Link {  // read as one 16-byte word where the layout allows (compareChain)
    const void* previous;
    uintptr_t instruction;
  };
  size_t chain_count;
  const void* chain_frame[kMaxWalkVisits];
  Link chain[kMaxWalkVisits];
  const void* chain_code[kMaxWalkVisits];
  uint16_t chain_outputs_through[kMaxWalkVisits];
  // Where to look for a frame met again: the height + 1 of the chain's frame whose address
  // hashes here (0: none). A guess only; the chain is compared before anything is reused.
  uint16_t height_of_address[256];
  // What the tail was made under: the code objects' deaths (Note [Code objects that die]) and
  // the hidden code objects (Note [Frames memtrace hides]) counted then.
  uint64_t code_deaths;
  size_t hidden;
  // The last walk's output, innermost first.
  size_t output_count;
  RawFrame output[kMaxFrames];
  // The outermost frames of the last walk's output not yet written into the frame buffer the
  // walk wrote (Note [The reused tail read in place]): they are output's, at the same
  // positions. fillReusedTail writes them there.
  size_t tail_pending;
  // The frames of the walk under way, innermost first (scratch); after the last one visited, the
  // frame the walk stopped at (nullptr past the outermost): the last one's caller.
  const void* visit_frame[kMaxWalkVisits + 1];
  uintptr_t visit_instruction[kMaxWalkVisits];
  const void* visit_code[kMaxWalkVisits];
  uint16_t visit_outputs_before[kMaxWalkVisits];
};

// Writes the calling thread's Python frames, innermost first, into `frames` (at most
// `max`, keeping the innermost). Returns the count. `cache`: the thread's own (or nullptr: a
// full walk, nothing remembered); then the outermost cache->tail_pending frames of the count
// are not written yet (fillReusedTail).
size_t captureStack(RawFrame* frames, size_t max, WalkCache* cache);

// Note [The reused tail read in place]
// A walk that stops at a frame met again (Note [Python stacks flat in depth]) reuses the last
// walk's output for the frames outside it. Where the inner part kept its length, which is the
// steady state of a loop, those frames sit in the cache's output at the very positions they
// take in the new stack, and the one reader that runs on every event, the writer, does not read
// them: the walk told it (same_outer) that they are the frames its cached stack was made of.
// So the walk leaves them there (tail_pending) instead of copying 24 bytes a frame into the
// thread's frame buffer (8.7 instructions a frame beyond 10 with the copy, 6.9 without it:
// docs/performance.md's depth table), and whoever reads the buffer's outer frames (the writer when
// its cache is not the last walk's, a lend, a borrow that appends to the buffer) calls
// fillReusedTail first. The borrow's case is autograd's device thread running Python of its own
// (a custom Function's backward): tests/simulator/test_python_lines.py's
// test_python_frames_of_the_device_thread_before_the_lent_ones (12 of its 36 borrows find the
// whole own stack left in place).
inline void fillReusedTail(RawFrame* frames, WalkCache* cache) {
  size_t pending = cache->tail_pending;
  if (!pending) return;
  size_t start = cache->output_count - pending;
  std::memcpy(frames + start, cache->output + start, pending * sizeof(RawFrame));
  cache->tail_pending = 0;
}

// Leaves the frames of `code` (a code object the caller keeps alive) out of every stack
// captured from now on (Note [Frames memtrace hides]). False when the table is full.
bool hideCode(const void* code);

// Walks only through the public API from now on (MEMTRACE_PYTHON_WALKER=api).
void usePublicApiOnly();

// How stacks are being walked: "direct" (Note [Python frames without the GIL]) or
// "public-api" (threads that hold the GIL only).
const char* walkerName();

// The metadata of a captured frame, or nullptr if it cannot be had (out of memory, or a frame
// the public API walked, never resolved, on a thread that does not hold the GIL: `holds_gil`
// is canWalk's answer in this hook). Called under the recorder's lock, in the hook that
// captured the frame or borrowed it (Note [Stacks lent to threads without Python]).
FrameInfo* resolveFrame(const RawFrame& frame, bool holds_gil);

// The Python side's state, a part of the recorder's (Recorder::python; Note [One recorder
// state]): the C API and the frame layout found at load, the deaths of code objects (Note [Code
// objects that die]), the hidden code objects (Note [Frames memtrace hides]) and the frame cache
// (Note [Python frame cache], under the recorder's lock). Set once at load, or atomics, except
// the frame cache.
struct PythonState {
  // The functions of the Python C API we use. Opaque pointers stand for PyObject*,
  // PyFrameObject*, PyThreadState*. The first block is called without the GIL (each says why
  // that is safe); the rest only by a thread that holds it (the public-API walker).
  struct Api {
    int (*Py_IsInitialized)();  // reads a flag of the runtime
    int (*Py_IsFinalizing)();   // 3.13; _Py_IsFinalizing before: an atomic load
    void* (
        *PyGILState_GetThisThreadState)();  // a thread-specific key's value (any thread, any time)
    int (*PyCode_CheckLineNumber)(int, void*);  // _PyCode_CheckLineNumber: reads the bounds only
    const void* PyCode_Type;
    const void* PyType_Type;
    const unsigned long* Py_Version;  // 3.11: the version as PY_VERSION_HEX

    int (*PyGILState_Check)();
    void* (*PyThreadState_UncheckedGet)();   // _PyThreadState_UncheckedGet (<= 3.12) or
                                             // PyThreadState_GetUnchecked (3.13)
    void* (*PyThreadState_GetFrame)(void*);  // 3.9
    void* (*PyFrame_GetBack)(void*);         // 3.9
    void* (*PyFrame_GetCode)(void*);         // 3.9
    int (*PyFrame_GetLasti)(void*);          // 3.11; absent before
    int (*PyFrame_GetLineNumber)(void*);
    int (*PyCode_Addr2Line)(void*, int);
    void* (*PyObject_GetAttrString)(void*, const char*);
    const char* (*PyUnicode_AsUTF8AndSize)(void*, ssize_t*);
    void (*PyErr_Clear)();
    void (*Py_IncRef)(void*);
    void (*Py_DecRef)(void*);
    int (*PyGC_Disable)();  // 3.10
    int (*PyGC_Enable)();   // 3.10
  };

  enum class Walker { kDirect, kPublicApi };
  using DirectWalk = size_t (*)(const void*, RawFrame*, size_t, WalkCache*);
  struct RawFrameHash {
    uint64_t operator()(const RawFrame& frame) const {
      return mixBits(reinterpret_cast<uintptr_t>(frame.code) ^
                     (static_cast<uint64_t>(static_cast<uint32_t>(frame.position)) << 32) ^
                     frame.identity);
    }
  };
  static constexpr size_t kDeathSlots = 16384;
  static constexpr size_t kMaxHiddenCodes = 128;  // values.py's values mode hides 32 today

  Api api;
  std::atomic<bool> api_loaded{false};
  std::atomic<Walker> walker{Walker::kPublicApi};
  const MemtracePythonLayout* layout = nullptr;  // for this interpreter, if we know it
  DirectWalk direct_walk = nullptr;              // for this interpreter's layout
  bool thread_state_is_thread_local = false;     // 3.12 on: see holdsGil
  std::atomic<bool> layout_failed_said{false};
  // A Python too old for the walkers' API: its Py_IsInitialized, to say so once it runs.
  int (*unsupported_python_initialized)() = nullptr;

  std::atomic<uint32_t> code_deaths[kDeathSlots];  // by address slot
  std::atomic<uint64_t> code_deaths_total{0};  // every slot's (Note [Python stacks flat in depth])
  void (*code_dealloc)(void*) = nullptr;       // CPython's own, once replaced

  std::atomic<const void*> hidden_codes[kMaxHiddenCodes];
  std::atomic<size_t> hidden_count{0};
  std::mutex hiding;  // one hideCode at a time (readers take no lock)

  FlatMap<RawFrame, FrameInfo*, RawFrameHash> frame_cache;
  Arena frame_arena;  // the frames' strings and FrameInfos
};

}  // namespace memtrace::python
