// The files inlined into the HTML report, compiled in by the build (html/embed_assets.py
// writes their definitions), so that memtrace-report needs nothing at run time.
#pragma once

#include <string_view>

namespace memtrace::report::assets {

extern const std::string_view kD3Js;        // d3.min.js, as Debian's node-d3 ships it
extern const std::string_view kD3License;   // node-d3's copyright file: d3's license
extern const std::string_view kReportHtml;  // html/report.html: the page, with {{SLOTS}}
extern const std::string_view kReportCss;   // html/report.css
extern const std::string_view kBytesJs;     // html/bytes.js: humanBytes(), ahead of each script
extern const std::string_view kSortableTableJs;  // html/sortable_table.js: sortableTable()
extern const std::string_view kReportJs;         // html/report.js: the glue between data and d3
extern const std::string_view kFlameSvgJs;       // html/flame_svg.js: the SVG flame graph's script
extern const std::string_view kJobHtml;          // html/job.html: the page of a job's ranks
extern const std::string_view kJobJs;            // html/job.js: its glue between data and d3

}  // namespace memtrace::report::assets
