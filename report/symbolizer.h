// Native instruction pointers to function names and source lines, offline, with elfutils'
// libdw, from the module map the trace recorded (the recorder never symbolizes).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>

#include "reader/reader.h"

namespace memtrace::report {

struct NativeFrame {
  std::string function;  // demangled, or "0x..." when unknown
  std::string module;    // the module's file name (no directories), or ""
  std::string file;      // source file, when debug information has it
  int line = 0;
};

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
