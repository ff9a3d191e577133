// Benchmarks memtrace-estimate's work after the model is loaded, on the models that
// export_models.py writes: building the neutral graph (abstract execution of forward), the
// analyses on it, and both together (what one --input or one --batch point costs).
//
//   memtrace-estimate-bench --models DIR [google benchmark flags]
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "estimator/device_profile.h"
#include "estimator/estimate.h"
#include "estimator/input_spec.h"
#include "estimator/torchscript/torchscript_model.h"

namespace {

using namespace memtrace::estimator;

struct BenchModel {
  std::string file;
  std::vector<InputSpec> inputs;
};

// The models export_models.py writes, with the inputs the budget is stated for.
const std::map<std::string, BenchModel> kModels = {
    {"resnet50_scripted", {"resnet50_scripted.pt", {parseInputSpec("1x3x224x224")}}},
    {"resnet50_traced", {"resnet50_traced.pt", {parseInputSpec("1x3x224x224")}}},
    {"gpt2_scripted", {"gpt2_scripted.pt", {parseInputSpec("1x1024:int64")}}},
    {"gpt2_traced", {"gpt2_traced.pt", {parseInputSpec("1x1024:int64")}}},
    {"gpt2_medium_traced", {"gpt2_medium_traced.pt", {parseInputSpec("1x1024:int64")}}},
    {"llama_1b_traced", {"llama_1b_traced.pt", {parseInputSpec("1x1024:int64")}}},
};

// The profile memtrace-estimate uses by default: PyTorch's caching allocator, cuBLAS
// workspace and kernel choice on a GPU (estimator/profiles/cuda.json).
const DeviceProfile& defaultProfile() {
  static const DeviceProfile profile = loadDeviceProfile("cuda", MEMTRACE_PROFILE_DIRECTORY);
  return profile;
}

void benchmarkBuildGraph(benchmark::State& state, const torchscript::TorchScriptModel* model,
                         const BenchModel* spec) {
  for (auto _ : state) {
    Graph graph = model->buildGraph(spec->inputs);
    benchmark::DoNotOptimize(graph.nodes.data());
  }
}

void benchmarkAnalyses(benchmark::State& state, const torchscript::TorchScriptModel* model,
                       const BenchModel* spec) {
  Graph graph = model->buildGraph(spec->inputs);
  EstimateOptions options{Semantics::kEager, defaultProfile(), std::nullopt};
  for (auto _ : state) {
    Estimate estimate = estimateMemory(graph, options);
    benchmark::DoNotOptimize(estimate.activations.peak_bytes);
  }
  state.counters["nodes"] = static_cast<double>(graph.nodes.size());
}

void benchmarkEstimate(benchmark::State& state, const torchscript::TorchScriptModel* model,
                       const BenchModel* spec) {
  EstimateOptions options{Semantics::kEager, defaultProfile(), std::nullopt};
  for (auto _ : state) {
    Graph graph = model->buildGraph(spec->inputs);
    Estimate estimate = estimateMemory(graph, options);
    benchmark::DoNotOptimize(estimate.activations.peak_bytes);
  }
}

// The TorchScript semantics walks the interpreter's graph: inlined, the executor's passes run
// on it first (Note [The interpreter's graph]), once per estimate.
void benchmarkEstimateTorchScript(benchmark::State& state,
                                  const torchscript::TorchScriptModel* model,
                                  const BenchModel* spec) {
  EstimateOptions options{Semantics::kTorchScript, defaultProfile(), std::nullopt};
  torchscript::BuildOptions build;
  build.interpreter_graph = true;
  for (auto _ : state) {
    Graph graph = model->buildGraph(spec->inputs, build);
    Estimate estimate = estimateMemory(graph, options);
    benchmark::DoNotOptimize(estimate.activations.peak_bytes);
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string directory;
  std::vector<char*> rest = {argv[0]};
  for (int index = 1; index < argc; ++index) {
    if (std::strcmp(argv[index], "--models") == 0 && index + 1 < argc) {
      directory = argv[++index];
    } else {
      rest.push_back(argv[index]);
    }
  }
  if (directory.empty()) {
    std::cerr << "usage: memtrace-estimate-bench --models DIR (written by export_models.py)\n";
    return 2;
  }
  // Loading is not what the budget is about, but it is worth knowing: timed once each.
  std::vector<std::unique_ptr<torchscript::TorchScriptModel>> loaded;
  for (const auto& [name, spec] : kModels) {
    std::string path = directory + "/" + spec.file;
    if (!std::filesystem::exists(path)) {
      std::cerr << "skipping " << name << ": " << path << " is missing\n";
      continue;
    }
    auto start = std::chrono::steady_clock::now();
    loaded.push_back(
        std::make_unique<torchscript::TorchScriptModel>(torchscript::TorchScriptModel::load(path)));
    double milliseconds =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    std::cerr << "loaded " << name << " in " << milliseconds << " ms\n";
    loaded.back()->useDevice(defaultProfile());
    const torchscript::TorchScriptModel* model = loaded.back().get();
    benchmark::RegisterBenchmark(("estimate/" + name).c_str(), benchmarkEstimate, model, &spec)
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(("build_graph/" + name).c_str(), benchmarkBuildGraph, model, &spec)
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(("analyses/" + name).c_str(), benchmarkAnalyses, model, &spec)
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(("estimate_torchscript/" + name).c_str(),
                                 benchmarkEstimateTorchScript, model, &spec)
        ->Unit(benchmark::kMillisecond);
  }
  int count = static_cast<int>(rest.size());
  benchmark::Initialize(&count, rest.data());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
