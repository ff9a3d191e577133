// The simulated cuFFT (libcufft.so.12): plans, the work area each asks for (Note [cuFFT's work
// area]), and the work area a plan allocates itself when the program leaves cuFFT's automatic
// allocation on. Executing a plan computes, which the generated stubs do as nothing.
#include <stdint.h>

#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "simulator/core/sizes.h"
#include "simulator/libraries/library.h"

using namespace simgpu;

// Note [cuFFT's work area]
// A cuFFT plan needs a work area for the passes of its transform, whose size cuFFT's planner
// decides on the card from the sizes' factors, the data types and the architecture;
// cufftMakePlan* and cufftGetSize* report it, cufftEstimate* before a plan, and none of it is
// documented as a formula. PyTorch turns cuFFT's own allocation off and allocates the work area
// itself, through its caching allocator, for each execution (SpectralOps.cpp _exec_fft:
// cufftSetWorkArea, then cufftXtExec; the plan is kept in PyTorch's plan cache). The simulated
// cuFFT answers an estimate (Note [Sizes nobody measured] in simulator/core/sizes.cpp):
//  - no work area when every dimension has only the prime factors 2, 3, 5 and 7 and the
//    transform is one-dimensional of at most 4,096 points: cuFFT's documented fast sizes, done
//    in one pass (audio front ends: n_fft 400, 512, 1,024); at most one copy of the data;
//  - one copy of the data (the batch of complex elements of the transform, in the execution's
//    precision) for a larger or multi-dimensional transform of such sizes, which take several
//    passes; at most two;
//  - for a size with a larger prime factor (Bluestein's algorithm: cuFFT then transforms a
//    padded power of two of at least 2n - 1 points) two copies of the padded data, at most four.
// The bounds are estimates too; the device profile's measured entries replace them, and the
// calibration (python -m mem_tracer.calibrate) measures them on a card. When the program leaves
// automatic allocation on (cuFFT's default, CuPy's way), the plan allocates its work area at
// planning on the simulated device, counted against its memory, and frees it at cufftDestroy;
// memtrace sees it as it sees a real cuFFT's (not at all: libcufft allocates through the
// runtime it links statically).

namespace {

enum : int {
  kSuccess = 0,
  kInvalidPlan = 1,
  kAllocFailed = 2,
  kInvalidValue = 4,
  kInvalidSize = 8,
  kNotSupported = 16
};

// cufftType (cufft.h) and cudaDataType (library_types.h).
enum : int { kR2C = 0x2a, kC2R = 0x2c, kC2C = 0x29, kD2Z = 0x6a, kZ2D = 0x6c, kZ2Z = 0x69 };
enum : int {
  kReal32 = 0,
  kReal64 = 1,
  kReal16 = 2,
  kComplex32 = 4,
  kComplex64 = 5,
  kComplex16 = 6,
  kReal16Bf = 14,
  kComplex16Bf = 15
};

struct Plan {
  bool automatic = true;  // cufftSetAutoAllocation: cuFFT allocates the work area itself
  bool made = false;
  SizeQuestion question;
  SizeAnswer answer;
  void* own_area = nullptr;  // allocated by the plan (automatic allocation)
  int device = 0;
};

std::mutex g_mutex;
std::map<int, Plan>& plans() {
  static auto* table = new std::map<int, Plan>;  // immortal: destroyed plans at exit
  return *table;
}
int g_next = 1;

const char* typeName(int type) {
  switch (type) {
    case kReal32:
      return "R_32F";
    case kReal64:
      return "R_64F";
    case kReal16:
      return "R_16F";
    case kComplex32:
      return "C_32F";
    case kComplex64:
      return "C_64F";
    case kComplex16:
      return "C_16F";
    case kReal16Bf:
      return "R_16BF";
    case kComplex16Bf:
      return "C_16BF";
  }
  return "unknown";
}

bool complexType(int type) {
  return type == kComplex32 || type == kComplex64 || type == kComplex16 || type == kComplex16Bf;
}

// Bytes of one complex element of the execution's precision.
uint64_t complexBytes(int type) {
  switch (type) {
    case kReal64:
    case kComplex64:
      return 16;
    case kReal16:
    case kComplex16:
    case kReal16Bf:
    case kComplex16Bf:
      return 4;
    default:
      return 8;
  }
}

bool smallFactors(long long n) {
  for (long long prime : {2, 3, 5, 7})
    while (n > 1 && n % prime == 0) n /= prime;
  return n == 1;
}

long long paddedPowerOfTwo(long long n) {
  long long padded = 1;
  while (padded < 2 * n - 1) padded <<= 1;
  return padded;
}

// How the data lies (cuFFT's advanced layout): simple (inembed and onembed null: contiguous), or
// embedded in larger arrays with strides and distances between transforms. Logged with the
// question, so that the calibration asks the card the same plan.
struct Layout {
  bool simple = true;
  std::vector<long long> inembed, onembed;
  long long istride = 1, idist = 1, ostride = 1, odist = 1;

