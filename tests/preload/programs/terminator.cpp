// Loaded by tests/preload/scripts/terminate_at_finalization.py (ctypes): a library whose own
// thread allocates steadily and calls std::terminate once the interpreter is finalizing, as
// a library's teardown does when it ends a process at exit ("terminate called without an
// active exception"). Its account of every event is dying_account.h's.
#include <dlfcn.h>

#include <exception>
#include <thread>

#include "dying_account.h"

namespace {

using IsFinalizing = int (*)();

IsFinalizing finalizingCheck() {
  // Py_IsFinalizing is public from CPython 3.13; _Py_IsFinalizing before.
  for (const char* name : {"Py_IsFinalizing", "_Py_IsFinalizing"})
    if (void* function = dlsym(RTLD_DEFAULT, name)) return reinterpret_cast<IsFinalizing>(function);
  return nullptr;
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int terminator_start() {
  IsFinalizing finalizing = finalizingCheck();
  if (!finalizing) return -1;
  std::thread([finalizing] {
    void* slots[8] = {};
    long next = 0;
    for (;;) {
      dying::churn(slots, 8, 1, next);
      if (finalizing()) {
        dying::churn(slots, 8, 50, next);
        std::terminate();
      }
    }
  }).detach();
  return 0;
}

// The main thread's allocations, counted in the same account.
extern "C" __attribute__((visibility("default"))) void terminator_churn(long pairs) {
  static void* slots[16] = {};
  static long next = 0;
  dying::churn(slots, 16, pairs, next);
}
