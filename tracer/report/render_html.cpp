// The self-contained HTML report: one file holding d3 (the charting library, as Debian's
// node-d3 ships it, with its license), the glue script html/report.js, the stylesheet and
// the data, so that it opens anywhere, offline.
//
// Note [HTML report safety]
// Everything that comes from the trace reaches the page only as JSON data, inside
// <script type="application/json">, escaped by jsonForScript() so that it can never end
// that element; report.js puts it into the page with d3's .text() and .attr(), never as
// markup. The only trace string written as HTML is the page title, escaped by escapeXml().
#include "tracer/report/render_html.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "tracer/report/escape.h"
#include "tracer/report/html_assets.h"
#include "tracer/report/render.h"
#include "tracer/report/training.h"

namespace memtrace::report {
namespace {

using nlohmann::json;

const char* frameKindName(FrameKind kind) {
  switch (kind) {
    case FrameKind::kRoot:
      return "root";
    case FrameKind::kDevice:
      return "device";
    case FrameKind::kPython:
      return "python";
    case FrameKind::kNative:
      return "native";
    case FrameKind::kSpecial:
      return "special";
  }
  return "?";
}

// The page's summary: the JSON report's process, summary and devices, in one object.
json pageSummaryJson(const Report& report) {
  json summary = summaryJson(report.summary);
  summary.update(processJson(report.summary));
  summary["trace"] = report.trace_path;
  summary["devices"] = devicesJson(report.summary);
  return summary;
}

json tableJson(const Report& report, const Prediction* prediction) {
  const LocationTable& table = report.table;
  size_t shown = report.top == 0 ? table.rows.size() : std::min(report.top, table.rows.size());
  json rows = rowsJson(report, prediction);
  uint64_t shown_bytes = shown ? table.rows[shown - 1].cumulative_bytes : 0;
  return {{"at", pointName(report.live_set.point)},
          {"time_ns", report.live_set.time_ns},
          {"event", report.live_set.event},
          {"bytes", report.live_set.bytes},
          {"allocations", report.live_set.allocations.size()},
          {"group_by", groupByName(table.group_by)},
          {"frame", table.frame_policy == FramePolicy::kUser ? "user" : "innermost"},
          {"locations", table.rows.size()},
          {"more_bytes", table.total_bytes - shown_bytes},
          {"rows", rows}};
}

}  // namespace

json timelineJson(const Timeline& timeline) {
  // Columns rather than objects: the samples are most of the file.
  json time = json::array(), bytes = json::array(), lanes = json::array();
  for (size_t lane = 0; lane < timeline.lanes.size(); ++lane) lanes.push_back(json::array());
  for (const TimelineSample& sample : timeline.samples) {
    time.push_back(sample.time_ns);
    bytes.push_back(sample.bytes);
    for (size_t lane = 0; lane < timeline.lanes.size(); ++lane)
      lanes[lane].push_back(sample.lanes[lane]);
  }
  json marks = json::array();
  for (const TimelineMark& mark : timeline.marks)
    marks.push_back(
        {{"time_ns", mark.time_ns}, {"kind", format::markerName(mark.kind)}, {"name", mark.name}});
  json failures = json::array();
  for (const TimelineFailure& failure : timeline.failures)
    failures.push_back({{"time_ns", failure.time_ns}, {"size", failure.size}});
  return {{"lane_names", timeline.lanes},
          {"time_ns", time},
          {"bytes", bytes},
          {"lanes", lanes},
          {"marks", marks},
          {"failures", failures},
          {"duration_ns", timeline.duration_ns},
          {"bucket_ns", timeline.bucket_ns},
          {"first_traced_ns", timeline.first_traced_ns},
          {"events", timeline.events},
          {"peak",
           {{"bytes", timeline.peak_bytes},
            {"time_ns", timeline.peak_time_ns},
            {"event", timeline.peak_event}}}};
}

namespace {

json flameJson(const FlameGraph& graph) {
  // Flat: [parent, name, kind, bytes, allocations, label, library] per node, parents before
  // children.
  json nodes = json::array();
  for (const FlameNode& node : graph.nodes)
    nodes.push_back(json::array({node.parent, node.name, frameKindName(node.kind), node.bytes,
                                 node.allocations, node.label, node.library}));
  return {{"nodes", nodes}};
}

json predictionJson(const Prediction* prediction) {
  if (!prediction) return nullptr;
  return {{"path", prediction->path},
          {"model", prediction->model},
          {"semantics", prediction->semantics},
          {"lower_bound", prediction->lower_bound},
          {"peak_requested_bytes", prediction->peak_requested_bytes},
          {"peak_allocated_bytes", prediction->peak_allocated_bytes}};
}

}  // namespace

void writePage(std::ostream& out, std::string_view page, const std::string& title,
               std::string_view script, const nlohmann::json& data) {
  // Invalid UTF-8 from the trace becomes U+FFFD rather than an error.
  std::string data_text = jsonForScript(data.dump(-1, ' ', false, json::error_handler_t::replace));
  // Fill the template's slots in one pass, so that nothing inserted is read as a slot.
  auto slot = [&](std::string_view name) -> std::string {
    if (name == "TITLE") return escapeXml(title);
    if (name == "D3_LICENSE") return std::string(assets::kD3License);
    if (name == "D3") return std::string(assets::kD3Js);
    if (name == "CSS") return std::string(assets::kReportCss);
    if (name == "JS")
      return std::string(assets::kBytesJs) + "\n" + std::string(assets::kSortableTableJs) + "\n" +
             std::string(script);
    if (name == "DATA") return data_text;
    throw std::logic_error("unknown slot in a page template: " + std::string(name));
  };
  size_t at = 0;
  while (true) {
    size_t open = page.find("{{", at);
    if (open == std::string_view::npos) break;
    size_t close = page.find("}}", open);
    if (close == std::string_view::npos) break;
    out << page.substr(at, open - at) << slot(page.substr(open + 2, close - open - 2));
    at = close + 2;
  }
  out << page.substr(at);
}

void renderHtml(std::ostream& out, const HtmlReport& html) {
  const TraceSummary& summary = html.report.summary;
  json data = {
      {"summary", pageSummaryJson(html.report)},
      {"simulated", simulatedJson(summary.simulated)},
      {"oom", oomJson(html.report.oom, html.report.top)},
      {"device_reads", summary.simulated || summary.device_read_count
                           ? deviceReadsJson(summary, html.report.device_reads, html.report.top)
                           : json(nullptr)},
      {"table", tableJson(html.report, html.prediction)},
      {"timeline", timelineJson(html.timeline)},
      {"flame", flameJson(html.flame)},
      // The module x category table at the peak, beside the flame graph (null without training
      // records: Note [The module table]).
      {"training", trainingJson(summary, html.prediction)},
      {"estimate", predictionJson(html.prediction)}};
  writePage(out, assets::kReportHtml, "memtrace: " + html.report.trace_path, assets::kReportJs,
            data);
}

}  // namespace memtrace::report
