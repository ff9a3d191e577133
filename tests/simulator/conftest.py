"""tests/simulator runs its programs on the simulated GPU: on a simulated H200 unless
MEMTRACE_TEST_GPU names another profile (memtrace_testing.run puts them there)."""
import memtrace_testing

if not memtrace_testing.SIMULATED_GPU:
    memtrace_testing.SIMULATED_GPU = "h200"
