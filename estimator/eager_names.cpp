#include "estimator/eager_names.h"

#include <algorithm>
#include <optional>
#include <set>
#include <string_view>

namespace memtrace::estimator {

namespace {

constexpr std::string_view kArgumentPrefix = "(argument ";

}  // namespace

std::string argumentHoldName(size_t index) {
  return std::string(kArgumentPrefix) + std::to_string(index) + ")";
}

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

// Note [Values stored into objects]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// `self.keys = torch.cat([self.keys, key_states], dim=-2)` (transformers' DynamicCache) binds
// no name: the object holds the value until its attribute is stored again or the object dies.
// The graph shows neither the object nor its identity (the same line stores into every
// layer's cache), but it shows data flow: a store whose value was computed from a value stored
// into the same attribute (the cat above reads the old `self.keys`) replaces that value, in the
// same object. So each store binds its values to a slot of the forward's scope: the slot of the
// stored value it read (which it releases, as rebinding a name does), else a slot of its own,
// held until forward returns. What a slot cannot see is an object that dies earlier, or an
// attribute stored again from values not computed from the old ones; hence the bracket: freed
// at last use below, held until forward returns (Graph::unnamed_values) above.
//
// The tracer, for its part, turns tensors a module reaches through an object it was given (the
// cache passed as `past_key_values`) into arguments of the module's call: Python passed the
// object, and no parameter name of the callee holds them, so their argument holds are dropped.

namespace {

constexpr std::string_view kSlotPrefix = "(stored into ";

ScopeId rootScope(const Graph& graph) {
  return graph.scopes.empty() ? ScopeId() : ScopeId(0u);  // the forward's: the first scope made
}

// The slot of a value stored into the attribute `prefix` names that `value` was computed from:
// read by the node producing it, directly or as an element of a list it read, or through the
// values the storing function (`scope`) computed on the way (`full = torch.cat([self.keys, k])`
// then `self.keys = full[:, :, -window:]`). Values other functions computed are not followed:
// the layer before also stored into `self.keys`, and this layer's keys come from its output.
std::optional<std::string> slotReplacedBy(const Graph& graph, ValueId value,
                                          const std::string& prefix, ScopeId scope) {
  std::vector<NodeId> producers = {graph.value(value).producer};
  std::set<uint32_t> visited;
  for (size_t next = 0; next < producers.size(); ++next) {
    if (!producers[next].valid() || !visited.insert(producers[next].value).second) continue;
    std::vector<ValueId> read = graph.node(producers[next]).inputs;
    for (size_t index = 0; index < read.size(); ++index) {
      const Value& input = graph.value(read[index]);
      if (input.kind == ValueKind::kContainer) {
        read.insert(read.end(), input.elements.begin(), input.elements.end());
        continue;
      }
      for (const Binding& binding : input.bindings) {
        if (binding.variable.starts_with(prefix)) return binding.variable;
      }
      if (input.producer.valid() && graph.node(input.producer).scope == scope) {
        producers.push_back(input.producer);
      }
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::string> storedIntoOf(const Value& value) {
  for (const Binding& binding : value.bindings) {
    if (!binding.variable.starts_with(kSlotPrefix)) continue;
    // "(stored into self.keys #12)" -> "self.keys"
    size_t end = binding.variable.rfind(" #");
    if (end == std::string::npos || end < kSlotPrefix.size()) continue;
    return binding.variable.substr(kSlotPrefix.size(), end - kSlotPrefix.size());
  }
  return std::nullopt;
}

void noteStoredInObject(Graph& graph, const SourceFrame& statement, ScopeId scope,
                        const std::string& target, const std::vector<ValueId>& values,
                        NodeId after) {
  ScopeId root = rootScope(graph);
  for (ValueId value : values) {
    graph.unnamed_values.push_back({value, root});
    graph.value(value).bindings.push_back({scope, target, after});
    // A slot of its own for now; resolveObjectStores finds the slot it replaces.
    graph.value(value).bindings.push_back(
        {root, std::string(kSlotPrefix) + target + " #" + std::to_string(value.value) + ")",
         after});
  }
  graph.assumeOnce({AssumptionKind::kSemantics,
                    "",
                    {statement},
                    "values stored into an object (`" + target + " = ...` at " + statement.file +
                        ":" + std::to_string(statement.line) +
                        ") live as long as the object, which the graph does not show: the "
                        "eager figure holds them until a store computed from them replaces "
                        "them, else until forward returns, and is approximate",
                    /*makes_lower_bound=*/false});
}

void resolveObjectStores(Graph& graph) {
  // In the order the stores' values were made, which is not always the order their statements
  // were finished (a statement is finished only after the calls it makes return).
  std::vector<ValueId> stored;
  for (size_t index = 0; index < graph.values.size(); ++index) {
    if (storedIntoOf(graph.values[index])) stored.push_back(ValueId(index));
  }
  auto made = [&](ValueId id) {
    NodeId producer = graph.value(id).producer;
    return producer.valid() ? static_cast<int64_t>(producer.value) : -1;
  };
  std::stable_sort(stored.begin(), stored.end(),
                   [&](ValueId left, ValueId right) { return made(left) < made(right); });
  for (ValueId id : stored) {
    Value& value = graph.value(id);
    for (Binding& binding : value.bindings) {
      if (!binding.variable.starts_with(kSlotPrefix)) continue;
      // "(stored into self.keys #12)" -> "(stored into self.keys ", and the function that
      // stored it, which bound "self.keys" in its own scope (noteStoredInObject).
      std::string prefix = binding.variable.substr(0, binding.variable.rfind('#'));
      std::string target =
          prefix.substr(kSlotPrefix.size(), prefix.size() - kSlotPrefix.size() - 1);
      auto storing = std::find_if(value.bindings.begin(), value.bindings.end(),
                                  [&](const Binding& other) { return other.variable == target; });
      if (storing == value.bindings.end()) continue;
      if (std::optional<std::string> slot = slotReplacedBy(graph, id, prefix, storing->scope)) {
        binding.variable = *slot;
      }
    }
    std::erase_if(value.bindings, [](const Binding& binding) {
      return binding.variable.starts_with(kArgumentPrefix);
    });
  }
}

}  // namespace memtrace::estimator
