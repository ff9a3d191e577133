// What the estimator knows of a device: the caching allocator's rounding and segment rules and
// the library workspaces that go through it. Profiles are data (estimator/profiles/*.json),
// each number with the PyTorch source it comes from; docs/estimate-format.md lists the fields.
#pragma once

#include <compare>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tracer/format/caching_allocator.h"

namespace memtrace::estimator {

// The constants of c10/cuda/CUDACachingAllocator.cpp (Note [PyTorch's caching allocator rules]),
// each profile's own.
using CachingAllocatorRules = format::CachingAllocatorRules;

// A PyTorch release, major.minor: what the device runs decides some of the profile's rules.
struct TorchRelease {
  int major = 0;
  int minor = 0;
  friend auto operator<=>(const TorchRelease&, const TorchRelease&) = default;
};

// One sdpa kernel's constraints and allocations, as aten/src/ATen/native/transformers/cuda/
// sdp_utils.cpp (CUDA) and sdp_utils_cpp.cpp (CPU) check them (Note [sdpa's kernel choice],
// estimator/sdpa_choice.h: what every backend needs besides).
struct SdpaKernel {
  std::string name;                      // flash, efficient, cudnn, flash_cpu
  std::vector<std::string> dtypes;       // of the query, estimator names (float16, ...)
  int64_t max_head_dim = 0;              // 0: no limit
  int64_t head_dim_multiple = 1;         // of q's and v's head dim, in elements
  int64_t head_dim_alignment_bytes = 1;  // of q's and v's head dim, in bytes
  bool same_head_dims = false;           // q, k and v's head dims equal (else q and k's)
  bool gqa = true;                       // takes fewer key heads than query heads (enable_gqa)
  bool mask = true;                      // takes an attn_mask
  bool dropout = true;                   // takes dropout_p > 0
  int64_t dropout_resolution = 0;        // dropout_p * this must be whole (cuDNN: 16); 0: any
  bool causal_needs_square = false;      // is_causal only when L == S
  int64_t pad_head_dim_to = 1;           // copies q, k, v padded to a multiple of this
  int64_t pad_mask_to = 1;               // copies the expanded mask padded to a multiple of this
  bool logsumexp = false;                // allocates a float logsumexp (B, H, L) in inference
  bool bhld_output = false;              // output (B, H, L, E) contiguous; else (B, L, H, E)
  bool output_like_query = false;        // the output takes the query's layout (empty_like)
  // Takes fewer key heads than query heads from this release on, whatever `gqa` says
  // (applyTorchRelease); none: `gqa` for every release.
  std::optional<TorchRelease> gqa_from_release;
};

// A temporary a device kernel takes from the allocator inside itself and frees before it
// returns (Note [What a CUDA kernel allocates inside itself] in
// python/mem_tracer/estimator/step_recorder.py, which reads the same profile entries): the
// size of the argument `like`, in its dtype or in the result type of `dtype_of`.
struct KernelTemporary {
  std::string op;                       // the op whose kernel takes it: "aten::native_layer_norm"
  std::string like;                     // the argument it has the elements of: "input"
  std::vector<std::string> dtype_of;    // arguments whose result type it takes; empty: `like`'s
  bool before_outputs = false;          // taken before the op's outputs; else after them
  bool only_if_not_contiguous = false;  // a copy of `like` the kernel makes only then
  std::string what;                     // "layer norm's input.contiguous()"
};

// How the device's fused kernels are chosen and what they allocate (Note [Op rules]).
struct KernelRules {
  std::string device = "cuda";  // what prim::device answers: cuda or cpu
  std::string sdpa_source;
  std::vector<SdpaKernel> sdpa;  // in priority order; the math fallback comes last
  // Whether the device's memory counter sees what a fused kernel allocates internally (the
  // caching allocator does; the CPU ground truth, live storages seen by the dispatcher, does
  // not).
  bool count_kernel_scratch = true;
  std::string scratch_source;
  std::vector<KernelTemporary> temporaries;  // the profile's `kernels.temporaries`
};

// "2.11", "2.13.0", "2.14.1+cu130": the release; nullopt for anything else.
std::optional<TorchRelease> parseTorchRelease(const std::string& text);
std::string torchReleaseText(TorchRelease release);

struct DeviceProfile {
  std::string name;
  std::string description;
  CachingAllocatorRules allocator;
  // cuBLAS keeps one workspace per (device, stream), allocated through the caching allocator
  // by the first op that calls cuBLAS and never freed.
  int64_t cublas_workspace_bytes = 0;
  std::vector<std::string> cublas_ops;
  // cuBLASLt's workspace beside cuBLAS's (Note [The cuBLASLt workspace]): allocated after it by
  // the first op that runs through cuBLASLt, never freed; 0 where cuBLASLt shares cuBLAS's.
  int64_t cublaslt_workspace_bytes = 0;
  std::vector<std::string> cublaslt_ops;
  // The last release that keeps the separate cuBLASLt workspace (none: every release does);
  // applyTorchRelease() turns it off for later ones.
  std::optional<TorchRelease> cublaslt_last_release;
  // The release the device runs, once applyTorchRelease() has been given it.
  std::optional<TorchRelease> torch_release;
  // cuDNN chooses a convolution algorithm, and its workspace, at run time: a bound, not a
  // prediction. None: no bound stated, convolution workspaces are left out (and said so).
  std::optional<int64_t> convolution_workspace_bound_bytes;
  std::vector<std::string> convolution_ops;
  KernelRules kernels;
};

// The profile's rules for the PyTorch release the device runs.
DeviceProfile applyTorchRelease(DeviceProfile profile, TorchRelease release);

// Parses a profile; `origin` names it in error messages. Throws EstimateError.
DeviceProfile parseDeviceProfile(const std::string& json_text, const std::string& origin);

// `name_or_path` is a file path when it contains '/' or ends in ".json", else a profile name
// looked up as <profile_directory>/<name>.json. Throws EstimateError.
DeviceProfile loadDeviceProfile(const std::string& name_or_path,
                                const std::string& profile_directory);

// The names of the profiles in a directory, sorted.
std::vector<std::string> listDeviceProfiles(const std::string& profile_directory);

}  // namespace memtrace::estimator
