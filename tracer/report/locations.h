// Where an allocation comes from, at the grain the report groups by, and the table of
// what was live at a point grouped that way (Mem, Cumulative Mem, Median, Count, Location).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "tracer/reader/reader.h"
#include "tracer/report/analysis.h"
#include "tracer/report/symbolizer.h"

namespace memtrace::report {

enum class GroupBy { kLine, kFunction, kFile, kStack, kModule, kCategory };

// Which Python frame stands for an allocation: the innermost in the user's own code (outside
// the standard library, site-packages and torch: isUserCode), the default, or the innermost
// (where the allocating call is, which can be inside torch). The estimator offers the same two.
enum class FramePolicy { kInnermost, kUser };

// Note [The line the user acts on]
// A report leads with the line the user can change: `loss.backward()` in train.py, not
// torch/autograd/graph.py:_engine_run_backward where the allocation happened to be asked for.
// So every view (text, page, CSV/JSON, flame graph, job, diff) attributes an allocation to the
// innermost frame of the user's code by default; `--frame innermost` (frame="innermost" in
// Python) is the allocating frame, one option away. With no user frame on the stack (a
// library's own thread, a program that is all library) the innermost frame stands for it.
// memtrace's own frames are never shown, under either policy: its package (the hooks
// `memtrace run` adds, mem_tracer.estimate's wrapper) is passed over when choosing a frame
// and left out of full stacks, as is the runner above the program's first frame (runpy's
// frames under `python -m` and `memtrace run`): a flame graph's roots are the program's.
// "The user's code" is a script, a package being developed (an editable install is its
// checkout, outside site-packages), a notebook cell (ipykernel's /tmp/ipykernel_PID/N.py,
// IPython's <ipython-input-N-...>), `python -c` (<string>) and standard input (<stdin>).
// Code torch.compile generated is not the user's (nobody wrote it): a frame in it that the trace
// maps to the source it stands for (Note [Generated code] in records.h) is named, under the user
// policy, by the innermost user frame of that source stack (the line of the user's forward the
// buffer came from); without a map the walk goes on outward, as through any library. Under
// `--frame innermost` the generated line is named, and full stacks keep it.

// How an allocation is attributed.
enum class LocationKind {
  kPython,    // a Python frame (or stack)
  kUntraced,  // written while tracing was stopped, or live before the trace began (Note
              // [What was live before tracing] in analysis.h names it by what it holds)
  kNative,    // no Python frame (a thread without the GIL), a native frame
  kNoStack,   // traced, but without any stack (MEMTRACE_STACKS=none, or no GIL)
  kModule,    // grouped by nn.Module path (or none: "<no module>")
  kCategory,  // grouped by training category (parameter, gradient, ...)
};

struct Location {
  LocationKind kind = LocationKind::kNoStack;
  std::string name;  // as the report prints it
  // Of the Python frame that stands for it (kPython with line/function/file grouping):
  std::string file;
  std::string function;
  int line = 0;
  std::string module;  // the nn.Module path, with module grouping
  // kUntraced: what the trace knows it holds (untracedHolding; kUnknown: nothing).
  format::Category holding = format::Category::kUnknown;
};

struct TableRow {
  uint64_t bytes = 0;
  // PyTorch's allocated bytes of the same tensors: their blocks (LiveAllocation::allocated),
  // meaningful where LocationTable::allocated_known.
  uint64_t allocated_bytes = 0;
  uint64_t cumulative_bytes = 0;
  uint64_t median_bytes = 0;
  uint64_t count = 0;
  Location location;
  // The last of a step's phases (forward, backward, the optimizer's) its allocations were made
  // in; kNone when none was (Note [The step's own calls] in estimator/passes/attribute_peak.h).
  format::TrainingPhase phase = format::TrainingPhase::kNone;
};

struct LocationTable {
  GroupBy group_by = GroupBy::kLine;
  FramePolicy frame_policy = FramePolicy::kUser;
  uint64_t total_bytes = 0;
  bool allocated_known = false;  // LiveSet::allocated_known: each row's allocated_bytes is exact
  std::vector<TableRow> rows;    // largest first; all of them (renderers cut to --top)
};

class Locator {
 public:
  Locator(const reader::Tables& tables, GroupBy group_by, FramePolicy frame_policy);
  ~Locator();

  LocationTable group(const LiveSet& live_set);
  Location describe(const LiveAllocation& allocation);

  // The frame id that stands for a Python stack under the policy (0 for none).
  uint32_t chosenFrame(uint32_t python_stack) const;
  // The Python stack from the outermost frame to the innermost.
  std::vector<uint32_t> framesOf(uint32_t python_stack) const;
  std::string frameName(uint32_t frame) const;  // "file:line (function)"
  // The source stack a frame of generated code stands for (Note [Generated code]); 0: none.
  uint32_t sourceStackOf(uint32_t frame) const;

 private:
  struct Key {
    uint8_t kind;
    uint64_t value;
    bool operator==(const Key&) const = default;
  };
  Key keyOf(const LiveAllocation& allocation);
  uint64_t interestingIp(uint32_t native_stack);
  Symbolizer& symbolizer();
  bool isLibraryPath(uint32_t file) const;
  enum class Role : int8_t { kProgram, kMemtrace, kRunner };
  Role roleOf(uint32_t frame) const;

  const reader::Tables& tables_;
  GroupBy group_by_;
  FramePolicy frame_policy_;
  std::unique_ptr<Symbolizer> symbolizer_;
  mutable std::vector<int8_t> library_file_;  // per string id: -1 unknown, 0 user code, 1 library
  mutable std::vector<int8_t> role_;          // per string id: -1 unknown, else a Role
  // Note [Generated code]: the kGeneratedCode records of each generated file (by its string
  // id; indices into tables_.generated_code), and what sourceStackOf() found per frame id.
  void indexGeneratedCode() const;
  mutable size_t generated_indexed_ = 0;  // how many records are indexed
  mutable std::unordered_map<uint32_t, std::vector<uint32_t>> generated_by_file_;
  mutable std::vector<uint32_t> source_stack_;  // per frame id: kUnknownStack, 0 none, or a stack
  static constexpr uint32_t kUnknownStack = UINT32_MAX;
};

// Note [One line holds the peak]
// When the program's own code is thin (a library's loop: `trainer.train()`), one user line
// holds most of the peak and the line table says nothing more. The report then breaks that
// line down by the nn.Module each allocation was made in and by the innermost line in a library
// other than torch (transformers' modeling_gpt2.py:NNN, accelerate's backward), where the
// library's configuration acts, and says that it did. "Most": at least kDominantShare of the
// point's bytes, with the line grouping and the user policy (the default).
inline constexpr double kDominantShare = 0.5;
struct LineBreakdown {
  Location line;  // the user's line
  uint64_t bytes = 0;
  uint64_t point_bytes = 0;               // live at the point in all
  std::vector<TableRow> by_module;        // its bytes by module, largest first
  std::vector<TableRow> by_library_line;  // by the innermost library frame outside torch
};
std::optional<LineBreakdown> breakDownDominantLine(Locator& locator, const reader::Tables& tables,
                                                   const LiveSet& live_set,
                                                   const LocationTable& table);

// Helpers the renderers share.
const char* locationKindName(LocationKind kind);  // "python", "untraced", ...
std::string displayPath(std::string_view path);
std::string groupByName(GroupBy group_by);

}  // namespace memtrace::report
