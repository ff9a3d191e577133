// Sizes the simulated libraries answer the program without knowing them: a cuFFT plan's work
// area, a cuSOLVER routine's buffer, a cuDNN RNN's work and reserve spaces, a cuDNN plan's
// workspace. One policy for all of them (Note [Sizes nobody measured]): the program runs to its
// end on an answer that says how sure it is, the answer is said and recorded, and the device
// profile's measurements win where they have one.
#pragma once

#include <stdint.h>

#include <string>

namespace simgpu {

// How sure an answer is. The numbers are the C API's (simgpu_api.h) and the trace's.
enum class Certainty : uint8_t {
  kExact = 0,      // documented (a formula the library publishes) or measured on the card
  kBounded = 1,    // between a documented least and `at_most`, which is documented too
  kEstimated = 2,  // memtrace's estimate; `at_most` is its estimate too, or kNoBound
};

// `at_most` of an answer nothing bounds.
inline constexpr uint64_t kNoBound = UINT64_MAX;

// What the program asked: the library ("cuFFT"), the function it called and what the answer
// depends on (a JSON object: sizes, data types, modes), the key of a measured entry.
struct SizeQuestion {
  const char* library = "";
  std::string call;
  std::string shapes = "{}";
};

struct SizeAnswer {
  uint64_t bytes = 0;
  uint64_t at_most = 0;  // bytes when exact; kNoBound when nothing bounds it
  Certainty certainty = Certainty::kEstimated;
  std::string how;  // where the figure comes from, a phrase ("LAPACK's documented minimum")
};

// Answers `question`: the device profile's "measured_sizes" entry that matches it (then exact),
// else `*answer` as the library computed it. Says the first answer of each call on stderr,
// writes every answer to MEMTRACE_GPU_SIZES_LOG, and tells memtrace (the size observer of
// simgpu_api.h) unless `told_at_use` (the library tells it when the program hands it the
// buffer: sizeUsed). False when the program asked for today's refusal of sizes that are not
// exact (MEMTRACE_GPU_UNKNOWN_SIZES=refuse): the caller then refuses the call, as before.
bool answerSize(const SizeQuestion& question, SizeAnswer* answer, bool told_at_use = false);
// What a refusal says when answerSize returned false (refuse()'s `why`).
inline constexpr const char* kUnknownSizeRefused =
    "the size it answers is not known here, and MEMTRACE_GPU_UNKNOWN_SIZES=refuse asks for no "
    "estimate";

// The program handed the library `address`, a buffer it sized by `answer` (cuFFT's work area
// at cufftSetWorkArea): tells memtrace which allocation holds an answer that is not exact.
void sizeUsed(const SizeQuestion& question, const SizeAnswer& answer, const void* address);

// JSON text of `text` as a string literal, for the shapes the libraries describe.
std::string jsonString(const std::string& text);

}  // namespace simgpu
