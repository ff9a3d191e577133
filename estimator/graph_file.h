// Graph files: a training step or a forward recorded on fake tensors by
// mem_tracer.estimator.step_graph (Note [Recording the step on fake tensors] in
// python/mem_tracer/estimator/step_graph.py), read into the neutral graph. docs/estimate-format.md
// ("Graph files") describes the format.
//
// Note [Graph files]
// ~~~~~~~~~~~~~~~~~~
// A graph file says, per ATen op in execution order, which storages the op allocated and which
// were released since the op before: the Python recorder ran the step on fake tensors, which
// die when Python and autograd drop them as real ones do. So the file carries lifetimes, not
// only data flow: each node's events are its releases, then its allocations, and no storage's
// life is left to a last-use rule (assignLifetimes sees them all released inside a node). What
// the estimator adds is what the recording cannot: the device's caching allocator (rounding,
// segments, the cuBLAS workspace), the attribution of the peak to lines, modules, phases and
// categories, the budget verdicts, and the report's join with a measured trace. Persistent
// storages (parameters, buffers, optimizer state, inputs) are allocated before the first node
// and never released.
#pragma once

#include <optional>
#include <string>

#include "estimator/graph.h"

namespace memtrace::estimator {

struct GraphFile {
  Graph graph;
  bool training = false;  // kind "training" (else "inference": one forward)
  std::string model;      // the model's class
  std::string device;     // whose kernels the recording ran: "cpu", "cuda"
  std::string profile;    // the device profile it followed; empty: the CPU's own kernels
  std::string optimizer;  // its class, training only; empty without one
  // How the device runs it ("foreach", "fused", "for-loop"; device_optimizer.py).
  std::string optimizer_implementation;
  std::string loop;         // what the training loop's names hold (step_graph.LOOPS)
  std::string loop_detail;  // that, in a sentence
  int64_t accumulate = 1;
  std::string autocast;  // the autocast dtype, empty without
};

// Whether `path` names a graph file rather than a TorchScript archive (its first byte is '{').
bool isGraphFile(const std::string& path);

// Reads a graph file. Throws EstimateError naming the file and what is wrong.
GraphFile readGraphFile(const std::string& path);

}  // namespace memtrace::estimator
