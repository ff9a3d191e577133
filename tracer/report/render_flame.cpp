// The flame graph as folded stacks (flamegraph.pl, speedscope) and as an interactive SVG
// icicle.
#include "tracer/report/render_flame.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>

#include "tracer/common/byte_format.h"
#include "tracer/report/escape.h"
#include "tracer/report/html_assets.h"
#include "tracer/report/locations.h"

namespace memtrace::report {
namespace {

constexpr double kWidth = 1200;
constexpr double kRowHeight = 17;
constexpr double kTop = 58;       // under the title and the controls
constexpr double kCharWidth = 7;  // of the 12 px monospace labels

std::string colorOf(const FlameNode& node) {
  // Stable colours: a frame keeps its colour from one graph to the next.
  uint32_t hash = static_cast<uint32_t>(std::hash<std::string>{}(node.name));
  switch (node.kind) {
    case FrameKind::kPython:  // warm, as in flamegraph.pl
      return fmt::format("rgb({},{},{})", 205 + hash % 50, 80 + (hash >> 8) % 130,
                         40 + (hash >> 16) % 40);
    case FrameKind::kNative:  // blue
      return fmt::format("rgb({},{},{})", 80 + hash % 60, 140 + (hash >> 8) % 60,
                         200 + (hash >> 16) % 55);
    case FrameKind::kDevice:
      return "rgb(170,150,210)";
    case FrameKind::kSpecial:
      return "rgb(190,190,190)";
    case FrameKind::kRoot:
      return "rgb(225,225,225)";
  }
  return "gray";
}

std::string label(const std::string& name, double width) {
  size_t fits = width > 2 * kCharWidth ? static_cast<size_t>((width - 6) / kCharWidth) : 0;
  if (fits < 3) return "";
  if (name.size() <= fits) return name;
  return name.substr(0, fits - 2) + "..";
}

}  // namespace

void renderFolded(std::ostream& out, const FlameGraph& graph) {
  for (const auto& [stack, bytes] : foldedStacks(graph))
    out << validUtf8(stack) << ' ' << bytes << '\n';
}

void renderFlameSvg(std::ostream& out, const FlameGraph& graph, const std::string& title) {
  size_t depth = 0;
  std::function<void(uint32_t, size_t)> measure = [&](uint32_t node, size_t level) {
    depth = std::max(depth, level + 1);
    for (uint32_t child : graph.nodes[node].children) measure(child, level + 1);
  };
  if (!graph.nodes.empty()) measure(0, 0);
  double height = kTop + depth * kRowHeight + 10;
  // Note [Interactive SVG flame graph]
  // As flamegraph.pl's: a script inside the SVG (html/flame_svg.js, inlined at build time)
  // zooms to a clicked frame, resets, searches and hides library frames, with nothing
  // loaded from anywhere.
  // Each frame's <g> carries what the script needs (its id, its parent's, its bytes, its
  // full name and label) as attributes, escaped like the text; the search box is an HTML
  // <input> in a <foreignObject>, which a browser shows in a standalone SVG. Without the
  // script (an image viewer) the SVG is the whole graph, as drawn here.
  out << fmt::format(
      "<?xml version=\"1.0\" encoding=\"UTF-8\" standalone=\"no\"?>\n"
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" "
      "viewBox=\"0 0 {0} {1}\" font-family=\"monospace\" font-size=\"12\">\n"
      "<style>.frame {{ cursor: pointer; }} .frame text {{ pointer-events: none; }} "
      ".button {{ cursor: pointer; fill: #0645ad; }} .ancestor rect {{ opacity: 0.55; }}"
      "</style>\n"
      "<rect x=\"0\" y=\"0\" width=\"{0}\" height=\"{1}\" fill=\"white\"/>\n"
      "<text x=\"{2}\" y=\"20\" font-size=\"15\" text-anchor=\"middle\">{3}</text>\n"
      "<text id=\"reset\" class=\"button\" x=\"8\" y=\"46\" visibility=\"hidden\">"
      "Reset zoom</text>\n"
      "<text id=\"matched\" x=\"{4}\" y=\"{5}\" text-anchor=\"end\"></text>\n"
      "<foreignObject x=\"{6}\" y=\"28\" width=\"400\" height=\"24\">"
      "<div xmlns=\"http://www.w3.org/1999/xhtml\" style=\"font: 12px monospace\">"
      "<label><input id=\"hide-library\" type=\"checkbox\"/>hide library frames</label> "
      "<input id=\"search\" type=\"search\" placeholder=\"search frames\" "
      "style=\"width: 210px; font: 12px monospace\"/></div></foreignObject>\n",
      kWidth, height, kWidth / 2, escapeXml(title), kWidth - 8, height - 2, kWidth - 408);
  uint64_t total = graph.total_bytes();
  if (total == 0) {
    out << "<text x=\"10\" y=\"50\">nothing was live</text>\n</svg>\n";
    return;
  }
  std::function<void(uint32_t, size_t, double)> draw = [&](uint32_t index, size_t level, double x) {
    const FlameNode& node = graph.nodes[index];
    double width = kWidth * static_cast<double>(node.bytes) / static_cast<double>(total);
    if (width < 0.3) return;  // too thin to see; its bytes still count in its parent
    double y = kTop + level * kRowHeight;
    double share = 100.0 * static_cast<double>(node.bytes) / static_cast<double>(total);
    out << fmt::format(
        "<g class=\"frame\" data-id=\"{}\" data-parent=\"{}\" data-bytes=\"{}\" "
        "data-name=\"{}\" data-label=\"{}\"{}>"
        "<title>{} ({} bytes, {}, {:.2f}%, {} allocations)</title>"
        "<rect x=\"{:.2f}\" y=\"{:.1f}\" width=\"{:.2f}\" height=\"{}\" fill=\"{}\" rx=\"2\"/>"
        "<text x=\"{:.2f}\" y=\"{:.1f}\">{}</text></g>\n",
        index, index == 0 ? -1 : static_cast<int64_t>(node.parent), node.bytes,
        escapeXml(node.name), escapeXml(node.label), node.library ? " data-library=\"1\"" : "",
        escapeXml(node.name), node.bytes, formatBytes(node.bytes), share, node.allocations, x, y,
        std::max(width - 0.5, 0.1), kRowHeight - 1, colorOf(node), x + 3, y + kRowHeight - 5,
        escapeXml(label(node.label, width)));
    double child_x = x;
    for (uint32_t child : node.children) {
      draw(child, level + 1, child_x);
      child_x +=
          kWidth * static_cast<double>(graph.nodes[child].bytes) / static_cast<double>(total);
    }
  };
  draw(0, 0, 0);
  out << "<script><![CDATA[\n"
      << assets::kBytesJs << "\n"
      << assets::kFlameSvgJs << "]]></script>\n</svg>\n";
}

}  // namespace memtrace::report
