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

// The name of the Binding that holds a call's argument `index` in the callee's scope until the
// callee returns (Note [Eager and TorchScript lifetimes]): no Python name, so none to rebind.
std::string argumentHoldName(size_t index);

// Says once per file that the statements of `statement`'s file cannot be read, so the names
// their values are bound to are unknown and the eager figure is approximate.
void noteSourceMissing(Graph& graph, const SourceFrame& statement);

// Records values a statement stored into an object (`self.keys = ...`, storedTarget): no
// Python name holds them, the object does (Note [Values stored into objects]). Said once per
// target: the eager figure rests on the object's lifetime, which the IR does not show, so it is
// approximate, bracketed by freeing them at last use and holding them until forward returns.
// The function storing them (`scope`) also binds the target, as a name, until it returns,
// so that `return self.keys, self.values` names what it returns.
void noteStoredInObject(Graph& graph, const SourceFrame& statement, ScopeId scope,
                        const std::string& target, const std::vector<ValueId>& values,
                        NodeId after);

// The attribute a value was stored into (`self.keys`), if noteStoredInObject recorded one.
std::optional<std::string> storedIntoOf(const Value& value);

// Once the graph is built (a statement is finished only after the calls it makes return):
// gives each value stored into an object the slot of the stored value it replaces, if any,
// and drops the holds of call arguments that are stored values: the tracer passed them to a
// call it lifted them into, where Python passed the object (Note [Values stored into objects]).
void resolveObjectStores(Graph& graph);

}  // namespace memtrace::estimator
