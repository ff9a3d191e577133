// The self-contained HTML report (memtrace-report html). The analyses it draws on
// (timeline.h, flame.h, analysis.h) stay apart from it.
#pragma once

#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <string_view>

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

// The timeline as the pages' data (columns rather than objects: the samples are most of it).
nlohmann::json timelineJson(const Timeline& timeline);

// Writes a page template (html/*.html) with its slots filled: TITLE (escaped), D3, D3_LICENSE,
// CSS (the report's stylesheet), JS (`script`, after the helpers every page shares: bytes.js's
// humanBytes(), sortable_table.js's sortableTable()) and DATA (`data`, made safe for a <script>
// element: Note [HTML report safety]).
void writePage(std::ostream& out, std::string_view page, const std::string& title,
               std::string_view script, const nlohmann::json& data);

// One self-contained file: d3 (with its license), the glue script and the data inlined.
void renderHtml(std::ostream& out, const HtmlReport& html);

}  // namespace memtrace::report
