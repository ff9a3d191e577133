// attributePeak's three groupings and countFlops' formulas.
#include <gtest/gtest.h>

#include "estimator/passes/attribute_peak.h"
#include "estimator/passes/count_flops.h"
#include "graph_builder_for_tests.h"

namespace memtrace::estimator {
namespace {

using testing::TestGraph;

TEST(AttributePeak, GroupsByInnermostFrameUserFrameAndModule) {
  TestGraph test;
  ValueId x = test.input(100);
  // Two tensors made inside torch (linear.py), called from two lines of the user's model, and
  // one made on a third line of the model directly.
  ValueId a = test.op({x}, 3000);
  ValueId b = test.op({x}, 2000);
  ValueId c = test.op({x}, 1000);
  const std::string torch_file = "/usr/lib/python3.11/site-packages/torch/nn/modules/linear.py";
  test.graph.node(NodeId(0u)).stack = {{torch_file, 134, "forward"},
                                       {"/m/model.py", 10, "forward"}};
  test.graph.node(NodeId(0u)).module_path = "encoder.fc";
  test.graph.node(NodeId(1u)).stack = {{torch_file, 134, "forward"},
                                       {"/m/model.py", 11, "forward"}};
  test.graph.node(NodeId(1u)).module_path = "decoder.fc";
  test.graph.node(NodeId(2u)).stack = {{"/m/model.py", 12, "forward"}};
  test.graph.node(NodeId(2u)).module_path = "decoder";
  PeakAttribution attribution =
      attributePeak(test.graph, {test.storageOf(c), test.storageOf(a), test.storageOf(b)});

  ASSERT_EQ(attribution.by_frame.size(), 2u);
  EXPECT_EQ(attribution.by_frame[0].frame.file, torch_file);
  EXPECT_EQ(attribution.by_frame[0].bytes, 5000);
  EXPECT_EQ(attribution.by_frame[0].tensors, 2);
  EXPECT_EQ(attribution.by_frame[1].frame.line, 12);

  ASSERT_EQ(attribution.by_user_frame.size(), 3u);
  EXPECT_EQ(attribution.by_user_frame[0].frame.line, 10);
  EXPECT_EQ(attribution.by_user_frame[0].bytes, 3000);
  EXPECT_EQ(attribution.by_user_frame[1].frame.line, 11);
  EXPECT_EQ(attribution.by_user_frame[2].frame.line, 12);

  ASSERT_EQ(attribution.by_module.size(), 3u);
  EXPECT_EQ(attribution.by_module[0].module_path, "encoder.fc");

  std::vector<StorageId> largest_first = {test.storageOf(a), test.storageOf(b), test.storageOf(c)};
  EXPECT_EQ(attribution.storages, largest_first);
}

TEST(UserCode, LeavesOutTheStandardLibraryPackagesAndTorch) {
  EXPECT_TRUE(isUserCode("/home/me/project/model.py"));
  EXPECT_FALSE(isUserCode("/usr/lib/python3.11/site-packages/torch/nn/functional.py"));
  EXPECT_FALSE(isUserCode("/usr/lib/python3/dist-packages/numpy/core.py"));
  EXPECT_FALSE(isUserCode("/usr/lib/python3.11/contextlib.py"));
  EXPECT_FALSE(isUserCode("/src/pytorch/torch/nn/modules/conv.py"));
  EXPECT_FALSE(isUserCode("/src/memtrace/python/mem_tracer/estimator/estimate.py"));
  EXPECT_TRUE(isUserCode("<string>"));  // python -c
  EXPECT_FALSE(isUserCode(""));
}

Graph flopsGraph(const std::string& op, std::vector<std::vector<int64_t>> input_shapes,
                 std::vector<int64_t> output_shape) {
  TestGraph test;
  std::vector<ValueId> inputs;
  for (const auto& shape : input_shapes) {
    ValueId input = test.input(4);
    test.graph.value(input).shape = shape;
    inputs.push_back(input);
  }
  ValueId output = test.op(inputs, 4, ScopeId(), op);
  test.graph.value(output).shape = output_shape;
  countFlops(test.graph);
  return test.graph;
}

TEST(CountFlops, TwoPerMultiplyAdd) {
  // Convolution: 2 x output elements x (input channels / groups) x kernel area.
  EXPECT_EQ(flopsGraph("aten::conv2d", {{1, 3, 8, 8}, {16, 3, 3, 3}}, {1, 16, 8, 8}).nodes[0].flops,
            2 * 16 * 8 * 8 * 3 * 3 * 3);
  // Depthwise: the weight has one input channel per group.
  EXPECT_EQ(
      flopsGraph("aten::conv2d", {{1, 32, 8, 8}, {32, 1, 3, 3}}, {1, 32, 8, 8}).nodes[0].flops,
      2 * 32 * 8 * 8 * 9);
  // Transposed: each input element spreads over output channels x kernel.
  EXPECT_EQ(flopsGraph("aten::conv_transpose2d", {{1, 8, 4, 4}, {8, 4, 2, 2}}, {1, 4, 8, 8})
                .nodes[0]
                .flops,
            2 * 8 * 4 * 4 * 4 * 4);
  // Linear: 2 x output elements x in_features.
  EXPECT_EQ(flopsGraph("aten::linear", {{2, 10, 64}, {32, 64}}, {2, 10, 32}).nodes[0].flops,
            2 * 2 * 10 * 32 * 64);
  // Batched matmul: 2 x output elements x the reduced dimension.
  EXPECT_EQ(
      flopsGraph("aten::matmul", {{2, 4, 16, 8}, {2, 4, 8, 16}}, {2, 4, 16, 16}).nodes[0].flops,
      2 * 2 * 4 * 16 * 16 * 8);
  // addmm: the matrices come after the added tensor.
  EXPECT_EQ(flopsGraph("aten::addmm", {{32}, {10, 64}, {64, 32}}, {10, 32}).nodes[0].flops,
            2 * 10 * 32 * 64);
  EXPECT_EQ(flopsGraph("aten::relu", {{10}}, {10}).nodes[0].flops, 0);
}

}  // namespace
}  // namespace memtrace::estimator
