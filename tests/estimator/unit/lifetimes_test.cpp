// assignLifetimes and simulateLiveBytes: when each storage is freed under each semantics, and
// the exact live-bytes peak that follows.
#include <gtest/gtest.h>

#include "estimator/eager_names.h"
#include "estimator/passes/assign_lifetimes.h"
#include "estimator/passes/simulate_live_bytes.h"
#include "estimator/timeline.h"
#include "graph_builder_for_tests.h"

namespace memtrace::estimator {
namespace {

using testing::TestGraph;

int64_t peakOf(const Graph& graph, Semantics semantics) {
  Lifetimes lifetimes = assignLifetimes(graph, semantics);
  return simulateLiveBytes(graph, buildTimeline(graph, lifetimes)).peak_bytes;
}

NodeId releaseOf(const Graph& graph, Semantics semantics, StorageId storage) {
  return assignLifetimes(graph, semantics).released_after[storage.value];
}

TEST(AssignLifetimes, TorchScriptFreesAfterLastUse) {
  TestGraph test;
  ValueId x = test.input(100);
  ValueId a = test.op({x}, 1000);  // node 0
  ValueId b = test.op({a}, 2000);  // node 1
  ValueId c = test.op({b}, 3000);  // node 2
  test.graph.outputs.push_back(c);
  EXPECT_EQ(releaseOf(test.graph, Semantics::kTorchScript, test.storageOf(a)), NodeId(1u));
  EXPECT_EQ(releaseOf(test.graph, Semantics::kTorchScript, test.storageOf(b)), NodeId(2u));
  EXPECT_FALSE(releaseOf(test.graph, Semantics::kTorchScript, test.storageOf(c)).valid());
  // The largest adjacent pair: b and c live while node 2 runs.
  EXPECT_EQ(peakOf(test.graph, Semantics::kTorchScript), 5000);
}

TEST(AssignLifetimes, UnusedOutputDiesWithItsNode) {
  TestGraph test;
  ValueId x = test.input(100);
  ValueId unused = test.op({x}, 1000);
  ValueId kept = test.op({x}, 10);
  test.graph.outputs.push_back(kept);
  for (Semantics semantics : {Semantics::kEager, Semantics::kTorchScript}) {
    EXPECT_EQ(releaseOf(test.graph, semantics, test.storageOf(unused)), NodeId(0u));
  }
}

TEST(AssignLifetimes, EagerNameHoldsUntilScopeReturns) {
  // h = f(x); out = g(h); return out + 1  (h is held by its name until the function returns)
  TestGraph test;
  ValueId x = test.input(100);
  ScopeId body = test.call(test.root);
  ValueId h = test.op({x}, 1000, body);
  test.bind(h, "h", body);
  ValueId out = test.op({h}, 2000, body);
  test.bind(out, "out", body);
  ValueId result = test.op({out}, 3000, body);
  test.op({result}, 1, test.root);  // the caller goes on after the call
  EXPECT_EQ(releaseOf(test.graph, Semantics::kEager, test.storageOf(h)), NodeId(2u));
  EXPECT_EQ(releaseOf(test.graph, Semantics::kTorchScript, test.storageOf(h)), NodeId(1u));
  EXPECT_EQ(peakOf(test.graph, Semantics::kEager), 6000);
  EXPECT_EQ(peakOf(test.graph, Semantics::kTorchScript), 5000);
}

TEST(AssignLifetimes, EagerRebindingReleasesThePreviousValue) {
  // out = f(x); out = g(out); out = k(out); big = m(out)
  TestGraph test;
  ValueId x = test.input(100);
  ValueId first = test.op({x}, 1000);
  test.bind(first, "out");
  ValueId second = test.op({first}, 1000);
  test.bind(second, "out");
  ValueId third = test.op({second}, 1000);
  test.bind(third, "out");
  test.op({third}, 5000);
  // The first value is released once `out` is bound again, after node 1 returned.
  EXPECT_EQ(releaseOf(test.graph, Semantics::kEager, test.storageOf(first)), NodeId(1u));
  EXPECT_EQ(releaseOf(test.graph, Semantics::kEager, test.storageOf(second)), NodeId(2u));
  // `out` still holds the third value when the scope ends with node 3.
  EXPECT_EQ(releaseOf(test.graph, Semantics::kEager, test.storageOf(third)), NodeId(3u));
}

TEST(AssignLifetimes, ValuesBoundTogetherAreReleasedTogether) {
  // outputs = block(x) (a tuple: hidden and weights); outputs = block(x)
  TestGraph test;
  ValueId x = test.input(100);
  ValueId hidden = test.op({x}, 1000);   // node 0
  ValueId weights = test.op({x}, 3000);  // node 1
  test.bind(hidden, "outputs");          // both bound when the call returns
  test.bind(weights, "outputs");
  ValueId hidden2 = test.op({x}, 1000);  // node 2
  test.bind(hidden2, "outputs");
  test.op({hidden2}, 10);  // node 3
  // Neither element of the first tuple releases the other: both go when `outputs` is rebound.
  EXPECT_EQ(releaseOf(test.graph, Semantics::kEager, test.storageOf(hidden)), NodeId(2u));
  EXPECT_EQ(releaseOf(test.graph, Semantics::kEager, test.storageOf(weights)), NodeId(2u));
}

TEST(AssignLifetimes, EagerCallArgumentsLiveUntilTheCallReturns) {
  // The callee rebinds its parameter, but the caller still holds the argument.
  TestGraph test;
  ValueId x = test.input(100);
  ValueId argument = test.op({x}, 4000);  // node 0, in the caller
  ScopeId callee = test.call(test.root);
  test.bind(argument, "(argument 1)", callee);
  ValueId inner = test.op({argument}, 1000, callee);  // node 1
  ValueId inner2 = test.op({inner}, 1000, callee);    // node 2
  ValueId after = test.op({inner2}, 1, test.root);    // node 3, back in the caller
  test.graph.outputs.push_back(after);
  EXPECT_EQ(releaseOf(test.graph, Semantics::kEager, test.storageOf(argument)), NodeId(2u));
  EXPECT_EQ(releaseOf(test.graph, Semantics::kTorchScript, test.storageOf(argument)), NodeId(1u));
}

TEST(AssignLifetimes, ScopeWithoutNodesHoldsNothingPastTheBinding) {
  TestGraph test;
  ValueId x = test.input(100);
  ValueId a = test.op({x}, 1000);  // node 0
  ScopeId identity = test.call(test.root);
  test.bind(a, "(argument 1)", identity);  // nn.Identity: a call that runs no node
  test.op({x}, 10);                        // node 1
  test.op({x}, 10);                        // node 2
  EXPECT_EQ(releaseOf(test.graph, Semantics::kEager, test.storageOf(a)), NodeId(0u));
}

TEST(AssignLifetimes, ContainersHoldTheirElements) {
  TestGraph test;
  ValueId x = test.input(100);
  ValueId a = test.op({x}, 1000);    // node 0
  ValueId b = test.op({x}, 1000);    // node 1
  ValueId list = test.list({a, b});  // node 2
  test.op({x}, 10);                  // node 3
  test.use({list});                  // node 4: the last use of the list
  for (Semantics semantics : {Semantics::kEager, Semantics::kTorchScript}) {
    EXPECT_EQ(releaseOf(test.graph, semantics, test.storageOf(a)), NodeId(4u));
    EXPECT_EQ(releaseOf(test.graph, semantics, test.storageOf(b)), NodeId(4u));
  }
}

TEST(AssignLifetimes, AnElementTakenOutIsNoLongerHeldByItsContainer) {
  // skips = [a, b]; ...; x = skips.pop() (b); ...; the list lives on to node 5
  TestGraph test;
  ValueId x = test.input(100);
  ValueId a = test.op({x}, 1000);    // node 0
  ValueId b = test.op({x}, 1000);    // node 1
  ValueId list = test.list({a, b});  // node 2
  test.op({x}, 10);                  // node 3: pops b
  test.op({x}, 10);                  // node 4
  test.use({list});                  // node 5: the last use of the list
  noteTakenOut(test.graph.value(list), {a}, NodeId(3u));
  ASSERT_EQ(test.graph.value(list).taken_out.size(), 1u);
  for (Semantics semantics : {Semantics::kEager, Semantics::kTorchScript}) {
    EXPECT_EQ(releaseOf(test.graph, semantics, test.storageOf(a)), NodeId(5u));
    EXPECT_EQ(releaseOf(test.graph, semantics, test.storageOf(b)), NodeId(3u));
  }
  // Put back (skips.append(b)), it is held as long as the list again.
  noteTakenOut(test.graph.value(list), {a, b}, NodeId(4u));
  EXPECT_TRUE(test.graph.value(list).taken_out.empty());
  EXPECT_EQ(releaseOf(test.graph, Semantics::kEager, test.storageOf(b)), NodeId(5u));
}

TEST(AssignLifetimes, UnnamedValuesAreHeldToTheirScopeEndOnlyForTheBracket) {
  TestGraph test;
  ValueId x = test.input(100);
  ScopeId body = test.call(test.root);
  ValueId h = test.op({x}, 1000, body);    // node 0: its statement's name is unknown
  ValueId out = test.op({h}, 2000, body);  // node 1
  test.op({out}, 3000, body);              // node 2
  test.graph.unnamed_values.push_back({h, body});
  EXPECT_EQ(assignLifetimes(test.graph, Semantics::kEager).released_after[test.storageOf(h).value],
            NodeId(1u));
  EXPECT_EQ(
      assignLifetimes(test.graph, Semantics::kEager, true).released_after[test.storageOf(h).value],
      NodeId(2u));
}

TEST(AssignLifetimes, ObjectStoresAreReplacedThroughDataFlow) {
  // Two layers' caches, each `self.keys = x` then, inside a module call the tracer passed the
  // stored keys to, `self.keys = torch.cat([self.keys, k])` (Note [Values stored into objects]).
  TestGraph test;
  const SourceFrame statement{"cache_utils.py", 136, "update"};
  ValueId x = test.input(100);
  ScopeId update0 = test.call(test.root, "update");
  ValueId first = test.op({x}, 1000, update0);  // node 0: layer 0's cache
  ScopeId update1 = test.call(test.root, "update");
  ValueId second = test.op({x}, 1000, update1);  // node 1: layer 1's cache
  ScopeId call = test.call(test.root);
  test.bind(first, argumentHoldName(1), call);
  test.bind(second, argumentHoldName(2), call);
  ValueId grown = test.op({first}, 2000, call);   // node 2: reads layer 0's keys
  test.op({x}, 10, call);                         // node 3
  ValueId other = test.op({second}, 2000, call);  // node 4: reads layer 1's keys
  test.op({x}, 10, test.root);                    // node 5
  // Noted in the order their statements finished: the call's before the caller's.
  noteStoredInObject(test.graph, statement, call, "self.keys", {grown}, NodeId(2u));
  noteStoredInObject(test.graph, statement, call, "self.keys", {other}, NodeId(4u));
  noteStoredInObject(test.graph, statement, update0, "self.keys", {first}, NodeId(0u));
  noteStoredInObject(test.graph, statement, update1, "self.keys", {second}, NodeId(1u));
  resolveObjectStores(test.graph);
  // Each replaced by the store computed from it, not held as the call's argument until node 4.
  EXPECT_EQ(releaseOf(test.graph, Semantics::kEager, test.storageOf(first)), NodeId(2u));
  EXPECT_EQ(releaseOf(test.graph, Semantics::kEager, test.storageOf(second)), NodeId(4u));
  // The new keys are held by their objects until forward returns, long past their last use.
  EXPECT_EQ(releaseOf(test.graph, Semantics::kEager, test.storageOf(grown)), NodeId(5u));
  EXPECT_EQ(releaseOf(test.graph, Semantics::kTorchScript, test.storageOf(grown)), NodeId(2u));
  EXPECT_EQ(test.graph.assumptions.size(), 1u);  // said once for the target
}

TEST(AssignLifetimes, StorageLivesWhileAnyViewLives) {
  TestGraph test;
  ValueId x = test.input(100);
  ValueId base = test.op({x}, 1000);  // node 0
  ValueId view = test.view(base);     // node 1
  test.op({x}, 10);                   // node 2
  test.use({view});                   // node 3
  EXPECT_EQ(releaseOf(test.graph, Semantics::kTorchScript, test.storageOf(base)), NodeId(3u));
}

TEST(AssignLifetimes, DropPointsCountInTorchScriptOnly) {
  TestGraph test;
  ValueId x = test.input(100);
  ValueId a = test.op({x}, 1000);  // node 0
  test.op({a}, 10);                // node 1: last real use
  test.op({x}, 10);                // node 2
  NodeId drop = test.use({a});     // node 3: the end of an if whose other branch uses a
  test.graph.node(drop).torch_script_only = true;
  EXPECT_EQ(releaseOf(test.graph, Semantics::kTorchScript, test.storageOf(a)), NodeId(3u));
  EXPECT_EQ(releaseOf(test.graph, Semantics::kEager, test.storageOf(a)), NodeId(1u));
}

TEST(AssignLifetimes, WeightsInputsAndOutputsAreNeverReleased) {
  TestGraph test;
  ValueId x = test.input(100);
  ValueId w = test.weight(50);
  ValueId y = test.op({x, w}, 10);
  test.graph.outputs.push_back(y);
  Lifetimes lifetimes = assignLifetimes(test.graph, Semantics::kTorchScript);
  for (const NodeId& release : lifetimes.released_after) EXPECT_FALSE(release.valid());
}

TEST(SimulateLiveBytes, TemporariesCountWhileTheirNodeRuns) {
  TestGraph test;
  ValueId x = test.input(100);
  ValueId a = test.op({x}, 1000);
  ValueId b = test.opWithTemporary({a}, 1000, 700);
  test.graph.outputs.push_back(b);
  LiveBytesPeak peak = simulateLiveBytes(
      test.graph, buildTimeline(test.graph, assignLifetimes(test.graph, Semantics::kTorchScript)));
  EXPECT_EQ(peak.peak_bytes, 2700);  // a, the temporary and b at once
  EXPECT_EQ(peak.peak_node, NodeId(1u));
  EXPECT_EQ(peak.live_at_peak.size(), 3u);
}

TEST(SimulateLiveBytes, ListsWhatIsLiveAtTheFirstPeak) {
  TestGraph test;
  ValueId x = test.input(100);
  ValueId a = test.op({x}, 500);   // node 0
  ValueId b = test.op({a}, 4000);  // node 1: a + b = 4500, the peak
  ValueId c = test.op({b}, 100);   // node 2
  test.graph.outputs.push_back(c);
  LiveBytesPeak peak = simulateLiveBytes(
      test.graph, buildTimeline(test.graph, assignLifetimes(test.graph, Semantics::kTorchScript)));
  EXPECT_EQ(peak.peak_bytes, 4500);
  EXPECT_EQ(peak.peak_node, NodeId(1u));
  std::vector<StorageId> expected = {test.storageOf(a), test.storageOf(b)};
  EXPECT_EQ(peak.live_at_peak, expected);
}

}  // namespace
}  // namespace memtrace::estimator