  std::string json() const {
    if (simple) return "true";
    auto list = [](const std::vector<long long>& values) {
      std::string out = "[";
      for (size_t i = 0; i < values.size(); ++i) out += (i ? "," : "") + std::to_string(values[i]);
      return out + "]";
    };
    return "{\"inembed\":" + list(inembed) + ",\"istride\":" + std::to_string(istride) +
           ",\"idist\":" + std::to_string(idist) + ",\"onembed\":" + list(onembed) +
           ",\"ostride\":" + std::to_string(ostride) + ",\"odist\":" + std::to_string(odist) + "}";
  }
};

template <typename Int>
Layout layoutOf(int rank, const Int* inembed, long long istride, long long idist,
                const Int* onembed, long long ostride, long long odist) {
  Layout layout;
  if (!inembed && !onembed) return layout;
  layout.simple = false;
  for (int i = 0; i < rank; ++i) {
    layout.inembed.push_back(inembed ? inembed[i] : 0);
    layout.onembed.push_back(onembed ? onembed[i] : 0);
  }
  layout.istride = istride, layout.idist = idist, layout.ostride = ostride, layout.odist = odist;
  return layout;
}

// The question and the estimate of Note [cuFFT's work area], for a plan of `rank` dimensions
// `n`, `batch` transforms from `input` to `output` executed in `execution`.
void estimate(const char* call, int rank, const long long* n, long long batch, int input,
              int output, int execution, const Layout& layout, Plan* plan) {
  bool real_in = !complexType(input), real_out = !complexType(output);
  uint64_t data = static_cast<uint64_t>(batch), padded = static_cast<uint64_t>(batch);
  bool fast = true;
  std::string sizes;
  for (int i = 0; i < rank; ++i) {
    // The complex side of a real transform holds n / 2 + 1 points of its last dimension.
    long long points = (real_in || real_out) && i == rank - 1 ? n[i] / 2 + 1 : n[i];
    data *= static_cast<uint64_t>(points);
    padded *= static_cast<uint64_t>(smallFactors(n[i]) ? points : paddedPowerOfTwo(n[i]));
    fast = fast && smallFactors(n[i]);
    sizes += (i ? "," : "") + std::to_string(n[i]);
  }
  uint64_t element = complexBytes(execution);
  SizeAnswer& answer = plan->answer;
  answer.certainty = Certainty::kEstimated;
  if (!fast) {
    answer.bytes = 2 * padded * element;
    answer.at_most = 2 * answer.bytes;
    answer.how =
        "two copies of the data padded for Bluestein's algorithm (Note [cuFFT's work "
        "area] in simulator/libraries/cufft.cpp)";
  } else if (rank == 1 && n[0] <= 4096) {
    answer.bytes = 0;
    answer.at_most = data * element;
    answer.how =
        "a one-pass transform of a fast size (Note [cuFFT's work area] in "
        "simulator/libraries/cufft.cpp)";
  } else {
    answer.bytes = data * element;
    answer.at_most = 2 * answer.bytes;
    answer.how =
        "one copy of the data for a transform of several passes (Note [cuFFT's work "
        "area] in simulator/libraries/cufft.cpp)";
  }
  plan->question.library = "cuFFT";
  plan->question.call = call;
  plan->question.shapes = "{\"n\":[" + sizes + "],\"batch\":" + std::to_string(batch) +
                          ",\"input\":\"" + typeName(input) + "\",\"output\":\"" +
                          typeName(output) + "\",\"execution\":\"" + typeName(execution) +
                          "\",\"layout\":" + layout.json() + "}";
}

// cufftType as the three data types of the Xt API.
bool typesOf(int type, int* input, int* output, int* execution) {
  switch (type) {
    case kR2C:
      *input = kReal32, *output = kComplex32, *execution = kComplex32;
      return true;
    case kC2R:
      *input = kComplex32, *output = kReal32, *execution = kComplex32;
      return true;
    case kC2C:
      *input = kComplex32, *output = kComplex32, *execution = kComplex32;
      return true;
    case kD2Z:
      *input = kReal64, *output = kComplex64, *execution = kComplex64;
      return true;
    case kZ2D:
      *input = kComplex64, *output = kReal64, *execution = kComplex64;
      return true;
    case kZ2Z:
      *input = kComplex64, *output = kComplex64, *execution = kComplex64;
      return true;
  }
  return false;
}

// Makes `handle`'s plan (Note [cuFFT's work area]); `work` gets its work area's size.
int makePlan(int handle, const char* call, int rank, const long long* n, long long batch, int input,
             int output, int execution, const Layout& layout, size_t* work) {
  if (rank < 1 || rank > 3 || batch < 1 || !n) return kInvalidSize;
  for (int i = 0; i < rank; ++i)
    if (n[i] < 1) return kInvalidSize;
  Plan plan;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    auto found = plans().find(handle);
    if (found == plans().end()) return kInvalidPlan;
    plan = found->second;
  }
  // Answered outside the lock: the answer reaches memtrace's recorder (its own lock).
  estimate(call, rank, n, batch, input, output, execution, layout, &plan);
  if (!answerSize(plan.question, &plan.answer, /*told_at_use=*/!plan.automatic))
    return refuse("cuFFT", call, kNotSupported, kUnknownSizeRefused);
  // A work area of 0 bytes is never handed over (PyTorch's empty tensor has no address): told
  // now, as holding nothing.
  if (!plan.automatic && !plan.answer.bytes) sizeUsed(plan.question, plan.answer, nullptr);
  plan.made = true;
  plan.device = currentDevice();
  if (plan.automatic && plan.answer.bytes && !plan.own_area) {
    if (allocate(&plan.own_area, plan.answer.bytes, plan.device, MemoryKind::kDevice) !=
        Status::kSuccess) {
      plan.own_area = nullptr;
      return kAllocFailed;
    }
  }
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    auto found = plans().find(handle);
    if (found == plans().end()) {  // destroyed meanwhile by another thread
      if (plan.own_area) release(plan.own_area);
      return kInvalidPlan;
    }
    found->second = plan;
  }
  if (work) *work = plan.answer.bytes;
  return kSuccess;
}

