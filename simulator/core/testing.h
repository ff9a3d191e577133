// What the simulated libraries tell the test hooks of simgpu_testing.h (Note [Test hooks of
// the simulated GPU] in testing.cpp).
#pragma once

namespace simgpu::testing {

// A stream-ordered allocation is being made on the calling thread.
void noteStreamOrderedAllocation();
// cuMemGetInfo or cudaMemGetInfo is being answered on the calling thread.
void noteMemoryInfo();
// A pool was trimmed by cudaMemPoolTrimTo or cuMemPoolTrimTo.
void notePoolTrim();
// A stream-capture query on `device`: waits there while MEMTRACE_GPU_TEST_MEET asks it to.
void meetBeforeCaptureQuery(int device);

}  // namespace simgpu::testing
