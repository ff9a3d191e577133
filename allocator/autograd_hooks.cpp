// Autograd's engine's entry points, interposed under LD_PRELOAD, so that backward's
// allocations on the device's own threads are named by the line that called backward with no
// Python of ours in the program (Note [Stacks lent to threads without Python] in
// tracer/recorder/lent_stacks.cpp).
//
// Note [Interposing autograd's engine]
// Two member functions of torch::autograd::Engine (libtorch_cpu.so) are reached through the
// dynamic linker's symbol lookup, where a preloaded definition comes first:
//   - execute_with_graph_task(graph_task, graph_root, input_buffer): Python's engine
//     (libtorch_python.so's PythonEngine) calls the base class's from its override, on the
//     thread that called backward, with the GIL released, just before that thread waits for
//     the graph task; re-entrant backward (a checkpoint's, a grad() inside a backward) comes
//     through it too. The thread lends its own stack for the graph task, and takes it back
//     when the call returns or unwinds.
//   - evaluate_function(graph_task, node, inputs, cpu_ready_queue): every node, on whichever
//     thread runs it (the engine's thread_main calls it through the PLT): the lends learn the
//     id of their graph task (the engine's current one there).
// Each is declared here with the ABI of its C++ declaration, reduced to pointers: a reference
// and a by-value object that is not trivially copyable (intrusive_ptr) are both passed as a
// pointer, and such a result (the returned intrusive_ptr<Future>) is returned through the
// hidden pointer the caller passes, which a function returning a class with a non-trivial
// destructor is given too (System V x86-64 and AArch64). The real function is looked up once,
// through the loaded libtorch_cpu.so (Python loads it RTLD_LOCAL, out of RTLD_NEXT's reach).
// The mangled names are torch 2.x's (checked on 2.14.1); a torch that changed either
// signature never calls these, and backward's device threads then stay unnamed under a bare
// LD_PRELOAD (the package's wrapper still names them). This file is compiled with exceptions:
// an exception thrown out of backward unwinds through execute_with_graph_task's hook, whose
// guard ends the lend; nothing here throws.
#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>

#include <atomic>

#include "allocator/real_functions.h"
#include "tracer/recorder/recorder.h"

#if defined(__x86_64__) || defined(__aarch64__)

// A class returned in memory, as the engine's intrusive_ptr<Future> is; never destroyed here.
// Not in the anonymous namespace: a function whose type names such a class has internal
// linkage, and the hook must be exported.
struct MemtraceReturnedInMemory {
  void* pointer;
  ~MemtraceReturnedInMemory() {}
};

namespace {

constexpr const char* kExecuteWithGraphTask =
    "_ZN5torch8autograd6Engine23execute_with_graph_taskERKSt10shared_ptrINS0_9GraphTaskEEN3c1013"
    "intrusive_ptrINS0_4NodeENS7_6detail34intrusive_target_default_null_typeIS9_EEEEONS0_"
    "11InputBufferE";
constexpr const char* kEvaluateFunction =
    "_ZN5torch8autograd6Engine17evaluate_functionERSt10shared_ptrINS0_9GraphTaskEEPNS0_4NodeERNS0_"
    "11InputBufferERKS2_INS0_10ReadyQueueEE";

struct Search {
  const char* name;
  const void* self;
  void* found;
};

// The definition of `name` in a loaded object other than this library.
void* findInLoadedObjects(const char* name, const void* self) {
  memtrace::dl::DlsymFunction real_dlsym = memtrace::dl::realDlsym();
  if (!real_dlsym) return nullptr;
  if (void* next = real_dlsym(RTLD_NEXT, name); next && next != self) return next;
  Search search{name, self, nullptr};
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) -> int {
        auto* search = static_cast<Search*>(data);
        if (!info->dlpi_name || !*info->dlpi_name) return 0;
        void* handle = dlopen(info->dlpi_name, RTLD_LAZY | RTLD_NOLOAD);
        if (!handle) return 0;
        void* found = memtrace::dl::realDlsym()(handle, search->name);
        dlclose(handle);  // RTLD_NOLOAD took one more reference to a loaded object
        if (found && found != search->self) search->found = found;
        return search->found ? 1 : 0;
      },
      &search);
  return search.found;
}

template <typename Fn>
Fn realTorchFunction(std::atomic<Fn>& cache, const char* name, Fn self) {
  Fn fn = cache.load(std::memory_order_acquire);
  if (fn) return fn;
  fn = reinterpret_cast<Fn>(findInLoadedObjects(name, reinterpret_cast<const void*>(self)));
  if (!fn) {
    // Unreachable: only code linked against torch's definition calls this one.
    fprintf(stderr, "memtrace: %s is called but not defined by any loaded library\n", name);
    abort();
  }
  cache.store(fn, std::memory_order_release);
  return fn;
}

// Ends the lend when the engine's call returns or an exception leaves it.
class LendForGraphTask {
 public:
  explicit LendForGraphTask(const void* graph_task)
      : id_(memtrace::lendForGraphTaskStart(graph_task)) {}
  ~LendForGraphTask() { memtrace::endLendForGraphTask(id_); }
  LendForGraphTask(const LendForGraphTask&) = delete;
  LendForGraphTask& operator=(const LendForGraphTask&) = delete;

 private:
  int id_;
};

}  // namespace

using ExecuteWithGraphTask = MemtraceReturnedInMemory (*)(void*, void* const*, void*, void*);
using EvaluateFunction = void (*)(void*, void* const*, void*, void*, const void*);

__attribute__((visibility("default"))) MemtraceReturnedInMemory
executeWithGraphTaskHook(void* engine, void* const* graph_task, void* graph_root, void* input_buffer) __asm__(
    "_ZN5torch8autograd6Engine23execute_with_graph_taskERKSt10shared_ptrINS0_9GraphTaskEEN3c10"
    "13intrusive_ptrINS0_4NodeENS7_6detail34intrusive_target_default_null_typeIS9_EEEEONS0_"
    "11InputBufferE");
__attribute__((visibility("default"))) void
evaluateFunctionHook(void* engine, void* const* graph_task, void* node, void* inputs, const void* cpu_ready_queue) __asm__(
    "_ZN5torch8autograd6Engine17evaluate_functionERSt10shared_ptrINS0_9GraphTaskEEPNS0_4NodeERN"
    "S0_11InputBufferERKS2_INS0_10ReadyQueueEE");

MemtraceReturnedInMemory executeWithGraphTaskHook(void* engine, void* const* graph_task,
                                                  void* graph_root, void* input_buffer) {
  static std::atomic<ExecuteWithGraphTask> cache{nullptr};
  ExecuteWithGraphTask real =
      realTorchFunction(cache, kExecuteWithGraphTask, &executeWithGraphTaskHook);
  LendForGraphTask lend(graph_task ? *graph_task : nullptr);
  return real(engine, graph_task, graph_root, input_buffer);
}

void evaluateFunctionHook(void* engine, void* const* graph_task, void* node, void* inputs,
                          const void* cpu_ready_queue) {
  static std::atomic<EvaluateFunction> cache{nullptr};
  EvaluateFunction real = realTorchFunction(cache, kEvaluateFunction, &evaluateFunctionHook);
  if (graph_task && *graph_task) memtrace::graphTaskEvaluates(*graph_task);
  real(engine, graph_task, node, inputs, cpu_ready_queue);
}

#endif
