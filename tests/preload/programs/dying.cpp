// A program that allocates and then dies the way its first argument says, at the point its
// second says (the allocation pairs made first), keeping its own account of every event
// (dying_account.h). Ways to die:
//   abort, terminate, segv (a fatal signal), _exit        from main, after the pairs
//   atexit-abort            exit() runs a handler that allocates, then aborts
//   destructor-abort        a static destructor allocates at exit, then aborts
//   thread-terminate        a thread allocating steadily calls std::terminate after the pairs
//                           while main goes on allocating
//   kill                    allocates forever (the test sends SIGKILL); the pairs are its pace
//                           in microseconds between pairs
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <thread>

#include "dying_account.h"

namespace {

void* g_slots[16];
long g_next = 0;
long g_pairs = 0;

struct DiesInItsDestructor {
  ~DiesInItsDestructor() {
    dying::churn(g_slots, 16, 100, g_next);
    std::abort();
  }
};

void allocateThenAbort() {
  dying::churn(g_slots, 16, 100, g_next);
  std::abort();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: dying HOW PAIRS\n");
    return 2;
  }
  const char* how = argv[1];
  g_pairs = std::atol(argv[2]);
  dying::counts();
  if (!std::strcmp(how, "kill")) {
    timespec pause{0, g_pairs * 1000};
    for (;;) {
      dying::churn(g_slots, 16, 10, g_next);
      if (g_pairs) nanosleep(&pause, nullptr);
    }
  }
  if (!std::strcmp(how, "thread-terminate")) {
    std::thread([] {
      void* slots[8] = {};
      long next = 0;
      dying::churn(slots, 8, g_pairs, next);
      std::terminate();
    }).detach();
    for (;;) dying::churn(g_slots, 16, 1, g_next);
  }
  dying::churn(g_slots, 16, g_pairs, g_next);
  if (!std::strcmp(how, "abort")) std::abort();
  if (!std::strcmp(how, "terminate")) std::terminate();
  if (!std::strcmp(how, "segv")) raise(SIGSEGV);
  if (!std::strcmp(how, "_exit")) _exit(7);
  if (!std::strcmp(how, "atexit-abort")) {
    std::atexit(allocateThenAbort);
    std::exit(0);
  }
  if (!std::strcmp(how, "destructor-abort")) {
    static DiesInItsDestructor dies;
    (void)dies;
    std::exit(0);
  }
  std::fprintf(stderr, "unknown way to die: %s\n", how);
  return 2;
}
