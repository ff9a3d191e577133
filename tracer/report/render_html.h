// The self-contained HTML report (memtrace-report html). The analyses it draws on
// (timeline.h, flame.h, analysis.h) stay apart from it.
#pragma once

#include <ostream>

#include "tracer/report/flame.h"
#include "tracer/report/prediction.h"
#include "tracer/report/render.h"
#include "tracer/report/timeline.h"

namespace memtrace::report {

struct HtmlReport {
  const Report& report;  // summary, live set and table, as the text report has them
  const Timeline& timeline;
  const FlameGraph& flame;
  const Prediction* prediction = nullptr;  // optional
};

// One self-contained file: d3 (with its license), the glue script and the data inlined.
void renderHtml(std::ostream& out, const HtmlReport& html);

}  // namespace memtrace::report
