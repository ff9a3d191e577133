// What the estimator reads from users and from IR text: sizes, input specs, Python statements
// and stacks, device profiles; and the batch search.
#include <gtest/gtest.h>

#include <fstream>

#include "estimator/batch_search.h"
#include "estimator/byte_size.h"
#include "estimator/device_profile.h"
#include "estimator/errors.h"
#include "estimator/input_spec.h"
#include "estimator/python_source.h"

namespace memtrace::estimator {
namespace {

TEST(ByteSize, ParsesBinaryAndDecimalUnits) {
  EXPECT_EQ(parseByteSize("24GiB"), int64_t{24} << 30);
  EXPECT_EQ(parseByteSize("512 MiB"), int64_t{512} << 20);
  EXPECT_EQ(parseByteSize("1.5GB"), 1'500'000'000);
  EXPECT_EQ(parseByteSize("80gb"), 80'000'000'000);
  EXPECT_EQ(parseByteSize("1000"), 1000);
  EXPECT_EQ(parseByteSize("2k"), 2000);
  EXPECT_FALSE(parseByteSize("GiB"));
  EXPECT_FALSE(parseByteSize("12 parsecs"));
  EXPECT_FALSE(parseByteSize("-5GiB"));
}

TEST(ByteSize, FormatsWithThreeDigits) {
  EXPECT_EQ(formatBytes(512), "512 B");
  EXPECT_EQ(formatBytes(10433331), "9.95 MiB");
  EXPECT_EQ(formatBytes(int64_t{150} << 20), "150 MiB");
  EXPECT_EQ(formatBytes(int64_t{24} << 30), "24.0 GiB");
}

TEST(InputSpec, ParsesShapeAndDtype) {
  InputSpec image = parseInputSpec("1x3x224x224");
  EXPECT_EQ(image.shape, (std::vector<int64_t>{1, 3, 224, 224}));
  EXPECT_EQ(image.dtype, "float32");
  InputSpec tokens = parseInputSpec("4x128:long");
  EXPECT_EQ(tokens.shape, (std::vector<int64_t>{4, 128}));
  EXPECT_EQ(tokens.dtype, "int64");
  EXPECT_EQ(parseInputSpec("2x8:half").dtype, "float16");
  EXPECT_EQ(describeInputSpec(tokens), "4x128:int64");
}

TEST(InputSpec, RejectsMalformedInput) {
  EXPECT_THROW(parseInputSpec("1x3x:float32"), EstimateError);
  EXPECT_THROW(parseInputSpec("axb"), EstimateError);
  EXPECT_THROW(parseInputSpec("1x-3"), EstimateError);
  EXPECT_THROW(parseInputSpec(""), EstimateError);
  try {
    parseInputSpec("1x3:float8");
    FAIL() << "an unknown dtype was accepted";
  } catch (const EstimateError& error) {
    EXPECT_NE(std::string(error.what()).find("unknown dtype 'float8'"), std::string::npos);
  }
}

TEST(AssignmentTargets, FindsTheNamesAStatementBinds) {
  using Names = std::vector<std::string>;
  EXPECT_EQ(assignmentTargets("        out = self.conv1(x)"), Names{"out"});
  EXPECT_EQ(assignmentTargets("q, k, v = self.c_attn(x).split(C, dim=2)"), (Names{"q", "k", "v"}));
  EXPECT_EQ(assignmentTargets("(a, b) = pair"), (Names{"a", "b"}));
  EXPECT_EQ(assignmentTargets("x: Tensor = f(y)"), Names{"x"});
  EXPECT_EQ(assignmentTargets("    out += identity"), Names{"out"});
  EXPECT_EQ(assignmentTargets("att = att.masked_fill(mask == 0, -1.0)"), Names{"att"});
  EXPECT_TRUE(assignmentTargets("return self.fc(x)").empty());
  EXPECT_TRUE(assignmentTargets("if x == y:").empty());
  EXPECT_TRUE(assignmentTargets("self.cache = x").empty());
  EXPECT_TRUE(assignmentTargets("d[key] = x").empty());
  EXPECT_TRUE(assignmentTargets("f(x=1)").empty());
}

TEST(StoredTarget, NamesWhatAStatementStoresIntoAnObject) {
  EXPECT_EQ(storedTarget("        self.keys = torch.cat([self.keys, key_states], dim=-2)"),
            "self.keys");
  EXPECT_EQ(storedTarget("cache[layer] = x"), "cache[layer]");
  EXPECT_EQ(storedTarget("out[..., : 2 * x.shape[2]] = y"), "out[..., : 2 * x.shape[2]]");
  EXPECT_EQ(storedTarget("out[x.shape[0]"), std::nullopt);  // not closed
  EXPECT_EQ(storedTarget("self.cache.values[i] += x"), "self.cache.values[i]");
  EXPECT_EQ(storedTarget("out = self.conv1(x)"), std::nullopt);  // a name, not an object
  EXPECT_EQ(storedTarget("self.a, self.b = pair"), std::nullopt);
  EXPECT_EQ(storedTarget("self.fc(x)"), std::nullopt);
  EXPECT_EQ(storedTarget("if self.x == y:"), std::nullopt);
  EXPECT_EQ(storedTarget("d[key == 1]"), std::nullopt);
}

TEST(ReturnedNames, NamesTheElementsThatAreBareNames) {
  using Names = std::vector<std::string>;
  EXPECT_EQ(returnedNames("        return self.proj(out), weights"), (Names{"", "weights"}));
  EXPECT_EQ(returnedNames("return x"), Names{"x"});
  // Attributes a statement stored (DynamicLayer.update's return).
  EXPECT_EQ(returnedNames("        return self.keys, self.values"),
            (Names{"self.keys", "self.values"}));
  EXPECT_EQ(returnedNames("return self.keys.float(), a..b, c."), (Names{"", "", ""}));
  EXPECT_EQ(returnedNames("return f(a, b), (c, d), e,"), (Names{"", "", "e"}));
  EXPECT_EQ(returnedNames("returned = x"), std::nullopt);
  EXPECT_EQ(returnedNames("x = y"), std::nullopt);
  EXPECT_EQ(returnedNames("return f(a,"), std::nullopt);  // goes on on the next line
  EXPECT_EQ(returnedNames("return x  # weights"), std::nullopt);
}

TEST(PythonStack, ParsesATracedNodesStackInnermostFirst) {
  std::string text =
      "/venv/lib/python3.11/site-packages/torch/nn/functional.py(2207): softmax\n"
      "/home/me/model (v2)/model.py(14): forward\n"
      "/venv/lib/python3.11/site-packages/torch/nn/modules/module.py(1768): _slow_forward\n"
      "/venv/lib/python3.11/site-packages/torch/jit/_trace.py(1216): trace_module\n"
      "/home/me/export.py(20): <module>\n";
  std::optional<std::vector<SourceFrame>> stack = parsePythonStack(text);
  ASSERT_TRUE(stack);
  ASSERT_EQ(stack->size(), 3u);  // stops at the tracing machinery
  EXPECT_EQ((*stack)[0].function, "softmax");
  EXPECT_EQ((*stack)[0].line, 2207);
  EXPECT_EQ((*stack)[1].file, "/home/me/model (v2)/model.py");
  EXPECT_EQ((*stack)[1].line, 14);
  EXPECT_FALSE(parsePythonStack("F.softmax(att, dim=-1)"));
  EXPECT_FALSE(parsePythonStack(""));
}

TEST(PythonStack, SplitsAtModuleCalls) {
  const std::string module = "/venv/site-packages/torch/nn/modules/module.py";
  std::vector<SourceFrame> stack = {
      {"/venv/site-packages/torch/nn/modules/conv.py", 560, "_conv_forward"},
      {"/venv/site-packages/torch/nn/modules/conv.py", 565, "forward"},
      {module, 1768, "_slow_forward"},
      {module, 1789, "_call_impl"},
      {"/m/model.py", 30, "helper"},
      {"/m/model.py", 40, "forward"},
      {module, 1768, "_slow_forward"},
      {module, 1789, "_call_impl"},
  };
  std::vector<std::vector<SourceFrame>> segments = splitByModuleCalls(stack);
  ASSERT_EQ(segments.size(), 3u);
  EXPECT_TRUE(segments[0].empty());
  ASSERT_EQ(segments[1].size(), 2u);
  EXPECT_EQ(segments[1][0].line, 30);  // innermost first: the helper's line
  EXPECT_EQ(segments[1][1].line, 40);
  ASSERT_EQ(segments[2].size(), 2u);
  EXPECT_EQ(segments[2][0].function, "_conv_forward");
}

TEST(SourceFileCache, FindsTheFirstLineOfAStatement) {
  std::string path = ::testing::TempDir() + "statement_start.py";
  {
    std::ofstream file(path);
    file << "def forward(self, x):\n"                                          // 1
         << "    \"\"\"Docstring with a bracket ( that never closes.\"\"\"\n"  // 2
         << "    q, k, v = self.qkv(x).reshape(\n"                             // 3
         << "        1, 2).permute(\n"                                         // 4
         << "        2, 0).unbind(0)\n"                                        // 5
         << "    y = f(q, ')')  # (\n"                                         // 6
         << "    z = y + \\\n"                                                 // 7
         << "        k\n"                                                      // 8
         << "    return z\n";                                                  // 9
  }
  SourceFileCache cache;
  EXPECT_EQ(cache.statementStart(path, 3), 3);
  EXPECT_EQ(cache.statementStart(path, 4), 3);
  EXPECT_EQ(cache.statementStart(path, 5), 3);
  EXPECT_EQ(cache.statementStart(path, 6), 6);  // the string's bracket and the comment's
  EXPECT_EQ(cache.statementStart(path, 8), 7);  // a backslash continues the line
  EXPECT_EQ(cache.statementStart(path, 9), 9);
  EXPECT_EQ(cache.statementStart(path + ".gone", 5), 5);  // unreadable: the line itself

  // A long docstring: its closing quotes must not read as opening ones.
  std::string long_path = ::testing::TempDir() + "statement_start_docstring.py";
  {
    std::ofstream file(long_path);
    file << "def forward(self, x):\n    \"\"\"\n";
    for (int line = 0; line < 60; ++line) file << "    Text (with brackets.\n";
    file << "    \"\"\"\n"
         << "    if x is None:\n"
         << "        y = self.wte(x)\n";  // line 66
  }
  EXPECT_EQ(cache.statementStart(long_path, 66), 66);
}

TEST(PythonSource, ContainerDisplays) {
  EXPECT_TRUE(bindsAContainerDisplay(
      "causal_mask_mapping = {\n    \"full\": f(x),  # (\n    \"sliding\": g(x),\n}"));
  EXPECT_TRUE(bindsAContainerDisplay("outs = [f(x), g(x)]"));
  EXPECT_TRUE(bindsAContainerDisplay("outs = [layer(x) for layer in layers]"));
  EXPECT_TRUE(bindsAContainerDisplay("pair = f(x), g(x)"));
  EXPECT_TRUE(bindsAContainerDisplay("pair = (f(x), g(x))  # a tuple"));
  EXPECT_FALSE(bindsAContainerDisplay("y = (f(x) + g(x))"));  // parentheses, no tuple
  EXPECT_FALSE(bindsAContainerDisplay("y = [f(x), g(x)][0]"));
  EXPECT_FALSE(bindsAContainerDisplay("y = f(x, g(x))"));
  EXPECT_FALSE(bindsAContainerDisplay("y = f(\"a, b\")"));
  EXPECT_FALSE(bindsAContainerDisplay("a, b = f(x), g(x)"));  // unpacked: each name its own
  EXPECT_FALSE(bindsAContainerDisplay("self.masks = [f(x), g(x)]"));
  EXPECT_FALSE(bindsAContainerDisplay("return f(x), g(x)"));
}

TEST(PythonSource, FindsThePartTakenFromACall) {
  EXPECT_EQ(partTakenFromACall("query = query.max(dim=3).values"), ".values");
  EXPECT_EQ(partTakenFromACall("h = (\n    h.view(b, 2, -1).max(dim=1).values\n)"), ".values");
  EXPECT_EQ(partTakenFromACall("ordered = torch.sort(x, dim=-1)[0]  # values"), "[0]");
  EXPECT_EQ(partTakenFromACall("y = layer(x)[0].values"), "[0]");
  EXPECT_EQ(partTakenFromACall("y = f(x)[-1]"), "[-1]");
  EXPECT_EQ(partTakenFromACall("y = f(x)"), std::nullopt);             // the whole result
  EXPECT_EQ(partTakenFromACall("y = f(x).values + 1"), std::nullopt);  // an operator after
  EXPECT_EQ(partTakenFromACall("y = x.values"), std::nullopt);         // no call
  EXPECT_EQ(partTakenFromACall("a, b = f(x)[0]"), std::nullopt);       // not one name
  EXPECT_EQ(partTakenFromACall("return f(x)[0]"), std::nullopt);
}

TEST(PythonSource, FindsTheNamesPassedWholeToACall) {
  using Names = std::vector<std::string>;
  EXPECT_EQ(bareNameArguments("hidden_state = torch.cat(output, dim=1)"), Names{"output"});
  EXPECT_EQ(bareNameArguments("y = f(a, g(b), c)"), (Names{"a", "b", "c"}));
  EXPECT_EQ(bareNameArguments("y = torch.cat([a, b], dim=w)"), Names{});  // a display, a keyword
  EXPECT_EQ(bareNameArguments("y = f(a.t(), b[0], *c, \"d\")"), Names{});
  EXPECT_EQ(bareNameArguments("y = f(not a, 1)"), Names{});
  EXPECT_EQ(bareNameArguments("y = a + b"), Names{});  // no call
}

TEST(SourceFileCache, ReadsAWholeStatement) {
  std::string path = ::testing::TempDir() + "whole_statement.py";
  {
    std::ofstream file(path);
    file << "def forward(self, x):\n"      // 1
         << "    masks = {\n"              // 2
         << "        \"a\": f(x),  # }\n"  // 3
         << "        \"b\": g(x),\n"       // 4
         << "    }\n"                      // 5
         << "    return masks\n";          // 6
  }
  SourceFileCache cache;
  EXPECT_EQ(cache.statement(path, 2),
            "    masks = {\n        \"a\": f(x),  # }\n        \"b\": g(x),\n    }");
  EXPECT_EQ(cache.statement(path, 6), "    return masks");
  EXPECT_FALSE(cache.statement(path + ".gone", 2));
}

TEST(DeviceProfile, ShippedProfilesParse) {
  for (const std::string& name : listDeviceProfiles(MEMTRACE_PROFILE_DIRECTORY)) {
    DeviceProfile profile = loadDeviceProfile(name, MEMTRACE_PROFILE_DIRECTORY);
    EXPECT_EQ(profile.name, name);
    if (name == "cpu") continue;  // no caching allocator: below
    EXPECT_EQ(profile.allocator.minimum_block_bytes, 512);
    EXPECT_EQ(profile.allocator.large_segment_bytes, 20 << 20);
    EXPECT_EQ(profile.kernels.device, "cuda");
    ASSERT_FALSE(profile.kernels.sdpa.empty());
  }
  DeviceProfile cpu = loadDeviceProfile("cpu", MEMTRACE_PROFILE_DIRECTORY);
  EXPECT_FALSE(cpu.allocator.caches_freed_blocks);
  EXPECT_EQ(cpu.allocator.minimum_block_bytes, 1);
  EXPECT_EQ(cpu.cublas_workspace_bytes, 0);
  EXPECT_EQ(cpu.kernels.device, "cpu");
  EXPECT_FALSE(cpu.kernels.count_kernel_scratch);
  ASSERT_EQ(cpu.kernels.sdpa.size(), 1u);
  EXPECT_EQ(cpu.kernels.sdpa[0].name, "flash_cpu");
  EXPECT_EQ(loadDeviceProfile("cuda-sm90", MEMTRACE_PROFILE_DIRECTORY).kernels.sdpa[0].name,
            "cudnn");
  EXPECT_EQ(loadDeviceProfile("cuda", MEMTRACE_PROFILE_DIRECTORY).cublas_workspace_bytes, 8519680);
  EXPECT_EQ(loadDeviceProfile("cuda-sm90", MEMTRACE_PROFILE_DIRECTORY).cublas_workspace_bytes,
            32 << 20);
  // Note [The cuBLASLt workspace]: 1 MiB beside cuBLAS's up to torch 2.11, none after.
  DeviceProfile hopper = loadDeviceProfile("cuda-sm90", MEMTRACE_PROFILE_DIRECTORY);
  EXPECT_EQ(hopper.cublaslt_workspace_bytes, 1 << 20);
  EXPECT_EQ(applyTorchRelease(hopper, {2, 11}).cublaslt_workspace_bytes, 1 << 20);
  EXPECT_EQ(applyTorchRelease(hopper, {2, 12}).cublaslt_workspace_bytes, 0);
  EXPECT_EQ(applyTorchRelease(hopper, {3, 0}).cublaslt_workspace_bytes, 0);
  EXPECT_EQ(cpu.cublaslt_workspace_bytes, 0);
}

TEST(DeviceProfile, ParsesTorchReleases) {
  EXPECT_EQ(parseTorchRelease("2.11"), (TorchRelease{2, 11}));
  EXPECT_EQ(parseTorchRelease("2.14.1+cu130"), (TorchRelease{2, 14}));
  EXPECT_EQ(parseTorchRelease("2.13.0"), (TorchRelease{2, 13}));
  EXPECT_EQ(torchReleaseText({2, 9}), "2.9");
  for (const char* bad : {"", "2", "2.", "two.eleven", "2.11x", ".11"}) {
    EXPECT_FALSE(parseTorchRelease(bad).has_value()) << bad;
  }
  const std::string bad_release = R"({"name": "x", "caching_allocator": {
      "minimum_block_bytes": 512, "small_request_limit_bytes": 1048576,
      "small_segment_bytes": 2097152, "large_segment_threshold_bytes": 10485760,
      "large_segment_bytes": 20971520, "large_segment_rounding_bytes": 2097152},
      "cublas_workspace": {"bytes": 0, "ops": []},
      "cublaslt_workspace": {"bytes": 1048576, "last_torch_release": "soon", "ops": []},
      "convolution_workspace": {"bound_bytes": null, "ops": []}})";
  EXPECT_THROW(parseDeviceProfile(bad_release, "bad.json"), EstimateError);
}

// The efficient kernel takes grouped heads from torch 2.14 on (the profiles' gqa_from_torch, which
// the recording reads too): the TorchScript front end follows the release --torch names.
TEST(DeviceProfile, TakesGroupedHeadsFromTheReleaseTheProfileNames) {
  DeviceProfile hopper = loadDeviceProfile("cuda-sm90", MEMTRACE_PROFILE_DIRECTORY);
  auto efficient = [](const DeviceProfile& profile) {
    for (const SdpaKernel& kernel : profile.kernels.sdpa) {
      if (kernel.name == "efficient") return kernel;
    }
    ADD_FAILURE() << "cuda-sm90 has no efficient kernel";
    return SdpaKernel{};
  };
  EXPECT_FALSE(efficient(hopper).gqa);
  ASSERT_TRUE(efficient(hopper).gqa_from_release.has_value());
  EXPECT_FALSE(efficient(applyTorchRelease(hopper, {2, 13})).gqa);
  EXPECT_TRUE(efficient(applyTorchRelease(hopper, {2, 14})).gqa);
  EXPECT_TRUE(efficient(applyTorchRelease(hopper, {3, 0})).gqa);
  // Kernels without it keep what `gqa` says, whatever the release.
  for (const SdpaKernel& kernel : applyTorchRelease(hopper, {2, 9}).kernels.sdpa) {
    if (kernel.name != "efficient") EXPECT_TRUE(kernel.gqa) << kernel.name;
  }
}

// Note [What a CUDA kernel allocates inside itself]: the CUDA profiles list the temporaries the
// recording and the TorchScript front end both read; the CPU's lists none.
TEST(DeviceProfile, ReadsTheKernelsTemporaries) {
  for (const char* name : {"cuda", "cuda-sm90", "cuda-no-cublas-workspace"}) {
    const std::vector<KernelTemporary> temporaries =
        loadDeviceProfile(name, MEMTRACE_PROFILE_DIRECTORY).kernels.temporaries;
    ASSERT_EQ(temporaries.size(), 4u) << name;
    EXPECT_EQ(temporaries[0].op, "aten::_softmax_backward_data");
    EXPECT_EQ(temporaries[0].dtype_of, (std::vector<std::string>{"grad_output", "output"}));
    EXPECT_FALSE(temporaries[0].before_outputs);
    EXPECT_FALSE(temporaries[0].only_if_not_contiguous);
    EXPECT_EQ(temporaries[1].op, "aten::native_layer_norm");
    EXPECT_EQ(temporaries[1].like, "input");
    EXPECT_TRUE(temporaries[1].before_outputs);
    EXPECT_TRUE(temporaries[1].only_if_not_contiguous);
  }
  EXPECT_TRUE(loadDeviceProfile("cpu", MEMTRACE_PROFILE_DIRECTORY).kernels.temporaries.empty());
  const std::string head = R"({"name": "x", "caching_allocator": {
      "minimum_block_bytes": 512, "small_request_limit_bytes": 1048576,
      "small_segment_bytes": 2097152, "large_segment_threshold_bytes": 10485760,
      "large_segment_bytes": 20971520, "large_segment_rounding_bytes": 2097152},
      "cublas_workspace": {"bytes": 0, "ops": []},
      "convolution_workspace": {"bound_bytes": null, "ops": []}, "kernels": )";
  for (
      const char* bad : {
          R"({"temporaries": {}})",
          R"({"temporaries": [{"op": "aten::x", "like": "input", "what": "w"}]})",
          R"({"temporaries": [{"op": "aten::x", "like": "input", "when": "soon", "what": "w"}]})",
          R"({"temporaries": [{"op": "", "like": "input", "when": "after_outputs", "what": "w"}]})",
          R"({"sdpa": {"order": ["efficient"], "efficient": {"dtypes": [], "gqa_from_torch": 2.14}}})",
      }) {
    EXPECT_THROW(parseDeviceProfile(head + bad + "}", "bad.json"), EstimateError) << bad;
  }
}

