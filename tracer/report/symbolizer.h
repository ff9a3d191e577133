// Native instruction pointers to function names and source lines, offline, with elfutils'
// libdw, from the loaded objects the trace recorded (the recorder never symbolizes).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>

#include "tracer/reader/reader.h"

namespace memtrace::report {

struct NativeFrame {
  std::string function;  // demangled, or "0x..." when unknown
  std::string object;    // the loaded object's file name (no directories), or ""
  std::string file;      // source file, when debug information has it
  int line = 0;
};

// Whether a loaded object (its file name) is the Python interpreter: native frames from
// there on outward are what the Python stack already shows.
inline bool isInterpreterObject(std::string_view object) {
  return object.rfind("python", 0) == 0 || object.rfind("libpython", 0) == 0;
}

class Symbolizer {
 public:
  explicit Symbolizer(const reader::Tables& tables);
  ~Symbolizer();
  Symbolizer(const Symbolizer&) = delete;
  Symbolizer& operator=(const Symbolizer&) = delete;

  // `ip` is a return address unless `innermost`: it is looked up as ip - 1, the call.
  const NativeFrame& resolve(uint64_t ip, bool innermost);

 private:
  struct State;
  std::unique_ptr<State> state_;
  std::unordered_map<uint64_t, NativeFrame> cache_;
};

}  // namespace memtrace::report