// The same estimate without a plan (cufftEstimate*).
int estimateOnly(const char* call, int rank, const long long* n, long long batch, int type,
                 size_t* work) {
  int input, output, execution;
  if (!work) return kInvalidValue;
  if (!typesOf(type, &input, &output, &execution)) return kInvalidValue;
  Plan plan;
  estimate(call, rank, n, batch, input, output, execution, Layout{}, &plan);
  if (!answerSize(plan.question, &plan.answer, /*told_at_use=*/true))
    return refuse("cuFFT", call, kNotSupported, kUnknownSizeRefused);
  *work = plan.answer.bytes;
  return kSuccess;
}

int newPlan(int* handle) {
  if (!handle) return kInvalidValue;
  std::lock_guard<std::mutex> lock(g_mutex);
  *handle = g_next++;
  plans()[*handle] = Plan{};
  return kSuccess;
}

}  // namespace

// cuFFT 12.0.0.
SIMGPU_API int cufftCreate(int* handle) {
  return newPlan(handle);
}
SIMGPU_API int cufftDestroy(int handle) {
  void* area = nullptr;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    auto found = plans().find(handle);
    if (found == plans().end()) return kInvalidPlan;
    area = found->second.own_area;
    plans().erase(found);
  }
  if (area) release(area);
  return kSuccess;
}
SIMGPU_API int cufftSetStream(int, void*) {
  return kSuccess;
}
SIMGPU_API int cufftSetAutoAllocation(int handle, int automatic) {
  std::lock_guard<std::mutex> lock(g_mutex);
  auto found = plans().find(handle);
  if (found == plans().end()) return kInvalidPlan;
  found->second.automatic = automatic != 0;
  return kSuccess;
}
// The program hands the plan the work area it allocated for an execution: memtrace learns which
// allocation holds the estimate (Note [Sizes nobody measured]).
SIMGPU_API int cufftSetWorkArea(int handle, void* area) {
  SizeQuestion question;
  SizeAnswer answer;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    auto found = plans().find(handle);
    if (found == plans().end()) return kInvalidPlan;
    if (!found->second.made || found->second.automatic) return kSuccess;
    question = found->second.question;
    answer = found->second.answer;
  }
  if (area && answer.bytes) sizeUsed(question, answer, area);
  return kSuccess;
}
SIMGPU_API int cufftGetSize(int handle, size_t* work) {
  if (!work) return kInvalidValue;
  std::lock_guard<std::mutex> lock(g_mutex);
  auto found = plans().find(handle);
  if (found == plans().end()) return kInvalidPlan;
  *work = found->second.answer.bytes;
  return kSuccess;
}
SIMGPU_API int cufftGetVersion(int* version) {
  if (!version) return kInvalidValue;
  *version = 12000;
  return kSuccess;
}
SIMGPU_API int cufftGetProperty(int type, int* value) {
  if (!value) return kInvalidValue;
  *value = type == 0 ? 12 : 0;  // libraryPropertyType: MAJOR_VERSION 0, MINOR 1, PATCH 2
  return kSuccess;
}

