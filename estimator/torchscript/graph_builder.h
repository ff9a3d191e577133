#pragma once

#include <torch/csrc/jit/api/module.h>

#include <vector>

#include "estimator/graph.h"
#include "estimator/input_spec.h"
#include "estimator/python_source.h"
#include "estimator/torchscript/build_options.h"
#include "estimator/torchscript/op_rules.h"
#include "estimator/torchscript/shape_functions.h"
#include "estimator/torchscript/source_locations.h"

namespace memtrace::estimator::torchscript {

// What one module's builds can share: resolved source ranges, source files read from disk,
// compiled shape functions. A batch sweep builds the same module many times.
struct BuildCaches {
  SourceLocations locations;
  SourceFileCache source_files;
  ShapeFunctionSizer shape_functions;
  OpRules op_rules;  // and the device's kernel rules
  // forward as the interpreter runs it (Note [The interpreter's graph]), made on first use.
  std::shared_ptr<torch::jit::Graph> interpreter_graph;
};

// Runs `module.forward` abstractly for inputs of the given shapes (Note [Abstract execution])
// and records what it executes as a neutral graph. Throws EstimateError on bad input.
Graph buildGraph(const torch::jit::Module& module, const std::vector<InputSpec>& inputs,
                 BuildCaches& caches, const BuildOptions& options = {});

}  // namespace memtrace::estimator::torchscript
