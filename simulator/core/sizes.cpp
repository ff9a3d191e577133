#include "simulator/core/sizes.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <atomic>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "simulator/core/device.h"
#include "simulator/core/simgpu_api.h"

using Json = nlohmann::ordered_json;

// Note [Sizes nobody measured]
// A library tells the program sizes that only the library knows: how much work area a cuFFT
// plan needs, how large a buffer a cuSOLVER routine wants, how large cuDNN's RNN work and
// reserve spaces are, which workspace a cuDNN plan asks for. The program then allocates that
// much through PyTorch's caching allocator, so each answer changes the peak. Some of these are
// documented (cuDNN's RNN weight space is the sum of its matrices and biases: exact); most are
// the library's own choice on the card, which cannot be known here. The policy, one for every
// library:
//  - The program runs to its end: every such call is answered, never refused, and the answer
//    says how sure it is (Certainty): exact (documented, or measured on the card), bounded
//    (documented bounds) or estimated (memtrace's estimate, with an upper figure that is an
//    estimate too, or none); each library's file says where its figures come from.
//  - A measurement wins: the device profile's "measured_sizes" entries ({"library", "call",
//    "match": {...}, "bytes", "measured"}) answer a question whose shapes contain the entry's
//    "match" (every key it names equal, objects recursively), exactly. The calibration command
//    (python -m mem_tracer.calibrate) writes them from a card.
//  - Each answer that is not exact is said once per function on stderr, written to
//    MEMTRACE_GPU_SIZES_LOG (a JSON line each: what the calibration reads), and handed to the
//    size observer memtrace registers (simgpu_api.h), which records it in the trace with the
//    Python line that asked: the report lists them by line, and the verdict says how much of
//    the peak they hold and by how much it could be higher (Note [Sizes in the trace] in
//    tracer/format/records.h).
//  - MEMTRACE_GPU_UNKNOWN_SIZES=refuse (memtrace run --gpu-refuse-unknown-sizes) keeps the old
//    behaviour: such a call fails in one line, with the library's "not supported", and the
//    program stops there.
namespace simgpu {
namespace {

SimgpuSizeObserver g_size_observer = nullptr;

struct MeasuredEntry {
  std::string library;
  std::string call;
  Json match;
  uint64_t bytes = 0;
  std::string measured;
};

bool matches(const Json& pattern, const Json& value) {
  if (!pattern.is_object()) return pattern == value;
  if (!value.is_object()) return false;
  for (const auto& [key, expected] : pattern.items())
    if (!value.contains(key) || !matches(expected, value.at(key))) return false;
  return true;
}

// The profile's "measured_sizes" entries; read once.
const std::vector<MeasuredEntry>& measured() {
  static const std::vector<MeasuredEntry>* entries = [] {
    auto* out = new std::vector<MeasuredEntry>;
    const Profile* card = profile();
    if (!card) return out;
    try {
      std::ifstream file(card->file);
      Json document = Json::parse(file);
      if (!document.contains("measured_sizes")) return out;
      for (const Json& row : document.at("measured_sizes").at("entries")) {
        MeasuredEntry entry;
        entry.library = row.at("library").get<std::string>();
        entry.call = row.at("call").get<std::string>();
        entry.match = row.value("match", Json::object());
        entry.bytes = row.at("bytes").get<uint64_t>();
        entry.measured = row.value("measured", "");
        out->push_back(std::move(entry));
      }
    } catch (const std::exception& error) {
      std::string how =
          std::string("cannot be read (") + error.what() + "): no size is taken from it";
      approximate("the simulated GPU", "the device profile's measured_sizes", how.c_str());
      out->clear();
    }
    return out;
  }();
  return *entries;
}

bool refuseUnknown() {
  static const bool refuse = [] {
    const char* text = getenv("MEMTRACE_GPU_UNKNOWN_SIZES");
    return text && strcmp(text, "refuse") == 0;
  }();
  return refuse;
}

FILE* logFile() {
  static FILE* file = [] {
    const char* path = getenv("MEMTRACE_GPU_SIZES_LOG");
    if (!path || !*path) return static_cast<FILE*>(nullptr);
    if (strcmp(path, "stderr") == 0) return stderr;
    FILE* opened = fopen(path, "a");
    if (!opened) {
      std::string how = std::string("MEMTRACE_GPU_SIZES_LOG=") + path + " cannot be written";
      approximate("the simulated GPU", "the sizes log", how.c_str());
    }
    return opened;
  }();
  return file;
}

const char* certaintyName(Certainty certainty) {
  switch (certainty) {
    case Certainty::kExact:
      return "exact";
    case Certainty::kBounded:
      return "bounded";
    case Certainty::kEstimated:
      return "estimated";
  }
  return "estimated";
}

std::string withCommas(uint64_t value) {
  std::string digits = std::to_string(value), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

// {"library":..., "call":..., "shapes":{...}}: what the trace records and the log writes.
std::string describe(const SizeQuestion& question) {
  return "{\"library\":" + jsonString(question.library) + ",\"call\":" + jsonString(question.call) +
         ",\"shapes\":" + question.shapes + "}";
}

void tell(const SizeQuestion& question, const SizeAnswer& answer, const void* address) {
  SimgpuSizeObserver observer = __atomic_load_n(&g_size_observer, __ATOMIC_ACQUIRE);
  if (!observer) return;
  std::string description = describe(question);
  observer(description.c_str(), answer.bytes, answer.at_most, static_cast<int>(answer.certainty),
           address);
}

std::mutex g_mutex;
std::set<std::string> g_said;

}  // namespace

std::string jsonString(const std::string& text) {
  return Json(text).dump();
}

bool answerSize(const SizeQuestion& question, SizeAnswer* answer, bool told_at_use) {
  Json shapes;
  try {
    shapes = Json::parse(question.shapes);
  } catch (const std::exception&) {
    shapes = Json::object();
  }
  for (const MeasuredEntry& entry : measured()) {
    if (entry.library != question.library || entry.call != question.call) continue;
    if (!matches(entry.match, shapes)) continue;
    answer->bytes = answer->at_most = entry.bytes;
    answer->certainty = Certainty::kExact;
    answer->how = "measured: " + entry.measured;
    return true;
  }
  if (answer->certainty == Certainty::kExact) {
    answer->at_most = answer->bytes;
    return true;
  }
  if (refuseUnknown()) return false;
  bool first;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    first = g_said.insert(std::string(question.library) + "/" + question.call).second;
  }
  if (first) {
    std::string bound = answer->at_most == kNoBound ? std::string("no bound known")
                                                    : "at most " + withCommas(answer->at_most);
    fprintf(stderr,
            "memtrace simulated GPU: %s's %s: %s bytes, %s (%s): %s; every such answer is in "
            "the report (Note [Sizes nobody measured] in simulator/core/sizes.cpp)\n",
            question.library, question.call.c_str(), withCommas(answer->bytes).c_str(),
            certaintyName(answer->certainty), bound.c_str(), answer->how.c_str());
  }
  if (FILE* file = logFile()) {
    std::string line = "{\"event\":\"size\"," + describe(question).substr(1, std::string::npos);
    line.pop_back();
    line += ",\"bytes\":" + std::to_string(answer->bytes) + ",\"at_most\":" +
            (answer->at_most == kNoBound ? std::string("null") : std::to_string(answer->at_most)) +
            ",\"certainty\":\"" + certaintyName(answer->certainty) +
            "\",\"how\":" + jsonString(answer->how) + "}";
    std::lock_guard<std::mutex> lock(g_mutex);
    fprintf(file, "%s\n", line.c_str());
    fflush(file);
  }
  if (!told_at_use) tell(question, *answer, nullptr);
  return true;
}

void sizeUsed(const SizeQuestion& question, const SizeAnswer& answer, const void* address) {
  if (answer.certainty == Certainty::kExact) return;
  tell(question, answer, address);
}

}  // namespace simgpu

extern "C" {
SIMGPU_EXPORT void simgpu_set_size_observer(SimgpuSizeObserver observer) {
  __atomic_store_n(&simgpu::g_size_observer, observer, __ATOMIC_RELEASE);
}
}
