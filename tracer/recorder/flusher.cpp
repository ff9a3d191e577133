// The flusher thread: bounds how long a record waits in the buffer (the issue: flushed at
// least every 100 ms), so that a process that is killed loses at most that much.
#include <pthread.h>
#include <signal.h>
#include <time.h>

#include "tracer/recorder/recorder_state.h"
#include "tracer/recorder/reports.h"

namespace memtrace::detail {
namespace {

void* flusherMain(void*) {
  timespec interval{0, static_cast<long>(kFlushPeriodNs)};  // Note [When records reach the file]
  for (;;) {
    nanosleep(&interval, nullptr);
    writeSnapshotIfAsked();  // Note [Reports the library writes itself]
    RecorderLock lock;
    if (g_recorder.file.isOpen() && g_recorder.file.hasPendingBytes() && !g_recorder.file.flush())
      failWrite();
  }
  return nullptr;
}

}  // namespace

void startFlusher() {
  if (g_recorder.flusher_running) return;
  // The flusher must not take signals meant for the program's threads.
  sigset_t all, previous;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &previous);
  pthread_t thread;
  pthread_attr_t attributes;
  pthread_attr_init(&attributes);
  pthread_attr_setdetachstate(&attributes, PTHREAD_CREATE_DETACHED);
  pthread_attr_setstacksize(&attributes, 64 << 10);
  if (pthread_create(&thread, &attributes, flusherMain, nullptr) == 0)
    g_recorder.flusher_running = true;
  pthread_attr_destroy(&attributes);
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
}

}  // namespace memtrace::detail
