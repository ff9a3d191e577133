#pragma once

#include <torch/csrc/jit/frontend/source_range.h>

#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "estimator/graph.h"

namespace memtrace::estimator::torchscript {

// What a node's source range says about where it comes from.
struct RangeLocation {
  bool known = false;
  // A traced node's range text is the whole Python stack at trace time (innermost first); a
  // scripted node's names one file and line, whose caller frames come from the call stack the
  // front end follows.
  bool traced = false;
  std::vector<SourceFrame> frames;  // traced: the stack; scripted: one frame, function unset
  std::string statement;            // scripted: the text of the source line (for its names)
  // Scripted: the range itself begins with `[` or `{`: a display, or, for a prim::Loop, a list
  // or dict comprehension (TorchScript gives the loop it becomes the comprehension's range).
  bool bracketed = false;
};

// Resolves source ranges of a loaded archive to the original Python locations, through the
// debug information torch.jit.save keeps (SourceRange::findSourceRangeThatGenerated); each
// range once.
class SourceLocations {
 public:
  const RangeLocation& resolve(const torch::jit::SourceRange& range);

 private:
  std::map<std::tuple<const void*, size_t, size_t>, RangeLocation> cache_;
};

}  // namespace memtrace::estimator::torchscript
