// The flame graph as folded stacks (flamegraph.pl, speedscope) and as an SVG icicle
// (memtrace-report flamegraph). The graph itself is built in flame.h.
#pragma once

#include <ostream>
#include <string>

#include "tracer/report/flame.h"

namespace memtrace::report {

// flamegraph.pl / speedscope input: "frame;frame;frame bytes" lines.
void renderFolded(std::ostream& out, const FlameGraph& graph);
// An icicle (root on top), with a tooltip (<title>) on each frame, that zooms to a clicked
// frame and searches (Note [Interactive SVG flame graph] in render_flame.cpp).
void renderFlameSvg(std::ostream& out, const FlameGraph& graph, const std::string& title);

}  // namespace memtrace::report
