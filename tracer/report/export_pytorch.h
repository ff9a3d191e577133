// memtrace-report export pytorch: the trace as PyTorch's memory snapshot.
#pragma once

#include <ostream>

#include "tracer/reader/reader.h"
#include "tracer/report/analysis.h"

namespace memtrace::report {

// PyTorch's memory snapshot pickle (torch.cuda.memory._snapshot()), which
// pytorch.org/memory_viz and torch/cuda/_memory_viz.py open: the history up to `point` as
// device_traces and what is live there as segments (Note [PyTorch snapshot export]).
void exportPytorchSnapshot(std::ostream& out, reader::TraceReader& trace,
                           const TraceSummary& summary, const Point& point);

}  // namespace memtrace::report
