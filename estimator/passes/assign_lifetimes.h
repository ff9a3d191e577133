#pragma once

#include <optional>
#include <string_view>
#include <vector>

#include "estimator/graph.h"

namespace memtrace::estimator {

// Who frees a tensor, and when: see Note [Eager and TorchScript lifetimes].
enum class Semantics : uint8_t {
  kEager,        // the nn.Module run by Python: a tensor lives while a Python name holds it
  kTorchScript,  // the TorchScript interpreter: a tensor dies after its last use
};

const char* semanticsName(Semantics semantics);
std::optional<Semantics> parseSemantics(std::string_view text);

struct Lifetimes {
  // Per storage: the node after which it is released, or none when it is still alive as the
  // forward returns (weights, inputs, outputs and what they hold). Temporaries released inside
  // their node (MemoryEventKind::kRelease) are none here too: their node already releases them.
  std::vector<NodeId> released_after;
};

// `hold_unnamed` (eager only): the values no name could be recovered for (Graph::unnamed_values)
// are held until their scope ends, as a Python name would hold them at most; by default they
// are freed at last use. The two give the bracket of an approximate eager figure.
Lifetimes assignLifetimes(const Graph& graph, Semantics semantics, bool hold_unnamed = false);

}  // namespace memtrace::estimator
