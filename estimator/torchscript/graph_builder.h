#pragma once

#include <torch/csrc/jit/api/module.h>

#include <vector>

#include "estimator/graph.h"
#include "estimator/input_spec.h"

namespace memtrace::estimator::torchscript {

// Runs `module.forward` abstractly for inputs of the given shapes (Note [Abstract execution])
// and records what it executes as a neutral graph. Throws EstimateError on bad input.
Graph buildGraph(const torch::jit::Module& module, const std::vector<InputSpec>& inputs);

}  // namespace memtrace::estimator::torchscript
