#include "estimator/passes/assign_lifetimes.h"

#include <algorithm>
#include <limits>
#include <map>
#include <string>
#include <tuple>

// Note [Eager and TorchScript lifetimes]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The same graph frees its tensors at different times depending on who runs it, and the
// difference is larger than the accuracy budget (ResNet-50 at batch 1: about 9.95 MiB of live
// activations at the peak in eager PyTorch, 9.19 MiB in the TorchScript interpreter).
//
// TorchScript: the interpreter drops a value after its last use (it emits a DROP, or MOVEs the
// value into the op that uses it last) and drops unused outputs right away. Calls are inlined
// before execution, so a call boundary holds nothing. A value whose last use is inside an if or
// a loop is dropped after that if or loop, whichever branch ran (insertLastUses in
// runtime/interpreter/preprocess_graph.cpp: the drop goes after the node at the value's own
// depth); the front end records those points as torch_script_only nodes.
//
// Eager: CPython frees a tensor when its last reference goes away. References are
//   - a use: the argument of the op that reads it, held until that op returns;
//   - a name: `out = self.conv(x)` holds the result until `out` is bound again (after the call
//     on the right-hand side of that binding returns) or until the function returns;
//   - a call: a caller keeps every argument on its value stack until the callee returns
//     (Module.__call__ also keeps its *args tuple), whatever the callee does with its own
//     parameter names;
//   - a container: a list or tuple keeps its elements alive as long as it lives itself, or
//     until they are taken out of it (`skip = skips.pop()`: the list's hold ends there);
//   - an object: `self.keys = torch.cat([self.keys, k])` holds the value until the attribute
//     is stored again or the object dies (Note [Values stored into objects]).
// The front end records names as Bindings in the scope (function invocation) that binds them,
// call arguments as Bindings of the callee's scope that are never rebound, and objects'
// attributes as Bindings of the forward's scope.
// Both semantics keep what the forward returns, and containers hold their elements in both.

