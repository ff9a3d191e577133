#include "estimator/torchscript/source_locations.h"

#include "estimator/python_source.h"

namespace memtrace::estimator::torchscript {

namespace {

RangeLocation locate(const torch::jit::SourceRange& range) {
  RangeLocation location;
  std::optional<torch::jit::SourceRange> original = range.findSourceRangeThatGenerated();
  const torch::jit::SourceRange& source = original ? *original : range;
  if (!source.source()) return location;
  std::string text = source.text().str();
  if (std::optional<std::vector<SourceFrame>> stack = parsePythonStack(text)) {
    location.known = true;
    location.traced = true;
    location.frames = std::move(*stack);
    return location;
  }
  auto file_line_column = source.file_line_col();
  if (!file_line_column) return location;
  auto [file, line, column] = *file_line_column;
  if (file.empty() || line == 0) return location;
  location.known = true;
  location.frames.push_back({file, static_cast<int64_t>(line), {}});
  const auto& view = source.source();
  size_t line_in_source = view->lineno_for_offset(source.start());
  location.statement = view->get_line(line_in_source).str();
  size_t first = text.find_first_not_of(" \t\n");
  location.bracketed = first != std::string::npos && (text[first] == '[' || text[first] == '{');
  return location;
}

}  // namespace

const RangeLocation& SourceLocations::resolve(const torch::jit::SourceRange& range) {
  auto key =
      std::make_tuple(static_cast<const void*>(range.source().get()), range.start(), range.end());
  auto found = cache_.find(key);
  if (found != cache_.end()) return found->second;
  return cache_.emplace(key, locate(range)).first->second;
}

}  // namespace memtrace::estimator::torchscript
