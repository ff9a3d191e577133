#include "estimator/eager_names.h"

#include <algorithm>

namespace memtrace::estimator {

std::optional<ValueId> lastBoundTo(const Graph& graph, ScopeId scope, const std::string& name) {
  std::optional<ValueId> found;
  int64_t latest = -1;
  for (size_t index = 0; index < graph.values.size(); ++index) {
    for (const Binding& binding : graph.values[index].bindings) {
      if (binding.scope != scope || binding.variable != name) continue;
      int64_t after = binding.after.valid() ? binding.after.value : -1;
      if (!found || after >= latest) {
        found = ValueId(static_cast<uint32_t>(index));
        latest = after;
      }
    }
  }
  return found;
}

void noteSourceMissing(Graph& graph, const SourceFrame& statement) {
  graph.assumeOnce({AssumptionKind::kSemantics,
                    "",
                    {statement},
                    "the source file " + statement.file +
                        " cannot be read: the Python names its statements bind are unknown, so "
                        "the eager figure frees their values at last use and is approximate",
                    /*makes_lower_bound=*/false});
}

void noteStoredInObject(Graph& graph, const SourceFrame& statement, const std::string& target,
                        const std::vector<ValueId>& values) {
  ScopeId root;
  if (!graph.scopes.empty()) root = ScopeId(0u);  // the forward's: the first scope made
  for (ValueId value : values) graph.unnamed_values.push_back({value, root});
  graph.assumeOnce({AssumptionKind::kSemantics,
                    "",
                    {statement},
                    "values stored into an object (`" + target + " = ...` at " + statement.file +
                        ":" + std::to_string(statement.line) +
                        ") live as long as the object, which the graph does not show: the "
                        "eager figure frees them at last use and is approximate",
                    /*makes_lower_bound=*/false});
}

}  // namespace memtrace::estimator