SIMGPU_API int cufftXtMakePlanMany(int handle, int rank, long long* n, long long* inembed,
                                   long long istride, long long idist, int input,
                                   long long* onembed, long long ostride, long long odist,
                                   int output, long long batch, size_t* work, int execution) {
  if (rank < 1 || rank > 3) return kInvalidSize;
  return makePlan(handle, "cufftXtMakePlanMany", rank, n, batch, input, output, execution,
                  layoutOf(rank, inembed, istride, idist, onembed, ostride, odist), work);
}
SIMGPU_API int cufftXtGetSizeMany(int handle, int rank, long long* n, long long* inembed,
                                  long long istride, long long idist, int input, long long* onembed,
                                  long long ostride, long long odist, int output, long long batch,
                                  size_t* work, int execution) {
  return cufftXtMakePlanMany(handle, rank, n, inembed, istride, idist, input, onembed, ostride,
                             odist, output, batch, work, execution);
}

namespace {
int makeTyped(int handle, const char* call, int rank, const long long* n, long long batch, int type,
              const Layout& layout, size_t* work) {
  int input, output, execution;
  if (!typesOf(type, &input, &output, &execution)) return kInvalidValue;
  return makePlan(handle, call, rank, n, batch, input, output, execution, layout, work);
}
template <typename Int>
std::vector<long long> widened(int rank, const Int* n) {
  std::vector<long long> out;
  for (int i = 0; n && i < rank; ++i) out.push_back(n[i]);
  return out;
}
}  // namespace

