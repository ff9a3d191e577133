#include "tracer/recorder/python_stack.h"

#include <dlfcn.h>
#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <cstring>

#include "tracer/common/flat_map.h"
#include "tracer/recorder/arena.h"
#include "tracer/recorder/immortal.h"

namespace memtrace::python {
namespace {

// The functions of the Python C API we use, all in the stable part of the API except
// where noted. Opaque pointers stand for PyObject*, PyFrameObject*, PyThreadState*.
struct Api {
  int (*Py_IsInitialized)();
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
  int (*PyGC_Disable)();            // 3.10
  int (*PyGC_Enable)();             // 3.10
  int (*Py_IsFinalizing)();         // 3.13; _Py_IsFinalizing before
  const unsigned long* Py_Version;  // 3.11: the version as PY_VERSION_HEX
};

// Note [Walking CPython's frames directly]
// The public API costs about 12 ns a frame (five calls, two reference counts). CPython's
// interpreter frames are a linked list we can read with a few loads a frame, if we know
// their layout, which is fixed within a minor version (read from CPython's own headers,
// Include/internal/pycore_frame.h and pycore_code.h, of 3.11.7, 3.12.1 and 3.13.0, x86_64):
// offsets of the code object, the previous frame and the instruction pointer in
// _PyInterpreterFrame, of its owner byte, and of the bytecode and of _co_firsttraceable in
// PyCodeObject. Frames are skipped exactly as PyFrame_GetBack skips them
// (_PyFrame_IsIncomplete: owned by the C stack, or not yet past the code's first traceable
// instruction), and the position is PyFrame_GetLasti's (2 * code units from the start).
// The layout is trusted only after the first 64 stacks walked both ways agree, and one
// stack in 4096 is checked again; a disagreement (a debug or free-threaded build, a
// layout we got wrong) sends every later stack through the public API.
struct FrameLayout {
  size_t frame_object_to_frame;  // PyFrameObject::f_frame
  size_t code;                   // _PyInterpreterFrame::f_code (f_executable in 3.13)
  size_t previous;
  size_t instruction;  // prev_instr (3.11, 3.12) or instr_ptr (3.13)
  size_t owner;
  int owned_by_generator;
  int owned_by_c_stack;    // -1: no such owner (3.11)
  size_t code_units;       // PyCodeObject::co_code_adaptive
  size_t first_traceable;  // PyCodeObject::_co_firsttraceable (an int)
};

constexpr FrameLayout kLayout311 = {24, 32, 48, 56, 69, 1, -1, 184, 168};
constexpr FrameLayout kLayout312 = {24, 0, 8, 56, 70, 1, 3, 192, 176};
constexpr FrameLayout kLayout313 = {24, 0, 8, 56, 70, 1, 3, 200, 184};

const FrameLayout* g_layout = nullptr;  // for this interpreter, if we know it
enum class FastWalk { kChecking, kTrusted, kOff };
std::atomic<FastWalk> g_fast_walk{FastWalk::kChecking};
std::atomic<uint32_t> g_fast_agreements{0};
std::atomic<uint32_t> g_walks{0};
constexpr uint32_t kAgreementsToTrust = 64;
constexpr uint32_t kRecheckEvery = 4096;

Api g_api;
std::atomic<bool> g_api_loaded{false};

template <typename Fn>
bool lookUp(Fn* slot, const char* name) {
  *slot = reinterpret_cast<Fn>(dlsym(RTLD_DEFAULT, name));
  return *slot != nullptr;
}

struct RawFrameHash {
  uint64_t operator()(const RawFrame& frame) const {
    return mixBits(reinterpret_cast<uintptr_t>(frame.code) ^
                   (static_cast<uint64_t>(static_cast<uint32_t>(frame.position)) << 48));
  }
};

// Note [Python frame cache]
// Turning a frame into file:line:function costs a few hundred ns (attribute lookups and
// the line table), so it is done once per distinct (code object, instruction offset) and
// kept for the life of the process; trace files come and go (fork, reopen) but the
// meaning of a frame does not. Guarded by the recorder's lock, and only ever touched with
// the GIL held.
// Never destroyed (Note [The recorder's state outlives every thread]).
Immortal<FlatMap<RawFrame, FrameInfo*, RawFrameHash>> g_frame_cache_storage;
FlatMap<RawFrame, FrameInfo*, RawFrameHash>& g_frame_cache = g_frame_cache_storage.value;
Immortal<Arena> g_frame_arena_storage;
Arena& g_frame_arena = g_frame_arena_storage.value;

}  // namespace

bool loadApi() {
  if (g_api_loaded.load(std::memory_order_acquire)) return true;
  Api api{};
  bool ok = lookUp(&api.Py_IsInitialized, "Py_IsInitialized") &&
            lookUp(&api.PyGILState_Check, "PyGILState_Check") &&
            (lookUp(&api.PyThreadState_UncheckedGet, "PyThreadState_GetUnchecked") ||
             lookUp(&api.PyThreadState_UncheckedGet, "_PyThreadState_UncheckedGet")) &&
            lookUp(&api.PyThreadState_GetFrame, "PyThreadState_GetFrame") &&
            lookUp(&api.PyFrame_GetBack, "PyFrame_GetBack") &&
            lookUp(&api.PyFrame_GetCode, "PyFrame_GetCode") &&
            lookUp(&api.PyFrame_GetLineNumber, "PyFrame_GetLineNumber") &&
            lookUp(&api.PyObject_GetAttrString, "PyObject_GetAttrString") &&
            lookUp(&api.PyUnicode_AsUTF8AndSize, "PyUnicode_AsUTF8AndSize") &&
            lookUp(&api.PyErr_Clear, "PyErr_Clear") && lookUp(&api.Py_IncRef, "Py_IncRef") &&
            lookUp(&api.Py_DecRef, "Py_DecRef");
  if (!ok) return false;
  // Optional: with PyFrame_GetLasti frames are told apart by instruction and the line is
  // looked up once (PyCode_Addr2Line); without it (Python < 3.11) by line number.
  if (lookUp(&api.PyFrame_GetLasti, "PyFrame_GetLasti") &&
      !lookUp(&api.PyCode_Addr2Line, "PyCode_Addr2Line"))
    api.PyFrame_GetLasti = nullptr;
  lookUp(&api.PyGC_Disable, "PyGC_Disable");
  lookUp(&api.PyGC_Enable, "PyGC_Enable");
  if (!lookUp(&api.Py_IsFinalizing, "Py_IsFinalizing"))
    lookUp(&api.Py_IsFinalizing, "_Py_IsFinalizing");
  lookUp(&api.Py_Version, "Py_Version");
  if (api.Py_Version && api.PyFrame_GetLasti) {
    switch (*api.Py_Version >> 16) {  // PY_VERSION_HEX: major, minor, micro, level
      case 0x030B:
        g_layout = &kLayout311;
        break;
      case 0x030C:
        g_layout = &kLayout312;
        break;
      case 0x030D:
        g_layout = &kLayout313;
        break;
      default:
        g_layout = nullptr;
    }
  }
  if (!g_layout) g_fast_walk.store(FastWalk::kOff);
  g_api = api;
  g_api_loaded.store(true, std::memory_order_release);
  return true;
}

bool threadHoldsGil() {
  if (!g_api_loaded.load(std::memory_order_acquire)) return false;
  if (!g_api.Py_IsInitialized()) return false;
  if (g_api.Py_IsFinalizing && g_api.Py_IsFinalizing()) return false;
  // PyGILState_Check answers 1 when it cannot tell (no thread state machinery yet), so
  // the thread state is checked too.
  return g_api.PyGILState_Check() && g_api.PyThreadState_UncheckedGet() != nullptr;
}

GcPause::GcPause(bool active) {
  if (active && g_api.PyGC_Disable) reenable_ = g_api.PyGC_Disable() == 1;
}

GcPause::~GcPause() {
  if (reenable_) g_api.PyGC_Enable();
}

namespace {

template <typename T>
T field(const void* base, size_t offset) {
  T value;
  std::memcpy(&value, static_cast<const char*>(base) + offset, sizeof(T));
  return value;
}

// The public API's walk (the reference), from the thread's top frame object, which it
// releases.
size_t walkWithApi(void* frame, RawFrame* frames, size_t max) {
  size_t count = 0;
  while (frame && count < max) {
    void* code = g_api.PyFrame_GetCode(frame);  // a new reference
    int position =
        g_api.PyFrame_GetLasti ? g_api.PyFrame_GetLasti(frame) : g_api.PyFrame_GetLineNumber(frame);
    // The frame keeps its code object alive until resolveFrame takes its own reference.
    g_api.Py_DecRef(code);
    frames[count++] = RawFrame{code, position};
    void* back = g_api.PyFrame_GetBack(frame);  // a new reference, or null
    g_api.Py_DecRef(frame);
    frame = back;
  }
  if (frame) g_api.Py_DecRef(frame);  // deeper than `max`: the outermost frames are dropped
  return count;
}

// Note [Walking CPython's frames directly]. `check`: compare with frames[0, count) instead
// of writing; returns count on agreement, SIZE_MAX otherwise.
size_t walkDirectly(const void* frame, RawFrame* frames, size_t max, bool check, size_t count) {
  const FrameLayout& layout = *g_layout;
  size_t walked = 0;
  for (; frame && walked < max; frame = field<const void*>(frame, layout.previous)) {
    int owner = field<char>(frame, layout.owner);
    if (owner == layout.owned_by_c_stack) continue;
    const char* code = field<const char*>(frame, layout.code);
    const char* units = code + layout.code_units;
    const char* instruction = field<const char*>(frame, layout.instruction);
    if (owner != layout.owned_by_generator &&
        instruction < units + 2 * field<int>(code, layout.first_traceable))
      continue;  // not started yet: PyFrame_GetBack skips it too
    long units_in = (instruction - units) / 2;
    RawFrame raw{code, units_in < 0 ? -1 : static_cast<int32_t>(2 * units_in)};
    if (check) {
      if (walked >= count || !(frames[walked] == raw)) return SIZE_MAX;
    } else {
      frames[walked] = raw;
    }
    ++walked;
  }
  if (check && walked != count) return SIZE_MAX;
  return walked;
}

}  // namespace

size_t captureStack(RawFrame* frames, size_t max) {
  void* thread_state = g_api.PyThreadState_UncheckedGet();
  if (!thread_state) return 0;
  void* top = g_api.PyThreadState_GetFrame(thread_state);  // a new reference, or null
  if (!top) return 0;
  FastWalk mode = g_fast_walk.load(std::memory_order_relaxed);
  bool recheck = mode == FastWalk::kTrusted &&
                 g_walks.fetch_add(1, std::memory_order_relaxed) % kRecheckEvery == 0;
  if (mode == FastWalk::kTrusted && !recheck) {
    const void* frame = field<const void*>(top, g_layout->frame_object_to_frame);
    g_api.Py_DecRef(top);  // it stays alive: it is running
    return walkDirectly(frame, frames, max, false, 0);
  }
  const void* frame =
      mode == FastWalk::kOff ? nullptr : field<const void*>(top, g_layout->frame_object_to_frame);
  size_t count = walkWithApi(top, frames, max);
  if (mode != FastWalk::kOff) {
    if (walkDirectly(frame, frames, max, true, count) == SIZE_MAX) {
      g_fast_walk.store(FastWalk::kOff, std::memory_order_relaxed);
    } else if (mode == FastWalk::kChecking &&
               g_fast_agreements.fetch_add(1, std::memory_order_relaxed) + 1 >=
                   kAgreementsToTrust) {
      FastWalk expected = FastWalk::kChecking;
      g_fast_walk.compare_exchange_strong(expected, FastWalk::kTrusted);
    }
  }
  return count;
}

void usePublicApiOnly() {
  g_fast_walk.store(FastWalk::kOff, std::memory_order_relaxed);
}

const char* walkerName() {
  switch (g_fast_walk.load(std::memory_order_relaxed)) {
    case FastWalk::kTrusted:
      return "direct";
    case FastWalk::kChecking:
      return "checking";
    case FastWalk::kOff:
      return "public-api";
  }
  return "?";
}

FrameInfo* resolveFrame(const RawFrame& frame) {
  if (FrameInfo** cached = g_frame_cache.find(frame)) return *cached;

  auto* code = const_cast<void*>(frame.code);
  auto copyAttribute = [&](const char* name, const char** out, uint32_t* size) {
    *out = "?";
    *size = 1;
    void* value = g_api.PyObject_GetAttrString(code, name);
    if (!value) {
      g_api.PyErr_Clear();
      return;
    }
    ssize_t length = 0;
    const char* utf8 = g_api.PyUnicode_AsUTF8AndSize(value, &length);
    if (utf8) {
      if (const char* copy = g_frame_arena.copyString(utf8, static_cast<size_t>(length))) {
        *out = copy;
        *size = static_cast<uint32_t>(length);
      }
    } else {
      g_api.PyErr_Clear();
    }
    g_api.Py_DecRef(value);
  };

  auto* info = static_cast<FrameInfo*>(g_frame_arena.allocate(sizeof(FrameInfo)));
  if (!info) return nullptr;
  copyAttribute("co_filename", &info->file, &info->file_size);
  copyAttribute("co_name", &info->function, &info->function_size);
  if (g_api.PyFrame_GetLasti) {
    // An instruction without a line (some generated code) reports line 0.
    int line = frame.position >= 0 ? g_api.PyCode_Addr2Line(code, frame.position) : -1;
    info->line = line < 0 ? 0 : line;
  } else {
    info->line = frame.position;
  }
  if (!g_frame_cache.insert(frame, info)) return nullptr;
  g_api.Py_IncRef(code);  // never released: see the function's comment
  return info;
}

}  // namespace memtrace::python
