#include "tracer/report/locations.h"

#include <unistd.h>

#include <algorithm>
#include <string_view>
#include <unordered_map>

#include "tracer/common/user_code.h"

namespace memtrace::report {
namespace {

// Native frames inside these loaded objects are the allocation machinery, not its caller.
bool isAllocatorObject(const std::string& object) {
  for (const char* prefix : {"libcudart", "libcuda.so", "libmemtrace"})
    if (object.rfind(prefix, 0) == 0) return true;
  return false;
}

}  // namespace

std::string displayPath(std::string_view path) {
  static const std::string cwd = [] {
    char buffer[4096];
    return getcwd(buffer, sizeof(buffer)) ? std::string(buffer) + "/" : std::string();
  }();
  if (!cwd.empty() && path.size() > cwd.size() && path.substr(0, cwd.size()) == cwd)
    return std::string(path.substr(cwd.size()));
  return std::string(path);
}

const char* locationKindName(LocationKind kind) {
  switch (kind) {
    case LocationKind::kPython:
      return "python";
    case LocationKind::kUntraced:
      return "untraced";
    case LocationKind::kNative:
      return "native";
    case LocationKind::kNoStack:
      return "none";
    case LocationKind::kModule:
      return "module";
    case LocationKind::kCategory:
      return "category";
  }
  return "?";
}

std::string groupByName(GroupBy group_by) {
  switch (group_by) {
    case GroupBy::kLine:
      return "line";
    case GroupBy::kFunction:
      return "function";
    case GroupBy::kFile:
      return "file";
    case GroupBy::kStack:
      return "stack";
    case GroupBy::kModule:
      return "module";
    case GroupBy::kCategory:
      return "category";
  }
  return "?";
}

Locator::Locator(const reader::Tables& tables, GroupBy group_by, FramePolicy frame_policy)
    : tables_(tables), group_by_(group_by), frame_policy_(frame_policy) {}

Locator::~Locator() = default;

Symbolizer& Locator::symbolizer() {
  if (!symbolizer_) symbolizer_ = std::make_unique<Symbolizer>(tables_);
  return *symbolizer_;
}

bool Locator::isLibraryPath(uint32_t file) const {
  auto& known = library_file_;
  if (known.size() <= file) known.resize(tables_.strings.size(), -1);
  if (known[file] < 0) {
    // A file the trace maps to source is generated code, whatever its path (Note [Generated
    // code]: TORCHINDUCTOR_CACHE_DIR puts it anywhere).
    indexGeneratedCode();
    known[file] = isUserCode(tables_.string(file)) && !generated_by_file_.contains(file) ? 0 : 1;
  }
  return known[file] == 1;
}

void Locator::indexGeneratedCode() const {
  // As far as the tables go now: a reader that reads on adds records, and one that reads the file
  // again rebuilds its tables from none (sourceStackOf() then skips what is not read yet). A
  // record comes before the code it describes runs, so no allocation is asked about before it.
  for (; generated_indexed_ < tables_.generated_code.size(); ++generated_indexed_)
    generated_by_file_[tables_.generated_code[generated_indexed_].file].push_back(
        static_cast<uint32_t>(generated_indexed_));
}

uint32_t Locator::sourceStackOf(uint32_t frame_id) const {
  if (tables_.generated_code.empty()) return 0;
  if (source_stack_.size() <= frame_id)
    source_stack_.resize(tables_.python_frames.size(), kUnknownStack);
  uint32_t& known = source_stack_[frame_id];
  if (known != kUnknownStack) return known;
  known = 0;
  indexGeneratedCode();
  const reader::PythonFrame& frame = tables_.python_frames[frame_id];
  auto found = generated_by_file_.find(frame.file);
  if (found == generated_by_file_.end()) return known;
  // The last record that covers the line: a file told twice says the same thing twice.
  for (uint32_t index : found->second) {
    if (index >= tables_.generated_code.size()) break;
    const reader::GeneratedCode& code = tables_.generated_code[index];
    if (frame.line >= code.first_line && frame.line - code.first_line < code.line_count)
      known = code.source_stack;
  }
  return known;
}

Locator::Role Locator::roleOf(uint32_t frame) const {
  uint32_t file = tables_.python_frames[frame].file;
  auto& known = role_;
  if (known.size() <= file) known.resize(tables_.strings.size(), -1);
  if (known[file] < 0) {
    std::string_view path = tables_.string(file);
    known[file] = static_cast<int8_t>(isMemtraceCode(path) ? Role::kMemtrace
                                      : isRunnerCode(path) ? Role::kRunner
                                                           : Role::kProgram);
  }
  return static_cast<Role>(known[file]);
}

uint32_t Locator::chosenFrame(uint32_t python_stack) const {
  if (python_stack == 0) return 0;
  // Note [The line the user acts on]: memtrace's own frames are passed over under either
  // policy; with none of the program's own, the innermost is the best there is.
  uint32_t innermost = tables_.python_stacks[python_stack].frame;
  uint32_t program = 0;
  for (uint32_t node = python_stack; node; node = tables_.python_stacks[node].parent) {
    uint32_t frame = tables_.python_stacks[node].frame;
    if (roleOf(frame) == Role::kMemtrace) continue;
    if (frame_policy_ == FramePolicy::kInnermost) return frame;
    if (!program) program = frame;
    // Note [Generated code]: a line of compiled code stands for its source stack, whose frames
    // come between this frame and its caller's.
    for (uint32_t source = sourceStackOf(frame); source;
         source = tables_.python_stacks[source].parent) {
      uint32_t source_frame = tables_.python_stacks[source].frame;
      if (!isLibraryPath(tables_.python_frames[source_frame].file)) return source_frame;
    }
    if (!isLibraryPath(tables_.python_frames[frame].file)) return frame;
  }
  return program ? program : innermost;
}

std::vector<uint32_t> Locator::framesOf(uint32_t python_stack) const {
  std::vector<uint32_t> all;
  for (uint32_t node = python_stack; node; node = tables_.python_stacks[node].parent)
    all.push_back(tables_.python_stacks[node].frame);
  std::reverse(all.begin(), all.end());
  // Note [The line the user acts on]: the runner above the program's first frame (runpy,
  // memtrace run) and memtrace's own frames anywhere are left out, unless nothing is left.
  std::vector<uint32_t> frames;
  bool above_program = true;
  for (uint32_t frame : all) {
    Role role = roleOf(frame);
    if (role == Role::kMemtrace || (above_program && role == Role::kRunner)) continue;
    above_program = false;
    frames.push_back(frame);
  }
  return frames.empty() ? all : frames;
}

std::string Locator::frameName(uint32_t frame_id) const {
  const reader::PythonFrame& frame = tables_.python_frames[frame_id];
  return displayPath(tables_.string(frame.file)) + ":" + std::to_string(frame.line) + " (" +
         std::string(tables_.string(frame.function)) + ")";
}

uint64_t Locator::interestingIp(uint32_t native_stack) {
  uint64_t first = 0;
  bool innermost = true;
  for (uint32_t node = native_stack; node; node = tables_.native_stacks[node].parent) {
    uint64_t ip = tables_.native_stacks[node].ip;
    if (!first) first = ip;
    if (!isAllocatorObject(symbolizer().resolve(ip, innermost).object)) return ip;
    innermost = false;
  }
  return first;
}

Locator::Key Locator::keyOf(const LiveAllocation& allocation) {
  // A category holds for untraced allocations too (parameters placed before tracing began).
  if (group_by_ == GroupBy::kCategory) return Key{10, static_cast<uint64_t>(allocation.category)};
  // Note [What was live before tracing]: an owned allocation is its module's, traced or not;
  // an untraced one is otherwise named by what it holds.
  if (group_by_ == GroupBy::kModule && (allocation.traced || allocation.module))
    return Key{9, allocation.module};
  if (!allocation.traced) return Key{1, static_cast<uint64_t>(untracedHolding(allocation))};
  if (allocation.python_stack) {
    if (group_by_ == GroupBy::kStack) return Key{2, allocation.python_stack};
    uint32_t frame_id = chosenFrame(allocation.python_stack);
    const reader::PythonFrame& frame = tables_.python_frames[frame_id];
    switch (group_by_) {
      case GroupBy::kLine:
        return Key{3, frame_id};
      case GroupBy::kFunction:
        return Key{4, uint64_t{frame.file} << 32 | frame.function};
      case GroupBy::kFile:
        return Key{5, frame.file};
      case GroupBy::kStack:
      case GroupBy::kModule:
      case GroupBy::kCategory:
        break;
    }
  }
  if (allocation.native_stack) {
    if (group_by_ == GroupBy::kStack) return Key{6, allocation.native_stack};
    return Key{7, interestingIp(allocation.native_stack)};
  }
  return Key{8, 0};
}

Location Locator::describe(const LiveAllocation& allocation) {
  Location location;
  if (group_by_ == GroupBy::kCategory) {
    location.kind = LocationKind::kCategory;
    location.name = format::categoryName(allocation.category);
    return location;
  }
  if (!allocation.traced && !(group_by_ == GroupBy::kModule && allocation.module)) {
    location.kind = LocationKind::kUntraced;
    location.holding = untracedHolding(allocation);
    location.name = untracedName(location.holding);
    return location;
  }
  if (group_by_ == GroupBy::kModule) {
    location.kind = LocationKind::kModule;
    location.module = std::string(tables_.string(allocation.module));
    location.name = location.module.empty() ? "<no module>" : location.module;
    return location;
  }
  if (allocation.python_stack) {
    location.kind = LocationKind::kPython;
    if (group_by_ == GroupBy::kStack) {
      for (uint32_t frame : framesOf(allocation.python_stack)) {
        if (!location.name.empty()) location.name += "; ";
        location.name += frameName(frame);
      }
      return location;
    }
    uint32_t frame_id = chosenFrame(allocation.python_stack);
    const reader::PythonFrame& frame = tables_.python_frames[frame_id];
    location.file = std::string(tables_.string(frame.file));
    location.function = std::string(tables_.string(frame.function));
    location.line = frame.line;
    switch (group_by_) {
      case GroupBy::kLine:
        location.name = frameName(frame_id);
        break;
      case GroupBy::kFunction:
        location.name = displayPath(location.file) + " (" + location.function + ")";
        location.line = 0;
        break;
      case GroupBy::kFile:
        location.name = displayPath(location.file);
        location.function.clear();
        location.line = 0;
        break;
      case GroupBy::kStack:
      case GroupBy::kModule:
      case GroupBy::kCategory:
        break;
    }
    return location;
  }
  if (allocation.native_stack) {
    location.kind = LocationKind::kNative;
    auto name = [](const NativeFrame& frame) {
      std::string text = frame.function;
      if (!frame.object.empty()) text += " [" + frame.object + "]";
      if (!frame.file.empty())
        text += " " + displayPath(frame.file) + ":" + std::to_string(frame.line);
      return text;
    };
    if (group_by_ == GroupBy::kStack) {
      std::vector<std::string> frames;
      bool innermost = true;
      for (uint32_t node = allocation.native_stack; node;
           node = tables_.native_stacks[node].parent) {
        frames.push_back(name(symbolizer().resolve(tables_.native_stacks[node].ip, innermost)));
        innermost = false;
      }
      for (auto it = frames.rbegin(); it != frames.rend(); ++it) {
        if (!location.name.empty()) location.name += "; ";
        location.name += *it;
      }
      return location;
    }
    uint64_t ip = interestingIp(allocation.native_stack);
    bool innermost = ip == tables_.native_stacks[allocation.native_stack].ip;
    const NativeFrame& frame = symbolizer().resolve(ip, innermost);
    location.name = "[native] " + name(frame);
    location.file = frame.file;
    location.function = frame.function;
    location.line = frame.line;
    return location;
  }
  location.kind = LocationKind::kNoStack;
  // Python stacks were wanted but this thread did not hold the GIL (autograd's threads,
  // C++ threads): say so, rather than that stacks were off.
  location.name =
      format::wantsPython(tables_.process.stack_mode) ? "<no Python frame>" : "<no stack>";
  return location;
}

LocationTable Locator::group(const LiveSet& live_set) {
  struct KeyHash {
    size_t operator()(const Key& key) const { return key.value * 0x9E3779B97F4A7C15ULL + key.kind; }
  };
  struct Group {
    uint64_t bytes = 0;
    uint64_t allocated = 0;
    std::vector<uint64_t> sizes;
    const LiveAllocation* representative = nullptr;
    format::TrainingPhase phase = format::TrainingPhase::kNone;
  };
  std::unordered_map<Key, Group, KeyHash> groups;
  for (const LiveAllocation& allocation : live_set.allocations) {
    Group& group = groups[keyOf(allocation)];
    group.bytes += allocation.size;
    group.allocated += allocation.allocated;
    group.sizes.push_back(allocation.size);
    if (!group.representative) group.representative = &allocation;
    // The step's phases come in this order (format::TrainingPhase's values).
    group.phase = std::max(group.phase, allocation.phase);
  }
  LocationTable table;
  table.group_by = group_by_;
  table.frame_policy = frame_policy_;
  table.total_bytes = live_set.bytes;
  table.allocated_known = live_set.allocated_known;
  for (auto& [key, group] : groups) {
    TableRow row;
    row.bytes = group.bytes;
    row.allocated_bytes = group.allocated;
    row.count = group.sizes.size();
    // The lower median for an even count: a size that was really allocated.
    auto middle = group.sizes.begin() + (group.sizes.size() - 1) / 2;
    std::nth_element(group.sizes.begin(), middle, group.sizes.end());
    row.median_bytes = *middle;
    row.location = describe(*group.representative);
    row.phase = group.phase;
    table.rows.push_back(std::move(row));
  }
  std::sort(table.rows.begin(), table.rows.end(), [](const TableRow& a, const TableRow& b) {
    if (a.bytes != b.bytes) return a.bytes > b.bytes;
    return a.location.name < b.location.name;  // a stable order for equal sizes
  });
  uint64_t cumulative = 0;
  for (TableRow& row : table.rows) {
    cumulative += row.bytes;
    row.cumulative_bytes = cumulative;
  }
  return table;
}

namespace {

// A library's own file, outside torch and memtrace (Note [One line holds the peak]): under a
// site-packages or dist-packages folder, its top package not torch's (or its compilers').
bool isModelLibraryFile(std::string_view path) {
  size_t at = path.rfind("-packages/");
  if (at == std::string_view::npos) return false;
  std::string_view rest = path.substr(at + std::string_view("-packages/").size());
  std::string_view top = rest.substr(0, rest.find('/'));
  for (std::string_view skipped : {"torch", "mem_tracer", "triton", "functorch", "torchgen"})
    if (top == skipped) return false;
  return true;
}

std::vector<TableRow> sortedRows(std::unordered_map<std::string, TableRow>& rows) {
  std::vector<TableRow> sorted;
  for (auto& [name, row] : rows) sorted.push_back(std::move(row));
  std::sort(sorted.begin(), sorted.end(), [](const TableRow& a, const TableRow& b) {
    return a.bytes != b.bytes ? a.bytes > b.bytes : a.location.name < b.location.name;
  });
  uint64_t cumulative = 0;
  for (TableRow& row : sorted) row.cumulative_bytes = cumulative += row.bytes;
  return sorted;
}

}  // namespace

std::optional<LineBreakdown> breakDownDominantLine(Locator& locator, const reader::Tables& tables,
                                                   const LiveSet& live_set,
                                                   const LocationTable& table) {
  if (table.group_by != GroupBy::kLine || table.frame_policy != FramePolicy::kUser ||
      table.rows.empty() || !live_set.bytes)
    return std::nullopt;
  const TableRow& top = table.rows.front();
  if (top.location.kind != LocationKind::kPython ||
      double(top.bytes) < kDominantShare * double(live_set.bytes))
    return std::nullopt;
  LineBreakdown breakdown;
  breakdown.line = top.location;
  breakdown.bytes = top.bytes;
  breakdown.point_bytes = live_set.bytes;
  std::unordered_map<std::string, TableRow> by_module;
  std::unordered_map<std::string, TableRow> by_library_line;
  auto add = [](std::unordered_map<std::string, TableRow>& rows, std::string name,
                LocationKind kind, uint64_t bytes) {
    TableRow& row = rows[name];
    row.location.kind = kind;
    row.location.name = std::move(name);
    row.bytes += bytes;
    ++row.count;
  };
  for (const LiveAllocation& allocation : live_set.allocations) {
    if (!allocation.traced || !allocation.python_stack) continue;
    Location location = locator.describe(allocation);
    if (location.kind != LocationKind::kPython || location.name != top.location.name) continue;
    std::string module(tables.string(allocation.module));
    if (module.empty()) module = "<no module>";
    add(by_module, std::move(module), LocationKind::kModule, allocation.size);
    std::vector<uint32_t> frames = locator.framesOf(allocation.python_stack);
    std::string library_line = "<no library frame>";
    for (auto frame = frames.rbegin(); frame != frames.rend(); ++frame)
      if (isModelLibraryFile(tables.string(tables.python_frames[*frame].file))) {
        library_line = locator.frameName(*frame);
        break;
      }
    add(by_library_line, std::move(library_line), LocationKind::kPython, allocation.size);
  }
  breakdown.by_module = sortedRows(by_module);
  breakdown.by_library_line = sortedRows(by_library_line);
  return breakdown;
}

}  // namespace memtrace::report
