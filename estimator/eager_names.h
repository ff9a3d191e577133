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

// Records values a statement stored into an object (`self.keys = ...`, storedTarget): no
// Python name holds them, the object does, for as long as it lives, which the IR does not
// show. The eager figure frees them at last use and is approximate; its bracket holds them
// until the forward returns (Graph::unnamed_values with the root scope). Said once per target.
void noteStoredInObject(Graph& graph, const SourceFrame& statement, const std::string& target,
                        const std::vector<ValueId>& values);

}  // namespace memtrace::estimator
