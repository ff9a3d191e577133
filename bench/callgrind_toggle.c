/* Callgrind's instrumentation switched on only around the measured work (bench/cost.py): the
 * measured script loads this library with ctypes and calls start() before the work and stop()
 * after it, under `valgrind --tool=callgrind --instr-atstart=no`, so that start-up, torch's
 * import and everything between the measured parts count nothing (Note [Instructions counted
 * around the work] in bench/cost.py). Outside valgrind every call is a no-op. */
#include <valgrind/callgrind.h>

/* Zeroes the counters, then instruments from here on (the switch flushes callgrind's
 * translations: its own cost is not counted, as instrumentation is still off when it runs). */
__attribute__((visibility("default"))) void memtrace_bench_start(void) {
  CALLGRIND_ZERO_STATS;
  CALLGRIND_START_INSTRUMENTATION;
}

/* Stops instrumenting and writes what was counted since start() to a dump named `label`. */
__attribute__((visibility("default"))) void memtrace_bench_stop(const char* label) {
  CALLGRIND_STOP_INSTRUMENTATION;
  CALLGRIND_DUMP_STATS_AT(label);
}

/* 1 under valgrind, 0 outside: the script refuses to count without it. */
__attribute__((visibility("default"))) int memtrace_bench_on_valgrind(void) {
  return RUNNING_ON_VALGRIND;
}
