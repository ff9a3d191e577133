#include "tracer/python_stack.h"

#include <dlfcn.h>
#include <sys/types.h>

#include <atomic>

#include "tracer/arena.h"
#include "tracer/flat_map.h"

namespace memtrace::python {
namespace {

// The functions of the Python C API we use, all in the stable part of the API except
// where noted. Opaque pointers stand for PyObject*, PyFrameObject*, PyThreadState*.
struct Api {
  int (*Py_IsInitialized)();
  int (*PyGILState_Check)();
  void* (*PyThreadState_UncheckedGet)();  // _PyThreadState_UncheckedGet (<= 3.12) or
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
  int (*Py_IsFinalizing)();  // 3.13; _Py_IsFinalizing before
};

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
FlatMap<RawFrame, FrameInfo*, RawFrameHash> g_frame_cache;
Arena g_frame_arena;

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

size_t captureStack(RawFrame* frames, size_t max) {
  void* thread_state = g_api.PyThreadState_UncheckedGet();
  if (!thread_state) return 0;
  void* frame = g_api.PyThreadState_GetFrame(thread_state);  // a new reference, or null
  size_t count = 0;
  while (frame && count < max) {
    void* code = g_api.PyFrame_GetCode(frame);  // a new reference
    int position = g_api.PyFrame_GetLasti ? g_api.PyFrame_GetLasti(frame)
                                          : g_api.PyFrame_GetLineNumber(frame);
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
