// memtrace-estimate: predicts the GPU memory a TorchScript model needs for one forward pass,
// from its IR alone, on a CPU. `memtrace-estimate --help` lists the options; the JSON it writes
// is described in docs/estimate-format.md.
#include <spdlog/spdlog.h>

#include <charconv>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <variant>
#include <vector>

#include "estimator/batch_search.h"
#include "estimator/byte_size.h"
#include "estimator/device_profile.h"
#include "estimator/errors.h"
#include "estimator/estimate.h"
#include "estimator/graph_file.h"
#include "estimator/input_spec.h"
#include "estimator/render.h"
#include "estimator/torchscript/torchscript_model.h"
#include "tools/common/cli.h"
#include "tools/common/output.h"
#include "tools/common/progress.h"
#include "tools/common/tool_main.h"

namespace {

using namespace memtrace::estimator;

// Exit statuses: 2 is what the issue asks for bad input; 1 is left for the estimator's bugs.
constexpr int kExitBadInput = 2;
constexpr int kExitInternalError = 1;
// --budget searches batches up to this; past it the answer says it hit the limit.
constexpr int64_t kBudgetSearchLimit = 1 << 16;

constexpr const char* kUsage =
    "usage: memtrace-estimate MODEL.pt --input SHAPE[:DTYPE] [--input ...] [options]\n"
    "       memtrace-estimate STEP.json [options]      (a graph file mem_tracer recorded)\n"
    "       memtrace-estimate --list-devices";

constexpr const char* kDescription =
    R"(Predicts the GPU memory one forward pass of a TorchScript model takes, from its IR alone.
Exit status: 0 on success, 2 on bad input (with one line saying what), 1 on an internal error.
)";

constexpr const char* kExamples = R"(
examples:
  memtrace-estimate model.pt --input 8x3x224x224              one forward pass, as text
  memtrace-estimate model.pt --input 4x128:int64 --format json -o est.json
  memtrace-estimate model.pt --input 1x3x224x224 --batch 1,8,32    a sweep of the batch
  memtrace-estimate model.pt --input 1x3x224x224 --budget 24GiB    the largest batch that fits
  memtrace-estimate model.pt --input 2x16 --semantics torchscript --device cuda-sm90

The JSON is described in docs/estimate-format.md; memtrace-report --estimate reads it. An
output file is never overwritten without -f/--force.)";

struct Options {
  std::string model;
  std::vector<InputSpec> inputs;
  std::string format = "text";
  Semantics semantics = Semantics::kEager;
  std::string device = "cuda";
  std::string torch_release;  // empty: the linked LibTorch's
  std::vector<int64_t> batches;
  std::optional<int64_t> budget_bytes;
  std::string output;  // empty: standard output
  bool force = false;
  torchscript::BuildOptions build;
  size_t rows = 10;
  bool list_devices = false;
  bool verbose = false;
};

int64_t parsePositive(const std::string& text, const std::string& option) {
  int64_t value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || value < 1) {
    throw EstimateError(option + " " + text + ": expected a positive integer");
  }
  return value;
}

