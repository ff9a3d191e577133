#include "tracer/report/flame.h"

#include <algorithm>
#include <filesystem>
#include <functional>
#include <map>
#include <string_view>
#include <tuple>
#include <unordered_map>

#include "tracer/common/user_code.h"

namespace memtrace::report {
namespace {

std::string nativeName(const NativeFrame& frame) {
  std::string text = frame.function;
  if (!frame.object.empty()) text += " [" + frame.object + "]";
  if (!frame.file.empty()) text += " " + displayPath(frame.file) + ":" + std::to_string(frame.line);
  return text;
}

std::string nativeLabel(const NativeFrame& frame) {
  std::string text = frame.function;
  if (!frame.object.empty()) text += " [" + frame.object + "]";
  if (!frame.file.empty()) text += " " + shortPath(frame.file) + ":" + std::to_string(frame.line);
  return text;
}

// The source tree a directory lies in: its nearest ancestor holding .git, or "" (cached:
// a flame graph asks for the same few directories again and again).
const std::string& sourceRootOf(const std::string& directory) {
  static std::unordered_map<std::string, std::string> roots;
  auto [it, inserted] = roots.try_emplace(directory);
  if (!inserted) return it->second;
  std::error_code error;
  for (std::filesystem::path at(directory); !at.empty() && at != at.root_path();
       at = at.parent_path()) {
    if (std::filesystem::exists(at / ".git", error)) {
      it->second = at.string() + "/";
      break;
    }
  }
  return it->second;
}

class FlameBuilder {
 public:
  FlameBuilder(const reader::Tables& tables, Locator& locator, Symbolizer& symbolizer)
      : tables_(tables), locator_(locator), symbolizer_(symbolizer) {
    graph_.nodes.push_back(FlameNode{"all", FrameKind::kRoot, 0, 0, 0, {}, "all", false});
  }

  void add(const LiveAllocation& allocation, bool per_device) {
    auto key = std::make_tuple(allocation.traced, allocation.python_stack, allocation.native_stack,
                               per_device ? allocation.device : 0);
    auto [it, inserted] = leaf_of_stack_.try_emplace(key, 0);
    if (inserted) it->second = leafFor(allocation, per_device);
    for (uint32_t node = it->second;; node = graph_.nodes[node].parent) {
      graph_.nodes[node].bytes += allocation.size;
      graph_.nodes[node].allocations += 1;
      if (node == 0) break;
    }
  }

  FlameGraph finish() {
    trimCommonDirectory();
    for (FlameNode& node : graph_.nodes) {
      std::sort(node.children.begin(), node.children.end(), [&](uint32_t a, uint32_t b) {
        const FlameNode& x = graph_.nodes[a];
        const FlameNode& y = graph_.nodes[b];
        return x.bytes != y.bytes ? x.bytes > y.bytes : x.name < y.name;
      });
    }
    return std::move(graph_);
  }

 private:
  uint32_t child(uint32_t parent, const std::string& name, FrameKind kind,
                 const std::function<std::string()>& label = {}, bool library = false) {
    auto [it, inserted] = children_.try_emplace({parent, name}, 0);
    if (inserted) {
      it->second = static_cast<uint32_t>(graph_.nodes.size());
      graph_.nodes.push_back(
          FlameNode{name, kind, 0, 0, parent, {}, label ? label() : name, library});
      graph_.nodes[parent].children.push_back(it->second);
    }
    return it->second;
  }

  uint32_t leafFor(const LiveAllocation& allocation, bool per_device) {
    uint32_t node = 0;
    if (per_device)
      node = child(node,
                   allocation.device < 0 ? "cuda:?" : "cuda:" + std::to_string(allocation.device),
                   FrameKind::kDevice);
    if (!allocation.traced || (!allocation.python_stack && !allocation.native_stack))
      return child(node, locator_.describe(allocation).name, FrameKind::kSpecial);
    for (uint32_t frame : locator_.framesOf(allocation.python_stack)) {
      const reader::PythonFrame& python = tables_.python_frames[frame];
      std::string_view file = tables_.string(python.file);
      std::string path;
      auto label = [&] {
        path = shortPath(file);
        return path + ":" + std::to_string(python.line) + " (" +
               std::string(tables_.string(python.function)) + ")";
      };
      node = child(node, locator_.frameName(frame), FrameKind::kPython, label, !isUserCode(file));
      if (!path.empty() && path[0] == '/') unshortened_.emplace_back(node, path);
    }
    // Native frames, innermost first, cut at the interpreter when Python frames stand for
    // it (Note [Mixed stacks in the flame graph]).
    std::vector<const NativeFrame*> native;
    bool innermost = true;
    for (uint32_t id = allocation.native_stack; id; id = tables_.native_stacks[id].parent) {
      const NativeFrame& frame = symbolizer_.resolve(tables_.native_stacks[id].ip, innermost);
      innermost = false;
      if (allocation.python_stack && isInterpreterObject(frame.object)) break;
      native.push_back(&frame);
    }
    for (auto it = native.rbegin(); it != native.rend(); ++it)
      node = child(
          node, nativeName(**it), FrameKind::kNative, [&] { return nativeLabel(**it); },
          isLibraryObject((*it)->object));
    return node;
  }

