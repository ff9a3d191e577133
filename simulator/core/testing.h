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

}  // namespace simgpu::testing
