// The flame graph of a live set: every live allocation's bytes on its full stack, Python
// frames then native ones, merged into a tree. A pure analysis; render_flame.cpp writes it
// as folded stacks or SVG, and the HTML report draws it as an icicle.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tracer/reader/reader.h"
#include "tracer/report/analysis.h"
#include "tracer/report/locations.h"
#include "tracer/report/symbolizer.h"

namespace memtrace::report {

enum class FrameKind : uint8_t {
  kRoot,
  kDevice,   // "cuda:N", only when the live set spans several devices
  kPython,   // "file:line (function)", as the report names a line
  kNative,   // "function [object] file:line"
  kSpecial,  // "untraced", "<no Python frame>", "<no stack>"
};

struct FlameNode {
  std::string name;  // in full, as the report names a location (and folded stacks hold)
  FrameKind kind = FrameKind::kRoot;
  uint64_t bytes = 0;        // this node and everything under it
  uint64_t allocations = 0;  // how many live allocations that is
  uint32_t parent = 0;
  std::vector<uint32_t> children;  // largest first
  std::string label;               // the name with its path shortened (Note [Short frame names])
  bool library = false;  // not user code (isUserCode) or in libtorch (isLibraryObject): hideable
};

// Note [Short frame names]
// A flame graph's frames are narrow, and full paths leave no room for what tells frames
// apart: "/root/.pyenv/versions/3.11.7/lib/python3.11/site-packages/torch/nn/modules/..."
// shows as its first 60 characters. A frame's label shortens its path: everything up to
// site-packages/ or dist-packages/ (an installed package is named from its import path), up
// to lib/pythonX.Y/ (the standard library), or up to the root of the source tree holding it
// (the nearest directory with a .git, looked up on this machine) goes. Absolute paths none
// of these apply to (a trace read on another machine) lose the directory they all share.
// The full name stays in the tooltip, the folded stacks and the search.
std::string shortPath(std::string_view path);

// Library frames, which the page's "hide library frames" hides: Python frames outside the
// user's code (isUserCode: the standard library, installed packages, torch, <frozen ...>)
// and native frames in libtorch and libc10.
bool isLibraryObject(std::string_view object);

struct FlameGraph {
  std::vector<FlameNode> nodes;  // nodes[0] is the root ("all")
  uint64_t total_bytes() const { return nodes.empty() ? 0 : nodes[0].bytes; }
};

// Note [Mixed stacks in the flame graph]
// An allocation's stack is its Python frames, outermost first, followed by its native
// frames from the innermost Python frame's call down to the CUDA call. The native stack of
// a call made from Python also holds the interpreter's own frames (from _start through
// _PyEval_EvalFrameDefault); the Python frames already stand for those, so the native
// frames are cut at the first frame, going outwards from the innermost, that lies in the
// Python interpreter (a loaded object named python* or libpython*: isInterpreterObject).
// Without Python frames (a C++ program, a thread without the GIL) the whole native stack is
// kept.
FlameGraph buildFlameGraph(const reader::Tables& tables, const LiveSet& live_set, Locator& locator,
                           Symbolizer& symbolizer);

// The folded-stack lines of flamegraph.pl and speedscope: "outermost;...;leaf bytes" (the
// root is left out: those tools draw their own), one per node that holds bytes of its own,
// in depth-first order (largest child first). Frame
// names are made safe for the format: ';' becomes ',' and line breaks become spaces.
std::vector<std::pair<std::string, uint64_t>> foldedStacks(const FlameGraph& graph);

}  // namespace memtrace::report