TEST(DeviceProfile, RejectsBadProfiles) {
  EXPECT_THROW(parseDeviceProfile("{", "broken.json"), EstimateError);
  EXPECT_THROW(parseDeviceProfile("{\"name\": \"x\"}", "partial.json"), EstimateError);
  EXPECT_THROW(loadDeviceProfile("no-such-device", MEMTRACE_PROFILE_DIRECTORY), EstimateError);
  try {
    loadDeviceProfile("no-such-device", MEMTRACE_PROFILE_DIRECTORY);
  } catch (const EstimateError& error) {
    EXPECT_NE(std::string(error.what()).find("known: cpu, cuda, cuda-no-cublas-workspace"),
              std::string::npos);
  }
  // A kernel rules section naming a kernel PyTorch does not have.
  const std::string bad_kernel = R"({"name": "x", "caching_allocator": {
      "minimum_block_bytes": 512, "small_request_limit_bytes": 1048576,
      "small_segment_bytes": 2097152, "large_segment_threshold_bytes": 10485760,
      "large_segment_bytes": 20971520, "large_segment_rounding_bytes": 2097152},
      "cublas_workspace": {"bytes": 0, "ops": []},
      "convolution_workspace": {"bound_bytes": null, "ops": []},
      "kernels": {"device": "cuda", "sdpa": {"order": ["turbo", "math"]}}})";
  try {
    parseDeviceProfile(bad_kernel, "bad.json");
    ADD_FAILURE() << "an unknown sdpa kernel was accepted";
  } catch (const EstimateError& error) {
    EXPECT_NE(std::string(error.what()).find("unknown sdpa kernel"), std::string::npos);
  }
}

