#include "estimator/torchscript/torchscript_model.h"

#include <torch/csrc/jit/serialization/import.h>
#include <torch/version.h>

#include <filesystem>
#include <fstream>

#include "estimator/errors.h"
#include "estimator/torchscript/graph_builder.h"
#include "estimator/torchscript/shape_functions.h"

namespace memtrace::estimator::torchscript {

struct TorchScriptModel::State {
  torch::jit::Module module;
  BuildCaches caches;
};

namespace {

// Turns LibTorch's load errors into what the user did wrong.
[[noreturn]] void explainLoadFailure(const std::string& path, const std::string& message) {
  const std::string unknown_op = "Unknown builtin op: ";
  size_t at = message.find(unknown_op);
  if (at != std::string::npos) {
    size_t start = at + unknown_op.size();
    std::string op = message.substr(start, message.find_first_of(" \n", start) - start);
    if (!op.empty() && op.back() == '.') op.pop_back();
    throw EstimateError(path + ": unsupported op " + op +
                        ": this LibTorch does not know it (a custom op whose library is not "
                        "loaded?)");
  }
  if (message.find("constants.pkl") != std::string::npos ||
      message.find("code/") != std::string::npos) {
    throw EstimateError(path +
                        ": a zip archive but not TorchScript (saved with torch.save rather than "
                        "torch.jit.save?)");
  }
  if (message.find("PytorchStreamReader") != std::string::npos ||
      message.find("zip archive") != std::string::npos) {
    throw EstimateError(path + ": not a TorchScript archive (torch.jit.save writes one)");
  }
  throw EstimateError(path + ": cannot load as TorchScript: " + firstLineOf(message));
}

}  // namespace

TorchScriptModel::TorchScriptModel(std::unique_ptr<State> state) : state_(std::move(state)) {}
TorchScriptModel::TorchScriptModel(TorchScriptModel&&) noexcept = default;
TorchScriptModel& TorchScriptModel::operator=(TorchScriptModel&&) noexcept = default;
TorchScriptModel::~TorchScriptModel() = default;

TorchScriptModel TorchScriptModel::load(const std::string& path) {
  std::error_code error;
  if (!std::filesystem::exists(path, error)) throw EstimateError(path + ": no such file");
  if (std::filesystem::is_directory(path, error)) {
    throw EstimateError(path + ": a directory, not a TorchScript archive");
  }
  if (!std::ifstream(path)) throw EstimateError(path + ": cannot be read");
  auto state = std::make_unique<State>();
  try {
    state->module = torch::jit::load(path, c10::Device(c10::DeviceType::CPU));
  } catch (const c10::Error& failure) {
    explainLoadFailure(path, failure.what_without_backtrace());
  } catch (const std::exception& failure) {
    explainLoadFailure(path, failure.what());
  }
  if (!state->module.find_method("forward")) {
    throw EstimateError(path + ": the TorchScript module has no forward method");
  }
  // Part of loading: compiled once per process, whatever the model (see its comment).
  ShapeFunctionSizer::prepare();
  return TorchScriptModel(std::move(state));
}

Graph TorchScriptModel::buildGraph(const std::vector<InputSpec>& inputs,
                                   const BuildOptions& options) const {
  return torchscript::buildGraph(state_->module, inputs, state_->caches, options);
}

TorchRelease linkedTorchRelease() {
  return {TORCH_VERSION_MAJOR, TORCH_VERSION_MINOR};
}

void TorchScriptModel::useDevice(const DeviceProfile& profile) {
  state_->caches.op_rules.useKernels(profile.kernels);
}

std::string TorchScriptModel::forwardSignature() const {
  const c10::FunctionSchema& schema = state_->module.get_method("forward").function().getSchema();
  std::string text = "forward(";
  for (size_t index = 1; index < schema.arguments().size(); ++index) {
    const c10::Argument& argument = schema.arguments()[index];
    text += (index > 1 ? ", " : "") + argument.name() + ": " + argument.type()->str();
  }
  return text + ")";
}

}  // namespace memtrace::estimator::torchscript