  // Labels whose path no rule shortened (outside any source tree found here) lose the
  // directory they all share (Note [Short frame names]).
  void trimCommonDirectory() {
    if (unshortened_.empty()) return;
    std::string_view common = unshortened_[0].second;
    for (const auto& [node, path] : unshortened_) {
      size_t same = 0;
      while (same < common.size() && same < path.size() && common[same] == path[same]) ++same;
      common = common.substr(0, same);
    }
    size_t slash = common.rfind('/');
    if (slash == std::string_view::npos || slash == 0) return;
    for (const auto& [node, path] : unshortened_) graph_.nodes[node].label.erase(0, slash + 1);
  }

  const reader::Tables& tables_;
  Locator& locator_;
  Symbolizer& symbolizer_;
  FlameGraph graph_;
  std::map<std::pair<uint32_t, std::string>, uint32_t> children_;
  std::map<std::tuple<bool, uint32_t, uint32_t, int>, uint32_t> leaf_of_stack_;
  std::vector<std::pair<uint32_t, std::string>> unshortened_;  // node, its label's path
};

std::string foldedName(std::string name) {
  for (char& c : name) {
    if (c == ';')
      c = ',';
    else if (c == '\n' || c == '\r')
      c = ' ';
  }
  return name;
}

void fold(const FlameGraph& graph, uint32_t node, const std::string& prefix,
          std::vector<std::pair<std::string, uint64_t>>& lines) {
  const FlameNode& here = graph.nodes[node];
  std::string path =
      node == 0 ? std::string() : (prefix.empty() ? "" : prefix + ";") + foldedName(here.name);
  uint64_t in_children = 0;
  for (uint32_t child : here.children) in_children += graph.nodes[child].bytes;
  if (node != 0 && here.bytes > in_children) lines.emplace_back(path, here.bytes - in_children);
  for (uint32_t child : here.children) fold(graph, child, path, lines);
}

}  // namespace

std::string shortPath(std::string_view path) {
  for (std::string_view packages : {"/site-packages/", "/dist-packages/"}) {
    size_t at = path.rfind(packages);
    if (at != std::string_view::npos) return std::string(path.substr(at + packages.size()));
  }
  size_t at = path.rfind("/lib/python");
  if (at != std::string_view::npos) {
    size_t slash = path.find('/', at + 11);
    if (at + 11 < path.size() && path[at + 11] >= '0' && path[at + 11] <= '9' &&
        slash != std::string_view::npos)
      return std::string(path.substr(slash + 1));
  }
  if (!path.empty() && path.front() == '/') {
    size_t slash = path.rfind('/');
    const std::string& root = sourceRootOf(std::string(path.substr(0, slash)));
    if (!root.empty()) return std::string(path.substr(root.size()));
  }
  return displayPath(path);
}

bool isLibraryObject(std::string_view object) {
  size_t slash = object.rfind('/');
  std::string_view name = slash == std::string_view::npos ? object : object.substr(slash + 1);
  return name.substr(0, 8) == "libtorch" || name.substr(0, 6) == "libc10";
}

FlameGraph buildFlameGraph(const reader::Tables& tables, const LiveSet& live_set, Locator& locator,
                           Symbolizer& symbolizer) {
  bool per_device = false;
  for (const LiveAllocation& allocation : live_set.allocations)
    if (allocation.device != live_set.allocations.front().device) per_device = true;
  FlameBuilder builder(tables, locator, symbolizer);
  for (const LiveAllocation& allocation : live_set.allocations) builder.add(allocation, per_device);
  return builder.finish();
}

std::vector<std::pair<std::string, uint64_t>> foldedStacks(const FlameGraph& graph) {
  std::vector<std::pair<std::string, uint64_t>> lines;
  if (!graph.nodes.empty()) fold(graph, 0, "", lines);
  return lines;
}

}  // namespace memtrace::report