// --example-counts: "OP ELEMENTS COUNT" a line, in the order the selections ran.
std::vector<torchscript::ExampleCount> readExampleCounts(const std::string& path) {
  std::ifstream file(path);
  if (!file) throw EstimateError("--example-counts " + path + ": cannot be read");
  std::vector<torchscript::ExampleCount> counts;
  std::string line;
  for (int number = 1; std::getline(file, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    std::istringstream fields(line);
    torchscript::ExampleCount count;
    std::string rest;
    if (!(fields >> count.op >> count.elements >> count.count) || (fields >> rest) ||
        count.elements < 0 || count.count < 0 || count.count > count.elements) {
      throw EstimateError("--example-counts " + path + ":" + std::to_string(number) +
                          ": expected OP ELEMENTS COUNT with 0 <= COUNT <= ELEMENTS");
    }
    counts.push_back(std::move(count));
  }
  return counts;
}

// The command line, parsed by CLI11 into text, then checked here (with the messages the
// tool has always given). Returns the exit status of --help or --version instead, if asked.
std::variant<Options, int> parseArguments(int argc, char** argv) {
  CLI::App app("", "memtrace-estimate");
  memtrace::tools::setUpApp(app, "memtrace-estimate", kUsage);
  app.description(kDescription);
  app.footer(kExamples);
  app.allow_extras();  // an unknown option is named below, in the tool's words
  Options options;
  std::vector<std::string> inputs;
  std::string semantics, batches, budget, example_counts, rows;
  app.add_option("MODEL", options.model, "the TorchScript model (torch.jit.save)")->type_name("");
  app.add_option("--input", inputs,
                 "one per forward argument, in order: 1x3x224x224, 4x128:int64 (dtypes: "
                 "float32 float16 bfloat16 float64 int64 int32 int16 int8 uint8 bool, with "
                 "PyTorch's aliases float half double long int)")
      ->type_name("SHAPE[:DTYPE]")
      ->allow_extra_args(false)
      ->take_all();
  app.add_option("--format", options.format,
                 "text for people (default), JSON for tools (docs/estimate-format.md), or the "
                 "neutral graph the estimate ran on, a node a line")
      ->type_name("text|json|graph");
  app.add_option("--semantics", semantics,
                 "who frees tensors: Python (eager, default) or the TorchScript interpreter (at "
                 "last use)")
      ->type_name("eager|torchscript");
  app.add_option("--device", options.device,
                 "a device profile name or a .json path (default: cuda)")
      ->type_name("PROFILE");
  app.add_option("--torch", options.torch_release,
                 "the PyTorch release the GPU runs, where the profile's rules depend on it "
                 "(default: the one memtrace-estimate is linked with)")
      ->type_name("RELEASE");
  app.add_flag("--list-devices", options.list_devices, "list the known device profiles and exit");
  app.add_option("--batch", batches, "sweep the batch dimension (dimension 0 of every input)")
      ->type_name("N,N,...");
  app.add_option("--budget", budget,
                 "the largest batch that runs on a device with SIZE for PyTorch's caching "
                 "allocator (24GiB)")
      ->type_name("SIZE");
  app.add_flag("--assume-worst-case", options.build.assume_worst_case,
               "size data-dependent selections (nonzero, boolean masks, where) as if every "
               "element were selected: an upper bound");
  app.add_option("--example-counts", example_counts,
                 "how many elements each data-dependent selection picked on the example input, "
                 "a line each in the order they ran: OP ELEMENTS COUNT (mem_tracer.estimate "
                 "records and passes them)")
      ->type_name("FILE");
  app.add_option("-o,--output", options.output,
                 "write the result to FILE (written whole, or not at all)")
      ->type_name("FILE");
  app.add_flag("-f,--force", options.force, "overwrite the output file if it exists");
  app.add_option("--rows", rows, "rows per table in the text output (default 10)")->type_name("N");
  app.add_flag("-v,--verbose", options.verbose, "log what it does, with timings, on stderr");

  std::vector<std::string> arguments(argv + 1, argv + argc);
  if (std::optional<int> status = memtrace::tools::parseCommandLine(app, arguments)) return *status;
  if (std::string unknown = memtrace::tools::firstUnknownOption(app); !unknown.empty())
    throw EstimateError("unknown option " + unknown + " (see --help)");
  if (std::string extra = memtrace::tools::firstExtraArgument(app); !extra.empty())
    throw EstimateError("more than one model given: " + options.model + " and " + extra);
  for (const std::string& input : inputs) options.inputs.push_back(parseInputSpec(input));
  if (options.format != "text" && options.format != "json" && options.format != "graph")
    throw EstimateError("--format " + options.format + ": expected text, json or graph");
  if (app.count("--semantics")) {
    std::optional<Semantics> parsed = parseSemantics(semantics);
    if (!parsed)
      throw EstimateError("--semantics " + semantics + ": expected eager or torchscript");
    options.semantics = *parsed;
    options.build.interpreter_graph = options.semantics == Semantics::kTorchScript;
  }
  if (app.count("--batch")) {
    size_t start = 0;
    while (start <= batches.size()) {
      size_t end = batches.find(',', start);
      if (end == std::string::npos) end = batches.size();
      options.batches.push_back(parsePositive(batches.substr(start, end - start), "--batch"));
      start = end + 1;
    }
  }
  if (app.count("--budget")) {
    options.budget_bytes = parseByteSize(budget);
    if (!options.budget_bytes || *options.budget_bytes == 0)
      throw EstimateError("--budget " + budget + ": expected a size such as 24GiB or 8000MB");
  }
  if (app.count("--example-counts"))
    options.build.example_counts = readExampleCounts(example_counts);
  if (app.count("--torch") && !parseTorchRelease(options.torch_release))
    throw EstimateError("--torch " + options.torch_release + ": expected a release such as 2.11");
  if (app.count("--rows")) options.rows = static_cast<size_t>(parsePositive(rows, "--rows"));
  return options;
}

// Profiles ship next to the binary (build/bin/profiles, or mem_tracer/bin/profiles in the
// Python package), or under share/memtrace/profiles when installed with CMake;
// MEMTRACE_ESTIMATOR_PROFILES overrides both.
std::string profileDirectory() {
  if (const char* override = std::getenv("MEMTRACE_ESTIMATOR_PROFILES")) return override;
  std::error_code error;
  std::filesystem::path executable = std::filesystem::read_symlink("/proc/self/exe", error);
  std::filesystem::path directory = executable.parent_path();
  for (const std::filesystem::path& candidate :
       {directory / "profiles", directory / ".." / "share" / "memtrace" / "profiles"}) {
    if (std::filesystem::is_directory(candidate, error)) return candidate.string();
  }
  return (directory / "profiles").string();
}

std::vector<InputSpec> withBatch(std::vector<InputSpec> inputs, int64_t batch) {
  for (InputSpec& input : inputs) {
    if (input.shape.empty()) continue;
    input.shape.front() = batch;
    checkInputFits(input, "batch " + std::to_string(batch));
  }
  return inputs;
}

double millisecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

// A graph file (graph_file.h): its shapes and lifetimes are recorded, so the inputs, the
// semantics and batch sweeps are the recording's (mem_tracer.plan records again per batch).
int estimateGraphFile(const Options& options, RenderOptions& render) {
  if (!options.inputs.empty() || !options.batches.empty()) {
    throw EstimateError(options.model +
                        ": a graph file has the shapes it was recorded with: --input and --batch "
                        "do not apply (mem_tracer.estimate and mem_tracer.plan record it again "
                        "per batch)");
  }
  GraphFile file = readGraphFile(options.model);
  StepInfo& step = render.step.emplace();
  step.training = file.training;
  step.model = file.model;
  step.device = file.device;
  step.optimizer = file.optimizer;
  step.profile = file.profile;
  step.optimizer_implementation = file.optimizer_implementation;
  step.loop = file.loop;
  step.loop_detail = file.loop_detail;
  step.accumulate = file.accumulate;
  step.autocast = file.autocast;
  // Recorded from Python's own execution: eager lifetimes, all explicit (Note [Graph files]).
  EstimateOptions estimate_options{Semantics::kEager, render.profile, std::nullopt};
  Estimate estimate = estimateMemory(file.graph, estimate_options);
  if (options.budget_bytes) {
    // The verdict for the recorded batch; mem_tracer.plan searches the batch.
    EstimateOptions limited = estimate_options;
    limited.memory_limit_bytes = *options.budget_bytes;
    Estimate replayed = estimateMemory(file.graph, limited);
    step.budget_bytes = *options.budget_bytes;
    step.fits_budget = !replayed.allocator.out_of_memory;
    step.budget_breaker = budgetBreaker(estimate, *options.budget_bytes);
  }
  std::string text = options.format == "json"    ? renderJson(file.graph, estimate, render)
                     : options.format == "graph" ? renderGraphText(file.graph)
                                                 : renderText(file.graph, estimate, render);
  memtrace::tools::writeOutput(options.output, text);
  return 0;
}

int run(int argc, char** argv) {
  std::variant<Options, int> parsed = parseArguments(argc, argv);
  if (const int* status = std::get_if<int>(&parsed)) return *status;
  Options& options = std::get<Options>(parsed);
  // Before anything is loaded: a refused command writes nothing and costs nothing.
  memtrace::tools::refuseToOverwrite(options.output, options.force);
  spdlog::set_level(options.verbose ? spdlog::level::debug : spdlog::level::warn);
  std::string profiles = profileDirectory();
  if (options.list_devices) {
    std::string text;
    for (const std::string& name : listDeviceProfiles(profiles)) {
      DeviceProfile profile = loadDeviceProfile(name, profiles);
      text += name + ": " + profile.description + "\n";
    }
    memtrace::tools::writeOutput(options.output, text);
    return 0;
  }
  if (options.model.empty()) throw EstimateError("no model given (see --help)");
  RenderOptions render;
  render.model_path = std::filesystem::absolute(options.model).string();
  render.rows = options.rows;
  render.profile =
      applyTorchRelease(loadDeviceProfile(options.device, profiles),
                        options.torch_release.empty() ? torchscript::linkedTorchRelease()
                                                      : *parseTorchRelease(options.torch_release));
  if (options.model.ends_with(".pt2")) {
    throw EstimateError(options.model +
                        ": a torch.export archive is recorded through Python: run `memtrace "
                        "estimate " +
                        options.model + " --input ...` (the mem_tracer package)");
  }
  if (isGraphFile(options.model)) return estimateGraphFile(options, render);
  if (options.inputs.empty()) {
    throw EstimateError("no --input given: one is needed per forward argument");
  }
  // The device type the model is estimated for (Note [Traces from any device]).
  spdlog::debug("device profile {} from {}", render.profile.name, profiles);

  auto start = std::chrono::steady_clock::now();
  std::error_code size_error;
  uint64_t model_bytes = std::filesystem::file_size(options.model, size_error);
  // A model of a GB takes seconds to load (1.2 s warm, 5 s from disk for 1 GiB of weights).
  memtrace::tools::Progress progress("memtrace-estimate", options.model,
                                     size_error ? 0 : model_bytes);
  progress.pass("loading the model");
  torchscript::TorchScriptModel model = torchscript::TorchScriptModel::load(options.model);
  progress.done();
  model.useDevice(render.profile);
  spdlog::debug("loaded {} in {:.1f} ms: {}", options.model, millisecondsSince(start),
                model.forwardSignature());

  EstimateOptions estimate_options{options.semantics, render.profile, std::nullopt};
  auto estimate_for = [&](const std::vector<InputSpec>& inputs, Graph& graph) {
    auto begin = std::chrono::steady_clock::now();
    graph = model.buildGraph(inputs, options.build);
    double built = millisecondsSince(begin);
    Estimate estimate = estimateMemory(graph, estimate_options);
    spdlog::debug("{} nodes, {} values, {} storages: graph {:.1f} ms, analyses {:.1f} ms",
                  graph.nodes.size(), graph.values.size(), graph.storages.size(), built,
                  millisecondsSince(begin) - built);
    return estimate;
  };

  if (options.batches.empty() && !options.budget_bytes) {
    Graph graph;
    Estimate estimate = estimate_for(options.inputs, graph);
    std::string text = options.format == "json"    ? renderJson(graph, estimate, render)
                       : options.format == "graph" ? renderGraphText(graph)
                                                   : renderText(graph, estimate, render);
    memtrace::tools::writeOutput(options.output, text);
    return 0;
  }

  auto point = [&](int64_t batch) {
    SweepPoint result;
    result.batch = batch;
    std::vector<InputSpec> inputs = withBatch(options.inputs, batch);
    for (const InputSpec& input : inputs) result.input_shapes.push_back(input.shape);
    Graph graph;
    result.estimate = estimate_for(inputs, graph);
    return result;
  };
  std::vector<SweepPoint> points;
  for (int64_t batch : options.batches) points.push_back(point(batch));
  std::optional<BudgetAnswer> budget;
  if (options.budget_bytes) {
    // Each batch is replayed on a device of the budget's size: it fits if the allocator never
    // runs out, releasing its cached segments and retrying as PyTorch does.
    int64_t budget_bytes = *options.budget_bytes;
    EstimateOptions limited = estimate_options;
    limited.memory_limit_bytes = budget_bytes;
    auto limited_point = [&](int64_t batch) {
      SweepPoint result;
      result.batch = batch;
      std::vector<InputSpec> inputs = withBatch(options.inputs, batch);
      for (const InputSpec& input : inputs) result.input_shapes.push_back(input.shape);
      Graph graph = model.buildGraph(inputs, options.build);
      result.estimate = estimateMemory(graph, limited);
      return result;
    };
    budget.emplace();
    budget->budget_bytes = budget_bytes;
    budget->search_limit = kBudgetSearchLimit;
    budget->largest_batch = largestBatchWithin(
        [&](int64_t batch) {
          Estimate estimate = limited_point(batch).estimate;
          // The exact bytes live at once do not depend on the allocator: past twice the
          // budget, no rounding or caching brings a batch back under it.
          int64_t exact =
              estimate.weightBytes() + estimate.input_bytes + estimate.activations.peak_bytes;
          return BatchCheck{!estimate.allocator.out_of_memory, exact > 2 * budget_bytes};
        },
        kBudgetSearchLimit);
    if (budget->largest_batch) budget->at_largest = limited_point(*budget->largest_batch);
    int64_t next = budget->largest_batch ? *budget->largest_batch + 1 : 1;
    if (next <= kBudgetSearchLimit) budget->at_next = point(next);  // without the limit
  }
  memtrace::tools::writeOutput(options.output, options.format == "json"
                                                   ? renderSweepJson(points, budget, render)
                                                   : renderSweepText(points, budget, render));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  memtrace::tools::ErrorPolicy policy;
  policy.user_error_status = kExitBadInput;
  policy.other_status = kExitInternalError;
  policy.other_prefix = "internal error: ";
  policy.other_first_line_only = true;
  return memtrace::tools::toolMain<EstimateError>("memtrace-estimate", policy,
                                                  [&] { return run(argc, argv); });
}
