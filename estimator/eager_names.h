// What the front ends need to record Python's names for eager semantics, beyond the source
// parsing of python_source.h (Note [Eager and TorchScript lifetimes]).
#pragma once

#include <optional>
#include <string>

#include "estimator/graph.h"

namespace memtrace::estimator {

// The value that `name` in `scope` was bound to last (by the node after which it was bound),
// or nothing when no statement of that scope binds it.
std::optional<ValueId> lastBoundTo(const Graph& graph, ScopeId scope, const std::string& name);

// Says once per file that the statements of `statement`'s file cannot be read, so the names
// their values are bound to are unknown and the eager figure is approximate.
void noteSourceMissing(Graph& graph, const SourceFrame& statement);

}  // namespace memtrace::estimator