SIMGPU_API int cufftMakePlanMany(int handle, int rank, int* n, int* inembed, int istride, int idist,
                                 int* onembed, int ostride, int odist, int type, int batch,
                                 size_t* work) {
  auto sizes = widened(rank, n);
  if (!n || rank < 1 || rank > 3 || static_cast<int>(sizes.size()) != rank) return kInvalidValue;
  return makeTyped(handle, "cufftMakePlanMany", rank, sizes.data(), batch, type,
                   layoutOf(rank, inembed, istride, idist, onembed, ostride, odist), work);
}
SIMGPU_API int cufftMakePlanMany64(int handle, int rank, long long* n, long long* inembed,
                                   long long istride, long long idist, long long* onembed,
                                   long long ostride, long long odist, int type, long long batch,
                                   size_t* work) {
  if (rank < 1 || rank > 3) return kInvalidSize;
  return makeTyped(handle, "cufftMakePlanMany64", rank, n, batch, type,
                   layoutOf(rank, inembed, istride, idist, onembed, ostride, odist), work);
}
SIMGPU_API int cufftMakePlan1d(int handle, int nx, int type, int batch, size_t* work) {
  long long n[] = {nx};
  return makeTyped(handle, "cufftMakePlan1d", 1, n, batch, type, Layout{}, work);
}
SIMGPU_API int cufftMakePlan2d(int handle, int nx, int ny, int type, size_t* work) {
  long long n[] = {nx, ny};
  return makeTyped(handle, "cufftMakePlan2d", 2, n, 1, type, Layout{}, work);
}
SIMGPU_API int cufftMakePlan3d(int handle, int nx, int ny, int nz, int type, size_t* work) {
  long long n[] = {nx, ny, nz};
  return makeTyped(handle, "cufftMakePlan3d", 3, n, 1, type, Layout{}, work);
}
SIMGPU_API int cufftPlan1d(int* handle, int nx, int type, int batch) {
  if (int status = newPlan(handle)) return status;
  return cufftMakePlan1d(*handle, nx, type, batch, nullptr);
}
SIMGPU_API int cufftPlan2d(int* handle, int nx, int ny, int type) {
  if (int status = newPlan(handle)) return status;
  return cufftMakePlan2d(*handle, nx, ny, type, nullptr);
}
SIMGPU_API int cufftPlan3d(int* handle, int nx, int ny, int nz, int type) {
  if (int status = newPlan(handle)) return status;
  return cufftMakePlan3d(*handle, nx, ny, nz, type, nullptr);
}
SIMGPU_API int cufftPlanMany(int* handle, int rank, int* n, int* inembed, int istride, int idist,
                             int* onembed, int ostride, int odist, int type, int batch) {
  if (int status = newPlan(handle)) return status;
  return cufftMakePlanMany(*handle, rank, n, inembed, istride, idist, onembed, ostride, odist, type,
                           batch, nullptr);
}
SIMGPU_API int cufftGetSize1d(int, int nx, int type, int batch, size_t* work) {
  long long n[] = {nx};
  return estimateOnly("cufftGetSize1d", 1, n, batch, type, work);
}
SIMGPU_API int cufftGetSize2d(int, int nx, int ny, int type, size_t* work) {
  long long n[] = {nx, ny};
  return estimateOnly("cufftGetSize2d", 2, n, 1, type, work);
}
SIMGPU_API int cufftGetSize3d(int, int nx, int ny, int nz, int type, size_t* work) {
  long long n[] = {nx, ny, nz};
  return estimateOnly("cufftGetSize3d", 3, n, 1, type, work);
}
SIMGPU_API int cufftGetSizeMany(int, int rank, int* n, int*, int, int, int*, int, int, int type,
                                int batch, size_t* work) {
  auto sizes = widened(rank, n);
  if (!n || static_cast<int>(sizes.size()) != rank) return kInvalidValue;
  return estimateOnly("cufftGetSizeMany", rank, sizes.data(), batch, type, work);
}
SIMGPU_API int cufftGetSizeMany64(int, int rank, long long* n, long long*, long long, long long,
                                  long long*, long long, long long, int type, long long batch,
                                  size_t* work) {
  return estimateOnly("cufftGetSizeMany64", rank, n, batch, type, work);
}
SIMGPU_API int cufftEstimate1d(int nx, int type, int batch, size_t* work) {
  long long n[] = {nx};
  return estimateOnly("cufftEstimate1d", 1, n, batch, type, work);
}
SIMGPU_API int cufftEstimate2d(int nx, int ny, int type, size_t* work) {
  long long n[] = {nx, ny};
  return estimateOnly("cufftEstimate2d", 2, n, 1, type, work);
}
SIMGPU_API int cufftEstimate3d(int nx, int ny, int nz, int type, size_t* work) {
  long long n[] = {nx, ny, nz};
  return estimateOnly("cufftEstimate3d", 3, n, 1, type, work);
}
SIMGPU_API int cufftEstimateMany(int rank, int* n, int*, int, int, int*, int, int, int type,
                                 int batch, size_t* work) {
  auto sizes = widened(rank, n);
  if (!n || static_cast<int>(sizes.size()) != rank) return kInvalidValue;
  return estimateOnly("cufftEstimateMany", rank, sizes.data(), batch, type, work);
}
