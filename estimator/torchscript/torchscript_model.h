// The TorchScript front end: a scripted or traced model saved with torch.jit.save, turned into
// the neutral graph (Note [The neutral graph]) for given input shapes. Torch headers stay
// behind this interface so that the tool and the core compile without them.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "estimator/device_profile.h"
#include "estimator/graph.h"
#include "estimator/input_spec.h"
#include "estimator/torchscript/build_options.h"

namespace memtrace::estimator::torchscript {

// The PyTorch release of the LibTorch this program is linked with (TORCH_VERSION_MAJOR and
// _MINOR): what a device profile assumes the GPU runs unless told (memtrace-estimate --torch).
TorchRelease linkedTorchRelease();

class TorchScriptModel {
 public:
  // Loads the archive on the CPU. Throws EstimateError for a missing file, a file that is not
  // a TorchScript archive, or one that uses ops this LibTorch does not know.
  static TorchScriptModel load(const std::string& path);

  TorchScriptModel(TorchScriptModel&&) noexcept;
  TorchScriptModel& operator=(TorchScriptModel&&) noexcept;
  ~TorchScriptModel();

  // Runs forward abstractly (Note [Abstract execution]) for inputs of these shapes and dtypes.
  // Not thread-safe: builds of one model share caches.
  // Throws EstimateError for the wrong number of inputs, inputs the model rejects (an op or an
  // assertion fails on their shapes) and constructs the front end cannot follow.
  Graph buildGraph(const std::vector<InputSpec>& inputs, const BuildOptions& options = {}) const;

  // Builds run as on this profile's device (its kernel rules, Note [Op rules]); until called,
  // as on a CUDA device whose sdpa is the math fallback.
  void useDevice(const DeviceProfile& profile);

  // "forward(x: Tensor, mask: Tensor)": for messages.
  std::string forwardSignature() const;

 private:
  struct State;
  explicit TorchScriptModel(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace memtrace::estimator::torchscript
