#include <algorithm>
#include <cstdio>
#include <map>
#include <sstream>
#include <tuple>

#include "estimator/byte_size.h"
#include "estimator/render.h"

namespace memtrace::estimator {

namespace {

std::string shapeText(const std::vector<int64_t>& shape) {
  std::string text;
  for (int64_t dimension : shape) text += (text.empty() ? "" : "x") + std::to_string(dimension);
  return text.empty() ? "scalar" : text;
}

std::string frameText(const SourceFrame& frame) {
  if (!frame.known()) return "(no source location)";
  return frame.file + ":" + std::to_string(frame.line) +
         (frame.function.empty() ? "" : " (" + frame.function + ")");
}

// "4.09 GFLOP": three significant digits in the largest decimal unit that keeps it at least 1.
std::string flopsText(int64_t flops) {
  static const char* const kUnits[] = {"FLOP", "kFLOP", "MFLOP", "GFLOP", "TFLOP", "PFLOP"};
  double value = static_cast<double>(flops);
  int unit = 0;
  while (value >= 1000 && unit < 5) {
    value /= 1000;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof text, unit == 0 ? "%.0f %s" : "%.3g %s", value, kUnits[unit]);
  return text;
}

std::string moduleText(const std::string& path) {
  return path.empty() ? "(root)" : path;
}

std::string nodeText(const Graph& graph, NodeId id) {
  if (!id.valid()) return "(before the first node)";
  const Node& node = graph.node(id);
  SourceFrame user = innermostUserFrame(node.stack);
  return node.op + " at " + frameText(user.known() ? user : innermostFrame(node.stack)) +
         ", module " + moduleText(node.module_path);
}

std::string percent(int64_t part, int64_t whole) {
  char text[16];
  std::snprintf(text, sizeof text, "%5.1f%%", whole > 0 ? 100.0 * part / whole : 0.0);
  return text;
}

std::string padded(const std::string& text, size_t width) {
  return text.size() >= width ? text : std::string(width - text.size(), ' ') + text;
}

void groupTable(std::ostringstream& out, const char* title, const std::vector<LiveGroup>& groups,
                int64_t total, size_t rows, bool by_module) {
  out << title << "\n";
  for (size_t index = 0; index < groups.size() && index < rows; ++index) {
    const LiveGroup& group = groups[index];
    out << "  " << padded(formatBytes(group.bytes), 10) << " " << percent(group.bytes, total)
        << "  " << (by_module ? moduleText(group.module_path) : frameText(group.frame)) << "  ["
        << group.tensors << (group.tensors == 1 ? " tensor]" : " tensors]") << "\n";
  }
  if (groups.size() > rows) out << "  ... " << groups.size() - rows << " more\n";
}

// A training step's peak, by category (graph files of a training step).
void trainingLines(std::ostringstream& out, const Graph& graph, const Estimate& estimate,
                   const RenderOptions& options) {
  const TrainingPeak& peak = *estimate.training;
  const StepInfo& step = options.step ? *options.step : StepInfo{};
  out << "training step of " << (step.model.empty() ? "the model" : step.model);
  if (!step.optimizer.empty()) out << " with " << step.optimizer;
  if (!step.optimizer_implementation.empty()) out << " (" << step.optimizer_implementation << ")";
  if (step.accumulate > 1) out << ", " << step.accumulate << " micro-batches accumulated";
  if (!step.autocast.empty()) out << ", autocast " << step.autocast;
  out << " (recorded on fake tensors"
      << (step.device.empty() ? std::string() : ", running " + step.device + "'s kernels")
      << (step.profile.empty() ? std::string() : " as profile " + step.profile + " states them")
      << ")\n";
  if (!step.loop.empty())
    out << "loop             " << step.loop << ": " << step.loop_detail << "\n";
  std::string phase = peak.node.valid() ? format::trainingPhaseName(graph.node(peak.node).phase)
                                        : std::string("none");
  out << "step peak        " << padded(formatBytes(peak.peak_bytes), 10) << "   in the " << phase
      << " phase, during " << nodeText(graph, peak.node) << "\n";
  for (uint8_t value = 1; value < static_cast<uint8_t>(format::Category::kCount); ++value) {
    auto category = static_cast<format::Category>(value);
    std::string name = format::categoryName(category);
    out << "  " << name << std::string(name.size() < 15 ? 15 - name.size() : 1, ' ')
        << padded(formatBytes(peak.bytesOf(category)), 10) << " "
        << percent(peak.bytesOf(category), peak.peak_bytes) << "\n";
  }
  if (step.budget_bytes) {
    out << "budget " << formatBytes(*step.budget_bytes) << ": "
        << (step.fits_budget ? "fits"
                             : "does not fit (the " + step.budget_breaker + " bytes are over it)")
        << "\n";
  }
  out << "\n";
}

void summaryLines(std::ostringstream& out, const Estimate& estimate) {
  const AllocatorReplay& allocator = estimate.allocator;
  out << "predicted torch.cuda.memory_stats() after one "
      << (estimate.training ? "training step" : "forward") << " on a fresh process:\n"
      << "  peak requested   " << padded(formatBytes(allocator.peak_requested_bytes), 10)
      << "   requested_bytes.all.peak (exact sizes)\n"
      << "  peak allocated   " << padded(formatBytes(allocator.peak_allocated_bytes), 10)
      << "   max_memory_allocated() (sizes rounded by the caching allocator)\n"
      << "  peak reserved    " << padded(formatBytes(allocator.peak_reserved_bytes), 10)
      << "   max_memory_reserved() (segments)\n"
      << "  baseline         " << padded(formatBytes(allocator.baseline_allocated_bytes), 10)
      << (estimate.training
              ? "   allocated by the weights, optimizer state, inputs and workspaces before the "
                "step\n"
              : "   allocated by the weights and inputs before the forward\n")
      << "  peak - baseline  "
      << padded(formatBytes(allocator.peak_allocated_bytes - allocator.baseline_allocated_bytes),
                10)
      << (estimate.training ? "   what the step adds\n" : "   what the forward adds\n");
}

// Why the profile keeps a cuBLASLt workspace: Note [The cuBLASLt workspace].
std::string cublasLtReleaseText(const DeviceProfile& profile) {
  if (!profile.cublaslt_last_release) return "";
  return " (torch " + torchReleaseText(*profile.cublaslt_last_release) +
         " and earlier keep it beside cuBLAS's)";
}

std::string deviceText(const DeviceProfile& profile) {
  if (!profile.torch_release) return profile.name;
  return profile.name + " (torch " + torchReleaseText(*profile.torch_release) + ")";
}

}  // namespace

std::string renderText(const Graph& graph, const Estimate& estimate, const RenderOptions& options) {
  std::ostringstream out;
  out << "memtrace-estimate: " << options.model_path << ", " << semanticsName(estimate.semantics)
      << " semantics, device profile " << deviceText(options.profile) << "\n";
  out << "inputs:";
  for (ValueId id : graph.inputs) {
    const Value& value = graph.value(id);
    out << " " << shapeText(value.shape) << ":" << value.dtype;
  }
  out << "\n";
  if (estimate.lower_bound) {
    out << "LOWER BOUND: some sizes are unknown (see below); the true peak may be higher\n";
  }
  if (estimate.eager_bracket) {
    const EagerBracket& bracket = *estimate.eager_bracket;
    int64_t figure = estimate.activations.peak_bytes;
    out << "APPROXIMATE: how long Python holds " << bracket.unnamed_values
        << " value(s) is unknown (no name recovered, or stored into an object: see below); the "
           "eager activation peak is between "
        << formatBytes(bracket.low) << " and " << formatBytes(bracket.high) << " (off by at most "
        << formatBytes(std::max(figure - bracket.low, bracket.high - figure))
        << "; every value freed at its last use: " << formatBytes(bracket.at_last_use) << ")\n";
  }
  if (estimate.approximate) {
    const ApproximateBracket& bracket = *estimate.approximate;
    int64_t figure = estimate.allocator.peak_allocated_bytes;
    out << "APPROXIMATE: " << bracket.calls
        << " call(s) not recorded as the device runs them (see assumptions below); the "
           "allocated peak is between "
        << formatBytes(std::max<int64_t>(0, figure - bracket.over_by)) << " and "
        << formatBytes(figure + bracket.under_by) << "\n";
  }
  out << "\n";

  const AllocatorReplay& allocator = estimate.allocator;
  out << "weights          " << padded(formatBytes(estimate.weightBytes()), 10) << "   parameters "
      << formatBytes(estimate.parameter_bytes) << ", buffers " << formatBytes(estimate.buffer_bytes)
      << ", constants " << formatBytes(estimate.constant_bytes) << "\n";
  out << "inputs           " << padded(formatBytes(estimate.input_bytes), 10) << "\n";
  if (estimate.optimizer_state_bytes > 0) {
    out << "optimizer state  " << padded(formatBytes(estimate.optimizer_state_bytes), 10) << "\n";
  }
  out << "activations      " << padded(formatBytes(estimate.activations.peak_bytes), 10)
      << "   live at the peak, during " << nodeText(graph, estimate.activations.peak_node) << "\n";
  if (allocator.cublas_workspace_bytes > 0) {
    out << "cuBLAS workspace " << padded(formatBytes(allocator.cublas_workspace_bytes), 10)
        << (graph.training_step
                ? "   one per thread that calls cuBLAS (the caller's, autograd's), from step 1 on\n"
                : "   from " + nodeText(graph, allocator.cublas_workspace_node) +
                      " on, never freed\n");
  }
  if (allocator.cublaslt_workspace_bytes > 0) {
    out << "cuBLASLt workspace " << padded(formatBytes(allocator.cublaslt_workspace_bytes), 8)
        << "   from " << nodeText(graph, allocator.cublaslt_workspace_node) << " on, never freed"
        << cublasLtReleaseText(options.profile) << "\n";
  }
  if (allocator.convolution_workspace_bound_bytes > 0) {
    out << "cuDNN workspace  "
        << padded(formatBytes(allocator.convolution_workspace_bound_bytes), 10)
        << "   per convolution: the profile's stated bound, included\n";
  } else {
    // Elastic: PyTorch retries a convolution with a plan of smaller workspace when the
    // workspace's allocation fails (Conv_v7.cpp's try_all, Conv_v8.cpp's plan filtering), so
    // the figure without it is what must fit; a run with memory to spare peaks higher.
    out << "cuDNN workspace      not included: cuDNN picks it at run time and takes a smaller one "
           "when memory is short, so a run with memory to spare may peak higher (ResNet-50 "
           "batch 8 on an H200: +3.3 %; state a bound in the device profile)\n";
  }
  out << "FLOPs            " << padded(flopsText(estimate.total_flops), 10)
      << "   convolutions, linear layers and matrix products (" << estimate.total_flops << ")\n\n";
  if (estimate.training) trainingLines(out, graph, estimate, options);
  summaryLines(out, estimate);
  out << "  the allocated peak is reached during " << nodeText(graph, allocator.peak_allocated_node)
      << "\n\n";

  int64_t total = estimate.activations.peak_bytes;
  groupTable(out, "live at the peak, by line (innermost frame):", estimate.attribution.by_frame,
             total, options.rows, false);
  groupTable(out, "live at the peak, by line in your code:", estimate.attribution.by_user_frame,
             total, options.rows, false);
  groupTable(out, "live at the peak, by module:", estimate.attribution.by_module, total,
             options.rows, true);

  if (!estimate.unknown_ops.empty()) {
    out << "\nops whose outputs could not be sized (counted as 0 bytes):\n";
    for (const UnknownOp& op : estimate.unknown_ops) {
      out << "  " << op.op << " x" << op.count << " first at "
          << frameText(innermostFrame(op.first_stack)) << ": " << op.detail << "\n";
    }
  }
  bool header = false;
  for (const Assumption& assumption : graph.assumptions) {
    if (assumption.kind == AssumptionKind::kUnknownOp ||
        assumption.kind == AssumptionKind::kUnsizedDependency) {
      continue;
    }
    if (!header) out << "\nassumptions:\n";
    header = true;
    SourceFrame user = innermostUserFrame(assumption.stack);
    SourceFrame where = user.known() ? user : innermostFrame(assumption.stack);
    out << "  " << (where.known() ? frameText(where) + ": " : std::string()) << assumption.detail
        << "\n";
  }
  std::map<std::tuple<std::string, std::string, std::string>, std::pair<int64_t, SourceFrame>>
      kernels;
  for (const KernelChoice& choice : graph.kernel_choices) {
    auto& [count, first] = kernels[{choice.op, choice.kernel, choice.why}];
    if (count++ == 0) first = innermostUserFrame(choice.stack);
  }
  if (!kernels.empty())
    out << "\nkernels assumed (device profile " << options.profile.name << "):\n";
  for (const auto& [key, seen] : kernels) {
    const auto& [op, kernel, why] = key;
    out << "  " << op << " x" << seen.first << " -> " << kernel
        << (seen.second.known() ? " (first at " + frameText(seen.second) + ")" : std::string())
        << ": " << why << "\n";
  }
  return out.str();
}

std::string renderGraphText(const Graph& graph) {
  std::ostringstream out;
  auto value_text = [&](ValueId id) {
    const Value& value = graph.value(id);
    std::string text = "%" + std::to_string(id.value);
    if (value.kind == ValueKind::kContainer) {
      text += "[";
      for (size_t index = 0; index < value.elements.size(); ++index) {
        text += (index ? "," : "") + std::string("%") + std::to_string(value.elements[index].value);
      }
      return text + "]";
    }
    if (!value.size_known) return text + ":?";
    text += ":" + shapeText(value.shape);
    if (value.storage.valid()) text += "@s" + std::to_string(value.storage.value);
    for (const Binding& binding : value.bindings) {
      text += " " + binding.variable + "/" + std::to_string(binding.scope.value);
    }
    return text;
  };
  for (size_t index = 0; index < graph.storages.size(); ++index) {
    const Storage& storage = graph.storages[index];
    if (storage.origin == StorageOrigin::kActivation) continue;
    out << "s" << index << " " << originName(storage.origin) << " " << storage.name << " "
        << storage.bytes << " bytes\n";
  }
  for (ValueId input : graph.inputs) out << "input " << value_text(input) << "\n";
  for (size_t index = 0; index < graph.nodes.size(); ++index) {
    const Node& node = graph.nodes[index];
    out << index << " " << node.op << (node.torch_script_only ? " (drop point)" : "")
        << (node.size_unknown ? " (unsized)" : "") << " scope " << node.scope.value << " (";
    for (size_t at = 0; at < node.inputs.size(); ++at) {
      out << (at ? ", " : "") << value_text(node.inputs[at]);
    }
    out << ") -> (";
    for (size_t at = 0; at < node.outputs.size(); ++at) {
      out << (at ? ", " : "") << value_text(node.outputs[at]);
    }
    out << ")";
    for (const MemoryEvent& event : node.events) {
      out << (event.kind == MemoryEventKind::kAllocate ? " +s" : " -s") << event.storage.value
          << ":" << graph.storage(event.storage).bytes;
    }
    out << "  " << frameText(innermostFrame(node.stack)) << " [" << moduleText(node.module_path)
        << "]\n";
  }
  out << "outputs:";
  for (ValueId output : graph.outputs) out << " %" << output.value;
  out << "\n";
  return out.str();
}

std::string renderSweepText(const std::vector<SweepPoint>& points,
                            const std::optional<BudgetAnswer>& budget,
                            const RenderOptions& options) {
  std::ostringstream out;
  out << "memtrace-estimate: " << options.model_path << ", device profile "
      << deviceText(options.profile);
  if (!points.empty())
    out << ", " << semanticsName(points.front().estimate.semantics) << " semantics";
  out << "\n\n";
  if (!points.empty()) {
    out << "   batch  activations  peak allocated  peak reserved\n";
    for (const SweepPoint& point : points) {
      const Estimate& estimate = point.estimate;
      out << padded(std::to_string(point.batch), 8) << " "
          << padded(formatBytes(estimate.activations.peak_bytes), 12) << " "
          << padded(formatBytes(estimate.allocator.peak_allocated_bytes), 15) << " "
          << padded(formatBytes(estimate.allocator.peak_reserved_bytes), 14)
          << (estimate.lower_bound ? "  (lower bound)" : "") << "\n";
    }
  }
  if (budget) {
    out << (points.empty() ? "" : "\n") << "budget " << formatBytes(budget->budget_bytes)
        << " (device memory for the caching allocator): ";
    if (!budget->largest_batch) {
      out << "even batch 1 does not fit\n";
    } else {
      out << "largest batch that fits: " << *budget->largest_batch;
      if (*budget->largest_batch == budget->search_limit) out << " (the search limit)";
      if (budget->at_largest) {
        const Estimate& estimate = budget->at_largest->estimate;
        out << " (peak reserved " << formatBytes(estimate.allocator.peak_reserved_bytes)
            << ", allocated " << formatBytes(estimate.allocator.peak_allocated_bytes) << ")";
      }
      out << "\n";
    }
    // The verdict explained: the bytes asked for and the segments reserved for them, at the
    // answer and at the batch after it.
    auto explain = [&](const SweepPoint& point, bool fits) {
      const AllocatorReplay& replay = point.estimate.allocator;
      std::string breaker = budgetBreaker(point.estimate, budget->budget_bytes);
      out << "  batch " << point.batch << ": requested " << formatBytes(replay.peak_requested_bytes)
          << ", reserved " << formatBytes(replay.peak_reserved_bytes) << ": ";
      if (fits) {
        out << "fits\n";
      } else if (breaker == "requested") {
        out << "does not fit: the bytes requested alone are over the budget\n";
      } else {
        out << "does not fit: the bytes requested fit, the segments the caching allocator "
               "reserves for them (rounding, fragmentation) do not\n";
      }
    };
    if (budget->at_largest) explain(*budget->at_largest, true);
    if (budget->at_next) explain(*budget->at_next, false);
  }
  return out.str();
}

std::string budgetBreaker(const Estimate& estimate, int64_t budget_bytes) {
  if (estimate.allocator.peak_requested_bytes > budget_bytes) return "requested";
  if (estimate.allocator.peak_reserved_bytes > budget_bytes || estimate.allocator.out_of_memory) {
    return "reserved";
  }
  return "";
}

}  // namespace memtrace::estimator
