#pragma once

#include "estimator/graph.h"

namespace memtrace::estimator {

// Fills Node::flops for convolutions, linear layers and matrix products: two floating-point
// operations per multiply-add, bias and activation left out (the usual convention, which is
// also torch.utils.flop_counter's). Every other node keeps 0. A graph whose front end counted
// them (Graph::flops_counted: graph files, by torch.utils.flop_counter) is left as it is.
void countFlops(Graph& graph);

}  // namespace memtrace::estimator