namespace memtrace::estimator {

const char* semanticsName(Semantics semantics) {
  return semantics == Semantics::kEager ? "eager" : "torchscript";
}

std::optional<Semantics> parseSemantics(std::string_view text) {
  if (text == "eager") return Semantics::kEager;
  if (text == "torchscript") return Semantics::kTorchScript;
  return std::nullopt;
}

namespace {

// Lifetime ends are node indices; these two sit outside that range.
constexpr int64_t kNotSet = -1;
constexpr int64_t kForever = std::numeric_limits<int64_t>::max();

// The last node that runs inside each scope or one of the scopes it calls.
std::vector<int64_t> findScopeExits(const Graph& graph) {
  std::vector<int64_t> exits(graph.scopes.size(), kNotSet);
  for (size_t index = 0; index < graph.nodes.size(); ++index) {
    for (ScopeId scope = graph.nodes[index].scope; scope.valid();
         scope = graph.scope(scope).parent) {
      exits[scope.value] = static_cast<int64_t>(index);
    }
  }
  return exits;
}

void extendByBindings(const Graph& graph, std::vector<int64_t>& value_ends, bool hold_unnamed) {
  struct Held {
    int64_t after;
    ValueId value;
  };
  // Keyed by (scope, name); the bindings of one key in the order they happen.
  std::map<std::pair<uint32_t, std::string>, std::vector<Held>> by_name;
  for (size_t index = 0; index < graph.values.size(); ++index) {
    for (const Binding& binding : graph.values[index].bindings) {
      int64_t after = binding.after.valid() ? binding.after.value : kNotSet;
      by_name[{binding.scope.value, binding.variable}].push_back({after, ValueId(index)});
    }
  }
  if (hold_unnamed) {
    // Each as if bound to a name of its own that nothing binds again.
    for (size_t index = 0; index < graph.unnamed_values.size(); ++index) {
      const UnnamedValue& unnamed = graph.unnamed_values[index];
      NodeId producer = graph.value(unnamed.value).producer;
      by_name[{unnamed.scope.value, "(unnamed " + std::to_string(index) + ")"}].push_back(
          {producer.valid() ? producer.value : kNotSet, unnamed.value});
    }
  }
  std::vector<int64_t> scope_exits = findScopeExits(graph);
  for (auto& [key, bindings] : by_name) {
    std::stable_sort(bindings.begin(), bindings.end(),
                     [](const Held& left, const Held& right) { return left.after < right.after; });
    int64_t scope_exit = scope_exits[key.first];
    for (size_t position = 0; position < bindings.size(); ++position) {
      const Held& held = bindings[position];
      // Values bound together (a tuple bound to one name holds all its elements) are released
      // together, by the next binding after them.
      size_t next = position + 1;
      while (next < bindings.size() && bindings[next].after == held.after) ++next;
      int64_t release = next < bindings.size() ? bindings[next].after : scope_exit;
      // A scope that ran no node at all (nn.Identity) holds nothing past the binding itself.
      release = std::max(release, held.after);
      int64_t& end = value_ends[held.value.value];
      end = std::max(end, release);
    }
  }
}

// A container keeps its elements alive: their end is at least the container's. Containers
// can hold containers, so repeat until nothing moves (the depth of nesting, in practice 1-2).
void extendByContainers(const Graph& graph, std::vector<int64_t>& value_ends) {
  bool changed = true;
  while (changed) {
    changed = false;
    for (size_t index = graph.values.size(); index-- > 0;) {
      const Value& value = graph.values[index];
      if (value.kind != ValueKind::kContainer) continue;
      for (ValueId element : value.elements) {
        int64_t held_until = value_ends[index];
        for (const auto& [taken, after] : value.taken_out) {
          if (taken == element && after.valid()) {
            held_until = std::min(held_until, static_cast<int64_t>(after.value));
          }
        }
        int64_t& end = value_ends[element.value];
        if (end < held_until) {
          end = held_until;
          changed = true;
        }
      }
    }
  }
}

}  // namespace

Lifetimes assignLifetimes(const Graph& graph, Semantics semantics, bool hold_unnamed) {
  std::vector<int64_t> value_ends(graph.values.size(), kNotSet);
  for (size_t index = 0; index < graph.values.size(); ++index) {
    const Value& value = graph.values[index];
    // Values nobody produced (inputs, weights, constants) belong to the caller or the module.
    value_ends[index] = value.producer.valid() ? value.producer.value : kForever;
  }
  for (size_t index = 0; index < graph.nodes.size(); ++index) {
    const Node& node = graph.nodes[index];
    if (node.torch_script_only && semantics != Semantics::kTorchScript) continue;
    for (ValueId input : node.inputs) {
      int64_t& end = value_ends[input.value];
      end = std::max(end, static_cast<int64_t>(index));
    }
  }
  for (ValueId output : graph.outputs) value_ends[output.value] = kForever;
  if (semantics == Semantics::kEager) extendByBindings(graph, value_ends, hold_unnamed);
  extendByContainers(graph, value_ends);

  std::vector<int64_t> storage_ends(graph.storages.size(), kNotSet);
  for (size_t index = 0; index < graph.values.size(); ++index) {
    const Value& value = graph.values[index];
    if (!value.storage.valid()) continue;
    int64_t& end = storage_ends[value.storage.value];
    end = std::max(end, value_ends[index]);
  }

  std::vector<bool> released_inside(graph.storages.size(), false);
  for (const Node& node : graph.nodes) {
    for (const MemoryEvent& event : node.events) {
      if (event.kind == MemoryEventKind::kRelease) released_inside[event.storage.value] = true;
    }
  }

  Lifetimes lifetimes;
  lifetimes.released_after.resize(graph.storages.size());
  for (size_t index = 0; index < graph.storages.size(); ++index) {
    const Storage& storage = graph.storages[index];
    if (storage.origin != StorageOrigin::kActivation || released_inside[index]) continue;
    int64_t end = storage_ends[index];
    // An allocation no value refers to (an op's internal cache, a dropped output) goes away
    // with the node that made it.
    if (end == kNotSet) end = storage.producer.valid() ? storage.producer.value : kForever;
    if (end != kForever) lifetimes.released_after[index] = NodeId(static_cast<uint32_t>(end));
  }
  return lifetimes;
}

}  // namespace memtrace::estimator
