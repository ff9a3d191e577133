// What a build of the neutral graph is for, beyond the input shapes. No torch headers: the tool
// sets these from its command line and the device profile.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace memtrace::estimator::torchscript {

// How many elements a data-dependent op (nonzero, a boolean mask, where(cond)) selected when the
// model ran on the example input: `count` of the `elements` of its condition.
struct ExampleCount {
  std::string op;  // "aten::nonzero"
  int64_t elements = 0;
  int64_t count = 0;
};

struct BuildOptions {
  // Data-dependent sizes (Note [Data-dependent sizes]): the example run's counts, in the order
  // the ops ran, and whether to bound every one by its worst case instead.
  std::vector<ExampleCount> example_counts;
  bool assume_worst_case = false;
  // TorchScript semantics: walk the graph the interpreter runs, calls inlined and the
  // executor's graph passes applied (Note [The interpreter's graph]), not the saved one.
  bool interpreter_graph = false;
};

}  // namespace memtrace::estimator::torchscript
