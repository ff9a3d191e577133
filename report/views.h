// Renderers and exports of the visual views (memtrace-report html, flamegraph, export).
// The analyses they draw on (timeline.h, flame.h, analysis.h) stay apart from them.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

#include "report/escape.h"
#include "report/prediction.h"
#include "report/flame.h"
#include "report/render.h"
#include "report/timeline.h"

namespace memtrace::report {

// ---- flame graph (render_flame.cpp) ---------------------------------------------------

// flamegraph.pl / speedscope input: "frame;frame;frame bytes" lines.
void renderFolded(std::ostream& out, const FlameGraph& graph);
// A static icicle (root on top), with a tooltip (<title>) on each frame.
void renderFlameSvg(std::ostream& out, const FlameGraph& graph, const std::string& title);

// ---- the HTML report (render_html.cpp) ------------------------------------------------

struct HtmlReport {
  const Report& report;  // summary, live set and table, as the text report has them
  const Timeline& timeline;
  const FlameGraph& flame;
  const Prediction* prediction = nullptr;  // optional
};

// One self-contained file: d3 (with its license), the glue script and the data inlined.
void renderHtml(std::ostream& out, const HtmlReport& html);

// ---- exports (export_perfetto.cpp, export_pytorch.cpp) --------------------------------

// Chrome trace event JSON, which Perfetto and chrome://tracing open: a counter track of
// live bytes per device (downsampled, Note [Timeline downsampling]), instant events for
// marks, the peak and failed allocations, and slices for phases.
void exportPerfetto(std::ostream& out, reader::TraceReader& trace, const TraceSummary& summary,
                    size_t buckets);

// PyTorch's memory snapshot pickle (torch.cuda.memory._snapshot()), which
// pytorch.org/memory_viz and torch/cuda/_memory_viz.py open: the history up to `point` as
// device_traces and what is live there as segments (Note [PyTorch snapshot export]).
void exportPytorchSnapshot(std::ostream& out, reader::TraceReader& trace,
                           const TraceSummary& summary, const Point& point);

}  // namespace memtrace::report