// A need in bytes checked against a budget, as the tool does with the exact bytes.
std::function<BatchCheck(int64_t)> checkAgainst(int64_t budget,
                                                std::function<int64_t(int64_t)> need,
                                                int* evaluations = nullptr) {
  return [=](int64_t batch) {
    if (evaluations) ++*evaluations;
    int64_t bytes = need(batch);
    return BatchCheck{bytes <= budget, bytes > 2 * budget};
  };
}

TEST(BatchSearch, FindsTheLargestBatchWithinBudget) {
  int evaluations = 0;
  auto need = [](int64_t batch) { return 1000 + 300 * batch; };
  EXPECT_EQ(largestBatchWithin(checkAgainst(1000 + 300 * 37, need, &evaluations), 1 << 16), 37);
  EXPECT_LE(evaluations, 15);
  EXPECT_EQ(largestBatchWithin(checkAgainst(1000 + 300 * 37 - 1, need), 1 << 16), 36);
  EXPECT_EQ(largestBatchWithin(checkAgainst(1299, need), 1 << 16), std::nullopt);
  EXPECT_EQ(largestBatchWithin(checkAgainst(int64_t{1} << 40, need), 100), 100);  // the limit
}

TEST(BatchSearch, LooksPastADipInTheNeed) {
  // Batches 7 and 8 need an extra segment that 9 and up do not, up to 40 (the allocator's
  // pools at work); the answer is 40, not 6.
  auto need = [](int64_t batch) -> int64_t {
    if (batch == 7 || batch == 8) return 24;
    return batch <= 40 ? 22 : 42;
  };
  EXPECT_EQ(largestBatchWithin(checkAgainst(22, need), 1 << 16), 40);
}

}  // namespace
}  // namespace memtrace::estimator
